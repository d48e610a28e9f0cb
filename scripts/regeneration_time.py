"""How long regenerating committed comparisons takes on this machine, from the times their own tables recorded.

Every comparison folder holds ``training.parquet`` (per run: steps trained, ``train_seconds``, the device) and
``extrapolation.parquet`` (per run and length: the evaluation's ``seconds``, measured where it ran, the CPU for
every committed table). Training time on the CPU is read as it was measured where the run trained on a CPU;
for runs trained on a GPU it is *projected*: the run's steps times the CPU seconds per step that CPU-trained
runs of the same encoder, encoder options and model shape (d_model, layers, batch, training length) recorded in any of
the
folders given (each projected row says which rate it borrowed; a shape no CPU run had is left out and said so).
With ``--measure-steps N``, a shape no CPU run had is timed here instead: one of its runs' configs trains N steps
on this CPU (one thread, no checks) and its seconds per step is the rate. Sweeps run two single-thread jobs at a
time on 2 cores, so wall time is job time / 2.

    python scripts/regeneration_time.py results/headline results/length_generalization
    python scripts/regeneration_time.py results/*/ --measure-steps 200 --out results/regeneration_time.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from posenc.files import atomic_write_text

JOBS = 2  # sweeps on 2 cores: two single-thread jobs (scripts/experiment.sh)


def runs_of(folder: Path) -> pd.DataFrame | None:
    """One row per trained run of ``folder``: encoder, task, shape, steps, seconds, device."""
    if not (folder / "training.parquet").is_file() or not (folder / "extrapolation.parquet").is_file():
        return None
    training = pd.read_parquet(folder / "training.parquet")
    configs = pd.read_parquet(folder / "extrapolation.parquet", columns=["run", "config"]).drop_duplicates("run")
    rows = training.merge(configs, on="run", how="left")
    rows["shape"] = [_shape(c) for c in rows["config"]]
    rows["experiment"] = folder.name
    return rows.drop(columns=["config"])


def _shape(config: str | None) -> str:
    """What sets the cost of a training step: width, depth, batch and training length."""
    if not isinstance(config, str):
        return "?"
    c = json.loads(config)
    model, train, task = c.get("model", {}), c.get("train", {}), c.get("task", {})
    options = ",".join(f"{k}={v}" for k, v in sorted(c.get("encoder", {}).items()) if k != "name")
    return (
        f"d{model.get('d_model')} x{model.get('n_layers')} b{train.get('batch_size')} "
        f"L{task.get('length')} {model.get('mixer', 'attention')} {options}"
    ).strip()


def cpu_rates(runs: pd.DataFrame) -> pd.Series:
    """CPU seconds per step, per (encoder, shape), over the CPU-trained runs of ``runs``."""
    cpu = runs[runs["device"] == "cpu"].groupby(["encoder", "shape"])
    return cpu["train_seconds"].sum() / cpu["steps"].sum()


def measured_rates(runs: pd.DataFrame, configs: dict[str, str], steps: int) -> pd.Series:
    """CPU seconds per step for each (encoder, shape) of GPU-trained ``runs`` that no CPU run had, timed here:
    one run's config (``configs``: run -> config JSON) trains ``steps`` steps on one thread."""
    import tempfile

    import torch

    from posenc.running.config import run_config_from_dict
    from posenc.running.train import train

    torch.set_num_threads(1)
    known = cpu_rates(runs).index
    rates = {}
    for (encoder, shape), part in runs[runs["device"] != "cpu"].groupby(["encoder", "shape"]):
        if (encoder, shape) in known or part["run"].iloc[0] not in configs:
            continue
        cfg = json.loads(configs[part["run"].iloc[0]])
        cfg.update(device="cpu", progress=False, resume=False)
        cfg["train"] = {
            **cfg["train"],
            "steps": steps,
            "check_every": 0,
            "checkpoint_every": 0,
            "compile": False,
            "precision": "fp32",
            "eval_sequences": 8,
        }
        with tempfile.TemporaryDirectory() as tmp:
            metrics = train(run_config_from_dict(cfg), Path(tmp), cfg)
        rates[(encoder, shape)] = metrics["train_seconds"] / steps
        print(f"measured {encoder} {shape}: {rates[(encoder, shape)]:.3f} s/step on this CPU", flush=True)
    return pd.Series(rates, dtype=float)


