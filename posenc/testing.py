"""posenc's encoder contract for a plugin's own test suite: the checks ``posenc encoders --check KEY`` runs (and
posenc's tests run on every built-in), as functions.

::

    from posenc.testing import assert_conforms

    def test_my_encoder_conforms():
        assert_conforms(MyEncoder)                 # a PositionalEncoder subclass ...
        assert_conforms("my_key", scale=2.0)       # ... or a registered key, with options

Each property (shapes, causality, determinism, each declared fast path, lengths past training, training) is
one :class:`Outcome` of the :class:`Report`; :mod:`posenc.conformance` says what each checks and how its
tolerance is derived.
"""

from __future__ import annotations

from typing import Any

from posenc.conformance import Outcome, Report, check

__all__ = ["Outcome", "Report", "assert_conforms", "check_encoder"]


def check_encoder(encoder: str | type, /, **options: Any) -> Report:
    """The conformance report of ``encoder`` (a registry key, built-in or plugin, or a
    :class:`posenc.encoders.PositionalEncoder` subclass) built with ``options`` (its keyword-only constructor
    parameters, checked as ``posenc train`` checks them).

    Raises:
        ConfigError: an unknown key, a class that is not an encoder, options it does not take, or a build that
            fails at the check's main shape (d_model 32, 4 heads).
    """
    return check(encoder, options)


def assert_conforms(encoder: str | type, /, **options: Any) -> Report:
    """:func:`check_encoder`, raising ``AssertionError`` with the report's lines (one per property, the failed
    ones marked ``FAIL`` with their numbers) unless every property holds; the report otherwise."""
    report = check(encoder, options)
    if not report.passed:
        raise AssertionError("\n".join(report.lines()))
    return report
