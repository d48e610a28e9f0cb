"""The arithmetic issue 24 asks for where a speed target is missed: the work each encoder's attention needs per
score (matmul FLOPs, other vector operations, bytes that must cross memory), against this machine's measured
matmul rate and memory bandwidth. ``scripts/bench_bounds.py`` calls it with the kernel times it measured in the
same run and writes ``results/bench/arithmetic.csv``; ``python scripts/work_per_score.py results/bench`` prints
the missed targets' table of docs/performance.md from the committed tables (:func:`targets_table`), measuring
nothing.

Two bounds per target, each the best any kernel could do:

- *at the machine's limits*: the encoder's attention at the measured matmul rate ``P`` for its matmul FLOPs, its
  other operations at ``P / 2`` (one vector operation per lane in the time a matmul does one fused multiply-add,
  2 FLOPs), and its bytes at the measured copy bandwidth, whichever takes longest; the rest of the model as rope's;
- *at rope's efficiency*: the encoder's attention as efficient as rope's fused SDPA measured here (its time
  scaled by the ratio of the work), the rest as rope's.

The work is counted as a fused kernel would do it (no recomputation, scores kept in cache), with the fewest
operations the formula allows, so that both bounds are lower bounds on time: a target beyond the first is out of
physical reach on this machine; one within it but beyond the kernel floor of bench_bounds is a missing kernel.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

# Vector operations per element of the functions that are not one instruction (vectorised implementations, as
# PyTorch's CPU kernels use: range reduction, a polynomial, rescaling).
EXP = 10  # exp: reduction, degree-5 polynomial, scale by 2^n
SIGMOID = EXP + 2  # 1 / (1 + exp(-x))
ERF = 20  # erf: a rational approximation on each of two ranges
SOFTMAX = 1 + 1 + EXP + 1  # per score: running max, subtract, exp, sum (the scale folds into q)
SOFTMAX_BACKWARD = 3  # dS = P (dP - rowsum(dO * O)): subtract, multiply, the row sum's share


# The kernel row of bench_bounds behind each target's "PyTorch's kernels allow" (the headline: its step section)
KERNEL_OF = {
    ("forward", "pope"): "fused SDPA, width 64 (pope)",
    ("forward", "fire"): "FlexAttention, FIRE with a straight MLP (fire)",
    ("forward", "fire_outside"): "fused SDPA + a bias computed outside, for free (fire)",
    ("training", "cope"): "cope_attention (cope)",
    ("training", "pope"): "fused SDPA, width 64 (pope)",
}
ROPE_KERNEL = "fused SDPA, width 32 (rope)"


@dataclass(frozen=True)
class Work:
    """Work per score of one head: FLOPs in matmuls, other vector operations, bytes to and from memory."""

    matmul_flops: float
    other_ops: float
    bytes: float = 0.0

    def flop_equivalents(self) -> float:
        return self.matmul_flops + 2 * self.other_ops


def forward_work(encoder: str, head_dim: int, n_heads: int) -> Work:
    """Per score of a causal forward, head width ``head_dim``: ``q.k`` and ``p v`` are ``2 h_d`` FLOPs each.

    - rope: ``4 h_d`` and softmax (the rotation is per token, not per score);
    - pope: ``q.k`` over ``2 h_d`` (cosine and sine parts), values at ``h_d``: ``6 h_d``;
    - fire: rope's, plus its normalised distance ``psi(i - j) / psi(max(L, i))`` (two table reads and a multiply,
      shared by the heads) and the least MLP (one multiply-add per head, no unit bending in [0, 1]), added to the
      score; ``fire_outside`` writes that bias and reads it back (4 bytes each way per score).
    """
    d = head_dim
    fire_ops = SOFTMAX + 3 / n_heads + 1 + 1
    works = {
        "rope": Work(4 * d, SOFTMAX),
        "pope": Work(6 * d, SOFTMAX),
        "fire": Work(4 * d, fire_ops),
        "fire_outside": Work(4 * d, fire_ops, bytes=8.0),
    }
    return works[encoder]


def training_work(encoder: str, head_dim: int) -> Work:
    """Per score of a causal forward and backward: rope's is ``q.k``, ``p v`` and the four backward products
    (``dV = P^T dO``, ``dP = dO V^T``, ``dQ = dS K``, ``dK = dS^T Q``), ``12 h_d``, with softmax's forward and
    backward; pope's has ``q`` and ``k`` twice as wide in three of them (``18 h_d``); CoPE (Golovneva et al.
    2024) adds ``z = q e`` and its two backward products over as many positions as keys (``18 h_d``) and per
    score: the gate's sigmoid, its cumulative sum, clamp, floor, the fraction, two gathers and the interpolation
    (2) added to the logit; in backward the count's gradient, its reversed cumulative sum (2), the sigmoid's
    backward (2), the add to the logit's, the two scatter-adds and the weight split (2)."""
    d = head_dim
    softmax = SOFTMAX + SOFTMAX_BACKWARD
    cope_forward = SIGMOID + 1 + 1 + 1 + 1 + 2 + 2 + 1
    cope_backward = 1 + 2 + 2 + 1 + 2 + 2
    works = {
        "rope": Work(12 * d, softmax),
        "pope": Work(18 * d, softmax),
        "cope": Work(18 * d, softmax + cope_forward + cope_backward),
    }
    return works[encoder]


