"""Encoders and tasks from outside posenc's tree: entry points, ``POSENC_PLUGINS`` and two decorators.

Two ways in, as pytest and lm-evaluation-harness take their users' code:

* an installed package declares entry points in group ``posenc.encoders`` (or ``posenc.tasks``), the entry's
  name being the key and its value ``"module:Class"``; the module is imported only when the key is used
  (built, its class or config read) or listed (``posenc encoders``, :func:`listing`), never to check keys;
* unpackaged code: the environment variable ``POSENC_PLUGINS`` holds a comma-separated list of importable
  module names or ``.py`` file paths, imported the first time a registry is read; their classes register
  with ``@posenc.register_encoder("key")`` / ``@posenc.register_task("key")``. The variable is inherited by
  every launcher's workers (joblib, submitit, SLURM jobs), which therefore see the same registry.

A plugin encoder subclasses :class:`posenc.encoders.PositionalEncoder` and is built as
``Class(shape, train_length, **options)``; a task subclasses :class:`posenc.tasks.Task`, built as
``Class(**options)``. Their keyword-only constructor parameters are their options: ``posenc train encoder=KEY
encoder.OPTION=VALUE`` composes a config made from them (:func:`posenc.running.config.plugin_config`)
unless the plugin ships
``KEY.yaml`` beside its module. A run's identity is its key and options, as for a built-in; where the code
came from (:class:`Origin`) is recorded in its ``config.yaml`` under ``plugins``, outside its identity.

This module imports no torch itself: ``import posenc`` stays light.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import keyword
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from posenc.errors import ConfigError

ENV = "POSENC_PLUGINS"
KEY = re.compile(r"[a-z][a-z0-9_]{0,47}\Z")  # a Hydra config name and a folder name, like the built-ins'
_GROUPS = ("encoder", "task")


@dataclass(frozen=True)
class Origin:
    """Where a plugin's class comes from.

    Args:
        kind: ``entry point`` (an installed package), ``file`` (a ``.py`` path in ``POSENC_PLUGINS``) or
            ``module`` (an importable module in ``POSENC_PLUGINS``, or code that registered in-process).
        source: the distribution and its version, the file's absolute path, or the module's name.
        object: ``"module:Class"``.
    """

    kind: str
    source: str
    object: str

    def __str__(self) -> str:
        return f"{self.kind} {self.source} ({self.object})"

    def record(self) -> dict[str, str]:
        """What a run's ``config.yaml`` keeps of it (``plugins.<group>``)."""
        return {"origin": self.kind, "source": self.source, "object": self.object}


# -- registration --------------------------------------------------------------------------------------
_loading: list[Origin] = []  # the POSENC_PLUGINS entry or entry point being imported (its decorators' origin)
_registered: list[list[tuple[Any, str]]] = []  # beside _loading: (registry, key) its decorators registered


#: group -> its Registry, filled as each registry is made (posenc.encoders, posenc.tasks import this module;
#: this module imports neither, so plugins never form an import cycle with the registries).
REGISTRIES: dict[str, Any] = {}
_PACKAGES = {"encoder": "posenc.encoders", "task": "posenc.tasks"}


def registry_of(group: str):
    """The registry of ``group``, importing its package if no one has yet (a decorator on a class that
    subclasses nothing of posenc's)."""
    if group not in REGISTRIES:
        importlib.import_module(_PACKAGES[group])
    return REGISTRIES[group]


def _object_path(cls: type) -> str:
    return f"{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', repr(cls))}"


def check_entry(registry, key: str, cls: Any, origin: Origin) -> None:
    """Raise one :class:`ConfigError` line naming the plugin if ``key`` or ``cls`` cannot be registered."""
    where = f"{registry.group} plugin '{key}' ({origin})"
    if not isinstance(key, str) or not KEY.match(key):
        raise ConfigError(
            f"{registry.group} plugin {key!r} ({origin}): a key is lowercase letters, digits and _, "
            "starting with a letter, at most 48 characters"
        )
    if registry.has_key(key):
        taken = registry.recorded_origin(key)
        raise ConfigError(f"{where}: the key is taken by {taken or 'a posenc built-in'}")
    check_class(registry, key, cls, origin)


