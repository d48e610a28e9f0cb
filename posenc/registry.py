"""One generic registry: config-group key -> class, for encoders and tasks alike.

Like Hugging Face's ``ROPE_INIT_FUNCTIONS`` (one dict of variants behind one signature), each registry is a
plain mapping, so ``name in ENCODERS`` and ``ENCODERS.items()`` work, plus the three things every caller
needs: refuse an unknown key with the known ones (:meth:`Registry.check`), build an entry with its options
checked against its constructor (:meth:`Registry.build`), and read a comma list of keys (:meth:`Registry.parse`).
``conf/<group>/<key>.yaml`` exists for every key (tests/test_config.py holds each to the code's defaults).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from posenc.errors import ConfigError
from posenc.options import check_options

T = TypeVar("T")


class Registry(dict[str, type[T]], Generic[T]):
    """Key -> class of config group ``group`` (``"encoder"``, ``"task"``).

    Args:
        group: the Hydra config group, used in messages: ``unknown encoder 'x'; known encoders: ...``.
        entries: key -> class, in the order listings show them.
    """

    def __init__(self, group: str, entries: dict[str, type[T]]) -> None:
        super().__init__(entries)
        self.group = group

    def check(self, name: str) -> None:
        """Raise :class:`ConfigError` naming the known keys if ``name`` is not one of them."""
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
