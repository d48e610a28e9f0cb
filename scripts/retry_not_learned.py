"""Print the Hydra overrides that train again, at a fallback learning rate, every configuration of a sweep
where a seed missed the mastery criterion: one line per task, e.g. ``task=copy encoder=nope,alibi`` (runs with
another sequence mixer on a line of their own: ``task=retrieval encoder=nope model.mixer=base_conv``).

    python scripts/retry_not_learned.py results/multirun/headline --lr 0.003

scripts/headline.sh runs each line with ``seed=0,1,2 train.lr=<fallback>``; `posenc compare --choose train.lr`
then compares, per configuration, the learning rate whose seeds learned best (posenc/analysis/selection.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posenc.analysis.run_folder import run_config
from posenc.analysis.selection import missed_configurations
from posenc.errors import PosencError
from posenc.running.runs import find_runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a sweep folder (or any folder of runs)")
    parser.add_argument("--lr", type=float, required=True, help="the learning rate the sweep trained at")
    args = parser.parse_args(argv)
    try:
        runs = find_runs([args.sweep])
        missed = missed_configurations(runs, [run_config(r) for r in runs], "train.lr", args.lr)
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for group, encoders in missed.items():
        task, _, mixer = group.partition(" ")  # "retrieval model.mixer=base_conv": a mixer's runs apart
        print(f"task={task} encoder={','.join(encoders)}" + (f" {mixer}" if mixer else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