def training_hours(runs: pd.DataFrame, measured: pd.Series | None = None) -> pd.DataFrame:
    """Per experiment: CPU job hours measured, projected (GPU-trained runs) and left out."""
    rate = cpu_rates(runs)
    if measured is not None and len(measured):
        rate = pd.concat([rate, measured])
    rows = []
    for experiment, part in runs.groupby("experiment", sort=False):
        measured = part[part["device"] == "cpu"]["train_seconds"].sum()
        other = part[part["device"] != "cpu"]
        keys = list(zip(other["encoder"], other["shape"]))
        known = [k in rate.index for k in keys]
        projected = sum(steps * rate[k] for steps, k, ok in zip(other["steps"], keys, known) if ok)
        missing = sorted({f"{e} ({s})" for (e, s), ok in zip(keys, known) if not ok})
        rows.append(
            {
                "experiment": experiment,
                "runs": len(part),
                "cpu_runs": len(part) - len(other),
                "train_h_measured": measured / 3600,
                "train_h_projected": projected / 3600,
                "not_projected": ", ".join(missing) or "-",
            }
        )
    return pd.DataFrame(rows)


def evaluation_hours(folder: Path) -> dict:
    """Evaluation job hours measured in ``folder``'s table, and the share of its two longest lengths."""
    table = pd.read_parquet(folder / "extrapolation.parquet", columns=["eval_length", "seconds"])
    by_length = table.groupby("eval_length")["seconds"].sum()
    longest = by_length.sort_index().tail(2)
    return {
        "experiment": folder.name,
        "eval_h": by_length.sum() / 3600,
        "eval_share_two_longest": longest.sum() / by_length.sum() if by_length.sum() else float("nan"),
        "two_longest": ",".join(str(int(n)) for n in longest.index),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="also write this Markdown file")
    parser.add_argument(
        "--measure-steps",
        type=int,
        default=0,
        help="time shapes no CPU run had by training this many steps here (0: leave them out)",
    )
    args = parser.parse_args()
    folders = [f for f in args.folders if (f / "extrapolation.parquet").is_file()]
    runs = pd.concat([r for f in folders if (r := runs_of(f)) is not None], ignore_index=True)
    measured = None
    if args.measure_steps > 0:
        configs = {
            run: c
            for f in folders
            for run, c in pd.read_parquet(f / "extrapolation.parquet", columns=["run", "config"])
            .drop_duplicates("run")
            .itertuples(index=False)
        }
        measured = measured_rates(runs, configs, args.measure_steps)
    evaluation = pd.DataFrame([evaluation_hours(f) for f in folders])
    table = training_hours(runs, measured).merge(evaluation, on="experiment", how="outer")
    table["wall_h_on_2_jobs"] = table[["train_h_measured", "train_h_projected", "eval_h"]].fillna(0).sum(axis=1) / JOBS
    total = table[["train_h_measured", "train_h_projected", "eval_h", "wall_h_on_2_jobs"]].sum()
    text = (
        "Job hours on this machine's CPU (one thread per job), from the committed tables "
        "(`python scripts/regeneration_time.py "
        + " ".join(str(f) for f in args.folders)
        + (f" --measure-steps {args.measure_steps}" if args.measure_steps else "")
        + "`); "
        "train_h_projected: GPU-trained runs at the CPU seconds per step of CPU-trained runs of the same "
        "encoder and shape"
        + (f" (or, for a shape no CPU run had, of {args.measure_steps} steps timed here)" if args.measure_steps else "")
        + "; wall time: two jobs at a time.\n\n"
        + table.round(2).to_markdown(index=False)
        + f"\n\nIn all: {total['train_h_measured']:.1f} h measured and {total['train_h_projected']:.1f} h "
        f"projected training, {total['eval_h']:.1f} h evaluation: about {total['wall_h_on_2_jobs']:.1f} "
        "hours of wall time on 2 cores.\n"
    )
    print(text)
    if args.out is not None:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
