"""One generic registry: config-group key -> class, for encoders and tasks alike, built-in or plugin.

Like Hugging Face's ``ROPE_INIT_FUNCTIONS`` (one mapping of variants behind one signature), each registry is a
read-only mapping, so ``name in ENCODERS`` and ``ENCODERS.items()`` work, plus the three things every caller
needs: refuse an unknown key with the known ones (:meth:`Registry.check`), build an entry with its options
checked against its constructor (:meth:`Registry.build`), and read a comma list of keys (:meth:`Registry.parse`).

Like lm-evaluation-harness's task registry, it also takes the user's own entries (:mod:`posenc.plugins`):
installed packages' entry points (group ``posenc.encoders`` / ``posenc.tasks``, imported only when their key is
used) and the modules named in ``POSENC_PLUGINS``, imported the first time the registry is read. Built-in keys
have ``conf/<group>/<key>.yaml`` (tests/running/test_config.py holds each to the code's defaults); a plugin's config is
made from its constructor's keyword-only parameters (:func:`posenc.running.config.plugin_config`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from posenc.errors import ConfigError
from posenc.options import check_options

T = TypeVar("T")


class Registry(Mapping[str, type[T]], Generic[T]):
    """Key -> class of config group ``group`` (``"encoder"``, ``"task"``).

    Args:
        group: the Hydra config group, used in messages: ``unknown encoder 'x'; known encoders: ...``.
        entries: the built-in key -> class, in the order listings show them (plugins follow).
        base: the class every entry must subclass (checked for plugins).
        entry_point_group: the entry-point group installed plugins register under (``posenc.encoders``).
    """

    def __init__(self, group: str, entries: dict[str, type[T]], *, base: type, entry_point_group: str) -> None:
        self.group = group
        self.base = base
        self.entry_point_group = entry_point_group
        self._classes: dict[str, type[T]] = dict(entries)
        self._builtins: tuple[str, ...] = tuple(entries)
        self._origins: dict[str, Any] = {}  # plugin key -> posenc.plugins.Origin (built-ins have none)
        self._lazy: dict[str, Any] = {}  # plugin key -> its entry point, imported on first use
        self._broken: dict[str, str] = {}  # plugin key -> why it cannot be used (one line)
        self._refused: list[tuple[str, str]] = []  # (key, line): plugin entries refused, their key left as it is
        self._plugins_read = False
        from posenc.plugins import REGISTRIES

        REGISTRIES[group] = self

    # -- the mapping: every read first takes in the plugins (once per process) ------------------------
    def _keys(self) -> dict[str, None]:
        self.read_plugins()
        return dict.fromkeys([*self._classes, *self._lazy])

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __contains__(self, name: object) -> bool:
        return name in self._keys()

    def __getitem__(self, name: str) -> type[T]:
        self.read_plugins(strict=False)
        if name in self._broken:
            raise ConfigError(self._broken[name])
        if name in self._lazy:
            from posenc.plugins import load_entry_point

            # the key stays taken while its module imports: a decorator there claiming it for another class
            # is a collision (the entry point's own class registering itself is not: posenc.plugins._register)
            self._classes[name] = load_entry_point(self, name, self._lazy[name])
            del self._lazy[name]
        return self._classes[name]

    # -- plugins ----------------------------------------------------------------------------------------
    def read_plugins(self, strict: bool = True) -> None:
        """Take in the installed entry points and ``POSENC_PLUGINS`` (once; :mod:`posenc.plugins`). ``strict``:
        a module of ``POSENC_PLUGINS`` that failed to import raises its one line (listings pass False)."""
        if not self._plugins_read:
            self._plugins_read = True
            from posenc.plugins import read_plugins

            read_plugins(self)
        if strict:
            from posenc.plugins import raise_module_errors

            raise_module_errors()

    def add(self, name: str, cls: type[T], origin: Any) -> None:
        """Register plugin ``cls`` under ``name`` (:func:`posenc.plugins.register_encoder` checks it first)."""
        self._classes[name] = cls
        self._origins[name] = origin

    def add_lazy(self, name: str, entry_point: Any, origin: Any) -> None:
        self._lazy[name] = entry_point
        self._origins[name] = origin

    def mark_broken(self, name: str, reason: str, origin: Any) -> None:
        """Plugin key ``name`` cannot be used: using it raises ``reason`` (an entry point that failed to import,
        a key two plugins claim)."""
        self._broken[name] = reason
        self._origins.setdefault(name, origin)

    def refuse(self, name: str, reason: str) -> None:
        """A plugin entry refused without touching key ``name`` (a malformed key, a built-in's key: the built-in
        stays as it is); listings show ``reason``."""
        self._refused.append((name, reason))

    def remove(self, name: str) -> None:
        """Forget plugin ``name`` (its module failed to import after registering it). Built-ins stay."""
        if name in self._builtins:
            return
        self._classes.pop(name, None)
        self._lazy.pop(name, None)
        self._origins.pop(name, None)

    def builtins(self) -> list[str]:
        """posenc's own keys, in listing order (never a plugin's; reads no plugin)."""
        return list(self._builtins)

    def has_key(self, name: str) -> bool:
        """Whether ``name`` is taken, without reading plugins (the registration check itself)."""
        return name in self._classes or name in self._lazy

    def origin(self, name: str) -> Any:
        """Where ``name`` comes from: a :class:`posenc.plugins.Origin`, or None for a built-in."""
        self.read_plugins(strict=False)
        return self._origins.get(name)

    def recorded_origin(self, name: str) -> Any:
        """:meth:`origin` as registered so far, reading no plugins: for the registration checks themselves,
        which run while plugins are being read."""
        return self._origins.get(name)

    def keys_unchecked(self) -> list[str]:
        """Every usable key, for listings: plugins read, but a failed ``POSENC_PLUGINS`` entry not raised."""
        self.read_plugins(strict=False)
        return [*self._classes, *self._lazy]

    def broken_unchecked(self) -> dict[str, str]:
        """Plugin key -> the one line saying why it cannot be used (listings show it and go on)."""
        self.read_plugins(strict=False)
        return dict(self._broken)

    def refused_unchecked(self) -> list[tuple[str, str]]:
        """``(key, line)`` of each plugin entry refused without making its key unusable (listings show it)."""
        self.read_plugins(strict=False)
        return list(self._refused)

    # -- what callers use -----------------------------------------------------------------------------
    def check(self, name: str) -> None:
        """Raise :class:`ConfigError` naming the known keys if ``name`` is not one of them (a broken plugin's
        key: the plugin's own one line)."""
        self.read_plugins()
        if name in self._broken:
            raise ConfigError(self._broken[name])
        if name not in self:
            raise ConfigError(f"unknown {self.group} '{name}'; known {self.group}s: {', '.join(self)}")

    def build(self, name: str, *args: Any, options: dict[str, Any] | None = None) -> T:
        """``self[name](*args, **options)``; unknown names, unknown options and bad values raise
        :class:`ConfigError`."""
        self.check(name)
        cls = self[name]
        return cls(*args, **check_options(self.group, name, cls, options or {}))

    def parse(self, text: str | None, option: str) -> list[str]:
        """Keys from a comma list given as command-line ``option`` (None: every key), in the order given,
        without repeats; an empty list or an unknown key raises :class:`ConfigError`."""
        if text is None:
            return list(self)
        names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        if not names:
            raise ConfigError(f"{option} needs at least one {self.group}; known {self.group}s: {', '.join(self)}")
        for name in names:
            self.check(name)
        return names
