"""Keyword options of registry entries (encoders, tasks), checked against a config mapping."""

from __future__ import annotations

import inspect
import math
from typing import Any

from posenc.errors import ConfigError


def checked_value(where: str, value: Any, want: type) -> Any:
    """``value`` as type ``want`` (an int is accepted as a float); any other mismatch raises ``ConfigError``."""
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not want:
        raise ConfigError(f"{where} must be of type {want.__name__}, got {value!r}")
    if want is float and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    return value


def keyword_options(cls: type) -> dict[str, Any]:
    """The keyword-only parameters of ``cls.__init__`` with their defaults."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def check_options(group: str, name: str, cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """Return ``options`` converted to the types of ``cls``'s defaults; unknown keys or bad types raise.

    Args:
        group: config group for messages, e.g. ``"encoder"``.
        name: registry key, e.g. ``"xpos"``.
    """
    allowed = keyword_options(cls)
    checked: dict[str, Any] = {}
    for key, value in options.items():
        if key not in allowed:
            known = ", ".join(allowed) or "none"
            raise ConfigError(f"{group} '{name}' has no option '{key}' (its options: {known})")
        default = allowed[key]
        if default is None:  # "derived from the training length unless given": None, or the annotated type
            if value is None:
                continue
            hint = str(_annotations(cls).get(key, ""))
            want = int if hint.startswith("int") else str if hint.startswith("str") else float
            checked[key] = checked_value(f"{group}.{key}", value, want)
            continue
        checked[key] = checked_value(f"{group}.{key}", value, type(default))
    return checked


def _annotations(cls: type) -> dict[str, Any]:
    """``cls.__init__``'s annotations as written (strings under ``from __future__ import annotations``)."""
    return {p.name: p.annotation for p in inspect.signature(cls.__init__).parameters.values()}
