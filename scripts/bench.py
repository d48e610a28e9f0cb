"""posenc benchmark: training speed against a Hugging Face Llama of the same shape, model FLOPs utilization,
long-sequence forward time and memory per encoder, and the rotary kernel against ``rotate_half``.

Everything is measured in this one process, so every ratio compares numbers taken in the same run:

    python scripts/bench.py                      # full run, ~15 minutes on a 2-core CPU
    python scripts/bench.py --quick              # a smoke run (seconds)
    python scripts/bench.py --device cuda        # on a GPU: bf16 autocast, fused AdamW, CUDA memory stats
    python scripts/bench.py --compile            # every model measured compiled (posenc's and the HF Llama)
    python scripts/bench.py --sections jobs      # sweeps: N one-thread jobs against one N-thread job

Needs the ``bench`` extra (``pip install -e ".[bench]"``) for the reference model. Writes
``results/bench/{training,step,forward,rope,jobs}.csv`` (the sections run) and ``results/bench/bench.md``, and
prints the tables; the output and bench.md name the machine (the CPU's model, and the GPU on CUDA). The
forward table is rewritten after every row, so a bench stopped midway keeps the rows it measured.
"""

from __future__ import annotations

import os

# First calls are timed as compilation from scratch (FlexAttention kernels), not as a hit in the on-disk
# cache an earlier run left; set before torch is imported.
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import argparse
import gc
import itertools
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from posenc import functional as pf
from posenc.analysis.printing import print_view, rich_table
from posenc.encoders import ENCODERS, build_encoder
from posenc.errors import PosencError, PositionRangeError
from posenc.files import atomic_write_text
from posenc.nn.model import ModelConfig, Transformer
from posenc.nn.subnormals import flush_subnormals

console = Console(stderr=True)
VOCAB = 64  # the reference shape: hidden 128, 2 layers, 4 heads, MLP 512, vocab 64
MEMORY_PASSES = 2  # forward section: each row's peak memory is the least of this many passes


# --- measuring ---------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_time(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls, in seconds (after one untimed warm-up call)."""
    return first_and_best_time(fn, device, repeats)[1]


def first_and_best_time(fn: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, float]:
    """Seconds of the first call (with any compilation it triggers) and the fastest of ``repeats`` after it."""
    start = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return first, min(times)


def release_freed_memory_promptly() -> None:
    """Make freed memory leave the resident set at once (glibc), so peaks are measured from a true baseline.

    glibc raises its mmap threshold after large frees and then keeps freed blocks in the heap, which
    would hide later peaks; a fixed threshold and ``malloc_trim`` undo that. Other C libraries: no-op.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: large blocks always mmap'd, unmapped on free
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_memory(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """(peak memory during ``fn``, its rise above the memory held before ``fn``), in MiB.

    CPU: the process's resident set (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``), so it
    counts every allocation, not only PyTorch's. CUDA: PyTorch's allocator statistics.
    """
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        sync(device)
        peak = torch.cuda.max_memory_allocated()
        return peak / 2**20, (peak - before) / 2**20
    release_freed_memory_promptly()
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
    before = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    return peak / 1024, (peak - before) / 1024


def matmul_flops(device: torch.device, dtype: torch.dtype, n: int = 1024, repeats: int = 20) -> float:
    """Achievable dense matmul FLOP/s here: the denominator of model FLOPs utilization."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)

    def run() -> None:
        for _ in range(5):
            a @ b

    return 5 * 2 * n**3 / best_time(run, device, repeats)


# --- models ------------------------------------------------------------------------------------------
def posenc_model(
    encoder: str, train_length: int, device: torch.device, attention: str = "auto", options: dict | None = None
) -> Transformer:
    cfg = ModelConfig(vocab_size=VOCAB, attention=attention)
    return Transformer(cfg, build_encoder(encoder, cfg.shape, train_length, options)).to(device)


