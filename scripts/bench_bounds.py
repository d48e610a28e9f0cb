"""The arithmetic behind the speed targets posenc does not meet on CPU (issue 24): what the kernels PyTorch offers
here cost for the work each encoder needs, measured in one run, so that the bounds
in docs/performance.md regenerate.

    python scripts/bench_bounds.py            # writes results/bench/bounds.md and bounds.csv

Rows (times are medians; "floor" is the ratio to rope the kernel alone imposes, whatever the encoder's own work):

- forward, 8192 tokens, batch 1 (the bench's model: d_model 128, 4 heads of 32, 2 layers): fused causal SDPA at
  head width 32 (rope), 64 (PoPE's queries and keys, values padded); FlexAttention with a score_mod that adds
  nothing and with the least FIRE's does (its normalised distance and a straight MLP); fused SDPA reading a bias
  computed outside it at no cost (FIRE's other route); rope's whole forward gives the share of attention in it,
  and the floor is ``(1 - share) + share * kernel / sdpa``;
- training, batch 32 x 128 tokens (the bench's training shape), forward and backward of one layer's attention:
  SDPA at width 32 and 64 (PoPE), CoPE's attention (posenc.functional.cope_attention); the floor is the step
  time of rope with those layers swapped, ``step / (step + layers * (kernel - sdpa))``, with rope's step timed here;
- the headline's step (d_model 64, 3 layers, batch 64 x 32 tokens, one thread): the rate of each of its matmuls
  (forward and both backward products) against a 1024^3 matmul: the MFU its matmuls alone would allow.

Then the arithmetic (``arithmetic.csv``, the second table of bounds.md, from ``scripts/work_per_score.py``): for each
target the kernels above miss, the work per score (matmul FLOPs, other operations, bytes to memory) against this
machine's matmul rate and memory bandwidth, measured here, and whether physics or only the kernels stand between
the target and posenc.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import VOCAB, headline_config, machine, posenc_model, train_flops_per_token  # noqa: E402
from work_per_score import arithmetic_rows, machine_limits  # noqa: E402

from posenc.files import atomic_write_text  # noqa: E402
from posenc.functional import cope_attention  # noqa: E402
from posenc.nn.attention import CausalAttention  # noqa: E402


def median_time(fn, repeats: int = 7, fastest: bool = False) -> float:
    """The median of ``repeats`` timed calls of ``fn`` after one untimed (``fastest``: their minimum)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if fastest else sorted(times)[len(times) // 2]


def forward_rows(length: int) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, length, 32, generator=gen) for _ in range(3))
    wide_q, wide_k = (torch.randn(1, 4, length, 64, generator=gen) for _ in range(2))
    model = posenc_model("rope", 128, torch.device("cpu")).eval()
    tokens = torch.randint(0, VOCAB, (1, length), generator=gen)
    with torch.no_grad():
        whole = median_time(lambda: model(tokens), 3)
        sdpa = median_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        padded = F.pad(v, (0, 32))  # fused SDPA needs one head width
        wide = median_time(lambda: F.scaled_dot_product_attention(wide_q, wide_k, padded, is_causal=True))
        backend = CausalAttention()
        flex = median_time(lambda: backend.flex(q, k, v, lambda score, b, h, q_idx, kv_idx: score), 3)
        fire_least = median_time(lambda: backend.flex(q, k, v, least_fire_score_mod(length)), 3)
        fire_outside = median_time(bias_outside_the_kernel(q, k, v), 3)
    # attention's share of rope's forward, timed apart: a loaded machine can time the parts above the whole,
    # but the share of a part is at most 1 (else the floor below goes negative)
    share = min(model.cfg.n_layers * sdpa / whole, 1.0)
    return [
        {
            "measure": f"forward {length}",
            "kernel": name,
            "seconds": t,
            "vs_sdpa": t / sdpa,
            "attention_share_of_rope": share,
            "floor_vs_rope": 1 - share + share * t / sdpa,
        }
        for name, t in (
            ("fused SDPA, width 32 (rope)", sdpa),
            ("fused SDPA, width 64 (pope)", wide),
            ("FlexAttention, empty score_mod", flex),
            ("FlexAttention, FIRE with a straight MLP (fire)", fire_least),
            ("fused SDPA + a bias computed outside, for free (fire)", fire_outside),
        )
    ]


def least_fire_score_mod(length: int):
    """The least a FIRE score_mod does: its normalised distance ``psi(i - j) / psi(max(L, i))`` from two tables
    (as posenc's FIRE.score_mod) and an MLP with no kink in ``[0, 1]``, one multiply-add per head. A trained
    FIRE adds three operations per unit that bends there."""
    positions = torch.arange(length, dtype=torch.float32)
    psi, inv_norm = torch.log1p(0.1 * positions), 1 / torch.log1p(0.1 * positions.clamp(min=32.0))
    slope, intercept = torch.linspace(-1, 1, 4), torch.linspace(0, 1, 4)

    def fire(score, b, h, q_idx, kv_idx):
        return score + slope[h] * (psi[(q_idx - kv_idx).abs()] * inv_norm[q_idx]) + intercept[h]

    return fire


def bias_outside_the_kernel(q, k, v, block: int = 256):
    """Fused SDPA reading a float bias per block of ``block`` queries (``[n_h, block, keys up to the block's
    end]``) that costs nothing to compute: zeros allocated once (and no causal mask inside the diagonal block,
    which only makes it cheaper). FIRE's bias depends on the query as well as the distance, so outside a kernel it
    is one value per score to write and read."""
    length = q.shape[-2]
    zeros = torch.zeros(q.shape[1], block, length)

    def attend():
        for start in range(0, length, block):
            end = min(start + block, length)
            F.scaled_dot_product_attention(
                q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=zeros[:, : end - start, :end]
            )

    return attend


