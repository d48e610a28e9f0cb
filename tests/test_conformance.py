"""The conformance check (posenc/conformance.py, posenc.testing, `posenc encoders --check KEY`): each property
fails on a toy encoder broken on purpose, and holds for every built-in (tests/test_encoders.py runs the whole
contract over the registry; here its reach and its failures)."""

from __future__ import annotations

import ast
import collections
import functools
import math
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

import posenc.testing
from posenc import conformance
from posenc import functional as pf
from posenc.cli.app import app
from posenc.encoders import ENCODERS, PositionalEncoder
from posenc.encoders.base import KeyBias, OwnAttention, as_is
from posenc.errors import ConfigError, PositionRangeError
from posenc.nn import fused_bias
from posenc.testing import assert_conforms

# -- toy encoders: one sound, the others each broken in one way -------------------------------------------------


class Slopes(PositionalEncoder):
    """ALiBi's bias ``-m_h (i - j)``, declared with every fast path it has, each right."""

    description = "toy: ALiBi"
    has_score_bias = True

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.register_buffer("slopes", pf.alibi_slopes(shape.n_heads), persistent=False)

    def score_bias(self, q_positions, k_positions):
        return -self.slopes[:, None, None] * (q_positions[:, None] - k_positions[None, :]).to(self.slopes.dtype)

    def distance_table(self, length):
        return -self.slopes[:, None] * torch.arange(length, dtype=self.slopes.dtype)

    def linear_bias_slopes(self):
        return self.slopes

    def score_mod(self, length, capture=as_is):
        slopes = capture(self.slopes)

        def alibi(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx).to(score.dtype)

        return alibi


class OffByOneTable(Slopes):
    """distance_table one distance off."""

    def distance_table(self, length):
        return -self.slopes[:, None] * (torch.arange(length, dtype=self.slopes.dtype) + 1)


class SignedScoreMod(Slopes):
    """score_mod with the bias's sign flipped."""

    def score_mod(self, length, capture=as_is):
        slopes = capture(self.slopes)
        return lambda score, b, h, q_idx, kv_idx: score + slopes[h] * (q_idx - kv_idx).to(score.dtype)


class DoubledSlopes(Slopes):
    """linear_bias_slopes twice the bias's."""

    def linear_bias_slopes(self):
        return 2 * self.slopes


class LogDistance(PositionalEncoder):
    """``-m_h log(1 + (i - j))`` with its distance table."""

    description = "toy: log distance"
    has_score_bias = True

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.register_buffer("slopes", pf.alibi_slopes(shape.n_heads), persistent=False)

    def score_bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0).to(self.slopes.dtype)
        return -self.slopes[:, None, None] * torch.log1p(distance)

    def distance_table(self, length):
        return -self.slopes[:, None] * torch.log1p(torch.arange(length, dtype=self.slopes.dtype))


class Float32Table(LogDistance):
    """The distance table computed in float32 whatever the parameters' dtype: rounding no float64 path has."""

    def distance_table(self, length):
        return super().distance_table(length).float().to(self.slopes.dtype)


class Clipped(PositionalEncoder):
    """``-m_h min(i - j, 8)``: constant from distance 8 on; declares the constant from distance 4 (wrong reach)."""

    description = "toy: clipped"
    has_score_bias = True
    reach = 4

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.register_buffer("slopes", pf.alibi_slopes(shape.n_heads), persistent=False)

    def score_bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).clamp(0, 8).to(self.slopes.dtype)
        return -self.slopes[:, None, None] * distance

    def far_bias(self):
        return self.reach, -8 * self.slopes


class ShiftedBlocks(PositionalEncoder):
    """A data bias ``-0.3 g_h (i - j)`` whose query-range form counts the rows from 0 instead of ``start``."""

    description = "toy: shifted data bias blocks"

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.gate = nn.Parameter(torch.ones(shape.n_heads))

    def data_bias(self, x, q, k):
        def bias(start, stop):
            rows = torch.arange(stop - start, dtype=q.dtype)  # should be arange(start, stop)
            distance = rows[:, None] - torch.arange(stop, dtype=q.dtype)[None, :]
            return (-0.3 * self.gate.to(q.dtype)[:, None, None] * distance).expand(q.shape[0], -1, -1, -1)

        return bias


class SignedKey(PositionalEncoder):
    """A data bias ``c_i - c_j`` with ``c_j = -0.3 j``, as a KeyBias whose key part has the wrong sign."""

    description = "toy: key bias with the wrong sign"

    def data_bias(self, x, q, k):
        b, h, s, _ = q.shape
        c = -0.3 * torch.arange(s, dtype=q.dtype)

        def dense(start, stop):
            return (c[start:stop, None] - c[None, :stop]).expand(b, h, -1, -1)

        return KeyBias(c.expand(b, h, s), dense)  # the key part is -c_j