def llama_reference(device: torch.device, max_length: int) -> torch.nn.Module:
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        console.print("error: the reference needs transformers: pip install -e '.[bench]' (or --no-reference)")
        sys.exit(2)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_length,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).to(device)


def matmul_parameters(model: torch.nn.Module) -> int:
    """Parameters that take part in matmuls (all 2-D weights; the tied head counted once, as a matmul)."""
    seen, total = set(), 0
    for name, p in model.named_parameters():
        if p.dim() == 2 and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def train_flops_per_token(model: torch.nn.Module, n_layers: int, d_model: int, length: int) -> float:
    """6 N (forward + backward of every matmul weight) + causal attention 6 L T d (Kaplan et al. 2020, PaLM
    appendix B: 12 L T d, halved for the causal mask)."""
    return 6 * matmul_parameters(model) + 6 * n_layers * length * d_model


def adamw(model: torch.nn.Module, device: torch.device, fused: bool | None = None) -> torch.optim.AdamW:
    """The bench's AdamW: the fused kernel on CUDA unless ``fused`` says otherwise. posenc's runs use it there
    (torch's own default is the foreach kernel), and the bench measures the step they run."""
    fused = device.type == "cuda" if fused is None else fused
    return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)


def training_tokens_per_s(
    model: torch.nn.Module,
    device: torch.device,
    autocast: torch.dtype | None,
    batch: int,
    length: int,
    steps: int,
    compiled: bool = False,
    fused: bool | None = None,
) -> float:
    """Tokens/s of full training steps (forward, loss, backward, clipping, AdamW: :func:`adamw`) on random
    tokens."""
    torch.manual_seed(0)
    data = torch.randint(0, VOCAB, (batch, length + 1), device=device)
    optimizer = adamw(model, device, fused)
    forward = torch.compile(model) if compiled else model

    def step() -> None:
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            out = forward(data[:, :-1])
            logits = out if isinstance(out, torch.Tensor) else out.logits
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    def run() -> None:
        for _ in range(steps):
            step()

    for _ in range(3):
        step()  # warm-up (and compilation)
    return batch * length * steps / best_time(run, device, repeats=3)


# --- sections ----------------------------------------------------------------------------------------
def training_section(args, device, autocast) -> pd.DataFrame:
    """Training tokens/s of every model in ``args.rounds`` interleaved rounds (each model once per round), so
    that a drift in the machine's speed (a shared CPU's neighbours) reaches every model alike. A model's
    tokens/s is its median over the rounds; its ratios are the medians of its per-round ratios, with their
    lowest and highest (``*_low``, ``*_high``). With ``--compile`` every model is compiled, the reference
    too, so that no ratio sets a compiled model against an eager one."""
    peak = matmul_flops(device, autocast or torch.float32)
    models: list[tuple[str, torch.nn.Module, dict]] = []
    if not args.no_reference:
        models.append(("llama (HF transformers, sdpa)", llama_reference(device, args.length), {}))
    models += [(f"posenc {name}", posenc_model(name, args.length, device), {}) for name in args.encoders]
    if not args.quick and device.type != "cuda":  # on CUDA every model's AdamW is the fused one already
        models.append(("posenc rope, fused AdamW", posenc_model("rope", args.length, device), {"fused": True}))
    if not args.quick and not args.compile:
        models.append(("posenc rope, torch.compile", posenc_model("rope", args.length, device), {"compiled": True}))
    rates: dict[str, list[float]] = {name: [] for name, _, _ in models}
    for round_ in range(args.rounds):
        for name, model, kw in models:
            kw = {"compiled": args.compile, **kw}
            tps = training_tokens_per_s(model, device, autocast, args.batch, args.length, args.steps, **kw)
            rates[name].append(tps)
            console.print(f"  training {name}, round {round_ + 1}/{args.rounds}: {tps:,.0f} tokens/s")
    console.print(f"  matmul rate measured: {peak / 1e9:.1f} GFLOP/s")
    rows = []
    llama = None if args.no_reference else models[0][0]
    for name, model, _ in models:
        tps = pd.Series(rates[name])
        row = {
            "model": name,
            "tokens_per_s": tps.median(),
            "mfu": tps.median() * train_flops_per_token(model, 2, 128, args.length) / peak,
            "params": sum(p.numel() for p in model.parameters()),
        }
        for column, reference in (("vs_llama", llama), ("vs_rope", "posenc rope")):
            ratios = tps / pd.Series(rates[reference]) if reference else pd.Series([float("nan")])
            row.update({column: ratios.median(), f"{column}_low": ratios.min(), f"{column}_high": ratios.max()})
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["matmul_gflops"] = peak / 1e9
    return table


