"""What a batched ensemble of seeds would buy at the headline's training step (issue: "consider what a batched
ensemble of seeds would buy on CPU and on a GPU"). Measures, on one device, K seeds of one configuration

- *alone*: K models trained one after another in one process, posenc's own step (posenc.running.train.optimizer_step);
- *stacked*: the same K initialisations as stacked weights, one step for all of them through torch.func
  (``vmap`` of ``functional_call``), one AdamW over the stacked tensors, gradient clipping per member,

on the same batches (each member draws its own, right-padded to the widest of the step), and reports steps/s per
seed, the ratio, and how far each member's parameters end from training it alone after the timed steps: the
condition for building it into ``posenc train`` is that they do not differ.

    python scripts/ensemble_bench.py --device cpu --members 1,2,4,8
    python scripts/ensemble_bench.py --device cuda --members 1,2,4,8,16,32

CPU timings use one thread, as the headline's sweep jobs do. Writes ``ensemble_<device>.csv`` and a Markdown table
to ``--out`` (default results/bench).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import headline_config, machine, sync  # noqa: E402

from posenc.files import atomic_write_text  # noqa: E402
from posenc.running.evaluate import answer_loss  # noqa: E402
from posenc.running.train import draw_batch, lr_factor, optimizer_step, setup_training  # noqa: E402
from posenc.tasks.base import Batch  # noqa: E402


def padded(batches: list[Batch], width: int) -> Batch:
    """The members' batches right-padded to ``width`` (masked out: causal attention and the masked loss make the
    padding invisible to the real tokens), stacked ``[K, b, width]``."""

    def pad(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]))

    return Batch(*(torch.stack([pad(getattr(b, f)) for b in batches]) for f in ("inputs", "targets", "mask")))


def member_batches(task, cfg, generators, batch_size: int) -> list[tuple[Batch, int]]:
    lo, hi = cfg.training_lengths(task)
    return [draw_batch(task, batch_size, lo, hi, cfg.task.length_draw, g) for g in generators]


def run(members: int, steps: int, device: torch.device, name: str) -> dict:
    cfgs = [headline_config(name, device) for _ in range(members)]
    for i, cfg in enumerate(cfgs):
        cfg.seed = i
    # each (task, model, step_model, optimizer, scheduler, autocast dtype)
    alone = [setup_training(cfg, device) for cfg in cfgs]
    task, cfg = alone[0][0], cfgs[0]
    # the stacked copies start from the same weights as the models alone
    params, buffers = stack_module_state([a[1] for a in alone])
    params = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    base = alone[0][1]
    decay = [params[k] for k, p in base.named_parameters() if p.dim() >= 2]
    no_decay = [params[k] for k, p in base.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.train.lr,
        betas=(0.9, 0.98),
    )
    t = cfg.train
    scheduler = torch.optim.lr_scheduler.LambdaLR(  # posenc.running.train.setup_training's schedule
        optimizer, lambda step: lr_factor(step, t.warmup_steps, t.steps, t.final_lr_ratio)
    )
    autocast = alone[0][5]

    def forward(p, b, inputs):
        return functional_call(base, (p, b), (inputs,))

    batched = vmap(forward, in_dims=(0, 0, 0), randomness="different")

    def stacked_step(batches: list[tuple[Batch, int]]) -> None:
        width = max(w for _, w in batches)
        both = padded([b.to(device) for b, _ in batches], width)
        # CUDA's fused SDPA kernels fail in vmap's backward ("LSE is not correctly aligned"): the math one there
        with (
            torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None),
            sdpa_kernel(SDPBackend.MATH) if device.type == "cuda" else contextlib.nullcontext(),
        ):
            logits = batched(params, buffers, both.inputs)  # [K, b, width, vocab]
            loss = sum(
                answer_loss(logits[i].float(), Batch(both.inputs[i], both.targets[i], both.mask[i]))
                for i in range(members)
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # clip_grad_norm_ per member: max_norm / (norm + 1e-6), at most 1
        norms = torch.stack([p.grad.flatten(1).pow(2).sum(1) for p in params.values()]).sum(0).sqrt()
        scale = (cfg.train.grad_clip / (norms + 1e-6)).clamp(max=1.0)
        for p in params.values():
            p.grad.mul_(scale.view(-1, *([1] * (p.dim() - 1))))
        optimizer.step()
        scheduler.step()

    def alone_step(batches: list[tuple[Batch, int]]) -> None:
        for (task_, model, step_model, opt, sched, dtype), (batch, _) in zip(alone, batches):
            optimizer_step(batch.to(device), model, step_model, opt, sched, dtype, cfg.train.grad_clip)

    gens = [torch.Generator().manual_seed(1000 + i) for i in range(members)]
    data = [member_batches(task, cfg, gens, cfg.train.batch_size) for _ in range(steps + 3)]
    times = {}
    for label, step in (("alone", alone_step), ("stacked", stacked_step)):
        for batches in data[:3]:
            step(batches)  # warm-up, the same batches for both
        sync(device)
        start = time.perf_counter()
        for batches in data[3:]:
            step(batches)
        sync(device)
        times[label] = time.perf_counter() - start
    diff = max(
        float((params[k][i] - dict(a[1].named_parameters())[k]).detach().abs().max())
        for i, a in enumerate(alone)
        for k in params
    )
    return {
        "encoder": name,
        "members": members,
        "alone_steps_per_s_per_seed": members * steps / times["alone"],
        "stacked_steps_per_s_per_seed": members * steps / times["stacked"],
        "stacked_vs_alone": times["alone"] / times["stacked"],
        "max_param_difference": diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--members", default="1,2,4,8")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--encoder", default="rope")
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda, but no CUDA device is available")
        sys.exit(2)
    try:
        members = [int(m) for m in args.members.split(",")]
        assert all(m > 0 for m in members) and args.steps > 0
    except (ValueError, AssertionError):
        print(
            f"error: --members must be positive integers separated by commas and --steps positive, got "
            f"{args.members!r}, {args.steps}"
        )
        sys.exit(2)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the headline's sweep jobs run
    rows = []
    for k in members:
        rows.append(run(k, args.steps, device, args.encoder))
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"ensemble_{device.type}.csv", table.to_csv(index=False))
    atomic_write_text(
        args.out / f"ensemble_{device.type}.md",
        f"# Batched ensemble of seeds at the headline's step\n\nMachine: {machine(device)}. Command: "
        f"`python {' '.join(sys.argv)}`.\n\n{table.to_markdown(index=False, floatfmt='.4g')}\n",
    )


if __name__ == "__main__":
    main()
