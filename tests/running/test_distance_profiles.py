"""`posenc kernels`: what attention sees by relative distance (RoFormer's bound, biases, absolute tables)."""

import cmath
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import compose_dict
from rounding import gamma, unit_roundoff
from typer.testing import CliRunner

from posenc import functional as pf
from posenc.cli.app import app
from posenc.encoders import build_encoder
from posenc.functional.rope_scaling import ROPE_SCALING
from posenc.functional.rope_scaling_spec import RopeScaling
from posenc.running.distance_profiles import (
    COLUMNS,
    DEFAULT_SHAPE,
    DEFAULT_TRAIN_LENGTH,
    kernel,
    kernel_table,
)  # fmt: skip

runner = CliRunner()
HEAD_DIM = DEFAULT_SHAPE.head_dim


def first_below(curve: torch.Tensor, fraction: float) -> int:
    """The first distance where ``curve`` falls below ``fraction`` of its value at distance 0."""
    return int((curve < fraction * curve[0]).nonzero()[0])


def curve(table: pd.DataFrame, component: str, scaling: str = "none") -> pd.DataFrame:
    rows = table[(table["component"] == component) & (table["scaling"] == scaling)]
    return rows.sort_values(["head", "distance"])


def test_default_shape_and_train_length_are_the_configs():
    cfg = compose_dict()
    assert cfg["model"]["d_model"] == DEFAULT_SHAPE.d_model
    assert cfg["model"]["n_heads"] == DEFAULT_SHAPE.n_heads
    assert cfg["task"]["length"] == DEFAULT_TRAIN_LENGTH


def test_roformer_bound_decays_and_equals_the_paper_sum():
    inv_freq = pf.rope_inv_freq(HEAD_DIM, 10000.0, dtype=torch.float64)
    distances = torch.arange(2049)
    bound = pf.roformer_bound(distances, inv_freq)
    assert bound[0].item() == pytest.approx((HEAD_DIM / 2 + 1) / 2)  # S_j = j at distance 0
    assert bound[1024:].mean() < 0.35 * bound[0]  # long-term decay (RoFormer §3.4.3, Fig. 2)
    assert bound[1024:].mean() < bound[1:64].mean()
    theta = inv_freq.tolist()
    for d in (1, 7, 100, 1000, 2048):  # (1/(D/2)) sum_{j=1}^{D/2} |sum_{k<j} e^{i d theta_k}|
        partial_sums = [sum(cmath.exp(1j * d * theta[k]) for k in range(j)) for j in range(1, len(theta) + 1)]
        direct = sum(abs(s) for s in partial_sums)
        assert bound[d].item() == pytest.approx(direct / len(theta), rel=1e-12)


def test_hook_kernel_of_rope_is_the_formula():
    encoder = build_encoder("rope", DEFAULT_SHAPE, DEFAULT_TRAIN_LENGTH)
    table = kernel(encoder, 300, name="rope").table
    assert list(table.columns) == COLUMNS
    assert set(table["component"]) == {"rotary", "rotary_bound"}  # no bias, no absolute table
    assert torch.equal(encoder.inv_freq, pf.rope_inv_freq(HEAD_DIM, 10000.0))  # the formula, in float32
    inv_freq = encoder.inv_freq.double()  # what the kernel rotates by: then both sides are float64
    distances = torch.arange(301)
    bound = curve(table, "rotary_bound")
    assert bound["head"].isna().all() and list(bound["distance"]) == list(range(301))  # same for every head
    # float64 throughout: each angle (at most 300 rad) 300 u off, each factor's cos, sin and product a few u
    # more; a partial sum of up to 16 unit factors, or the mean of 32 products: at most 2 * 32 * 304 u
    tolerance = 2 * 32 * 304 * unit_roundoff(torch.float64)
    torch.testing.assert_close(
        torch.tensor(bound["value"].values), pf.roformer_bound(distances, inv_freq), rtol=0, atol=tolerance
    )
    score = torch.tensor(curve(table, "rotary")["value"].values)  # all-ones q.k = mean_j cos(d theta_j)
    torch.testing.assert_close(
        score, torch.cos(torch.outer(distances.double(), inv_freq)).mean(-1), rtol=0, atol=tolerance
    )


