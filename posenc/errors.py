"""posenc's user-facing error types.

Anything raised as :class:`PosencError` is a problem with the user's input or files, reported by the
CLI as one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

from hydra.errors import CompactHydraException


class PosencError(CompactHydraException):
    """A bad input or file: the message is shown to the user as is.

    Deriving from Hydra's compact exception makes a failed job of a multirun sweep report this message
    alone, not a traceback.
    """


class ConfigError(PosencError):
    """A configuration value is missing, of the wrong type, or out of range."""


class PositionRangeError(PosencError):
    """An encoder was asked for positions it has no representation for (e.g. a learned table)."""