def headline_ops_per_token(
    d_model: int, d_mlp: int, n_layers: int, n_heads: int, length: int, vocab: int, params: int, tokens_per_step: int
) -> float:
    """Vector operations per token of one training step of the headline's model (forward and backward) outside its
    matmuls: exact GELU (erf and a product forward; erf, exp and a few products backward), two layer norms per
    layer and a final one (about 6 operations per element forward, 10 backward), softmax per score (causal: on
    average ``(length + 1) / 2`` keys per head), the rotation of queries and keys (3 each way), the residual
    adds, the loss's softmax over the vocabulary and AdamW's update (12 per parameter, per step)."""
    gelu = (ERF + 4) + (ERF + EXP + 6)
    norm = 16 * d_model
    per_layer = (
        gelu * d_mlp
        + 2 * norm
        + (SOFTMAX + SOFTMAX_BACKWARD) * n_heads * (length + 1) / 2
        + 6 * 2 * d_model
        + 4 * d_model
    )
    return n_layers * per_layer + norm + (SOFTMAX + SOFTMAX_BACKWARD) * vocab + 12 * params / tokens_per_step


@dataclass(frozen=True)
class MachineLimits:
    """This machine's measured matmul rates (FLOP/s; ``threads`` and one thread) and copy bandwidth (bytes/s)."""

    matmul: float
    matmul_one_thread: float
    bandwidth: float
    threads: int

    def describe(self) -> str:
        return (
            f"Measured here: a 1024³ fp32 matmul at {self.matmul / 1e9:.0f} GFLOP/s ({self.threads} threads) "
            f"and {self.matmul_one_thread / 1e9:.0f} GFLOP/s (one thread); a 256 MiB copy at "
            f"{self.bandwidth / 1e9:.1f} GB/s. Other vector operations are counted at half the matmul's FLOP "
            f"rate."
        )

    def seconds(self, work: Work, scores: float) -> float:
        return max(scores * work.flop_equivalents() / self.matmul, scores * work.bytes / self.bandwidth)


