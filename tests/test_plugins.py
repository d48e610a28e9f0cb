"""Plugins (posenc/plugins.py): the decorators, ``POSENC_PLUGINS`` files and modules, installed entry points.

The registries are process-wide, so every in-process test here works on fresh registries of its own (fixture
``fresh``: new ``Registry`` objects holding the built-ins, posenc.plugins' state reset, the plugin modules a test
imported forgotten). What needs the config layer or the command (``posenc train task=KEY``, a run of a plugin
not loaded) runs in a subprocess, with its own environment. An installed package is simulated by a folder on
``sys.path`` holding ``mypkg.py`` and ``mypkg-0.1.dist-info/{METADATA,entry_points.txt}``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import TINY, tiny_dict

import posenc.plugins as plugins
from posenc.encoders import ENCODERS, AttentionShape, PositionalEncoder
from posenc.errors import ConfigError
from posenc.registry import Registry
from posenc.tasks import TASKS, Task

SHAPE = AttentionShape(16, 2)

ENCODER = '''
import posenc
from posenc.encoders import NoPE


@posenc.register_encoder({key!r})
class {cls}(NoPE):
    """my encoder, first line"""

    def __init__(self, shape, train_length, *, width: int = 3) -> None:
        super().__init__(shape, train_length)
        self.width = width
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def encoder_file(folder: Path, name: str = "mine.py", key: str = "mine", cls: str = "Mine") -> Path:
    return write(folder, name, ENCODER.format(key=key, cls=cls))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """New encoder and task registries (the built-ins only), posenc.plugins' state reset, no POSENC_PLUGINS;
    afterwards the modules imported from tmp_path are forgotten."""
    builtins = {registry.group: {k: registry[k] for k in registry.builtins()} for registry in (ENCODERS, TASKS)}
    monkeypatch.setattr(plugins, "REGISTRIES", {})  # after reading the real ones: their reading sets the state
    monkeypatch.setattr(plugins, "_modules_read", False)
    monkeypatch.setattr(plugins, "_module_errors", [])
    monkeypatch.delenv(plugins.ENV, raising=False)
    encoders = Registry("encoder", builtins["encoder"], base=PositionalEncoder, entry_point_group="posenc.encoders")
    tasks = Registry("task", builtins["task"], base=Task, entry_point_group="posenc.tasks")
    before = set(sys.modules)
    yield SimpleNamespace(encoders=encoders, tasks=tasks)
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None) or ""
        if str(tmp_path) in file or name.startswith("posenc_plugin_"):
            del sys.modules[name]


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


def use_env(monkeypatch, *entries: object) -> None:
    monkeypatch.setenv(plugins.ENV, ",".join(str(e) for e in entries))


# -- the decorators ---------------------------------------------------------------------------------------
def test_decorator_registers_a_subclass_that_builds_with_its_options(fresh):
    from posenc.encoders import NoPE

    @plugins.register_encoder("inline")
    class Inline(NoPE):
        def __init__(self, shape, train_length, *, width: int = 3) -> None:
            super().__init__(shape, train_length)
            self.width = width

    assert "inline" in fresh.encoders and list(fresh.encoders)[-1] == "inline"
    assert fresh.encoders.build("inline", SHAPE, 16, options={"width": 5}).width == 5
    with pytest.raises(ConfigError, match="encoder 'inline' has no option 'height' \\(its options: width\\)"):
        fresh.encoders.build("inline", SHAPE, 16, options={"height": 1})
    origin = fresh.encoders.origin("inline")
    assert origin.kind == "module" and origin.object.endswith(
        ":test_decorator_registers_a_subclass_that_builds_with_its_options.<locals>.Inline"
    )
    assert fresh.encoders.origin("rope") is None and fresh.encoders.builtins() == ENCODERS.builtins()
    assert "inline" not in fresh.encoders.builtins()


def test_file_plugin_registers_with_the_file_as_its_origin(fresh, tmp_path, monkeypatch):
    path = encoder_file(tmp_path)
    use_env(monkeypatch, path)
    fresh.encoders.check("mine")
    assert fresh.encoders.origin("mine") == plugins.Origin("file", str(path), "mine:Mine")
    assert fresh.encoders.origin("mine").record() == {"origin": "file", "source": str(path), "object": "mine:Mine"}
    assert plugins.provenance("mine", "copy") == {"encoder": fresh.encoders.origin("mine").record()}
    assert plugins.provenance("rope", "copy") == {}


def test_a_task_plugin_joins_the_task_registry(fresh, tmp_path, monkeypatch):
    path = write(
        tmp_path,
        "mytask.py",
        """
        import posenc
        from posenc.tasks.synthetic import Copy

        @posenc.register_task("shout")
        class Shout(Copy):
            description = "copy, louder"
    """,
    )
    use_env(monkeypatch, path)
    fresh.tasks.check("shout")
    assert fresh.tasks.build("shout", options={"n_symbols": 4}).vocab_size == 6
    assert ("shout", "copy, louder", f"plugin: file {path} (mytask:Shout)") in plugins.listing(fresh.tasks)


def test_relative_file_entries_are_made_absolute_for_workers_and_read_once(fresh, tmp_path, monkeypatch):
    encoder_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    use_env(monkeypatch, "mine.py", "./mine.py")  # the same file twice: imported once, no collision with itself
    fresh.encoders.check("mine")
    assert os.environ[plugins.ENV] == str(tmp_path / "mine.py")


# -- failures: one line naming the plugin and its source ------------------------------------------------------
def test_key_of_a_builtin_is_refused_and_the_builtin_stays(fresh, tmp_path, monkeypatch):
    path = encoder_file(tmp_path, key="rope")
    use_env(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    assert one_line(err) == (
        f"POSENC_PLUGINS: encoder plugin 'rope' (file {path} (mine:Mine)): the key is taken by a posenc built-in"
    )
    assert fresh.encoders.origin("rope") is None and fresh.encoders["rope"].__name__ == "RoPE"


def test_key_of_another_plugin_is_refused_naming_both(fresh, tmp_path, monkeypatch):
    first = encoder_file(tmp_path / "a")
    second = encoder_file(tmp_path / "b", cls="Other")  # the same stem: imported under a name of its own
    use_env(monkeypatch, first, second)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("mine")
    line = one_line(err)
    assert line.startswith(f"POSENC_PLUGINS: encoder plugin 'mine' (file {second} (posenc_plugin_mine_")
    assert line.endswith(f":Other)): the key is taken by file {first} (mine:Mine)")
    assert fresh.encoders["mine"].__name__ == "Mine"  # the first stays; nothing runs until one is removed


def test_two_files_with_one_stem_are_two_modules_named_the_same_in_every_process(fresh, tmp_path, monkeypatch):
    first = encoder_file(tmp_path / "a")
    second = encoder_file(tmp_path / "b", key="mine_too", cls="Other")
    use_env(monkeypatch, first, second)
    fresh.encoders.check("mine_too")
    assert fresh.encoders["mine"].__module__ == "mine"
    name = fresh.encoders["mine_too"].__module__
    assert name.startswith("posenc_plugin_mine_") and sys.modules[name].__file__ == str(second)
    assert name == plugins.module_name(second)


@pytest.mark.integration
def test_a_plugin_module_name_is_the_same_in_every_process(tmp_path):
    """Launcher workers import a plugin file under the name the submitting process used (a digest of the path,
    not ``hash()``, which differs between processes)."""
    encoder_file(tmp_path)
    second = encoder_file(tmp_path / "b")
    code = (
        "import sys; sys.modules['mine'] = sys; from pathlib import Path; "
        f"from posenc.plugins import module_name; print(module_name(Path({str(second)!r})))"
    )
    names = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(names) == 1 and names.pop().startswith("posenc_plugin_mine_")


def test_a_file_named_after_an_importable_module_does_not_shadow_it(fresh, tmp_path, monkeypatch):
    path = encoder_file(tmp_path, name="tabulate.py")  # a real package's name, not imported yet here
    use_env(monkeypatch, path)
    fresh.encoders.check("mine")
    assert fresh.encoders["mine"].__module__.startswith("posenc_plugin_tabulate_")
    assert getattr(sys.modules.get("tabulate"), "__file__", "") != str(path)


@pytest.mark.parametrize("key", ["Mine", "my-key", "9lives", "", "x" * 49])
def test_malformed_key(fresh, tmp_path, monkeypatch, key):
    path = encoder_file(tmp_path, key=key)
    use_env(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    assert one_line(err) == (
        f"POSENC_PLUGINS: encoder plugin {key!r} (file {path} (mine:Mine)): a key is lowercase "
        "letters, digits and _, starting with a letter, at most 48 characters"
    )


def test_class_that_is_not_a_subclass(fresh, tmp_path, monkeypatch):
    path = write(
        tmp_path,
        "plain.py",
        """
        import posenc

        @posenc.register_encoder("plain")
        class Plain:
            pass
    """,
    )
    use_env(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("plain")
    assert one_line(err) == (
        f"POSENC_PLUGINS: encoder plugin 'plain' (file {path} (plain:Plain)): <class "
        "'plain.Plain'> is not a subclass of posenc.encoders.PositionalEncoder"
    )
    with pytest.raises(ConfigError, match="is not a subclass of posenc.tasks.Task"):
        plugins.register_task("plain_task")(type("NotATask", (), {}))


def test_module_that_fails_to_import_names_its_line_and_takes_back_what_it_registered(fresh, tmp_path, monkeypatch):
    path = write(
        tmp_path,
        "halfway.py",
        ENCODER.format(key="halfway", cls="Halfway")
        + """