class PeekingOwnAttention(PositionalEncoder):
    """An OwnAttention (no bias) whose inference path forgets the causal mask."""

    description = "toy: a fast path that sees the future"

    def data_bias(self, x, q, k):
        def dense(start, stop):
            return q.new_zeros(q.shape[0], q.shape[1], stop - start, stop)

        def attend(v, dropout_p):
            return None if torch.is_grad_enabled() else F.scaled_dot_product_attention(q, k, v)

        return OwnAttention(attend, dense)


class MeanCentred(PositionalEncoder):
    """Embeddings centred on the sequence's mean: every position sees the later tokens."""

    description = "toy: a causal leak"

    def embed(self, x, positions):
        return x - x.mean(dim=1, keepdim=True)


class UnseededInit(PositionalEncoder):
    """An offset drawn from Python's random module, which torch.manual_seed (training's seed) does not seed."""

    description = "toy: unseeded initialisation"

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.offset = nn.Parameter(torch.tensor([random.gauss(0.0, 1.0) for _ in range(shape.d_model)]))

    def embed(self, x, positions):
        return x + self.offset.to(x.dtype)


class PlainTensor(PositionalEncoder):
    """An offset kept as a plain attribute: seeded, but outside the state dict (a loaded model lacks it)."""

    description = "toy: a tensor outside the state dict"

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.__dict__["offset"] = torch.randn(shape.d_model)

    def embed(self, x, positions):
        return x + self.offset.to(x.dtype)


class Noisy(PositionalEncoder):
    """Noise from the global generator added at inference too."""

    description = "toy: noise"

    def embed(self, x, positions):
        return x + 0.01 * torch.randn_like(x)


class TransposedBias(Slopes):
    """score_bias as ``[n_h, s_k, s_q]``."""

    def score_bias(self, q_positions, k_positions):
        return super().score_bias(k_positions, q_positions)


class NaNGradient(PositionalEncoder):
    """A learned ``-r log(i - j)`` written with ``where``, whose untaken branch (log 0) poisons the gradient."""

    description = "toy: NaN gradient"
    has_score_bias = True

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.r = nn.Parameter(torch.full((shape.n_heads,), 0.5))

    def score_bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).to(self.r.dtype)
        return torch.where(distance > 0, -self.r[:, None, None] * torch.log(distance), 0.0)


class TokenBlind(PositionalEncoder):
    """Forgot ``x +``: the embeddings replaced by the position table."""

    description = "toy: token blind"

    def embed(self, x, positions):
        return pf.sinusoidal_table(positions, x.shape[-1], 10000.0).to(x.dtype).expand_as(x)


class UncheckedTable(PositionalEncoder):
    """A learned table of training-length rows, with no check_positions: past training the model fails."""

    description = "toy: unchecked table"

    def __init__(self, shape, train_length):
        super().__init__(shape, train_length)
        self.table = nn.Embedding(train_length, shape.d_model)

    def embed(self, x, positions):
        return x + self.table(positions)


class CheckedTable(UncheckedTable):
    """The same, refusing the lengths it cannot encode: a pass."""

    def check_positions(self, length):
        if length > self.train_length:
            raise PositionRangeError(f"{self.train_length} positions; {length} asked")


class SilentRefusal(CheckedTable):
    def check_positions(self, length):
        if length > self.train_length:
            raise PositionRangeError("")


class WrongErrorType(CheckedTable):
    def check_positions(self, length):
        if length > self.train_length:
            raise ValueError("too long")


class RefusesTraining(CheckedTable):
    def check_positions(self, length):
        if length >= self.train_length:
            raise PositionRangeError("too long")


# -- each property seen failing ----------------------------------------------------------------------------------


@functools.cache
def report_of(toy):
    """The toy's report, made once per session (several tests read one)."""
    return posenc.testing.check_encoder(toy)


def failed(report) -> set[str]:
    return {o.name for o in report.failed}