# One process of the jobs section: the sweep model's training steps at a thread count; prints its seconds.
_JOB = """
import sys, time, torch
from posenc.nn.model import ModelConfig, Transformer
from posenc.nn.subnormals import flush_subnormals
from posenc.encoders import build_encoder
threads, steps, d, layers, batch, length = map(int, sys.argv[1:])
torch.set_num_threads(threads)
torch.manual_seed(0)
cfg = ModelConfig(vocab_size=64, d_model=d, n_layers=layers, d_mlp=4 * d)
model = Transformer(cfg, build_encoder("rope", cfg.shape, length))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, 64, (batch, length + 1))
def step():
    loss = torch.nn.functional.cross_entropy(model(data[:, :-1]).reshape(-1, 64), data[:, 1:].reshape(-1))
    optimizer.zero_grad(); loss.backward(); optimizer.step()
for _ in range(5):
    step()
start = time.perf_counter()
for _ in range(steps):
    step()
print(time.perf_counter() - start)
"""


def jobs_section(args) -> pd.DataFrame:
    """Sweeps on this machine: N jobs of one thread each at once against one job with N threads (N = the
    cores), on the headline's model (d_model 64, 3 layers, batch 64 x 32 tokens), same total steps."""
    import os
    import subprocess

    cores = os.cpu_count() or 1
    steps = 20 if args.quick else 300
    shape = ["64", "3", "64", "32"]

    def run(threads: int, jobs: int, each: int) -> float:
        """Seconds of the slowest job's timed steps (after its warm-up, so imports and start-up don't count),
        all jobs at once."""
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _JOB, str(threads), str(each), *shape],
                env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(jobs)
        ]
        seconds = []
        for proc in procs:
            out, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(
                    f"a benchmark job failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}"
                )
            seconds.append(float(out.strip().splitlines()[-1]))
        return max(seconds)

    rows = []
    for name, threads, jobs in ((f"1 job x {cores} threads", cores, 1), (f"{cores} jobs x 1 thread", 1, cores)):
        seconds = run(threads, jobs, steps * cores // jobs)
        rows.append(
            {"setting": name, "steps": steps * cores, "seconds": seconds, "steps_per_s": steps * cores / seconds}
        )
        console.print(f"  jobs {name}: {steps * cores / seconds:.1f} steps/s")
    table = pd.DataFrame(rows)
    table["vs_first"] = table["steps_per_s"] / table["steps_per_s"].iloc[0]
    return table


def forward_in_fresh_process(args) -> pd.DataFrame:
    """The forward section in a process of its own: after the training sections, the allocator's state in this
    one skewed it (T5 at 8192 tokens 1.87x rope after them, 1.19x alone; FoX at 32768 4.2x against 2.6x in an
    earlier bench), and a fresh process is what ``posenc extrapolate`` runs in."""
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            __file__,
            "--sections",
            "forward",
            "--device",
            args.device,
            "--out",
            out,
            "--lengths",
            ",".join(map(str, args.lengths)),
            "--encoders",
            ",".join(args.encoders),
        ]
        command += (["--quick"] if args.quick else []) + (["--compile"] if args.compile else [])
        subprocess.run(command, check=True)
        return pd.read_csv(Path(out) / "forward.csv")


