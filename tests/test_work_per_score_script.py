"""scripts/work_per_score.py: the work per score each encoder's attention needs, the bounds it gives against a
machine's limits, and the verdict on each target (every outcome shown)."""

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import load_script

work = load_script("work_per_score")

# A machine doing 100 GFLOP/s in matmuls (50 G other operations/s) and copying 2 GB/s
LIMITS = work.MachineLimits(matmul=100e9, matmul_one_thread=50e9, bandwidth=2e9, threads=2)


def test_work_per_score_counts_the_papers_products():
    d = 32
    assert work.forward_work("rope", d, 4).matmul_flops == 4 * d  # q.k and p v, 2 d each
    assert work.forward_work("pope", d, 4).matmul_flops == 2 * 2 * d + 2 * d  # q.k over cosine and sine parts
    assert work.forward_work("fire", d, 4).other_ops == work.SOFTMAX + 3 / 4 + 2
    assert work.forward_work("fire_outside", d, 4).bytes == 8  # one fp32 bias written, then read
    assert work.training_work("rope", d).matmul_flops == 6 * 2 * d  # forward 2 products, backward 4
    assert work.training_work("pope", d).matmul_flops == 18 * d  # q, k wide in q.k, dQ, dK
    cope = work.training_work("cope", d)
    assert cope.matmul_flops == 18 * d and cope.other_ops > work.training_work("rope", d).other_ops + work.SIGMOID
    assert work.Work(10, 3).flop_equivalents() == 16  # an operation at half the FLOP rate of a multiply-add


def test_seconds_at_the_limits_take_the_slower_of_compute_and_memory():
    assert LIMITS.seconds(work.Work(100, 0), 1e9) == pytest.approx(1.0)
    assert LIMITS.seconds(work.Work(100, 50), 1e9) == pytest.approx(2.0)
    assert LIMITS.seconds(work.Work(1, 0, bytes=40), 1e9) == pytest.approx(20.0)  # 40 GB at 2 GB/s


@pytest.mark.parametrize(
    "goal, at_limits, at_rope, floor, higher, want",
    [
        (1.3, 1.4, 1.5, 1.8, False, "out of reach: the machine's limits"),
        (1.3, 1.2, 1.35, 1.8, False, "needs a kernel more efficient than rope's SDPA"),
        (1.3, 1.2, 1.25, 1.8, False, "within reach: needs a fused kernel PyTorch lacks on CPU"),
        (1.3, 1.2, 1.25, 1.28, False, "within reach of PyTorch's kernels"),
        (0.85, 0.8, 0.9, 0.9, True, "out of reach: the machine's limits"),
        (0.85, 1.1, 0.9, 0.7, True, "within reach: needs a fused kernel PyTorch lacks on CPU"),
        (0.7, 0.9, 0.9, float("nan"), True, "within physical reach; kernels not measured"),
    ],
)
def test_verdict_names_what_stands_between_the_target_and_posenc(goal, at_limits, at_rope, floor, higher, want):
    assert work.verdict(goal, at_limits, at_rope, floor, higher) == want


def _bounds(length: int, sdpa: float, share: float, train_sdpa: float, train_share: float) -> pd.DataFrame:
    kernels = [
        "fused SDPA, width 32 (rope)",
        "fused SDPA, width 64 (pope)",
        "FlexAttention, FIRE with a straight MLP (fire)",
        "fused SDPA + a bias computed outside, for free (fire)",
    ]
    rows = [
        {
            "measure": f"forward {length}",
            "kernel": k,
            "seconds": sdpa,
            "attention_share_of_rope": share,
            "floor_vs_rope": 1.5,
        }
        for k in kernels
    ]
    rows += [
        {
            "measure": "training 32x128",
            "kernel": k,
            "seconds": train_sdpa,
            "attention_share_of_rope": train_share,
            "floor_vs_rope": 0.8,
        }
        for k in ("fused SDPA, width 32 (rope)", "fused SDPA, width 64 (pope)", "cope_attention (cope)")
    ]
    return pd.DataFrame(rows)