@pytest.mark.parametrize(("toy", "broken"), [
    (OffByOneTable, {"distance_table"}),
    (SignedScoreMod, {"score_mod"}),
    (DoubledSlopes, {"linear_bias_slopes"}),
    (Float32Table, {"distance_table"}),
    (Clipped, {"far_bias"}),
    (ShiftedBlocks, {"data_bias by query block"}),
    (SignedKey, {"data_bias as KeyBias"}),
    (PeekingOwnAttention, {"causality", "data_bias as OwnAttention"}),
    (MeanCentred, {"causality"}),
    (UnseededInit, {"determinism"}),
    (PlainTensor, {"determinism"}),
    (NaNGradient, {"training"}),
    (RefusesTraining, {"lengths"}),
    (SilentRefusal, {"lengths"}),
    (WrongErrorType, {"lengths"}),
])  # fmt: skip
def test_each_break_fails_its_property_alone(toy, broken):
    report = report_of(toy)
    assert failed(report) == broken, str(report)
    for outcome in report.failed:
        assert outcome.line().startswith("FAIL") and outcome.detail


def test_a_sound_toy_with_every_score_bias_fast_path_passes():
    report = assert_conforms(Slopes)
    names = [o.name for o in report.outcomes]
    assert names == [
        "shapes",
        "causality",
        "determinism",
        "score_bias by query block",
        "distance_table",
        "score_mod",
        "linear_bias_slopes",
        "lengths",
        "training",
    ]
    assert report_of(LogDistance).passed and report_of(CheckedTable).passed


def test_fast_path_failures_give_the_numbers_against_the_derived_tolerance():
    line = report_of(OffByOneTable).outcome("distance_table").detail
    assert line.startswith("table against score_bias: worst error") and "> tolerance" in line
    # float64 rounding of a log table in float32: ~1e-8, five orders above the float64 formulas' bound (~1e-13)
    detail = report_of(Float32Table).outcome("distance_table").detail
    error, tolerance = (float(w) for w in detail.split("worst error ")[1].split(" (")[0].split(" > tolerance "))
    assert 1e-9 < error < 1e-6 and tolerance < 1e-12


def test_a_causal_leak_names_where_it_was_seen():
    detail = report_of(MeanCentred).outcome("causality").detail
    assert detail.startswith("later tokens change earlier outputs: worst change") and "tokens after" in detail


def test_non_determinism_at_inference_fails_determinism():
    report = report_of(Noisy)
    assert "determinism" in failed(report) and "apart" in report.outcome("determinism").detail
    assert "a tensor outside it" in report_of(PlainTensor).outcome("determinism").detail


def test_a_wrong_shape_fails_shapes_with_the_shapes():
    detail = report_of(TransposedBias).outcome("shapes").detail
    assert detail == (
        "score_bias gives shape (4, 5, 3), want (4, 3, 5) (layer 0, d_model 32, 4 heads of 8, batch 3, length 7)"
    )


def test_a_loss_that_does_not_fall_fails_training():
    detail = report_of(TokenBlind).outcome("training").detail
    assert detail.startswith("held-out loss") and "must reach <= 1.39" in detail
    after = float(detail.split(" -> ")[1].split()[0])
    assert after > math.log(16) - 0.3  # a model blind to the tokens stays near the uniform guess
    assert "without a finite nonzero gradient: r" in report_of(NaNGradient).outcome("training").detail


def test_lengths_past_training_run_or_are_refused_with_a_message():
    assert (
        "check_positions refuses 36, 37, 579 tokens: 12 positions; 36 asked"
        in report_of(CheckedTable).outcome("lengths").detail
    )
    detail = report_of(UncheckedTable).outcome("lengths").detail
    assert detail.startswith("check_positions accepts length 36, then the model raises IndexError"), detail
    assert "empty message" in report_of(SilentRefusal).outcome("lengths").detail
    assert "not a PosencError" in report_of(WrongErrorType).outcome("lengths").detail


def test_an_exception_in_the_encoder_names_its_line():
    detail = report_of(UncheckedTable).outcome("causality").detail
    assert detail.startswith("raised IndexError") and "test_conformance.py:" in detail and "in embed)" in detail


# -- what the check reaches --------------------------------------------------------------------------------------


def test_over_the_registry_the_check_runs_every_fused_path(monkeypatch):
    """The check's lengths and shapes reach every fast path posenc has (the fused bias paths, FlexAttention,
    CoPE's band, xPos' windows): a change that moved a path out of reach fails here instead of going unchecked."""
    calls: collections.Counter = collections.Counter()

    def spy(module, name):
        real = getattr(module, name)

        def wrapped(*args, **kwargs):
            out = real(*args, **kwargs)
            calls[name] += out is not None
            return out

        monkeypatch.setattr(module, name, wrapped)

    for name in ("linear_bias_attention", "distance_table_attention", "far_constant_attention", "key_bias_attention"):
        spy(fused_bias, name)
    for name in ("cope_band_attention", "xpos_window_attention"):
        spy(pf, name)
    spy(conformance, "eager_flex")
    with conformance.one_thread():
        for name in ENCODERS:  # passing is tests/test_encoders.py's matter
            conformance.fast_path_outcomes(conformance.Subject.of(name, {}))
    assert set(calls) == {
        "linear_bias_attention",
        "distance_table_attention",
        "far_constant_attention",
        "key_bias_attention",
        "cope_band_attention",
        "xpos_window_attention",
        "eager_flex",
    }
    assert all(calls.values()), calls