def least_memory(rows: list[dict], measure: Callable[[dict], tuple[float, float]], passes: int) -> None:
    """Each row's ``peak_mib`` and ``rise_mib``: the least of ``passes`` passes of ``measure(row)`` over every row
    in turn. Process RSS moves with the machine's other load and the allocator's state, and both only add to
    what a forward needs (one pass gave xPos's growth at 1.17-1.48x rope's across benches; the least of three
    passes in one process, 1.11x)."""
    for pass_ in range(passes):
        for row in rows:
            peak, rise = measure(row)
            row["peak_mib"] = min(peak, row.get("peak_mib", peak))
            row["rise_mib"] = min(rise, row.get("rise_mib", rise))
            console.print(
                f"  memory {row['encoder']} @ {row['length']}, pass {pass_ + 1}/{passes}: peak "
                f"{peak:.0f} MiB (+{rise:.0f})"
            )


@flush_subnormals()  # as in posenc extrapolate, every thread of an evaluating process (posenc.nn.subnormals)
def forward_section(args, device, autocast) -> pd.DataFrame:
    """Forward time (a first pass) and peak memory per encoder and length, batch 1, with subnormals flushed as
    posenc's evaluation flushes them (run in a fresh process, so the intra-op threads flush too).

    Ratios to rope and to ``nope``, the same model whose attention is plain fused causal SDPA with no
    positional work (``*_vs_sdpa``). ``first_s`` is the first call's time, compilation included (a new
    length compiles a FlexAttention kernel; the bench runs with inductor's on-disk caches off, so that is
    the cold cost); ``seconds`` the fastest call after it. Peak memory on CUDA: one pass right after the row's
    timing (the allocator's statistics do not move with the machine's load); on CPU the least of
    ``MEMORY_PASSES`` passes after every timing (:func:`least_memory`). A row that fails (out of memory at a
    length, a compile error) is a row with its ``error``, and the bench goes on. ``forward.csv`` is rewritten
    after every row, so a bench stopped at a time limit keeps what it measured.
    """
    rows: list[dict] = []
    partial = args.out / "forward.csv"
    partial.parent.mkdir(parents=True, exist_ok=True)
    for length in args.lengths:
        for name in args.encoders:
            row = {"encoder": name, "length": length, "error": ""}
            rows.append(row)
            try:
                forward = forward_fn(name, length, device, autocast, args.compile)
                first, row["seconds"] = first_and_best_time(forward, device, 1 if length > 8192 else 3)
                row["first_s"] = first
                console.print(f"  forward {name} @ {length}: {row['seconds']:.3f} s (first call {first:.2f} s)")
                if device.type == "cuda":
                    row["peak_mib"], row["rise_mib"] = peak_memory(forward, device)
                    console.print(
                        f"  memory {name} @ {length}, pass 1/1: peak {row['peak_mib']:.0f} MiB (+{row['rise_mib']:.0f})"
                    )
            except Exception as err:  # noqa: BLE001  one encoder at one length failing (OOM) is one row
                row["error"] = _one_line(err)
                console.print(f"  forward {name} @ {length}: error {row['error']}")
            forward = None  # its model and any failed call's tensors go before the next row
            _free(device)
            atomic_write_text(partial, forward_table(rows).to_csv(index=False))
    if device.type != "cuda":
        # Freed memory must leave the resident set for a peak to be seen; that makes allocations slower
        # (fresh pages every time), so memory is measured in passes of its own, after every timing.
        release_freed_memory_promptly()
        measured = [row for row in rows if not row["error"]]
        least_memory(
            measured,
            lambda row: peak_memory(forward_fn(row["encoder"], row["length"], device, autocast, args.compile), device),
            1 if args.quick else MEMORY_PASSES,
        )
    return forward_table(rows)


