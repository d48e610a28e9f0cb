"""Does README's first run learn on this machine? Trains the default configuration (``posenc train``, nothing
overridden) for several seeds, each with 1 and with 2 threads, and writes one row per run: steps to learn,
the budget, whether it learned within half the budget, wall time, and this machine's CPU model.

    python scripts/first_run.py                        # seeds 0-4 x 1 and 2 threads -> results/first_run/
    python scripts/first_run.py --jobs 2 --passive     # as committed: two runs at a time on a shared machine
    python scripts/first_run.py --seeds 0,1 --threads 1 --out /tmp/probe -- train.lr=3e-3   # a candidate

Why both thread counts and a CPU column: the thread count and the CPU type (its vector instructions) set the
order of floating-point sums, so each (seed, threads, CPU) is its own trajectory; the default has to learn on
every one of them, with half its budget to spare, or the quick start is a coin toss on someone's machine.
The runs are separate ``posenc train`` processes in ``--scratch`` (default: a temporary folder), one at a
time unless ``--jobs`` says more: other processes change a run's wall time, never its result, so each row
also records the machine's load average as the run started. On a machine other work keeps busy,
``--passive`` sets ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep instead of spinning): measured here it
made 2-thread steps about 4x faster under load and left the loss bit for bit the same (the thread count,
not the wait policy, splits the sums). Exit status 1 when a run missed half its budget.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from posenc.files import atomic_write_text

POSENC = [sys.executable, "-m", "posenc"]  # this interpreter's posenc, as a user runs it
COLUMNS = [
    "seed",
    "threads",
    "steps_to_learn",
    "budget",
    "learned",
    "within_half_budget",
    "wall_seconds",
    "train_seconds",
    "load_at_start",
    "omp_wait_policy",
    "cpu",
    "torch",
    "overrides",
]


def cpu_model() -> str:
    """This machine's CPU model as /proc/cpuinfo names it (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def train_one(seed: int, threads: int, folder: Path, overrides: list[str], wait_policy: str) -> dict:
    """Train the default (plus ``overrides``) with ``seed`` on ``threads`` threads into ``folder``; its row."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    command = [*POSENC, "train", f"seed={seed}", f"hydra.run.dir={folder}", "progress=false", *overrides]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    metrics = json.loads((folder / "metrics.json").read_text())
    steps, budget = metrics.get("steps_to_learn"), metrics["budget"]
    return {
        "seed": seed,
        "threads": threads,
        "steps_to_learn": steps,
        "budget": budget,
        "learned": bool(metrics["learned"]),
        "within_half_budget": bool(metrics["learned"]) and steps is not None and steps <= budget / 2,
        "wall_seconds": round(wall, 1),
        "train_seconds": metrics["train_seconds"],
        "load_at_start": round(load, 1),
        "omp_wait_policy": env.get("OMP_WAIT_POLICY", "default"),
    }


def summary(table: pd.DataFrame, command: str = "python scripts/first_run.py") -> str:
    """The table as markdown, after a line saying how many runs learned within half their budget and the
    margin: half the budget over the slowest run's steps-to-learn."""
    first = table.iloc[0]
    half, worst = int(table["budget"].max()) // 2, table["steps_to_learn"].max()
    configuration = f"the default with {first['overrides']}" if first["overrides"] else "the default"
    margin = (
        f"the slowest at step {worst:.0f}, a margin of {half / worst:.1f}x"
        if table["learned"].all()
        else f"{int((~table['learned']).sum())} not learned in the whole budget"
    )
    head = (
        f"# README's first run on {first['cpu']} (torch {first['torch']})\n\n"
        f"Configuration: {configuration}. {int(table['within_half_budget'].sum())} of {len(table)} runs "
        f"learned within half the budget ({half} steps); {margin}. OMP_WAIT_POLICY: "
        f"{first['omp_wait_policy']}. Wall times include whatever else the machine ran (its load average at "
        f"each run's start).\n\n"
    )
    shown = table.drop(columns=["cpu", "torch", "overrides", "omp_wait_policy"])
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    return head + "\n".join(lines) + f"\n\nWritten by `{command}`.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default 0-4)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--out", type=Path, default=Path("results/first_run"), help="where the table goes")
    parser.add_argument("--scratch", type=Path, default=None, help="where the runs train (default: temporary)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    parser.add_argument("--passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE: for a busy machine")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides after --, to probe a candidate default")
    args = parser.parse_args(argv)
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        scratch = args.scratch or Path(tmp)
        runs = [
            (seed, threads)
            for seed in [int(s) for s in args.seeds.split(",")]
            for threads in [int(t) for t in args.threads.split(",")]
        ]
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [
                pool.submit(
                    train_one,
                    seed,
                    threads,
                    scratch / f"threads{threads}" / f"seed{seed}",
                    args.overrides,
                    "PASSIVE" if args.passive else "",
                )
                for seed, threads in runs
            ]
            rows = []
            for future in futures:  # in the table's order; each printed as it is known
                rows.append(future.result())
                print(json.dumps(rows[-1]), flush=True)
    table = pd.DataFrame(rows).sort_values(["threads", "seed"])
    table = table.assign(cpu=cpu_model(), torch=torch.__version__, overrides=" ".join(args.overrides))
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "first_run.csv", table[COLUMNS].to_csv(index=False))
    given = sys.argv[1:] if argv is None else argv
    text = summary(table[COLUMNS], " ".join(["python scripts/first_run.py", *given]))
    atomic_write_text(args.out / "README.md", text)
    print(text)
    return 0 if table["within_half_budget"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
