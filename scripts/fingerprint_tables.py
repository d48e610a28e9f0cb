"""Record the fingerprint of every evaluation row's sequences in a result folder made before posenc recorded them.

    python scripts/fingerprint_tables.py results/length_generalization [results/headline ...]

`posenc compare --baseline DIR` pairs new runs with DIR's only where both saw the same evaluation sequences, which
it checks by the fingerprint each evaluation row carries (posenc.running.evaluate.sequences_fingerprint). Tables written
before that column existed hold none; this script makes them from each row's own task configuration, length and
number of sequences, without any model. Run it under the torch version that evaluated the tables (the sequences
come from torch's CPU generator): the committed tables were evaluated with torch 2.13.0, the version README
installs. Rows that already hold a fingerprint are checked, not rewritten: a mismatch (another torch's
generator) is one line and exit 1, with nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import torch

from posenc.analysis.folders import moved, updating
from posenc.analysis.store import read_results, write_results
from posenc.analysis.views import summary_markdown
from posenc.errors import PosencError
from posenc.running.config import run_config_from_dict
from posenc.running.evaluate import sequences_fingerprint
from posenc.tasks import build_task


def fingerprints(evaluations) -> list[str]:
    """The fingerprint of each row's evaluation sequences ("" for rows evaluated on none: notes)."""
    made: dict[tuple, str] = {}
    out = []
    for row in evaluations.itertuples(index=False):
        if str(row.note or "") or int(row.n_sequences) == 0:
            out.append("")
            continue
        cfg = run_config_from_dict(json.loads(row.config))
        depth = None if row.depth != row.depth else float(row.depth)  # NaN: no depth
        key = (
            json.dumps(cfg.task.options, sort_keys=True),
            cfg.task.name,
            int(row.eval_length),
            depth,
            int(row.n_sequences),
        )
        if key not in made:
            task = build_task(cfg.task.name, cfg.task.options)
            made[key] = sequences_fingerprint(
                task if depth is None else task.at_depth(depth), int(row.eval_length), int(row.n_sequences)
            )
        out.append(made[key])
    return out


def fingerprint_folder(folder: Path) -> int:
    """Fill ``folder``'s missing fingerprints (checking those present); the number of rows filled."""
    with updating(folder) as stage:
        results = read_results(folder)
        if results is None:
            raise PosencError(f"{folder} holds no evaluation tables")
        ev = results.evaluations.copy()
        made = fingerprints(ev)
        have = ev["fingerprint"].fillna("").astype(str)
        wrong = [(i, h, m) for i, (h, m) in enumerate(zip(have, made)) if h and h != m]
        if wrong:
            i, h, m = wrong[0]
            raise PosencError(
                f"{folder}: row {i} holds fingerprint {h}, torch {torch.__version__} makes {m}: these "
                "tables were evaluated on other sequences (another torch version's generator)"
            )
        filled = int(((have == "") & (pd.Series(made, index=have.index) != "")).sum())
        ev["fingerprint"] = made
        paths = write_results(
            stage, type(results)(ev, results.sequences, results.positions), summary=summary_markdown(ev)
        )
    moved(paths, stage, folder)
    return filled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        for folder in args.folders:
            filled = fingerprint_folder(folder)
            print(f"{folder}: {filled} rows fingerprinted (torch {torch.__version__})")
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