def forward_fn(
    name: str, length: int, device: torch.device, autocast: torch.dtype | None, compiled: bool = False
) -> Callable[[], None]:
    """One forward of encoder ``name``'s model on ``length`` random tokens, batch 1, without autograd."""
    # Encoders with a position range (the learned table's rows, the randomized encoding's range) are built
    # to cover the length benchmarked: this measures cost, not extrapolation.
    model = posenc_model(name, 128, device).eval()
    try:
        model.encoder.check_positions(length)
    except PositionRangeError:
        options = {"max_position": length} if name == "randomized" else None
        model = posenc_model(name, length, device, options=options).eval()
    call = torch.compile(model) if compiled else model
    tokens = torch.randint(0, VOCAB, (1, length), device=device)

    @torch.no_grad()
    def forward() -> None:
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            call(tokens)

    return forward


def forward_table(rows: list[dict]) -> pd.DataFrame:
    """The forward rows with their ratios to rope and to nope at the same length (empty where either
    failed)."""
    table = pd.DataFrame(rows)
    for column in ("seconds", "first_s", "peak_mib", "rise_mib"):
        if column not in table:
            table[column] = float("nan")
    for reference, suffix in (("rope", "rope"), ("nope", "sdpa")):
        at = table[table["encoder"] == reference].set_index("length")
        for column, value in (("time", "seconds"), ("peak", "peak_mib"), ("rise", "rise_mib")):
            table[f"{column}_vs_{suffix}"] = table[value] / table["length"].map(at[value])
    return table


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def _free(device: torch.device) -> None:
    """Return what a failed or finished row held, so that an out-of-memory row does not fail the next."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def rope_section(args, device) -> pd.DataFrame:
    """posenc's complex-multiply rotary (cached table) against the ``rotate_half`` formulation (GPT-NeoX /
    Llama; cos/sin cached too) on a strided ``[8, 4, 2048, 32]`` fp32 slice of a fused qkv projection."""
    b, h, s, d = (2, 4, 256, 32) if args.quick else (8, 4, 2048, 32)
    qkv = torch.randn(b, s, 3 * h * d, device=device)
    q = qkv[..., : h * d].view(b, s, h, d).transpose(1, 2)  # [b, h, s, d], as attention sees it
    inv_freq = pf.rope_inv_freq(d, device=device)
    rotation = pf.rope_rotation(torch.arange(s, device=device), inv_freq)
    angles = pf.rope_angles(torch.arange(s, device=device), inv_freq).float()
    cos, sin = torch.cat((angles.cos(), angles.cos()), -1), torch.cat((angles.sin(), angles.sin()), -1)

    def rotate_half() -> torch.Tensor:
        x1, x2 = q[..., : d // 2], q[..., d // 2 :]
        return q * cos + torch.cat((-x2, x1), dim=-1) * sin

    rows = []
    for name, fn in (
        ("posenc apply_rotation (complex, cached)", lambda: pf.apply_rotation(q, rotation)),
        (
            "posenc apply_rope (table computed per call)",
            lambda: pf.apply_rope(q, torch.arange(s, device=device), inv_freq),
        ),
        ("rotate_half (cos/sin cached)", rotate_half),
    ):
        rows.append({"kernel": name, "shape": f"[{b}, {h}, {s}, {d}]", "ms": 1e3 * best_time(fn, device, 20)})
    table = pd.DataFrame(rows)
    table["vs_rotate_half"] = table["ms"] / table["ms"].iloc[-1]
    return table


# --- output ------------------------------------------------------------------------------------------
# The headline's own training step, broken down (issue 24 item 3). Op names per category, as the profiler
# reports them on CPU and CUDA; time in no op (Python, the autograd engine's bookkeeping) is "python".
_CATEGORIES = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"),
    "attention": ("scaled_dot_product", "aten::_softmax", "aten::softmax", "flash", "efficient_attention"),
    "norm_activation": ("layer_norm", "gelu", "aten::rsqrt", "rms_norm"),
    "optimizer": ("_foreach_", "adam", "clip_grad", "aten::_fused"),
}


def _category(op: str) -> str:
    lowered = op.lower()
    for category, needles in _CATEGORIES.items():
        if any(n in lowered for n in needles):
            return category
    return "other_ops"


def headline_config(encoder: str, device: torch.device, compiled: bool = False):
    """The RunConfig of a length-generalization run (the headline's model: d_model 64, 3 layers, batch 64 x up
    to 32 tokens, lengths drawn per sequence) with ``encoder``, composed by Hydra as ``posenc train`` would;
    compiled with ``compiled`` (``--compile``)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from posenc.running.config import run_config_from_dict

    with initialize_config_module(config_module="posenc.conf", version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "experiment=length_generalization",
                f"encoder={encoder}",
                f"device={device.type}",
                f"train.compile={str(compiled).lower()}",
            ],
        )
    return run_config_from_dict(OmegaConf.to_container(cfg, resolve=True))