def machine_limits(seconds_of: Callable[[Callable[[], object]], float]) -> MachineLimits:
    """This machine's limits, each timed by ``seconds_of(fn)`` (bench_bounds: the fastest of seven calls)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    rate = 2 * 1024**3 / seconds_of(lambda: a @ b)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = 2 * 1024**3 / seconds_of(lambda: a @ b)
    finally:
        torch.set_num_threads(threads)
    src = torch.ones(1 << 26)
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() * 4 / seconds_of(lambda: dst.copy_(src))
    return MachineLimits(rate, one, bandwidth, threads)


def verdict(goal: float, at_limits: float, at_rope: float, floor: float, higher_is_better: bool) -> str:
    """Where a target stands: out of physical reach, beyond a kernel as efficient as rope's, beyond the kernels
    PyTorch offers here (``floor``), or within reach of them."""

    def misses(value: float) -> bool:
        return value < goal if higher_is_better else value > goal

    if misses(at_limits):
        return "out of reach: the machine's limits"
    if misses(at_rope):
        return "needs a kernel more efficient than rope's SDPA"
    if math.isnan(floor):  # not measured
        return "within physical reach; kernels not measured"
    if misses(floor):
        return "within reach: needs a fused kernel PyTorch lacks on CPU"
    return "within reach of PyTorch's kernels"


def arithmetic_rows(
    bounds: pd.DataFrame,
    limits: MachineLimits,
    length: int,
    n_layers: int = 2,
    n_heads: int = 4,
    head_dim: int = 32,
    batch: int = 32,
    train_length: int = 128,
    headline: dict | None = None,
) -> list[dict]:
    """One row per missed target, from the kernel rows of bench_bounds (``bounds``: its ``measure``, ``kernel``,
    ``seconds``, ``attention_share_of_rope`` and ``floor_vs_rope`` columns) and the machine's limits. Forward
    rows are time ratios to rope (lower is better), training rows throughput ratios, the headline's row an MFU."""
    rows = []
    forward = bounds[bounds["measure"] == f"forward {length}"].set_index("kernel")
    rope_fwd = forward.loc[ROPE_KERNEL]
    attention = n_layers * rope_fwd["seconds"]  # rope's attention in its whole forward
    whole = attention / rope_fwd["attention_share_of_rope"]
    rest = outside_attention(whole, attention)
    scores = n_layers * n_heads * length * (length + 1) / 2
    reference = forward_work("rope", head_dim, n_heads)
    for encoder, goal in (("pope", 1.3), ("fire", 2.0), ("fire_outside", 2.0)):
        work = forward_work(encoder, head_dim, n_heads)
        at_limits = (rest + limits.seconds(work, scores)) / whole
        at_rope = (
            rest
            + attention * work.flop_equivalents() / reference.flop_equivalents()
            + scores * work.bytes / limits.bandwidth
        ) / whole
        rows.append(
            _row(
                f"forward {length}, time vs rope",
                encoder,
                goal,
                work,
                reference,
                at_limits,
                at_rope,
                forward.loc[KERNEL_OF["forward", encoder], "floor_vs_rope"],
                False,
                limits.seconds(reference, scores) / attention,
            )
        )
    training = bounds[bounds["measure"] == f"training {batch}x{train_length}"].set_index("kernel")
    rope_train = training.loc[ROPE_KERNEL]
    attention = n_layers * rope_train["seconds"]
    step = attention / rope_train["attention_share_of_rope"]
    rest = outside_attention(step, attention)
    scores = n_layers * batch * n_heads * train_length * (train_length + 1) / 2
    reference = training_work("rope", head_dim)
    for encoder in ("cope", "pope"):
        work = training_work(encoder, head_dim)
        at_limits = step / (rest + limits.seconds(work, scores))
        at_rope = step / (rest + attention * work.flop_equivalents() / reference.flop_equivalents())
        rows.append(
            _row(
                f"training {batch}x{train_length}, throughput vs rope",
                encoder,
                0.85,
                work,
                reference,
                at_limits,
                at_rope,
                training.loc[KERNEL_OF["training", encoder], "floor_vs_rope"],
                True,
                limits.seconds(reference, scores) / attention,
            )
        )
    if headline is not None:
        flops, ops = headline["matmul_flops_per_token"], headline_ops_per_token(**headline["shape"])
        at_limits = flops / (flops + 2 * ops)
        rows.append(
            {
                "target": "headline step, MFU (one thread)",
                "encoder": "rope",
                "goal": 0.7,
                "matmul_flops": flops,
                "other_ops": ops,
                "bytes": 0.0,
                "work_vs_rope": float("nan"),
                "ropes_attention_at_limits": float("nan"),
                "bound_at_machine_limits": at_limits,
                "bound_at_ropes_efficiency": float("nan"),
                "kernel_floor": headline["kernel_floor"],
                "verdict": verdict(0.7, at_limits, at_limits, headline["kernel_floor"], True),
            }
        )
    return rows


def outside_attention(whole: float, attention: float) -> float:
    """The time of a forward or step outside its attention: ``whole - attention``, never below 0. The two are
    timed apart (attention kernels alone, the whole model), so on a loaded machine their medians can say
    attention took more than the whole; the rest is then taken as nothing, not as negative time."""
    return max(whole - attention, 0.0)