# -- the API and the command line ------------------------------------------------------------------------------------


def test_bad_input_is_a_config_error_before_any_check():
    with pytest.raises(ConfigError, match="unknown encoder 'bogus'; known encoders: nope"):
        posenc.testing.check_encoder("bogus")
    with pytest.raises(ConfigError, match="not a subclass of posenc.encoders.PositionalEncoder"):
        posenc.testing.check_encoder(dict)
    with pytest.raises(ConfigError, match="has no option 'gama'"):
        posenc.testing.check_encoder("xpos", gama=0.4)


def test_assert_conforms_raises_with_the_report():
    with pytest.raises(AssertionError, match=r"(?s)FAIL  causality .*1 of 6 properties fail"):
        assert_conforms(MeanCentred)


runner = CliRunner()


def test_check_on_the_command_line_prints_one_line_per_property_and_exits_0():
    result = runner.invoke(app, ["encoders", "--check", "kerple"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "encoder 'kerple' (posenc.encoders.learned_bias.KerpleLog), built for training length 12:"
    assert [line.split()[1] for line in lines[1:-1]] == [
        "shapes",
        "causality",
        "determinism",
        "score_bias",
        "distance_table",
        "score_mod",
        "lengths",
        "training",
    ]
    assert all(line.startswith("pass  ") for line in lines[1:-1])
    assert lines[-1].startswith("every property holds (")


class _Only(dict):
    """A stand-in registry of toys, as conformance reads one (check, then the class)."""

    def check(self, name):
        if name not in self:
            raise ConfigError(f"unknown encoder '{name}'; known encoders: {', '.join(self)}")


def test_a_failing_check_is_a_table_without_error_lines_and_exits_1(monkeypatch):
    monkeypatch.setattr(conformance, "ENCODERS", _Only(leaky=MeanCentred))
    result = runner.invoke(app, ["encoders", "--check", "leaky"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert "error:" not in result.output and len(lines) == 1 + 6 + 1  # heading, six properties, verdict
    assert [line[:4] for line in lines[1:-1]] == ["pass", "FAIL", "pass", "pass", "pass", "pass"]
    assert lines[-1].startswith("1 of 6 properties fail (")


def test_an_unknown_key_is_one_error_line_and_exits_2():
    result = runner.invoke(app, ["encoders", "--check", "bogus"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown encoder 'bogus'; known encoders: nope")


LEAKY_PLUGIN = """
import posenc
from posenc.encoders import PositionalEncoder


@posenc.register_encoder("leaky")
class MeanCentred(PositionalEncoder):
    description = "embeddings centred on the sequence's mean"

    def embed(self, x, positions):
        return x - x.mean(dim=1, keepdim=True)
"""


@pytest.mark.integration
def test_a_plugin_file_is_checked_from_the_command_line(tmp_path):
    """POSENC_PLUGINS: a file plugin's key checks like a built-in's; a broken one fails its line, exit 1."""
    import os
    import subprocess

    (tmp_path / "leaky.py").write_text(LEAKY_PLUGIN)
    env = {**os.environ, "POSENC_PLUGINS": str(tmp_path / "leaky.py"), "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "posenc", "encoders", "--check", "leaky"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "FAIL  causality" in result.stdout and "error:" not in result.stdout + result.stderr


# -- the check's own code ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [conformance, sys.modules["posenc.testing"]])
def test_each_check_is_a_small_function(module):
    """Each check and helper stays under 80 lines, so that a property reads at a glance."""
    tree = ast.parse(Path(module.__file__).read_text())
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 >= 80
    ]
    assert not long, long


def test_tolerances_follow_the_rounding_bound():
    assert conformance.rounding(torch.float64, 100, 3.0) == pytest.approx(100 * 2.0**-52 * 3.0)
    assert conformance.rounding(torch.float32, 10, 0.001) == pytest.approx(10 * 2.0**-23)  # at least 1: absolute
    assert conformance.difference(torch.tensor([float("-inf"), 1.0]), torch.tensor([float("-inf"), 1.5])) == 0.5
    assert conformance.difference(torch.tensor([float("nan")]), torch.tensor([0.0])) == math.inf