def step_section(args, device, autocast) -> pd.DataFrame:
    """One training step at the headline's shape, with posenc's own pieces (posenc.running.train.setup_training,
    draw_batch, optimizer_step): milliseconds per step (median of ``args.steps`` x 5 steps after warm-up), its
    phases timed by the clock (data, forward + loss, backward, clipping + AdamW + schedule), the profiler's op
    time by category and the rest (Python and autograd bookkeeping), and MFU against the matmul rate measured
    here, all at one thread; encoders interleaved in rounds, so that a drift of the machine reaches them alike. On
    CUDA the phases are synchronised first, so they add up to the step."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the headline's sweep jobs run (OMP_NUM_THREADS=1, two jobs on two cores)
    try:
        return _step_rows(args, device, autocast)
    finally:
        torch.set_num_threads(threads)


def _phases(
    name: str, device, autocast, quick: bool, compiled: bool = False
) -> tuple[Callable[[], list[float]], float]:
    """A function timing one training step of encoder ``name`` at the headline's shape by phase (seconds of
    data, forward + loss, backward, optimizer), warmed up; and the step's model FLOPs."""
    from posenc.running.evaluate import answer_loss
    from posenc.running.train import draw_batch, setup_training

    cfg = headline_config(name, device, compiled)
    task, model, step_model, optimizer, scheduler, _ = setup_training(cfg, device)
    lo, hi = cfg.training_lengths(task)
    data = torch.Generator().manual_seed(0)
    batch_size = 4 if quick else cfg.train.batch_size

    def phases() -> list[float]:
        marks = [time.perf_counter()]
        batch, _ = draw_batch(task, batch_size, lo, hi, cfg.task.length_draw, data)
        batch = batch.to(device)
        sync(device)
        marks.append(time.perf_counter())
        with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = answer_loss(step_model(batch.inputs).float(), batch)
        sync(device)
        marks.append(time.perf_counter())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sync(device)
        marks.append(time.perf_counter())
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        model.encoder.project_parameters()
        scheduler.step()
        sync(device)
        marks.append(time.perf_counter())
        return [b - a for a, b in itertools.pairwise(marks)]

    for _ in range(5):
        phases()  # warm-up
    flops = train_flops_per_token(model, cfg.model.n_layers, cfg.model.d_model, hi) * batch_size * hi
    return phases, flops