def check_class(registry, key: str, cls: Any, origin: Origin) -> None:
    """Raise one :class:`ConfigError` line naming the plugin if ``cls`` does not subclass the registry's base."""
    if not (isinstance(cls, type) and issubclass(cls, registry.base)):
        base = f"{registry.base.__module__.rsplit('.', 1)[0]}.{registry.base.__name__}"
        raise ConfigError(f"{registry.group} plugin '{key}' ({origin}): {cls!r} is not a subclass of {base}")


def _defined_in(cls: type, module: str) -> bool:
    """Whether ``cls`` comes from module ``module`` (or a submodule of it)."""
    name = getattr(cls, "__module__", "") or ""
    return name == module or name.startswith(f"{module}.")


def _register(group: str, key: str) -> Callable[[type], type]:
    def decorator(cls: type) -> type:
        registry = registry_of(group)
        registry.read_plugins(strict=False)  # entry points first: a clash with one is caught here
        loading = _loading[-1] if _loading else None
        if loading is not None:
            origin = Origin(loading.kind, loading.source, _object_path(cls))
        else:
            module = sys.modules.get(getattr(cls, "__module__", ""), None)
            source = str(getattr(module, "__file__", None) or cls.__module__)
            origin = Origin("module", source, _object_path(cls))
        taken = registry.recorded_origin(key)
        named_again = loading is not None and loading.kind != "entry point" and _defined_in(cls, loading.object)
        own = taken is not None and taken.kind == "entry point" and taken.object == _object_path(cls)
        if own and not named_again:
            # the entry point's own module registering its own class (imported to load the entry point, or by
            # its user): one class, one registration. Not so when POSENC_PLUGINS names that module (or a copy
            # of its file): the key then comes from two places, which is a collision like any other.
            return cls
        check_entry(registry, key, cls, origin)
        registry.add(key, cls, origin)
        if _registered:
            _registered[-1].append((registry, key))
        return cls

    return decorator


def register_encoder(key: str) -> Callable[[type], type]:
    """Class decorator: register a :class:`~posenc.encoders.PositionalEncoder` subclass as encoder ``key``."""
    return _register("encoder", key)


def register_task(key: str) -> Callable[[type], type]:
    """Class decorator: register a :class:`~posenc.tasks.Task` subclass as task ``key``."""
    return _register("task", key)


# -- reading plugins -----------------------------------------------------------------------------------
_module_errors: list[str] = []
_modules_read = False
_IMPORT_ERRORS = (Exception, SystemExit)  # foreign code at import: any of these becomes its one line


def _distribution(entry: Any) -> str:
    """``name version`` of the distribution declaring ``entry``, as far as its metadata tells (a missing
    ``METADATA``, name or version is not an error: the entry point still works)."""
    dist = getattr(entry, "dist", None)
    name = version = None
    if dist is not None:
        try:
            name = dist.name
        except Exception:  # noqa: BLE001 - unreadable metadata (no METADATA file): the folder's name below
            name = None
        try:
            version = dist.version
        except Exception:  # noqa: BLE001
            version = None
        if not name:
            folder = getattr(dist, "_path", None)  # PathDistribution: NAME-VERSION.dist-info
            name = Path(str(folder)).name.split("-")[0] if folder is not None else None
    name = str(name) if name else "an installed package"
    return f"{name} {version}" if version else name


def _entry_object(entry: Any) -> str:
    """An entry point's ``module:attr`` without spaces or extras, as :func:`_object_path` writes a class."""
    return re.sub(r"\s+", "", str(entry.value).split("[", 1)[0])