def helper():
    raise RuntimeError("no GPU here")


helper()
""",
    )
    use_env(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    assert one_line(err) == f"POSENC_PLUGINS: cannot import {path}: RuntimeError: no GPU here (line 15)"
    assert "halfway" not in fresh.encoders.keys_unchecked() and "halfway" not in sys.modules


def test_syntax_error_names_its_line(fresh, tmp_path, monkeypatch):
    path = write(tmp_path, "typo.py", "import posenc\n\n\ndef f(:\n    pass\n")
    use_env(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    assert one_line(err).startswith(f"POSENC_PLUGINS: cannot import {path}: SyntaxError: ")
    assert one_line(err).endswith("(line 4)")


def test_module_entry_that_fails_names_its_file_and_line(fresh, tmp_path, monkeypatch):
    write(tmp_path, "mymod.py", "x = 1\nraise ValueError('bad option table')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    use_env(monkeypatch, "mymod")
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    assert one_line(err) == (
        f"POSENC_PLUGINS: cannot import mymod: ValueError: bad option table ({tmp_path}/mymod.py line 2)"
    )


@pytest.mark.parametrize("entry", ["missing.py", "no_such_module_for_posenc"])
def test_missing_file_or_module(fresh, tmp_path, monkeypatch, entry):
    monkeypatch.chdir(tmp_path)
    use_env(monkeypatch, entry)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    want = (
        f"POSENC_PLUGINS: no plugin file {tmp_path / entry}"
        if entry.endswith(".py")
        else f"POSENC_PLUGINS: cannot import {entry}: ModuleNotFoundError: No module named '{entry}'"
    )
    assert one_line(err) == want


def test_a_plugin_raising_systemexit_at_import_is_one_line(fresh, tmp_path, monkeypatch):
    path = write(tmp_path, "quits.py", "import sys\nsys.exit('argparse in a plugin')\n")
    use_env(monkeypatch, path)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("rope")
    assert one_line(err) == f"POSENC_PLUGINS: cannot import {path}: SystemExit: argparse in a plugin (line 2)"


# -- listings -------------------------------------------------------------------------------------------------
def test_listing_shows_plugins_with_their_origin_and_broken_ones_as_a_line(fresh, tmp_path, monkeypatch, capsys):
    good = encoder_file(tmp_path)
    bad = write(tmp_path, "bad.py", "import posenc\nraise ImportError('needs flash_attn')\n")
    use_env(monkeypatch, good, bad, tmp_path / "gone.py")
    rows = plugins.listing(fresh.encoders)
    assert rows[: len(ENCODERS.builtins())] == [
        (k, plugins.description(ENCODERS[k]), "built-in") for k in ENCODERS.builtins()
    ]
    assert ("mine", "my encoder, first line", f"plugin: file {good} (mine:Mine)") in rows
    assert rows[-2:] == [
        ("", f"error: POSENC_PLUGINS: cannot import {bad}: ImportError: needs flash_attn (line 2)", "plugin"),
        ("", f"error: POSENC_PLUGINS: no plugin file {tmp_path / 'gone.py'}", "plugin"),
    ]
    # the command prints them and returns (exit 0); a strict read (any other command) stops on the first
    import posenc.cli.app
    import posenc.encoders

    monkeypatch.setattr(posenc.encoders, "ENCODERS", fresh.encoders)
    posenc.cli.app.encoders()
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("mine ") and line.endswith(f"[plugin: file {good} (mine:Mine)]") for line in out)
    assert out[-2:] == [rows[-2][1], rows[-1][1]]
    with pytest.raises(ConfigError, match="needs flash_attn"):
        fresh.encoders.check("mine")


# -- entry points: an installed package, simulated ------------------------------------------------------------
def install(site: Path, dist: str, module: str, source: str, entry_points: str, metadata: str | None = None) -> None:
    """A distribution ``dist`` in folder ``site``: module ``module``.py and its dist-info."""
    write(site, f"{module}.py", source)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    if metadata is None:
        metadata = f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n"
    if metadata:
        (info / "METADATA").write_text(metadata)
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points).lstrip())


@pytest.fixture
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


PLAIN_ENCODER = '''
from posenc.encoders import NoPE


class Mine(NoPE):
    """an installed encoder"""

    def __init__(self, shape, train_length, *, width: int = 3) -> None:
        super().__init__(shape, train_length)
        self.width = width
'''


def test_entry_point_is_imported_only_when_its_key_is_used(fresh, site):
    install(site, "mypkg", "mypkg", PLAIN_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    assert "mine" in fresh.encoders and "mine" in list(fresh.encoders) and len(fresh.encoders) == len(ENCODERS) + 1
    fresh.encoders.check("mine")
    fresh.encoders.parse("mine,rope", "--encoders")
    assert fresh.encoders.origin("mine") == plugins.Origin("entry point", "mypkg 0.1", "mypkg:Mine")
    fresh.encoders.build("rope", SHAPE, 16)  # another key's use
    plugins.provenance("rope", "copy")
    assert "mypkg" not in sys.modules
    assert fresh.encoders.build("mine", SHAPE, 16, options={"width": 7}).width == 7  # its use: imported now
    assert "mypkg" in sys.modules
    assert plugins.provenance("mine", "copy") == {
        "encoder": {"origin": "entry point", "source": "mypkg 0.1", "object": "mypkg:Mine"}
    }


def test_listing_imports_entry_points_to_describe_them(fresh, site):
    """`posenc encoders` is a use of every key: it imports each entry point for its description, so that one
    that does not import shows as its line there (documented in posenc.plugins.listing)."""
    install(site, "mypkg", "mypkg", PLAIN_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    row = ("mine", "an installed encoder", "plugin: entry point mypkg 0.1 (mypkg:Mine)")
    assert row in plugins.listing(fresh.encoders)
    assert "mypkg" in sys.modules


def test_broken_entry_points_are_one_line_each_and_the_listing_goes_on(fresh, site):
    install(
        site,
        "mypkg",
        "mypkg",
        PLAIN_ENCODER + "\n\nimport flash_attn_for_posenc_tests\n",
        """
        [posenc.encoders]
        mine = mypkg:Mine
        gone = mypkg_nowhere:Mine
        not_a_class = mypkg:PLAIN_ENCODER_VALUE
        Bad-Key = mypkg:Mine
        rope = mypkg:Mine
    """,
    )
    install(site, "otherpkg", "otherpkg", PLAIN_ENCODER, "[posenc.encoders]\nworks = otherpkg:Mine\n")
    fresh.encoders.check("rope")  # a plugin claiming a built-in's key leaves the built-in as it is
    assert fresh.encoders["rope"].__name__ == "RoPE" and fresh.encoders.origin("rope") is None
    with pytest.raises(ConfigError) as err:
        fresh.encoders.build("mine", SHAPE, 16)
    assert one_line(err) == (
        "encoder plugin 'mine' (entry point mypkg 0.1 (mypkg:Mine)): cannot import it: "
        "ModuleNotFoundError: No module named 'flash_attn_for_posenc_tests' "
        f"({site / 'mypkg.py'} line 12)"
    )
    with pytest.raises(ConfigError, match="^encoder plugin 'mine' .*cannot import it"):
        fresh.encoders.check("mine")  # known broken now: its line again, not "unknown"
    rows = plugins.listing(fresh.encoders)
    texts = {key: text for key, text, _ in rows if key}
    assert texts["works"] == "an installed encoder"
    assert texts["gone"] == (
        "error: encoder plugin 'gone' (entry point mypkg 0.1 (mypkg_nowhere:Mine)): cannot import "
        "it: ModuleNotFoundError: No module named 'mypkg_nowhere'"
    )
    assert texts["mine"].startswith("error: encoder plugin 'mine'")
    lines = [text for key, text, _ in rows if not key]
    assert (
        "error: encoder plugin 'rope' (entry point mypkg 0.1 (mypkg:Mine)): the key is taken by a posenc built-in"
    ) in lines
    assert (
        "error: encoder plugin 'Bad-Key' (entry point mypkg 0.1 (mypkg:Mine)): a key is lowercase letters, "
        "digits and _, starting with a letter, at most 48 characters"
    ) in lines
    assert all("\n" not in text for _, text, _ in rows)


def test_entry_point_whose_object_is_not_a_subclass(fresh, site):
    install(
        site,
        "mypkg",
        "mypkg",
        "class Mine:\n    pass\n\nNUMBER = 3\n",
        "[posenc.encoders]\nmine = mypkg:Mine\nnumber = mypkg:NUMBER\n",
    )
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("mine") or fresh.encoders["mine"]
    assert one_line(err) == (
        "encoder plugin 'mine' (entry point mypkg 0.1 (mypkg:Mine)): <class 'mypkg.Mine'> is not "
        "a subclass of posenc.encoders.PositionalEncoder"
    )
    with pytest.raises(ConfigError, match="'number' .*: 3 is not a subclass"):
        fresh.encoders["number"]


def test_two_distributions_claiming_one_key_leave_it_unusable_naming_both(fresh, site):
    install(site, "mypkg", "mypkg", PLAIN_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    install(site, "otherpkg", "otherpkg", PLAIN_ENCODER, "[posenc.encoders]\nmine = otherpkg:Mine\n")
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("mine")
    found = re.fullmatch(
        r"encoder plugin 'mine' \(entry point (\w+) 0\.1 \((\1):Mine\)\): the key is taken by "
        r"entry point (\w+) 0\.1 \((\3):Mine\)",
        one_line(err),
    )
    assert found and {found[1], found[3]} == {"mypkg", "otherpkg"}
    assert [text for key, text, _ in plugins.listing(fresh.encoders) if key == "mine"] == [f"error: {err.value}"]


def test_odd_distribution_metadata_still_gives_an_origin(fresh, site):
    install(site, "nometa", "nometa", PLAIN_ENCODER, "[posenc.encoders]\nno_meta = nometa:Mine\n", metadata="")
    install(
        site,
        "noversion",
        "noversion",
        PLAIN_ENCODER,
        "[posenc.encoders]\nno_version = noversion:Mine\n",
        metadata="Metadata-Version: 2.1\nName: noversion\n",
    )
    install(site, "spaced", "spaced", PLAIN_ENCODER, "[posenc.encoders]\nspaced = spaced : Mine [extra]\n")
    assert fresh.encoders.origin("no_meta") == plugins.Origin("entry point", "nometa", "nometa:Mine")
    assert fresh.encoders.origin("no_version") == plugins.Origin("entry point", "noversion", "noversion:Mine")
    assert fresh.encoders.origin("spaced") == plugins.Origin("entry point", "spaced 0.1", "spaced:Mine")
    for key in ("no_meta", "no_version", "spaced"):
        assert fresh.encoders.build(key, SHAPE, 16).width == 3


DECORATED_ENCODER = ENCODER.format(key="mine", cls="Mine")


def test_entry_point_module_that_also_uses_the_decorator_registers_once(fresh, site):
    """As examples/log_alibi: one module both an entry point and decorated (for POSENC_PLUGINS use)."""
    install(site, "mypkg", "mypkg", DECORATED_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    assert fresh.encoders["mine"].__module__ == "mypkg"
    assert fresh.encoders.origin("mine").kind == "entry point"


def test_entry_point_module_imported_by_its_user_first_registers_once(fresh, site):
    install(site, "mypkg", "mypkg", DECORATED_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    fresh.encoders.check("mine")
    import mypkg  # noqa: F401 - a plugin's own test imports its module

    assert fresh.encoders["mine"] is mypkg.Mine and fresh.encoders.origin("mine").kind == "entry point"


def test_posenc_plugins_naming_an_installed_plugin_again_is_a_collision(fresh, site, tmp_path, monkeypatch):
    install(site, "mypkg", "mypkg", DECORATED_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    copy = encoder_file(tmp_path / "checkout", name="mypkg.py")  # the package's file, also given as a file
    use_env(monkeypatch, copy)
    with pytest.raises(ConfigError) as err:
        fresh.encoders.check("mine")
    assert one_line(err).startswith(f"POSENC_PLUGINS: encoder plugin 'mine' (file {copy} (posenc_plugin_mypkg_")
    assert one_line(err).endswith("the key is taken by entry point mypkg 0.1 (mypkg:Mine)")


def test_a_file_plugin_importing_an_installed_plugin_to_extend_it(fresh, site, tmp_path, monkeypatch):
    install(site, "mypkg", "mypkg", DECORATED_ENCODER, "[posenc.encoders]\nmine = mypkg:Mine\n")
    path = write(
        tmp_path,
        "wider.py",
        """
        import posenc
        from mypkg import Mine

        @posenc.register_encoder("wider")
        class Wider(Mine):
            pass
    """,
    )
    use_env(monkeypatch, path)
    fresh.encoders.check("wider")
    assert fresh.encoders.origin("mine").kind == "entry point" and fresh.encoders.origin("wider").kind == "file"


def test_task_entry_points(fresh, site):
    install(
        site,
        "mytasks",
        "mytasks",
        "from posenc.tasks.synthetic import Copy\n\n\nclass Shout(Copy):\n    pass\n",
        "[posenc.tasks]\nshout = mytasks:Shout\n",
    )
    fresh.tasks.check("shout")
    assert "mytasks" not in sys.modules and "shout" not in fresh.encoders
    assert fresh.tasks.build("shout").vocab_size == 18


# -- runs: identity, and a run whose plugin is not loaded -----------------------------------------------------
def test_run_identity_does_not_depend_on_where_the_plugin_code_lives():
    from posenc.analysis.store import run_identity

    config = tiny_dict()
    config["encoder"] = {"name": "log_alibi", "scale": 2.0}
    file = {
        "encoder": {"origin": "file", "source": "/home/me/posenc_log_alibi.py", "object": "posenc_log_alibi:LogALiBi"}
    }
    package = {
        "encoder": {"origin": "entry point", "source": "posenc-log-alibi 0.1.0", "object": "posenc_log_alibi:LogALiBi"}
    }
    identities = {run_identity({**config, "plugins": p}) for p in (file, package)} | {run_identity(config)}
    assert len(identities) == 1
    other = {**config, "encoder": {"name": "log_alibi", "scale": 3.0}, "plugins": file}
    assert run_identity(other) not in identities


@pytest.mark.parametrize(
    ("origin", "how"),
    [
        ({"origin": "file", "source": "/x/mine.py", "object": "mine:Mine"}, "POSENC_PLUGINS=/x/mine.py"),
        ({"origin": "entry point", "source": "mypkg 0.1", "object": "mypkg:Mine"}, "install mypkg 0.1"),
        ({"origin": "module", "source": "mymod", "object": "mymod:Mine"}, "POSENC_PLUGINS=mymod"),
    ],
)
def test_run_of_a_plugin_not_loaded_here_says_how_to_load_it(origin, how):
    from posenc.running.config import run_config_from_dict

    config = tiny_dict()
    config["encoder"] = {"name": "mine", "width": 3}
    config["plugins"] = {"encoder": origin}
    with pytest.raises(ConfigError) as err:
        run_config_from_dict(config)
    assert one_line(err) == (
        f"encoder 'mine' is a plugin ({origin['object']} from {origin['origin']} "
        f"{origin['source']}) that is not loaded here: {how}"
    )


# -- the command, in subprocesses (POSENC_PLUGINS of their own) ------------------------------------------------
def posenc(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {**os.environ, "COLUMNS": "250", **env}
    full.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "posenc", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=300
    )


@pytest.mark.integration
def test_plugin_task_trains_like_a_builtin(tmp_path):
    path = write(
        tmp_path,
        "mytask.py",
        """
        import posenc
        from posenc.tasks.synthetic import Copy

        @posenc.register_task("shout")
        class Shout(Copy):
            description = "copy, louder"

            def __init__(self, *, n_symbols: int = 16, volume: int = 1) -> None:
                super().__init__(n_symbols=n_symbols)
                self.volume = volume
    """,
    )
    env = {plugins.ENV: str(path)}
    result = posenc(
        "train",
        "task=shout",
        "task.volume=3",
        "encoder=alibi",
        *TINY,
        f"paths.results={tmp_path}",
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(next((tmp_path / "runs" / "shout" / "alibi").rglob("config.yaml")).read_text())
    assert config["task"]["name"] == "shout" and config["task"]["volume"] == 3 and config["task"]["length"] == 16
    assert config["plugins"] == {"task": {"origin": "file", "source": str(path), "object": "mytask:Shout"}}
    result = posenc("train", "task=shout", "task.loudness=3", *TINY, cwd=tmp_path, env=env)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("error:") and "loudness" in result.stderr


@pytest.mark.integration
def test_training_a_builtin_imports_no_installed_plugin(tmp_path):
    site = tmp_path / "site"
    marker = tmp_path / "imported"
    install(
        site,
        "mypkg",
        "mypkg",
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n" + PLAIN_ENCODER,
        "[posenc.encoders]\nmine = mypkg:Mine\n",
    )
    env = {"PYTHONPATH": str(site)}
    result = posenc("train", "encoder=mine", "encoder.width=4", *TINY, "--cfg", "job", cwd=tmp_path, env=env)
    assert result.returncode == 0 and yaml.safe_load(result.stdout)["encoder"] == {"name": "mine", "width": 4}
    assert marker.exists()  # its own use imports it
    marker.unlink()
    result = posenc("train", "encoder=rope", *TINY, "--cfg", "job", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()


def test_entry_point_module_registering_its_key_for_another_class_is_a_collision(fresh, site):
    install(
        site,
        "mypkg",
        "mypkg",
        DECORATED_ENCODER + "\n\nclass Other(Mine):\n    pass\n",
        "[posenc.encoders]\nmine = mypkg:Other\n",
    )
    with pytest.raises(ConfigError) as err:
        fresh.encoders["mine"]
    assert one_line(err) == (
        "encoder plugin 'mine' (entry point mypkg 0.1 (mypkg:Mine)): the key is taken by entry "
        "point mypkg 0.1 (mypkg:Other)"
    )
    assert "mine" in fresh.encoders and fresh.encoders.origin("mine").object == "mypkg:Other"
    with pytest.raises(ConfigError, match="the key is taken by entry point mypkg 0.1"):
        fresh.encoders.check("mine")