def training_rows(batch: int = 32, length: int = 128) -> list[dict]:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(batch, 4, length, 32, generator=gen, requires_grad=True) for _ in range(3))
    wide_q, wide_k = (torch.randn(batch, 4, length, 64, generator=gen, requires_grad=True) for _ in range(2))
    pos_emb = torch.randn(32, length, generator=gen, requires_grad=True)
    kernels = {
        "fused SDPA, width 32 (rope)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "fused SDPA, width 64 (pope)": lambda: F.scaled_dot_product_attention(
            wide_q, wide_k, F.pad(v, (0, 32)), is_causal=True
        )[..., :32],
        "cope_attention (cope)": lambda: cope_attention(q, k, v, pos_emb),
    }
    times = {name: median_time(lambda fn=fn: fn().sum().backward()) for name, fn in kernels.items()}
    model = posenc_model("rope", length, torch.device("cpu"))
    data = torch.randint(0, VOCAB, (batch, length + 1), generator=gen)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = F.cross_entropy(model(data[:, :-1]).reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    rope_step = median_time(step)
    sdpa = times["fused SDPA, width 32 (rope)"]
    layers = model.cfg.n_layers
    return [
        {
            "measure": f"training {batch}x{length}",
            "kernel": name,
            "seconds": t,
            "vs_sdpa": t / sdpa,
            "attention_share_of_rope": layers * sdpa / rope_step,
            "floor_vs_rope": rope_step / (rope_step + layers * (t - sdpa)),
        }
        for name, t in times.items()
    ]


def matmul_rows() -> list[dict]:
    """The headline step's matmuls at one thread against a 1024^3 one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:

        def rate(m: int, n: int, p: int) -> float:
            a, b = torch.randn(m, n), torch.randn(n, p)
            return 2 * m * n * p / median_time(lambda: a @ b, 21)

        peak = rate(1024, 1024, 1024)
        tokens, d, d_mlp, vocab = 64 * 32, 64, 256, 18
        flops = seconds = 0.0
        for n, p in ((d, 3 * d), (d, d), (d, d_mlp), (d_mlp, d), (d, vocab)):  # qkv, proj, up, down, head
            for shape in ((tokens, n, p), (tokens, p, n), (n, tokens, p)):  # y = x W, dx, dW
                f = 2 * shape[0] * shape[1] * shape[2]
                flops, seconds = flops + f, seconds + f / rate(*shape)
    finally:
        torch.set_num_threads(threads)
    return [
        {
            "measure": "headline step, one thread",
            "kernel": "its matmuls vs a 1024^3 matmul",
            "seconds": seconds,
            "vs_sdpa": float("nan"),
            "attention_share_of_rope": float("nan"),
            "floor_vs_rope": float("nan"),
            "matmul_mfu_bound": flops / seconds / peak,
        }
    ]


def headline_work(out: Path) -> dict:
    """The headline step's shape and matmul FLOPs per token (its config, composed as ``posenc train`` does), and
    the MFU its kernels alone allow if the bench's step section wrote it to ``out/step.csv`` (else NaN)."""
    cfg = headline_config("rope", torch.device("cpu"))
    task, _, model = cfg.build()
    m, length = cfg.model, cfg.training_lengths(task)[1]
    step = out / "step.csv"
    floor = float("nan")
    if step.exists():
        table = pd.read_csv(step).set_index("encoder")
        floor = float(table.loc["rope", "mfu_if_only_kernels"]) if "rope" in table.index else floor
    params = sum(p.numel() for p in model.parameters())
    shape = {
        "d_model": m.d_model,
        "d_mlp": m.d_mlp,
        "n_layers": m.n_layers,
        "n_heads": m.n_heads,
        "length": length,
        "vocab": task.vocab_size,
        "params": params,
        "tokens_per_step": cfg.train.batch_size * length,
    }
    return {
        "shape": shape,
        "kernel_floor": floor,
        "matmul_flops_per_token": train_flops_per_token(model, m.n_layers, m.d_model, length),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--length", type=int, default=8192, help="forward length")
    args = parser.parse_args()
    start = time.perf_counter()
    table = pd.DataFrame(forward_rows(args.length) + training_rows() + matmul_rows())
    limits = machine_limits(lambda fn: median_time(fn, fastest=True))  # a rate: its fastest call
    arithmetic = pd.DataFrame(arithmetic_rows(table, limits, args.length, headline=headline_work(args.out)))
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "bounds.csv", table.to_csv(index=False))
    atomic_write_text(args.out / "arithmetic.csv", arithmetic.to_csv(index=False))
    markdown = table.to_markdown(index=False, floatfmt=".4g")
    sums = arithmetic.to_markdown(index=False, floatfmt=".4g")
    atomic_write_text(
        args.out / "bounds.md",
        f"# What the kernels allow (scripts/bench_bounds.py)\n\nMachine: "
        f"{machine(torch.device('cpu'))}; fp32. Command: `python {' '.join(sys.argv)}` "
        f"({time.perf_counter() - start:.0f} s).\n\n{markdown}\n\n"
        f"## What physics allows (scripts/work_per_score.py)\n\n{limits.describe()}\n\n{sums}\n",
    )
    print(markdown)
    print(sums)


if __name__ == "__main__":
    main()