def read_plugins(registry) -> None:
    """Take in ``registry``'s entry points (as lazy entries), then every ``POSENC_PLUGINS`` module (once).

    An entry point whose key is malformed or a built-in's is refused (the built-in stays usable); one whose key
    another plugin already holds makes that key unusable, with the line naming both (which of the two was
    meant cannot be known). No entry point is imported here."""
    try:
        entries = list(importlib.metadata.entry_points(group=registry.entry_point_group))
    except Exception as err:  # noqa: BLE001 - an unreadable installation: the registry's own keys still work
        registry.refuse(
            "",
            f"cannot read the installed {registry.entry_point_group} entry points: "
            f"{type(err).__name__}: {err}".splitlines()[0],
        )
        entries = []
    for entry in entries:
        origin = Origin("entry point", _distribution(entry), _entry_object(entry))
        try:
            check_entry(registry, entry.name, registry.base, origin)  # the class is checked when imported
        except ConfigError as err:
            if registry.has_key(entry.name) and registry.recorded_origin(entry.name) is not None:
                registry.mark_broken(entry.name, str(err), origin)  # two plugins: neither is chosen
            else:
                registry.refuse(entry.name, str(err))  # malformed, or a built-in's key
            continue
        registry.add_lazy(entry.name, entry, origin)
    read_env_modules()


def load_entry_point(registry, key: str, entry: Any) -> type:
    """Import entry point ``key``'s class; a failure marks it broken and raises its one line."""
    origin = registry.recorded_origin(key)
    module = origin.object.partition(":")[0]
    try:
        cls = _run_registering(Origin("entry point", origin.source, module), entry.load)
        check_class(registry, key, cls, origin)
    except ConfigError as err:
        registry.mark_broken(key, str(err), origin)
        raise
    except _IMPORT_ERRORS as err:
        where = _code_of(module)
        reason = f"{registry.group} plugin '{key}' ({origin}): cannot import it: {_error_line(err, where)}"
        registry.mark_broken(key, reason, origin)
        raise ConfigError(reason) from err
    return cls


def env_entries() -> list[str]:
    """``POSENC_PLUGINS``'s entries, file paths made absolute (and written back, so that launcher workers
    started in another folder import the same files), each once."""
    entries = [e.strip() for e in os.environ.get(ENV, "").split(",") if e.strip()]
    absolute = list(dict.fromkeys(str(Path(e).expanduser().resolve()) if _is_file_entry(e) else e for e in entries))
    if absolute != entries:
        os.environ[ENV] = ",".join(absolute)
    return absolute


def _is_file_entry(entry: str) -> bool:
    return entry.endswith(".py") or os.sep in entry or "/" in entry


def read_env_modules() -> None:
    """Import every ``POSENC_PLUGINS`` entry once per process; failures are kept as one line each."""
    global _modules_read
    if _modules_read:
        return
    _modules_read = True
    for entry in env_entries():
        try:
            _import_entry(entry)
        except ConfigError as err:
            _module_errors.append(f"{ENV}: {err}")
        except _IMPORT_ERRORS as err:
            line = (
                _error_line(err, Path(entry), named=True)
                if _is_file_entry(entry)
                else _error_line(err, _code_of(entry))
            )
            _module_errors.append(f"{ENV}: cannot import {entry}: {line}")


def _same_file(a: Any, b: Path) -> bool:
    try:
        return a is not None and Path(a).resolve() == b.resolve()
    except (OSError, ValueError, TypeError):
        return False


def module_name(path: Path) -> str:
    """The module name a plugin file is imported under: its stem where that names no other module (so that the
    same file has the same object paths as when imported by name), else a name of its own, the same in every
    process (launcher workers), that shadows nothing."""
    stem = path.stem
    if stem.isidentifier() and not keyword.iskeyword(stem):
        loaded = sys.modules.get(stem)
        if loaded is None:
            try:
                spec = importlib.util.find_spec(stem)  # a top-level name: searches, imports nothing
            except (ImportError, ValueError):
                spec = None
            if spec is None or _same_file(spec.origin, path):
                return stem
        elif _same_file(getattr(loaded, "__file__", None), path):
            return stem
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    safe = re.sub(r"\W", "_", stem)
    return f"posenc_plugin_{safe}_{digest}"


def _import_entry(entry: str) -> None:
    if not _is_file_entry(entry):
        _run_registering(Origin("module", entry, entry), lambda: importlib.import_module(entry))
        return
    path = Path(entry)
    if not path.is_file():
        raise ConfigError(f"no plugin file {path}")
    name = module_name(path)
    if _same_file(getattr(sys.modules.get(name), "__file__", None), path):
        return  # imported already (by its name, from a folder on sys.path): its decorators have run
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look a class's module up while it executes

    def execute() -> None:
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise

    _run_registering(Origin("file", str(path), name), execute)