def test_arithmetic_rows_add_the_encoders_work_to_ropes_measured_model():
    length = 1000
    scores = 2 * 4 * length * (length + 1) / 2  # two layers of four heads, causal
    # rope's attention exactly at the machine's limits: 2 layers x its work at 100 GFLOP/s, half of its forward
    sdpa = scores / 2 * work.forward_work("rope", 32, 4).flop_equivalents() / LIMITS.matmul
    train_scores = 2 * 32 * 4 * 128 * 129 / 2
    # rope's training attention (two layers) twice as slow as the limits allow
    train_sdpa = train_scores * work.training_work("rope", 32).flop_equivalents() / LIMITS.matmul
    rows = pd.DataFrame(
        work.arithmetic_rows(
            _bounds(length, sdpa, 0.5, train_sdpa, 0.25),
            LIMITS,
            length,
            headline={
                "matmul_flops_per_token": 1000.0,
                "kernel_floor": 0.6,
                "shape": {
                    "d_model": 64,
                    "d_mlp": 256,
                    "n_layers": 3,
                    "n_heads": 4,
                    "length": 32,
                    "vocab": 18,
                    "params": 150_000,
                    "tokens_per_step": 2048,
                },
            },
        )
    ).set_index("encoder")
    pope = rows.iloc[0]
    ratio = (192 + 26) / (128 + 26)  # pope's flop-equivalents over rope's
    assert pope["work_vs_rope"] == pytest.approx(ratio)
    assert pope["ropes_attention_at_limits"] == pytest.approx(1.0)
    # half the forward is attention, at the limits: 0.5 + 0.5 * ratio, both ways
    assert pope["bound_at_machine_limits"] == pytest.approx(0.5 + 0.5 * ratio)
    assert pope["bound_at_ropes_efficiency"] == pytest.approx(0.5 + 0.5 * ratio)
    assert pope["verdict"] == "within reach: needs a fused kernel PyTorch lacks on CPU"  # 1.21 < 1.3 < floor 1.5
    outside = rows.loc["fire_outside"]
    # 8 bytes per score at 2 GB/s outweigh its compute here: the bound is the bytes' time (the forward is 4 sdpa)
    assert outside["bound_at_machine_limits"] == pytest.approx(0.5 + scores * 8 / 2e9 / (4 * sdpa))
    assert outside["bound_at_machine_limits"] > rows.loc["fire", "bound_at_machine_limits"]
    cope = rows.loc["cope"]
    # rope's attention is half its measured time at the limits: cope's work at the limits against the step
    step = 2 * train_sdpa / 0.25
    cope_at_limits = train_scores * work.training_work("cope", 32).flop_equivalents() / LIMITS.matmul
    assert cope["bound_at_machine_limits"] == pytest.approx(step / (step - 2 * train_sdpa + cope_at_limits))
    assert cope["ropes_attention_at_limits"] == pytest.approx(0.5)
    headline = rows[rows["target"].str.startswith("headline")].iloc[0]
    ops = work.headline_ops_per_token(64, 256, 3, 4, 32, 18, 150_000, 2048)
    assert headline["bound_at_machine_limits"] == pytest.approx(1000 / (1000 + 2 * ops))
    assert headline["verdict"] == "out of reach: the machine's limits"  # 1000 FLOPs against ~60k operations
    assert not math.isnan(headline["kernel_floor"])


def test_attention_timed_above_its_whole_leaves_no_negative_time_outside_it():
    """On a loaded machine rope's attention, timed alone, can come out above the whole forward or step it is
    part of (a share > 1): the time outside attention is then 0, so every bound stays positive, and the
    encoders' bounds are their attention's time at the limits against rope's measured whole."""
    length = 1000
    sdpa = 1e-3
    train_sdpa = 1e-3
    rows = pd.DataFrame(work.arithmetic_rows(_bounds(length, sdpa, 1.3, train_sdpa, 1.2), LIMITS, length))
    assert (rows["bound_at_machine_limits"] > 0).all() and (rows["bound_at_ropes_efficiency"] > 0).all()
    assert work.outside_attention(1.0, 1.3) == 0.0 and work.outside_attention(1.0, 0.25) == 0.75
    cope = rows.set_index("encoder").loc["cope"]
    step = 2 * train_sdpa / 1.2
    cope_at_limits = 2 * 32 * 4 * 128 * 129 / 2 * work.training_work("cope", 32).flop_equivalents() / LIMITS.matmul
    assert cope["bound_at_machine_limits"] == pytest.approx(step / cope_at_limits)


ROOT = Path(__file__).resolve().parents[1]


def test_performance_pages_table_of_missed_targets_is_the_committed_benchs():
    """docs/performance.md's table is ``work_per_score.py results/bench``: a bench rerun without it fails."""
    table = work.targets_table(ROOT / "results" / "bench")
    page = (ROOT / "docs" / "performance.md").read_text()
    assert table in page, "docs/performance.md's table of missed targets is stale"
    rows = table.splitlines()[2:]
    assert [r.split(" | ")[0].lstrip("| ") for r in rows] == [
        "PoPE forward 8192 ≤ 1.3× rope",
        "FIRE forward 8192 ≤ 2× rope",
        "CoPE training ≥ 0.85× rope",
        "PoPE training ≥ 0.85× rope",
        "headline step MFU ≥ 0.7",
    ]
    training = pd.read_csv(ROOT / "results" / "bench" / "training.csv").set_index("model")
    assert f"| {training.loc['posenc cope', 'vs_rope']:.2f}× [" in rows[2]


def test_targets_table_says_what_is_missing_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "work_per_score.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "has no arithmetic.csv, bounds.csv" in result.stderr
    assert "Traceback" not in result.stderr
