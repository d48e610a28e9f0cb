"""The example's own tests: posenc's conformance check (``posenc.testing``) on its encoder, as a plugin's test
suite runs it. ``pip install "./examples/log_alibi[test]" && pytest examples/log_alibi`` (or, without
installing, ``pytest examples/log_alibi`` from posenc's checkout: pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

import pytest
from posenc_log_alibi import LogALiBi

from posenc.errors import ConfigError
from posenc.testing import assert_conforms


def test_log_alibi_conforms():
    """Shapes, causality, determinism, its declared fast path (``distance_table``) against ``score_bias``,
    lengths past training, a loss that falls: every property holds (else the report's lines are the failure)."""
    report = assert_conforms(LogALiBi, scale=2.0)
    assert {o.name for o in report.outcomes} >= {"shapes", "causality", "determinism", "training"}


def test_its_option_is_checked_as_posenc_checks_options():
    with pytest.raises(ConfigError, match="encoder.scale must be > 0"):
        assert_conforms(LogALiBi, scale=-1.0)
    with pytest.raises(ConfigError, match="has no option 'slope'"):
        assert_conforms(LogALiBi, slope=1.0)