def _profiled_shares(phases: Callable[[], list[float]], device, n: int) -> dict[str, float]:
    """Share of ``n`` profiled steps' wall time per op category, and the rest (``python``)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(n):
            phases()
        wall = time.perf_counter() - start
    by_category: dict[str, float] = {}
    for event in prof.key_averages():
        by_category[_category(event.key)] = by_category.get(_category(event.key), 0.0) + event.self_cpu_time_total
    shares = {f"{k}_share": v / 1e6 / wall for k, v in sorted(by_category.items())}
    shares["python_share"] = max(0.0, 1 - sum(by_category.values()) / 1e6 / wall)
    return shares


def _step_rows(args, device, autocast) -> pd.DataFrame:
    """``args.rounds`` interleaved rounds (every encoder once per round, as in the training section), each
    ``args.steps`` x 5 steps; a step's time is the median of all its steps, its ratio to rope the median of the
    per-round ratios (lowest and highest beside it); one profiled pass per encoder after the rounds."""
    peak = matmul_flops(device, autocast or torch.float32)  # at one thread, like the steps
    names = ["rope", *[n for n in ("cope", "fox", "pope", "fire", "t5", "alibi") if n in args.encoders]]
    benches = {name: _phases(name, device, autocast, args.quick, args.compile) for name in names}
    n = max(2, args.steps) * 5
    timed: dict[str, list[pd.DataFrame]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names:
            phases = benches[name][0]
            timed[name].append(
                pd.DataFrame([phases() for _ in range(n)], columns=["data", "forward", "backward", "optimizer"])
            )
            console.print(
                f"  step {name}, round {round_ + 1}/{args.rounds}: {1e3 * timed[name][-1].sum(axis=1).median():.1f} ms"
            )
    rope_rounds = pd.Series([t.sum(axis=1).median() for t in timed["rope"]])
    rows = []
    for name in names:
        steps = pd.concat(timed[name])
        step_s = steps.sum(axis=1).median()
        ratios = rope_rounds / pd.Series([t.sum(axis=1).median() for t in timed[name]])  # throughput vs rope
        rows.append(
            {
                "encoder": name,
                "ms_per_step": 1e3 * step_s,
                "mfu": benches[name][1] / step_s / peak,
                "vs_rope": ratios.median(),
                "vs_rope_low": ratios.min(),
                "vs_rope_high": ratios.max(),
                **{f"{k}_ms": 1e3 * v for k, v in steps.median().items()},
                **_profiled_shares(benches[name][0], device, n),
            }
        )
    table = pd.DataFrame(rows)
    # What MFU the step would reach if the time outside some kernels vanished: with only its matmuls,
    # attention, norms/activations and optimizer kernels left (no small ops, no Python), and with matmuls alone
    kernels = table[["matmul_share", "attention_share", "norm_activation_share", "optimizer_share"]].sum(axis=1)
    table["mfu_if_only_kernels"] = table["mfu"] / kernels
    table["mfu_if_only_matmuls"] = table["mfu"] / table["matmul_share"]
    table.attrs["matmul_gflops"] = peak / 1e9
    return table


def show(title: str, table: pd.DataFrame) -> None:
    """Print ``table`` with three significant digits, never cutting a value (posenc's ``print_view``)."""

    def view(compact: bool) -> Table:
        out = rich_table(compact, title=title)
        for column in table.columns:
            out.add_column(str(column), justify="left" if table[column].dtype == object else "right")
        for row in table.itertuples(index=False):
            out.add_row(*(f"{v:,.3g}" if isinstance(v, float) else str(v) for v in row))
        return out

    print_view(view)


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo's "model name" (Linux on x86), else lscpu's "Model name" (Linux
    where /proc/cpuinfo names none, as on ARM), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and line.split(":", 1)[1].strip():
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:") and line.split(":", 1)[1].strip():
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine(device: torch.device) -> str:
    """What measured: the GPU on CUDA, and always the CPU's model (issue 38: the bench names it), with the
    library versions."""
    gpu = f"GPU {torch.cuda.get_device_name()}; " if device.type == "cuda" else ""
    return (
        f"{gpu}CPU {cpu_model()}, {torch.get_num_threads()} threads; torch {torch.__version__}; "
        f"python {platform.python_version()}"
    )


def parse_args() -> argparse.Namespace:
    """The command line, checked (a bad value: one line and exit 2), with --quick's sizes applied."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--lengths", default="512,2048,8192,32768", help="forward lengths, batch 1")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128, help="training sequence length")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per repeat")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the training section")
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs")
    parser.add_argument("--no-reference", action="store_true", help="skip the transformers reference")
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile every model measured (posenc's and the reference alike)"
    )
    parser.add_argument(
        "--encoders",
        default=",".join(ENCODERS),
        help="comma-separated encoders (rope and nope, the references of the ratios, are always added)",
    )
    parser.add_argument(
        "--sections",
        default="training,step,rope,forward",
        help="which of training,step,rope,forward,jobs (step: the headline's own training step, "
        "broken down; jobs: N one-thread jobs against one N-thread job)",
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        console.print("error: --device cuda, but no CUDA device is available")
        sys.exit(2)
    try:
        args.lengths = [int(x) for x in args.lengths.split(",")]
        assert all(n > 0 for n in args.lengths)
    except (ValueError, AssertionError):
        console.print(f"error: --lengths must be positive integers separated by commas, got {args.lengths!r}")
        sys.exit(2)
    if args.rounds < 1:
        console.print(f"error: --rounds must be at least 1, got {args.rounds}")
        sys.exit(2)
    try:
        args.encoders = ENCODERS.parse(args.encoders, "--encoders")
        args.encoders = [name for name in ("rope", "nope") if name not in args.encoders] + args.encoders
        args.sections = [n.strip() for n in args.sections.split(",") if n.strip()]
        assert args.sections and set(args.sections) <= {"training", "step", "rope", "forward", "jobs"}
    except (PosencError, AssertionError) as err:
        console.print(f"error: {err or '--sections must name some of training, step, rope, forward, jobs'}")
        sys.exit(2)
    if args.quick:
        args.lengths, args.batch, args.length, args.steps, args.rounds = [256, 1024], 4, 32, 2, 2
    return args


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    autocast = torch.bfloat16 if device.type == "cuda" else None
    start = time.perf_counter()
    console.print(f"[bold]posenc benchmark[/] on {machine(device)}")
    makers = {
        "training": lambda: training_section(args, device, autocast),
        "step": lambda: step_section(args, device, autocast),
        "rope": lambda: rope_section(args, device),
        "jobs": lambda: jobs_section(args),
        # last: it changes how freed memory is returned; with other sections, in a fresh process
        "forward": lambda: (
            forward_in_fresh_process(args) if len(args.sections) > 1 else forward_section(args, device, autocast)
        ),
    }
    sections = {key: make() for key, make in makers.items() if key in args.sections}
    args.out.mkdir(parents=True, exist_ok=True)
    precision = ("bf16 autocast" if autocast else "fp32") + (", every model compiled" if args.compile else "")
    lines = [
        (
            f"# posenc benchmark\n\nMachine: {machine(device)}; {precision}. Command: "
            f"`python {' '.join(sys.argv)}` ({time.perf_counter() - start:.0f} s).\n"
        )
    ]
    titles = {
        "training": f"Training throughput, batch {args.batch} x {args.length} tokens, median of {args.rounds} "
        "interleaved rounds (ratios to the HF Llama and to posenc rope: median, lowest and highest "
        "of the rounds; MFU against the matmul rate measured in this run)",
        "forward": "Forward pass, batch 1: best time, first call (compilation included) and peak memory (process "
        "RSS on CPU); ratios to rope and to plain fused causal SDPA (nope)",
        "rope": "Rotary kernel time",
        "step": "The headline's training step (d_model 64, 3 layers, batch 64 x lengths 9-32, copy; one thread, "
        "as its sweep jobs run): ms per step "
        "(median), its phases by the clock, the profiler's op time by category and the rest (python: "
        "interpreter and autograd bookkeeping), MFU against the matmul rate measured in this run",
        "jobs": "Sweep jobs on this machine: the headline's model (d_model 64, 3 layers, batch 64 x 32 tokens), "
        "same total steps, wall time of all jobs",
    }
    for key in ("training", "step"):
        if key in sections:
            titles[key] += f"; matmul {sections[key].attrs['matmul_gflops']:.1f} GFLOP/s"
    for key, table in sections.items():
        show(titles[key], table)
        atomic_write_text(args.out / f"{key}.csv", table.to_csv(index=False))
        lines.append(f"## {titles[key]}\n\n{table.to_markdown(index=False, floatfmt='.4g')}\n")
    atomic_write_text(args.out / "bench.md", "\n".join(lines))
    console.print(f"wrote {args.out}/bench.md and training/forward/rope.csv")


if __name__ == "__main__":
    main()
