"""What an evaluation will cost, estimated before any work: memory and time, refused past the limits.

:func:`posenc.running.extrapolate.extrapolate` asks :func:`check_memory` and :func:`check_time` before it loads a single
checkpoint, so that a request for 64 sequences at 2^17 tokens fails in one line in a second, not after hours.
The estimates are model FLOPs over a matmul rate measured on the evaluation device, and bytes per kept row.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from posenc.errors import PosencError
from posenc.progress import console
from posenc.running.arguments import check_max_hours
from posenc.running.evaluate import default_sequences

# Memory: every evaluated sequence's row plus the largest forward pass (see :func:`memory_estimate`).
ROW_BYTES = 400  # memory per evaluated sequence kept until the tables are written (numpy, then pandas rows)
# x (d_model + d_mlp + vocabulary) per token of a forward pass: a margin over what a tiny model used on CPU
# (see docs/performance.md, section "Measurements behind design choices")
TOKEN_BYTES = 16
VOCABULARY = 256  # an upper bound on a task's vocabulary (lm: bytes)
MEMORY_SHARE = 0.8  # of the memory available now, what one command may plan to use


def available_memory() -> int | None:
    """Bytes of memory available now (Linux ``MemAvailable``), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def memory_estimate(configs: dict, wanted: dict, plan: dict, sequences: int | None) -> int:
    """Bytes an evaluation of ``wanted`` lengths under ``plan`` scalings will hold at its peak, roughly: every
    evaluated sequence's scores (kept until the tables are written) and the largest forward pass."""
    from posenc.running.evaluate import BATCH_TOKENS

    rows, forward = 0, 0
    for run, lengths in wanted.items():
        config = configs[run]
        task = config.get("task") if isinstance(config.get("task"), dict) else {}
        model = config.get("model") if isinstance(config.get("model"), dict) else {}
        depths = 5 if task.get("name") == "passkey" else 1
        for length in lengths:
            count = sequences or default_sequences(length)
            rows += count * depths * len(plan[run])
            width = int(model.get("d_model") or 64) + int(model.get("d_mlp") or 256) + VOCABULARY
            forward = max(forward, max(length, BATCH_TOKENS) * TOKEN_BYTES * width)
    return rows * ROW_BYTES + forward


def check_memory(configs: dict, wanted: dict, plan: dict, sequences: int | None) -> None:
    """Refuse, before any work, an evaluation whose estimated memory exceeds what is available now."""
    need, have = memory_estimate(configs, wanted, plan, sequences), available_memory()
    if have is None or need <= MEMORY_SHARE * have:
        return
    longest = max((n for lengths in wanted.values() for n in lengths), default=0)
    asked = f"--sequences {sequences}" if sequences else "the default sequence counts"
    raise PosencError(
        f"this evaluation needs about {need / 2**30:.1f} GiB of memory (estimated: lengths up to "
        f"{longest}, {asked}), more than the {have / 2**30:.1f} GiB available; use fewer or shorter "
        "--lengths or fewer --sequences, or --no-memory-check to try anyway"
    )


# Time: model FLOPs over a measured matmul rate (see :func:`time_estimate`).
TIME_FACTOR = 3.0  # safety factor: evaluation time over matmul FLOPs at the measured rate (see time_estimate)
SHOW_ESTIMATE_SECONDS = 60.0  # longer estimated evaluations are announced before they start
MATMUL_SIZE = 512  # the matrices timed by matmul_rate
MATMUL_SECONDS = 0.05  # how long matmul_rate times them


def forward_flops(config: dict, length: int) -> float:
    """Floating-point operations of one forward pass of a ``length``-token sequence through ``config``'s model:
    per layer ``2 n (4 d^2 + 2 d f)`` (q, k, v, out projections and the MLP; ``12 d^2`` when ``f = 4d``) plus,
    for attention, ``2 n^2 d`` (scores and values, ``4 n^2 d`` halved by the causal mask; the head count
    cancels: ``heads x head_dim = d``), and ``2 n d V`` for the unembedding."""
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    d, f = int(model.get("d_model") or 128), int(model.get("d_mlp") or 4 * int(model.get("d_model") or 128))
    layers, vocabulary = int(model.get("n_layers") or 2), int(model.get("vocab_size") or VOCABULARY)
    attends = (model.get("mixer") or "attention") == "attention"
    per_layer = 2 * length * (4 * d * d + 2 * d * f) + (2 * length * length * d if attends else 0)
    return layers * per_layer + 2 * length * d * vocabulary


