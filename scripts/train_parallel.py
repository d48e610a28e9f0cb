"""Train many posenc runs at once, one process each, with an optional deadline: how a sweep fills a GPU.

A model as small as the headline's (d_model 64-128, batches of 64 x 32-64 tokens) leaves a GPU almost idle from
one process: each step is bound by Python and kernel launches (13 ms per step eager on an H100, issue 25's
note), so throughput comes from many processes sharing the card. Hydra's joblib launcher does the same on a
CPU, but its workers cannot be stopped cleanly at a deadline; here each run is its own ``posenc train -m``
process, so SIGTERM at the deadline makes every unfinished run save a checkpoint and exit (exit code 143), and
running the same command again resumes them.

Each run is one line of Hydra overrides (``experiment=scale_copy encoder=rope seed=0``), given as arguments or
read from ``--from FILE`` (blank lines and ``#`` comments skipped). Logs go to ``--logs``, one file per run.

    python scripts/train_parallel.py --jobs 40 --deadline 420 --from runs.txt
    python scripts/train_parallel.py --jobs 2 "experiment=scale_copy encoder=rope seed=0"

Prints a line every ``--every`` seconds (running, finished, stopped, failed), and at the end the throughput:
steps trained per second by all runs together (over the wall time from the first start to the last exit) and
per run (its steps over the seconds its process ran, start-up included), also written to
``<logs>/throughput.json``. Steps are read from each run's log: the last step it names (the exact one when
SIGTERM stopped it; within ``train.log_every`` of the end when it finished), less the step it resumed from.
Exits 1 if a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def read_runs(args: argparse.Namespace) -> list[list[str]]:
    """The runs to train, each a list of overrides, in the order given."""
    lines = list(args.runs)
    if args.runs_file:
        lines += Path(args.runs_file).read_text().splitlines()
    runs = [shlex.split(line.split("#", 1)[0]) for line in lines]
    return [r for r in runs if r]


def command(posenc: str, overrides: list[str]) -> list[str]:
    """``posenc train -m`` for one run: -m gives it its sweep folder (the experiment's), so the run lands where
    ``posenc train -m experiment=...`` would put it; overrides fix every swept key, so it is one job."""
    return [posenc, "train", "-m", *overrides, "progress=false", "train.compile=false"]


# \s+, not a space: a log written to a file wraps at 80 columns, which can put the number on the next line
STEP = re.compile(r"\bstep\s+(\d+)")
RESUMED = re.compile(r"\bfrom\s+step\s+(\d+)")


def steps_trained(log: str) -> int:
    """The steps a run trained in this invocation, from its log (see the module's docstring)."""
    if "not retraining" in log:  # finished before: this process trained nothing
        return 0
    resumed = [int(n) for n in RESUMED.findall(log)]
    start = resumed[-1] if resumed else 0
    return max(0, max((int(n) for n in STEP.findall(log)), default=start) - start)


def throughput(logs: Path, seconds: dict[int, float], wall: float) -> dict:
    """Steps/s of all runs together over ``wall`` and of each run over the ``seconds`` its process ran."""
    runs = []
    for i, ran in sorted(seconds.items()):
        steps = steps_trained((logs / f"{i:03d}.log").read_text(errors="replace"))
        runs.append(
            {
                "run": i,
                "steps": steps,
                "seconds": round(ran, 1),
                "steps_per_s": round(steps / ran, 2) if ran > 0 else None,
            }
        )
    rates = [r["steps_per_s"] for r in runs if r["steps_per_s"] is not None]
    total = sum(r["steps"] for r in runs)
    return {
        "runs": len(runs),
        "wall_s": round(wall, 1),
        "steps": total,
        "steps_per_s": round(total / wall, 2) if wall > 0 else None,
        "steps_per_s_per_run": round(sum(rates) / len(rates), 2) if rates else None,
        "per_run": runs,
    }


def report_throughput(logs: Path, seconds: dict[int, float], wall: float) -> None:
    report = throughput(logs, seconds, wall)
    (logs / "throughput.json").write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"throughput: {report['steps']} steps in {report['wall_s']:.0f} s: {report['steps_per_s']} steps/s "
        f"in all, {report['steps_per_s_per_run']} steps/s per run ({report['runs']} runs; "
        f"{logs}/throughput.json)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="one run's overrides, quoted")
    parser.add_argument("--from", dest="runs_file", help="a file with one run's overrides per line")
    parser.add_argument("--jobs", type=int, default=2, help="processes at once")
    parser.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="seconds; then every unfinished run is stopped (it saves a checkpoint and resumes next time); 0: none",
    )
    parser.add_argument("--every", type=float, default=30, help="seconds between progress lines")
    parser.add_argument("--logs", default="train_parallel_logs", help="folder for one log per run")
    parser.add_argument("--posenc", default=shutil.which("posenc") or "posenc", help="the posenc executable")
    args = parser.parse_args(argv)
    runs = read_runs(args)
    if not runs or args.jobs < 1:
        print("error: no runs given (arguments or --from FILE), or --jobs below 1", file=sys.stderr)
        return 2
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    waiting = list(enumerate(runs))
    running: dict[int, subprocess.Popen] = {}
    codes: dict[int, int] = {}
    began: dict[int, float] = {}
    seconds: dict[int, float] = {}  # each run's process, start to exit
    stopping = False
    last = 0.0
    while waiting or running:
        elapsed = time.monotonic() - start
        if args.deadline and elapsed > args.deadline and not stopping:
            stopping = True
            print(
                f"deadline {args.deadline:.0f} s: stopping {len(running)} runs, {len(waiting)} never started",
                flush=True,
            )
            for proc in running.values():
                proc.send_signal(signal.SIGTERM)
            waiting = []
        while waiting and len(running) < args.jobs and not stopping:
            i, overrides = waiting.pop(0)
            with open(logs / f"{i:03d}.log", "w") as log:
                log.write(" ".join(command(args.posenc, overrides)) + "\n")
                log.flush()
                running[i] = subprocess.Popen(
                    command(args.posenc, overrides), stdout=log, stderr=subprocess.STDOUT, env=env
                )
                began[i] = time.monotonic()
        for i, proc in list(running.items()):
            if proc.poll() is not None:
                codes[i] = proc.returncode
                seconds[i] = time.monotonic() - began[i]
                del running[i]
        if elapsed - last >= args.every or not (waiting or running):
            last = elapsed
            failed = [i for i, c in codes.items() if c not in (0, 143, -15)]
            print(
                f"{elapsed:6.0f} s  running {len(running)}  finished {sum(c == 0 for c in codes.values())}  "
                f"stopped {sum(c in (143, -15) for c in codes.values())}  failed {len(failed)}  "
                f"waiting {len(waiting)}",
                flush=True,
            )
        time.sleep(0.5)
    report_throughput(logs, seconds, time.monotonic() - start)
    failed = sorted(i for i, c in codes.items() if c not in (0, 143, -15))
    for i in failed:
        tail = (logs / f"{i:03d}.log").read_text().splitlines()[-3:]
        print(f"failed: {' '.join(runs[i])} (exit {codes[i]}): {' | '.join(tail)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
