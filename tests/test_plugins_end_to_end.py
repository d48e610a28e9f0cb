"""The example plugin (examples/log_alibi) end to end, as a user runs it: once as a plain file named by
``POSENC_PLUGINS``, once installed as a package (``pip install --no-deps --target SITE examples/log_alibi``,
``PYTHONPATH=SITE``: its entry point ``posenc.encoders``). Listed, trained under the plain, joblib and
submitit_local launchers, resumed, extrapolated, drawn by ``posenc kernels``, listed by ``posenc runs``, tracked
with ``logger=tensorboard``; a rotary plugin takes ``--rope-scaling``. The runs are trained once for the module
(fixture ``trained``) into one results folder, the file's and the package's runs side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import TINY

from posenc.analysis.store import run_identity
from posenc.files import METRICS_FILE

pytestmark = pytest.mark.integration  # every test runs posenc in subprocesses
pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "log_alibi"
PLUGIN_FILE = EXAMPLE / "posenc_log_alibi.py"
FILE_ORIGIN = {"origin": "file", "source": str(PLUGIN_FILE), "object": "posenc_log_alibi:LogALiBi"}
PACKAGE_ORIGIN = {"origin": "entry point", "source": "posenc-log-alibi 0.1.0", "object": "posenc_log_alibi:LogALiBi"}
# A rotary plugin: RoPE's rotations under a key of its own, so --rope-scaling applies to it
ROTARY = '''
import posenc
from posenc.encoders import RotaryEncoder


@posenc.register_encoder("my_rope")
class MyRope(RotaryEncoder):
    """RoPE, kept in a file of its own"""

    key = "my_rope"

    def __init__(self, shape, train_length, *, base: float = 10000.0) -> None:
        super().__init__(shape, train_length, base)
'''
RUN = [*TINY, "encoder=log_alibi", "encoder.scale=2"]


def _env(env: dict[str, str]) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if k not in ("POSENC_PLUGINS", "PYTHONPATH", "HYDRA_FULL_ERROR")}
    return full | {"COLUMNS": "250", **env}


def posenc(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``posenc ARGS`` in a fresh process whose plugins are ``env``'s alone (POSENC_PLUGINS, PYTHONPATH)."""
    return subprocess.run(
        [sys.executable, "-m", "posenc", *args], cwd=cwd, env=_env(env), capture_output=True, text=True, timeout=300
    )