def _run_registering(origin: Origin, run: Callable[[], Any]) -> Any:
    """``run()`` (an import) with ``origin`` as its decorators' origin; if it fails, what it registered is
    taken back (a module that does not import provides nothing)."""
    _loading.append(origin)
    _registered.append([])
    try:
        return run()
    except BaseException:
        for registry, key in _registered[-1]:
            registry.remove(key)
        raise
    finally:
        _loading.pop()
        _registered.pop()


def _code_of(module: str) -> Path | None:
    """The file or folder of top-level module ``module``'s code (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin) if spec.origin and spec.has_location else None


def _inside(filename: str, code: Path) -> bool:
    try:
        file = Path(filename).resolve()
        code = code.resolve()
    except (OSError, ValueError):
        return False
    return file == code or code in file.parents


def _error_line(err: BaseException, code: Path | None, named: bool = False) -> str:
    """``Type: message`` of a plugin's exception, with the line of the plugin's own code (``code``: its file,
    or its package's folder) it was raised from: ``(FILE line N)``, or ``(line N)`` where ``named`` (the
    message names the file ``code`` already: a ``POSENC_PLUGINS`` file)."""
    line = f"{type(err).__name__}: {err}".splitlines()[0] if str(err) else type(err).__name__
    if code is None:
        return line

    def at(filename: str, lineno: int) -> str:
        return f"line {lineno}" if named and _same_file(filename, code) else f"{filename} line {lineno}"

    if isinstance(err, SyntaxError) and err.lineno and err.filename and _inside(err.filename, code):
        return f"{line} ({at(err.filename, err.lineno)})"
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.lineno and _inside(f.filename, code)]
    return f"{line} ({at(frames[-1].filename, frames[-1].lineno)})" if frames else line


def module_errors() -> list[str]:
    """The ``POSENC_PLUGINS`` entries that failed, one line each."""
    return list(_module_errors)


def raise_module_errors() -> None:
    """Raise the first failed ``POSENC_PLUGINS`` entry's line: the user asked for it, so nothing runs without."""
    if _module_errors:
        raise ConfigError(_module_errors[0])


# -- what the rest of posenc asks of plugins ----------------------------------------------------------
def provenance(encoder: str, task: str) -> dict[str, dict[str, str]]:
    """``config.yaml``'s ``plugins`` record for a run of ``encoder`` on ``task``: the origin of each that is
    a plugin (empty for built-ins)."""
    out = {}
    for group, key in (("encoder", encoder), ("task", task)):
        origin = registry_of(group).origin(key)
        if origin is not None:
            out[group] = origin.record()
    return out


def description(cls: type) -> str:
    """A class's one-line description: its own ``description``, else its docstring's first line."""
    own = cls.__dict__.get("description")
    if own:
        return str(own)
    doc = (cls.__doc__ or "").strip().splitlines()
    return doc[0] if doc else getattr(cls, "description", "")


def listing(registry) -> list[tuple[str, str, str]]:
    """``(key, description, origin)`` for every entry of ``registry``, built-ins first; a broken plugin is a
    row whose description is its error, and a refused entry point or a failed ``POSENC_PLUGINS`` entry a row
    of its own (key ``""``): a listing never stops on a plugin.

    Listing is a use of every key: it imports each installed entry point, for its description and so that
    one that does not import shows as its error line here rather than in the middle of a sweep. Nothing
    else imports an entry point but the use of its own key (``check``, ``in``, iterating the keys, ``origin``
    and another key's use import none)."""
    registry.read_plugins(strict=False)
    rows = []
    for key in registry.keys_unchecked():
        origin = registry.recorded_origin(key)
        try:
            text = description(registry[key])
        except ConfigError as err:
            text = f"error: {err}"
        rows.append((key, text, "built-in" if origin is None else f"plugin: {origin}"))
    rows += [
        (key, f"error: {reason}", "plugin")
        for key, reason in registry.broken_unchecked().items()
        if key not in registry.keys_unchecked()
    ]
    rows += [("", f"error: {reason}", "plugin") for _, reason in registry.refused_unchecked()]
    rows += [("", f"error: {line}", "plugin") for line in module_errors()]
    return rows
