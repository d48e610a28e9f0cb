"""The runs that output folders' committed training tables record, one per line, from ``multirun/`` on.

A run folder (``results/multirun/...``) is git-ignored and stays on the machine that trained it; its row in an
output folder's ``training.csv`` is committed. The incremental experiment scripts (``scripts/kazemnejad.sh``,
``t5_gap.sh``, ``t5_layout.sh``, ``ruoss_recipe.sh``, through ``scripts/train_or_list.sh``) read this list so
that a run trained by another session, on another machine, counts as finished there and is not trained again;
their tables then extend the committed ones (``posenc runs --extend``, ``posenc compare --extend``) rather than
replace them with the runs this machine holds.

    python scripts/recorded_runs.py results/kazemnejad/mastery results/kazemnejad/long

Each line is a run's ``run`` path from its ``multirun`` component on (``multirun/kazemnejad_matched/copy/nope/
seed0``), so that it compares with a run folder under any results root (``RESULTS``); a path without one is
printed whole. A folder without a training table records nothing; an unreadable table is one line on stderr and
exit 2 (nothing recorded could be retrained over).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path, PurePosixPath

RUNS_FOLDER = "multirun"


def from_runs_folder(run: str) -> str:
    """``run`` from its last ``multirun`` path component on (``run`` itself where it has none)."""
    parts = PurePosixPath(run).parts
    if RUNS_FOLDER not in parts:
        return run
    last = len(parts) - 1 - parts[::-1].index(RUNS_FOLDER)
    return str(PurePosixPath(*parts[last:]))


def recorded_runs(folder: Path) -> list[str]:
    """The finished runs of ``folder``'s ``training.csv``, each from ``multirun`` on ([] without a table). A
    row without ``steps`` is of a run that had not finished when the table was written (``posenc runs`` lists
    it, every cell but its run empty): it is to be trained, or resumed where its folder is."""
    table = folder / "training.csv"
    if not table.is_file():
        return []
    with table.open(newline="") as handle:
        rows = csv.DictReader(handle)
        missing = [name for name in ("run", "steps") if name not in (rows.fieldnames or ())]
        if missing:
            raise ValueError(f"{table} has no {' or '.join(missing)} column: not a posenc training table")
        return [from_runs_folder(row["run"]) for row in rows if row["run"] and row["steps"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="output folders (each may hold training.csv)")
    args = parser.parse_args(argv)
    try:
        runs = [run for folder in args.folders for run in recorded_runs(folder)]
    except (OSError, ValueError, csv.Error) as error:
        print(f"recorded_runs: {error}", file=sys.stderr)
        return 2
    print("\n".join(runs), end="\n" if runs else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