def time_estimate(configs: dict, wanted: dict, plan: dict, sequences: int | None, rate: float) -> float:
    """Seconds an evaluation of ``wanted`` lengths under ``plan`` scalings will take, roughly::

        TIME_FACTOR x sum over runs, lengths, scalings and depths of  sequences x forward_flops(length) / rate

    with ``forward_flops`` per layer ``2 n (4 d^2 + 2 d f) + 2 n^2 d`` (projections and MLP, then causal
    attention; :func:`forward_flops`), ``sequences`` the count asked for (default: the default count at that
    length; passkey's 5 depths each), and ``rate`` the FLOP/s of :func:`matmul_rate` on the evaluation
    device. ``TIME_FACTOR`` (3) covers what the FLOPs leave out: softmax, masks, encoders' extra work (score
    biases, rotations), data generation, the loss and per-sequence scores, and matrices smaller than the ones
    timed; 3 leaves a margin over the ratio measured for rope (see docs/performance.md, section
    "Measurements behind design choices") for slower encoders. Ignored: lengths an encoder cannot
    represent (counted as if evaluated, though they are skipped at once), query-block attention being slower
    than fused attention, a task's own default sequence count, loading checkpoints, and writing the tables.
    BaseConv layers count their projections only."""
    flops = 0.0
    for run, lengths in wanted.items():
        config = configs[run]
        task = config.get("task") if isinstance(config.get("task"), dict) else {}
        depths = 5 if task.get("name") == "passkey" else 1
        for length in lengths:
            count = sequences or default_sequences(length)
            flops += count * depths * len(plan[run]) * forward_flops(config, length)
    return TIME_FACTOR * flops / rate


_RATES: dict[tuple[str, int], float] = {}


def matmul_rate(device: torch.device) -> float:
    """FLOP/s of fp32 ``MATMUL_SIZE``-square matmuls on ``device`` with torch's thread count now, timed for about
    ``MATMUL_SECONDS`` (once per process, device and thread count)."""
    key = (str(device), torch.get_num_threads())
    if key not in _RATES:
        a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device)
        b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device)

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        torch.mm(a, b)  # warm-up
        sync()
        count, start = 0, time.perf_counter()
        while True:
            for _ in range(4):
                torch.mm(a, b)
            count += 4
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= MATMUL_SECONDS:
                break
        _RATES[key] = count * 2 * MATMUL_SIZE**3 / elapsed
    return _RATES[key]


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:.1f}" if hours < 10 else f"{hours:.3g}" if hours >= 1e3 else f"{hours:.0f}"


def check_time(
    configs: dict, wanted: dict, plan: dict, sequences: int | None, device: torch.device, max_hours: float, show: bool
) -> None:
    """Refuse, before any work, an evaluation estimated (:func:`time_estimate`) to take longer than
    ``max_hours``; announce one estimated to take longer than a minute (``show``)."""
    check_max_hours(max_hours)
    evaluations = sum(len(lengths) * len(plan[run]) for run, lengths in wanted.items())
    if not evaluations:
        return
    seconds = time_estimate(configs, wanted, plan, sequences, matmul_rate(device))
    longest = max(n for lengths in wanted.values() for n in lengths)
    if seconds > max_hours * 3600:
        asked = f"--sequences {sequences}" if sequences else "the default sequence counts"
        raise PosencError(
            f"this evaluation would take about {_hours(seconds)} h (estimated: {evaluations} "
            f"evaluations, lengths up to {longest}, {asked}), more than the {max_hours:g} h limit; use "
            f"fewer or shorter --lengths or fewer --sequences, or --max-hours to allow longer"
        )
    if show and seconds > SHOW_ESTIMATE_SECONDS:
        console.print(
            f"estimated evaluation time: about {seconds / 60:.0f} min ({evaluations} evaluations, "
            f"longest {longest} tokens)",
            highlight=False,
            soft_wrap=True,
        )
