"""Encoders and tasks from outside posenc's tree: entry points, ``POSENC_PLUGINS`` and two decorators.

Two ways in, as pytest and lm-evaluation-harness take their users' code:

* an installed package declares entry points in group ``posenc.encoders`` (or ``posenc.tasks``), the entry's
  name being the key and its value ``"module:Class"``; the module is imported only when the key is used;
* unpackaged code: the environment variable ``POSENC_PLUGINS`` holds a comma-separated list of importable
  module names or ``.py`` file paths, imported the first time a registry is read; their classes register
  with ``@posenc.register_encoder("key")`` / ``@posenc.register_task("key")``. The variable is inherited by
  every launcher's workers (joblib, submitit, SLURM jobs), which therefore see the same registry.

A plugin encoder subclasses :class:`posenc.encoders.PositionalEncoder` and is built as
``Class(shape, train_length, **options)``; a task subclasses :class:`posenc.tasks.Task`, built as
``Class(**options)``. Their keyword-only constructor parameters are their options: ``posenc train encoder=KEY
encoder.OPTION=VALUE`` composes a config made from them (:func:`posenc.config.plugin_config`) unless the plugin ships
``KEY.yaml`` beside its module. A run's identity is its key and options, as for a built-in; where the code
came from (:class:`Origin`) is recorded in its ``config.yaml`` under ``plugins``, outside its identity.

This module imports no torch itself: ``import posenc`` stays light.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
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
_loading: list[Origin] = []  # the POSENC_PLUGINS entry being imported (its decorators' origin)


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
    return f"{cls.__module__}:{cls.__qualname__}"


def check_entry(registry, key: str, cls: Any, origin: Origin) -> None:
    """Raise one :class:`ConfigError` line naming the plugin if ``key`` or ``cls`` cannot be registered."""
    where = f"{registry.group} plugin '{key}' ({origin})"
    if not isinstance(key, str) or not KEY.match(key):
        raise ConfigError(f"{registry.group} plugin {key!r} ({origin}): a key is lowercase letters, digits and _, "
                          "starting with a letter, at most 48 characters")
    if registry.has_key(key):
        taken = registry._origins.get(key)
        raise ConfigError(f"{where}: the key is taken by {taken or 'a posenc built-in'}")
    if not (isinstance(cls, type) and issubclass(cls, registry.base)):
        base = f"{registry.base.__module__.rsplit('.', 1)[0]}.{registry.base.__name__}"
        raise ConfigError(f"{where}: {cls!r} is not a subclass of {base}")


def _register(group: str, key: str) -> Callable[[type], type]:
    def decorator(cls: type) -> type:
        registry = registry_of(group)
        registry.read_plugins(strict=False)  # entry points first: a clash with one is caught here
        if _loading:
            origin = Origin(_loading[-1].kind, _loading[-1].source, _object_path(cls))
        else:
            module = sys.modules.get(getattr(cls, "__module__", ""), None)
            origin = Origin("module", str(getattr(module, "__file__", None) or cls.__module__), _object_path(cls))
        taken = registry._origins.get(key)
        if taken is not None and taken.kind == "entry point" and taken.object == _object_path(cls):
            return cls  # the entry point's own module, imported to load it: one class, one registration
        check_entry(registry, key, cls, origin)
        registry.add(key, cls, origin)
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


def read_plugins(registry) -> None:
    """Take in ``registry``'s entry points (as lazy entries), then every ``POSENC_PLUGINS`` module (once)."""
    for entry in importlib.metadata.entry_points(group=registry.entry_point_group):
        dist = getattr(entry, "dist", None)
        source = f"{dist.name} {dist.version}" if dist is not None else "an installed package"
        origin = Origin("entry point", source, entry.value)
        try:
            check_entry(registry, entry.name, registry.base, origin)  # the class is checked when imported
        except ConfigError as err:
            registry.mark_broken(entry.name, str(err), origin)
            continue
        registry.add_lazy(entry.name, entry, origin)
    read_env_modules()


def load_entry_point(registry, key: str, entry: Any) -> type:
    """Import entry point ``key``'s class; a failure marks it broken and raises its one line."""
    origin = registry._origins[key]
    try:
        cls = entry.load()
        if not (isinstance(cls, type) and issubclass(cls, registry.base)):
            check_entry(registry, key, cls, origin)  # raises: not a subclass
    except ConfigError as err:
        registry.mark_broken(key, str(err), origin)
        raise
    except Exception as err:  # noqa: BLE001 - any error of foreign code becomes its one line
        reason = f"{registry.group} plugin '{key}' ({origin}): cannot import it: {_error_line(err, None)}"
        registry.mark_broken(key, reason, origin)
        raise ConfigError(reason) from err
    return cls


def env_entries() -> list[str]:
    """``POSENC_PLUGINS``'s entries, file paths made absolute (and written back, so that launcher workers
    started in another folder import the same files)."""
    entries = [e.strip() for e in os.environ.get(ENV, "").split(",") if e.strip()]
    absolute = [str(Path(e).expanduser().resolve()) if _is_file_entry(e) else e for e in entries]
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
        except Exception as err:  # noqa: BLE001 - any error of foreign code becomes its one line
            _module_errors.append(f"{ENV}: cannot import {entry}: {_error_line(err, entry)}")


def _import_entry(entry: str) -> None:
    if not _is_file_entry(entry):
        _loading.append(Origin("module", entry, entry))
        try:
            importlib.import_module(entry)
        finally:
            _loading.pop()
        return
    path = Path(entry)
    if not path.is_file():
        raise ConfigError(f"no plugin file {path}")
    name = path.stem if path.stem.isidentifier() and path.stem not in sys.modules else f"posenc_plugin_{abs(hash(entry))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _loading.append(Origin("file", str(path), name))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        _loading.pop()


def _error_line(err: BaseException, file: str | None) -> str:
    """``Type: message`` of a plugin's exception, with the line of ``file`` it was raised from."""
    line = f"{type(err).__name__}: {err}".splitlines()[0]
    frames = [f for f in traceback.extract_tb(err.__traceback__) if file and f.filename == file]
    if isinstance(err, SyntaxError) and err.lineno:
        return f"{line} (line {err.lineno})"
    return f"{line} (line {frames[-1].lineno})" if frames else line


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
    row whose description is its error, and a failed ``POSENC_PLUGINS`` entry a row of its own: a listing
    never stops on a plugin."""
    registry.read_plugins(strict=False)
    rows = []
    for key in registry.keys_unchecked():
        origin = registry._origins.get(key)
        try:
            text = description(registry[key])
        except ConfigError as err:
            text = f"error: {err}"
        rows.append((key, text, "built-in" if origin is None else f"plugin: {origin}"))
    rows += [(key, f"error: {reason}", "plugin") for key, reason in registry.broken_unchecked().items()
             if key not in registry.keys_unchecked()]
    rows += [("", f"error: {line}", "plugin") for line in module_errors()]
    return rows