def test_alibi_kernel_is_minus_slope_times_distance():
    encoder = build_encoder("alibi", DEFAULT_SHAPE, DEFAULT_TRAIN_LENGTH)
    table = kernel(encoder, 512, name="alibi").table
    assert set(table["component"]) == {"bias"}
    slopes = pf.alibi_slopes(DEFAULT_SHAPE.n_heads).tolist()
    for head, rows in table.groupby("head"):
        assert (rows["value"].values == [-slopes[head] * d for d in rows["distance"]]).all()
    assert sorted(table["head"].unique()) == list(range(DEFAULT_SHAPE.n_heads))


def test_sinusoidal_kernel_is_the_cosine_of_position_vectors():
    encoder = build_encoder("sinusoidal", DEFAULT_SHAPE, DEFAULT_TRAIN_LENGTH)
    table = kernel(encoder, 200, name="sinusoidal").table
    assert set(table["component"]) == {"absolute"}
    d = torch.arange(201, dtype=torch.float64)
    width = DEFAULT_SHAPE.d_model
    omega = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
    expected = torch.cos(torch.outer(d, omega)).mean(-1)  # PE_m.PE_n = sum_t cos(d w_t), |PE|^2 = d_model/2
    # frequencies at most rounded to float32 (u32 relative): each angle d w_t at most 200 u32 w_t off, so the
    # mean of the cosines 200 u32 mean(w); the table's own sin and cos and the sums a few u32 more
    tolerance = 200 * unit_roundoff(torch.float32) * float(omega.mean()) + gamma(8, torch.float32)
    torch.testing.assert_close(torch.tensor(table["value"].values), expected, rtol=0, atol=tolerance)


def test_ntk_scaling_decays_slower_than_plain_rope():
    plain = pf.roformer_bound(torch.arange(2049), pf.rope_inv_freq(HEAD_DIM, 10000.0, dtype=torch.float64))
    inv_freq, _ = ROPE_SCALING["ntk"](HEAD_DIM, 10000.0, 4.0, DEFAULT_TRAIN_LENGTH, 2048)
    ntk = pf.roformer_bound(torch.arange(2049), inv_freq)
    for fraction in (0.5, 0.25):
        assert first_below(ntk, fraction) > first_below(plain, fraction)
    # Through the encoder's set_rope_scaling, as `posenc kernels --rope-scaling ntk` draws it: the same curve.
    encoder = build_encoder("rope", DEFAULT_SHAPE, DEFAULT_TRAIN_LENGTH)
    table = kernel_table(["rope"], [], 2048, [RopeScaling("none"), RopeScaling("ntk"), RopeScaling("yarn")], 4.0).table
    assert set(table["scaling"]) == {"none", "ntk", "yarn"}
    assert table.loc[table["scaling"] == "none", "scaling_factor"].isna().all()
    drawn = torch.tensor(curve(table, "rotary_bound", "ntk")["value"].values)
    rounded = pf.roformer_bound(torch.arange(2049), inv_freq.float().double())  # the encoder's float32 frequencies
    # then float64 on both sides, as test_hook_kernel_of_rope_is_the_formula: angles up to 2048 rad
    torch.testing.assert_close(drawn, rounded, rtol=0, atol=2 * 32 * 2052 * unit_roundoff(torch.float64))
    as_trained = torch.tensor(curve(table, "rotary_bound")["value"].values)
    assert first_below(drawn, 0.25) > first_below(as_trained, 0.25)
    yarn = curve(table, "rotary_bound", "yarn")["value"].values
    assert yarn[0] == pytest.approx(plain[0].item())  # YaRN's attention scale is no decay: divided out
    assert encoder.rope_scaling is None  # the variants are copies