class Started:
    """``posenc ARGS`` started in the background (commands that do not depend on each other run at once: the
    module's wall time is its longest chain, not its sum); :meth:`result` waits for it."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str], name: str, module: str = "posenc") -> None:
        self.out, self.err = cwd / f"{name}.stdout", cwd / f"{name}.stderr"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args], cwd=cwd, env=_env(env), stdout=out, stderr=err, text=True
            )
        self.args = args

    def result(self) -> subprocess.CompletedProcess:
        try:
            code = self.process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        return subprocess.CompletedProcess(self.args, code, self.out.read_text(), self.err.read_text())


def install_example(target: Path, work: Path) -> None:
    """``pip install --no-deps --target TARGET examples/log_alibi``, from a copy (a build writes beside the
    sources). Without build isolation where this environment has the build backend the example asks for."""
    source = work / "log_alibi"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-input", "--target", str(target)]
    try:
        import setuptools

        if int(setuptools.__version__.split(".")[0]) >= 77:
            command.append("--no-build-isolation")
    except ImportError:
        pass
    result = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def run_dirs(results: Path) -> dict[str, Path]:
    """``encoder/seedN`` -> the folder of each finished run under ``results``."""
    return {
        f"{p.parent.relative_to(results).parts[-3]}/{p.parent.relative_to(results).parts[-2]}": p.parent
        for p in results.rglob(METRICS_FILE)
    }


def config_of(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


BROKEN = "import posenc\n\nraise RuntimeError('a broken plugin')\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One results folder: log_alibi seed 0 trained from the file (plain launcher), resumed from the package;
    seed 1 from the package under joblib with tensorboard; my_rope from a file under submitit_local. And
    ``posenc encoders`` with the file and with the package, each beside a broken plugin file."""
    root = tmp_path_factory.mktemp("plugins")
    site, results = root / "site", root / "results"
    install_example(site, root)
    (rotary := root / "my_rope.py").write_text(ROTARY)
    (broken := root / "broken.py").write_text(BROKEN)
    (own_tests := root / "own_tests").mkdir()
    shutil.copy(EXAMPLE / "test_log_alibi.py", own_tests)
    envs = {
        "file": {"POSENC_PLUGINS": str(PLUGIN_FILE)},
        "package": {"PYTHONPATH": str(site)},
        "both": {"PYTHONPATH": str(site), "POSENC_PLUGINS": str(rotary)},
    }
    started = {
        "plain": Started("train", *RUN, f"paths.results={results}", cwd=root, env=envs["file"], name="plain"),
        "joblib": Started(
            "train",
            "-m",
            "hydra/launcher=joblib",
            *RUN,
            "seed=1",
            "logger=tensorboard",
            f"paths.results={results}",
            f"hydra.sweep.dir={results}/joblib",
            cwd=root,
            env=envs["package"],
            name="joblib",
        ),
        "submitit": Started(
            "train",
            "-m",
            "hydra/launcher=submitit_local",
            *TINY,
            "encoder=my_rope",
            f"paths.results={results}",
            f"hydra.sweep.dir={results}/submitit",
            cwd=root,
            env={"POSENC_PLUGINS": f"{PLUGIN_FILE},{rotary}"},
            name="submitit",
        ),
        "list_file": Started("encoders", cwd=root, env={"POSENC_PLUGINS": f"{PLUGIN_FILE},{broken}"}, name="list_file"),
        "list_package": Started(
            "encoders", cwd=root, env={**envs["package"], "POSENC_PLUGINS": str(broken)}, name="list_package"
        ),
        "check_file": Started("encoders", "--check", "log_alibi", cwd=root, env=envs["file"], name="check_file"),
        # the package's own test (examples/log_alibi/test_log_alibi.py), on the installed package, as its
        # author runs it: a folder of its own, no posenc test configuration
        "own_tests": Started(
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(root / "own_tests"),
            str(own_tests / "test_log_alibi.py"),
            cwd=own_tests,
            env=envs["package"],
            name="own_tests",
            module="pytest",
        ),
    }
    out = {name: process.result() for name, process in started.items()}
    for name in ("plain", "joblib", "submitit"):
        assert out[name].returncode == 0, f"{name}: {out[name].stderr}"
    plain = run_dirs(results)["log_alibi/seed0"]
    out["file_config"] = config_of(plain)
    (plain / METRICS_FILE).unlink()  # as if stopped after its last checkpoint: the next command resumes it
    out["resumed"] = posenc("train", *RUN, f"paths.results={results}", cwd=root, env=envs["package"])
    assert out["resumed"].returncode == 0, out["resumed"].stderr
    return {
        "root": root,
        "site": site,
        "results": results,
        "envs": envs,
        "out": out,
        "plain": plain,
        "rotary": rotary,
        "broken": broken,
        "runs": run_dirs(results),
    }


@pytest.mark.parametrize("how", ["file", "package"])
def test_posenc_encoders_lists_the_example(trained, how):
    result = trained["out"][f"list_{how}"]
    assert result.returncode == 0, result.stderr  # a broken plugin is one line: the listing goes on
    lines = result.stdout.splitlines()
    origin = FILE_ORIGIN if how == "file" else PACKAGE_ORIGIN
    (line,) = [line for line in lines if line.startswith("log_alibi ")]
    assert line.endswith(f"[plugin: {origin['origin']} {origin['source']} ({origin['object']})]")
    assert "ALiBi's slopes on log(1 + distance)" in line
    broken = trained["broken"]
    assert lines[-1] == f"error: POSENC_PLUGINS: cannot import {broken}: RuntimeError: a broken plugin (line 3)"
    assert lines[0].startswith("nope ")


def test_conformance_check_of_the_example_file(trained):
    result = trained["out"]["check_file"]
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("encoder 'log_alibi' (") and lines[-1].startswith("every property holds")
    assert len(lines) >= 8 and all(line.startswith("pass ") for line in lines[1:-1])