def _row(
    target: str,
    encoder: str,
    goal: float,
    work: Work,
    reference: Work,
    at_limits: float,
    at_rope: float,
    floor: float,
    higher_is_better: bool,
    rope_at_limits: float,
) -> dict:
    """``rope_at_limits``: the share of rope's measured attention time its work needs at the machine's limits."""
    return {
        "target": target,
        "encoder": encoder,
        "goal": goal,
        "matmul_flops": work.matmul_flops,
        "other_ops": work.other_ops,
        "bytes": work.bytes,
        "work_vs_rope": work.flop_equivalents() / reference.flop_equivalents(),
        "ropes_attention_at_limits": rope_at_limits,
        "bound_at_machine_limits": at_limits,
        "bound_at_ropes_efficiency": at_rope,
        "kernel_floor": floor,
        "verdict": verdict(goal, at_limits, at_rope, floor, higher_is_better),
    }


NEEDS = ("arithmetic.csv", "bounds.csv", "training.csv", "forward.csv", "step.csv")


def targets_table(folder: Path) -> str:
    """docs/performance.md's table of issue 24's missed targets from a bench folder (bench.py's and
    bench_bounds.py's tables):
    each target's measured ratio (training: median [lowest, highest] of the rounds), what PyTorch's kernels allow
    (the floor of bench_bounds, with the kernel's time against SDPA), the bound at rope's efficiency (with the
    work per score against rope's) and at the machine's limits. Raises FileNotFoundError naming what is missing."""
    missing = [name for name in NEEDS if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(f"{folder} has no {', '.join(missing)}: run scripts/bench.py and bench_bounds.py")
    arithmetic, bounds = pd.read_csv(folder / "arithmetic.csv"), pd.read_csv(folder / "bounds.csv")
    training = pd.read_csv(folder / "training.csv").set_index("model")
    forward = pd.read_csv(folder / "forward.csv").set_index(["encoder", "length"])
    step = pd.read_csv(folder / "step.csv").set_index("encoder")
    header = (
        "| target | measured here | PyTorch's kernels allow | a kernel as efficient as rope's | the machine's limits |"
    )
    lines = [header, "|---|---|---|---|---|"]
    for row in arithmetic.itertuples():
        kind = row.target.split()[0]
        if kind == "headline":
            lines.append(
                f"| headline step MFU ≥ {row.goal:g} | {step.loc['rope', 'mfu']:.2f} | "
                f"{row.kernel_floor:.2f} (its kernels alone) | — | {row.bound_at_machine_limits:.2f} |"
            )
            continue
        if row.encoder == "fire_outside":  # FIRE's second route: the first bounds it
            continue
        kernel = bounds[bounds["kernel"] == KERNEL_OF[kind, row.encoder]]
        kernel = kernel[kernel["measure"].str.startswith(kind)].iloc[0]
        name = {"cope": "CoPE", "pope": "PoPE", "fire": "FIRE"}[row.encoder]
        if kind == "training":
            got = training.loc[f"posenc {row.encoder}"]
            target = f"{name} training ≥ {row.goal:g}× rope"
            measured = f"{got['vs_rope']:.2f}× [{got['vs_rope_low']:.2f}, {got['vs_rope_high']:.2f}]"
        else:
            length = int(row.target.split()[1].rstrip(","))
            target = f"{name} forward {length} ≤ {row.goal:g}× rope"
            measured = f"{forward.loc[(row.encoder, length), 'time_vs_rope']:.2f}×"
        lines.append(
            f"| {target} | {measured} | {row.kernel_floor:.2f}× (its kernel: {kernel['vs_sdpa']:.2f}× "
            f"SDPA) | {row.bound_at_ropes_efficiency:.2f}× ({row.work_vs_rope:.2f}× rope's work per "
            f"score) | {row.bound_at_machine_limits:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="Print the table of issue 24's missed targets (docs/performance.md).")
    parser.add_argument("folder", type=Path, help="a bench folder (results/bench)")
    args = parser.parse_args()
    try:
        print(targets_table(args.folder), end="")
    except (FileNotFoundError, KeyError, IndexError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