def test_learned_encoders_need_a_trained_run_and_nope_has_no_kernel():
    result = kernel_table(["nope", "learned", "rope"], [], 64, [RopeScaling("none")], 4.0)
    assert set(result.table["encoder"]) == {"rope"}
    assert any("learned" in n and "needs a trained run (--runs)" in n for n in result.notes)
    assert any(n.startswith("nope:") for n in result.notes)


def test_cli_writes_tables_figures_and_reads_trained_runs(trained_runs: Path, tmp_path):
    out = tmp_path / "kernels"
    result = runner.invoke(app, [
        "kernels", "--encoders", "rope,alibi,sinusoidal,learned", "--runs", str(trained_runs),
        "--max-distance", "128", "--rope-scaling", "none,ntk", "--factor", "2", "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert not (out / "kernels.md").exists()  # a row per distance: the summary is the Markdown view
    for name in ("kernels.csv", "kernels.parquet", "kernels_summary.md"):
        assert (out / name).is_file(), name
    for stem in ("rotary", "rotary_bound", "bias", "absolute"):
        for ext in ("png", "svg"):
            assert (out / f"{stem}.{ext}").stat().st_size > 1000, f"{stem}.{ext}"
    table = pd.read_parquet(out / "kernels.parquet")
    assert list(table.columns) == COLUMNS
    runs = table[table["source"] != "untrained default"]
    assert set(runs["encoder"]) == {"rope", "learned"}
    # The learned run's table has task.length = 16 rows: its kernel stops at distance 15, read from the run.
    learned = runs[runs["encoder"] == "learned"]
    assert set(learned["component"]) == {"absolute"} and learned["distance"].max() == 15
    assert learned["train_length"].unique().tolist() == [16]
    rope = runs[runs["encoder"] == "rope"]  # the run's own shape: d_model 16, 2 heads -> head_dim 8
    bound0 = rope[(rope["component"] == "rotary_bound") & (rope["distance"] == 0)]["value"]
    assert bound0.tolist() == pytest.approx([(8 / 2 + 1) / 2] * 2)  # as trained and ntk
    assert "needs a trained run" not in result.stderr  # learned came from --runs
    assert "kernels.csv" in result.stderr and "rotary.png" in result.stderr


BAD = [
    ("unknown encoder", ["--encoders", "rope,bogus"], "known encoders"),
    ("zero max distance", ["--max-distance", "0"], "--max-distance"),
    ("negative max distance", ["--max-distance=-5"], "--max-distance"),
    ("huge max distance", ["--max-distance", "99999999"], "--max-distance"),
    ("unknown scaling method", ["--rope-scaling", "none,magic"], "known methods"),
    ("factor below 1", ["--factor", "0.5"], "--factor"),
    ("missing run directory", ["--runs", "{tmp}/missing"], "not found"),
    ("unreadable checkpoint", ["--runs", "{tmp}/garbage"], "cannot read checkpoint"),
    ("output is a file", ["--out", "{tmp}/file"], "not a folder"),
]


@pytest.mark.parametrize("case, args, needle", BAD, ids=[c for c, _, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, args, needle):
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "file").write_text("x")
    argv = ["kernels", "--encoders", "rope", "--max-distance", "16", "--out", str(tmp_path / "out")]
    result = runner.invoke(app, [*argv, *(a.format(tmp=tmp_path) for a in args)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # nothing written


def test_learned_bias_kernel_is_read_from_a_trained_run(tmp_path):
    from conftest import TINY

    from posenc.running.runs import load_run

    run = tmp_path / "fire-run"
    trained = runner.invoke(app, ["train", *TINY, "encoder=fire", f"hydra.run.dir={run}"])
    assert trained.exit_code == 0, trained.output
    table = kernel_table([], [run], 40, [RopeScaling("none")], 4.0).table
    assert set(table["component"]) == {"bias"} and set(table["encoder"]) == {"fire"}
    _, _, model = load_run(run)
    positions = torch.arange(41)
    expected = model.encoder.score_bias(positions[40:], positions)[:, 0].flip(-1).double()  # [n_h, distance]
    for head, rows in table.groupby("head"):
        torch.testing.assert_close(torch.tensor(rows.sort_values("distance")["value"].values), expected[head])