def test_the_example_package_own_tests_pass_installed(trained):
    result = trained["out"]["own_tests"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_runs_from_the_file_and_the_package_are_one_run(trained):
    """The same key and options: the same folder and identity wherever the code lives; config.yaml records
    where it came from. The package resumed the file's run (its checkpoint's config matched)."""
    plain, out = trained["plain"], trained["out"]
    assert out["file_config"]["plugins"] == {"encoder": FILE_ORIGIN}
    assert out["file_config"]["encoder"] == {"name": "log_alibi", "scale": 2.0}
    assert f"resuming {plain} from step 4" in out["resumed"].stdout + out["resumed"].stderr
    assert config_of(plain)["plugins"] == {"encoder": PACKAGE_ORIGIN}
    assert run_identity(config_of(plain)) == run_identity(out["file_config"])
    runs = trained["runs"]
    assert sorted(runs) == ["log_alibi/seed0", "log_alibi/seed1", "my_rope/seed0"]
    assert runs["log_alibi/seed0"] == plain and plain.name == runs["log_alibi/seed1"].name  # the folder's name
    seeded = run_identity(config_of(runs["log_alibi/seed1"]))
    assert seeded.config_id == run_identity(out["file_config"]).config_id  # the same configuration, another seed


def test_joblib_workers_load_the_entry_point_and_track(trained):
    run = trained["runs"]["log_alibi/seed1"]
    assert config_of(run)["plugins"] == {"encoder": PACKAGE_ORIGIN}
    assert json.loads((run / METRICS_FILE).read_text())["steps"] == 4
    assert list(run.rglob("events.out.tfevents.*")), sorted(p.name for p in run.rglob("*"))


def test_submitit_local_workers_load_posenc_plugins(trained):
    run = trained["runs"]["my_rope/seed0"]
    assert config_of(run)["plugins"] == {
        "encoder": {"origin": "file", "source": str(trained["rotary"]), "object": "my_rope:MyRope"}
    }


@pytest.fixture(scope="module")
def used(trained):
    """``extrapolate`` (with --rope-scaling), ``kernels`` and ``runs`` over the trained runs, with both plugins
    loaded, and ``extrapolate`` of the package's run with no plugin loaded: at once."""
    root, results, env = trained["root"], trained["results"], trained["envs"]["both"]
    started = {
        "extrapolate": Started(
            "extrapolate",
            "--runs",
            str(results),
            "--out",
            str(root / "tables"),
            "--lengths",
            "16,24",
            "--sequences",
            "2",
            "--device",
            "cpu",
            "--include-not-learned",
            "--rope-scaling",
            "none,ntk",
            cwd=root,
            env=env,
            name="extrapolate",
        ),
        "kernels": Started(
            "kernels",
            "--encoders",
            "log_alibi,my_rope",
            "--runs",
            str(trained["plain"]),
            "--max-distance",
            "32",
            "--rope-scaling",
            "none,ntk",
            "--out",
            str(root / "kernels"),
            cwd=root,
            env=env,
            name="kernels",
        ),
        "runs": Started(
            "runs", "--runs", str(results), "--out", str(root / "training"), cwd=root, env=env, name="runs"
        ),
        "unloaded": Started(
            "extrapolate",
            "--runs",
            str(trained["runs"]["log_alibi/seed1"]),
            "--out",
            str(root / "unloaded"),
            "--lengths",
            "16",
            "--include-not-learned",
            cwd=root,
            env={},
            name="unloaded",
        ),
    }
    return {name: process.result() for name, process in started.items()}


def test_extrapolate_takes_plugin_runs_and_rope_scaling_for_a_rotary_plugin(trained, used):
    assert used["extrapolate"].returncode == 0, used["extrapolate"].stderr
    table = pd.read_parquet(trained["root"] / "tables" / "extrapolation.parquet")
    scalings = table.groupby("encoder")["scaling"].agg(lambda s: sorted(set(s))).to_dict()
    assert sorted(scalings) == ["log_alibi", "my_rope"]
    assert scalings["my_rope"] == ["none", "ntk"] and scalings["log_alibi"] == ["none"]
    assert table[table.encoder == "log_alibi"].seed.nunique() == 2


def test_kernels_draw_plugins_untrained_and_from_runs(trained, used):
    assert used["kernels"].returncode == 0, used["kernels"].stderr
    kernels = pd.read_parquet(trained["root"] / "kernels" / "kernels.parquet")
    assert {"log_alibi", "my_rope"} <= set(kernels.encoder)


def test_runs_lists_plugin_runs(trained, used):
    assert used["runs"].returncode == 0, used["runs"].stderr
    training = pd.read_csv(trained["root"] / "training" / "training.csv")
    assert sorted(training.encoder) == ["log_alibi"] * 2 + ["my_rope"]


def test_a_run_whose_plugin_is_not_loaded_says_how_to_load_it(used):
    text = " ".join((used["unloaded"].stdout + used["unloaded"].stderr).split())
    assert (
        "its encoder 'log_alibi' is not registered here: it trained with the plugin "
        "posenc_log_alibi:LogALiBi (entry point posenc-log-alibi 0.1.0); load it the same way "
        "(install posenc-log-alibi 0.1.0;"
    ) in text, text
