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

Prints a line every ``--every`` seconds (running, finished, stopped, failed) and exits 1 if a run failed.
"""

from __future__ import annotations

import argparse
import os
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="one run's overrides, quoted")
    parser.add_argument("--from", dest="runs_file", help="a file with one run's overrides per line")
    parser.add_argument("--jobs", type=int, default=2, help="processes at once")
    parser.add_argument("--deadline", type=float, default=0, help="seconds; then every unfinished run is stopped "
                        "(it saves a checkpoint and resumes next time); 0: none")
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
    stopping = False
    last = 0.0
    while waiting or running:
        elapsed = time.monotonic() - start
        if args.deadline and elapsed > args.deadline and not stopping:
            stopping = True
            print(f"deadline {args.deadline:.0f} s: stopping {len(running)} runs, {len(waiting)} never started",
                  flush=True)
            for proc in running.values():
                proc.send_signal(signal.SIGTERM)
            waiting = []
        while waiting and len(running) < args.jobs and not stopping:
            i, overrides = waiting.pop(0)
            with open(logs / f"{i:03d}.log", "w") as log:
                log.write(" ".join(command(args.posenc, overrides)) + "\n")
                log.flush()
                running[i] = subprocess.Popen(command(args.posenc, overrides), stdout=log,
                                              stderr=subprocess.STDOUT, env=env)
        for i, proc in list(running.items()):
            if proc.poll() is not None:
                codes[i] = proc.returncode
                del running[i]
        if elapsed - last >= args.every or not (waiting or running):
            last = elapsed
            failed = [i for i, c in codes.items() if c not in (0, 143, -15)]
            print(f"{elapsed:6.0f} s  running {len(running)}  finished {sum(c == 0 for c in codes.values())}  "
                  f"stopped {sum(c in (143, -15) for c in codes.values())}  failed {len(failed)}  "
                  f"waiting {len(waiting)}", flush=True)
        time.sleep(0.5)
    failed = sorted(i for i, c in codes.items() if c not in (0, 143, -15))
    for i in failed:
        tail = (logs / f"{i:03d}.log").read_text().splitlines()[-3:]
        print(f"failed: {' '.join(runs[i])} (exit {codes[i]}): {' | '.join(tail)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
