"""Beside the baselines: a user's runs placed into a copy of a committed comparison (``compare --baseline``).

posenc's evaluation sequences are fixed per task and length (:func:`posenc.running.evaluate.eval_generator`) and its
comparisons are paired by sequence, so a new encoder's runs can be compared with a committed comparison's runs
without training or evaluating those again: the baseline folder's tables are copied into ``--out`` (the
baseline itself is never written), each copied row marked with the baseline it came from (column
``baseline``), and the new runs are evaluated at the baseline's lengths and merged in as ``compare --extend``
would. Two checks keep the pairing honest, each refusing in one line before anything is published:

* a new run's configuration may differ from the baseline's runs only in its encoder and its seed
  (:func:`check_configs`), since anything else (model, steps, lengths) could decide the outcome;
* the sequences a new run was evaluated on are the baseline's (:func:`check_fingerprints`): every evaluation
  row carries a fingerprint of its sequences, and another torch version's generator, say, would differ.

The report then has a section per task pairing each new encoder with every baseline encoder
(:func:`baseline_section`), and the claims are judged again over everything.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from posenc.analysis.claims import Side
from posenc.analysis.compare import TABLE_STEM, held_back, sequence_block
from posenc.analysis.selection import CHOICES_STEM
from posenc.analysis.stats import paired_difference
from posenc.analysis.store import EVALUATIONS, flatten_config, read_results, run_identity, write_results
from posenc.analysis.tables import read_table
from posenc.errors import PosencError

BASELINE_COLUMN = "baseline"  # in the evaluations table: the baseline folder a row was copied from, or ""
FREE_KEYS = ("encoder",)  # what a run placed beside a baseline may change (and its seed, outside the identity)
PAIRED_FACTORS = (2, 4)  # the report's paired differences: multiples of the training length


@dataclass(frozen=True)
class Baseline:
    """A committed comparison, read from its tables: the lengths it compares, the key its runs were chosen by
    (``--choose``, or None), and every configuration its runs were trained in (flattened, without the free keys)."""

    folder: Path
    lengths: list[int]
    choose: str | None
    configs: dict[str, list[dict]]  # task -> its runs' configurations

    def check_configs(self, configs: dict[str, dict]) -> None:
        """:func:`check_configs` against this baseline."""
        check_configs(self, configs)

    def check_fingerprints(self, new_evaluations: pd.DataFrame) -> None:
        """:func:`check_fingerprints` of ``new_evaluations`` against this baseline's tables."""
        check_fingerprints(read_results(self.folder).evaluations, new_evaluations)


def read_baseline(folder: Path) -> Baseline:
    """``folder``'s comparison as a :class:`Baseline`; one line where it holds none."""
    folder = Path(folder)
    comparison, results = read_table(folder, TABLE_STEM), read_results(folder)
    if comparison is None or results is None:
        raise PosencError(
            f"--baseline {folder} holds no comparison (no {TABLE_STEM}.parquet and "
            f"{EVALUATIONS}.parquet): name a folder `posenc compare` wrote, e.g. "
            "results/length_generalization"
        )
    choices = read_table(folder, CHOICES_STEM)
    choose = str(choices["key"].iloc[0]) if choices is not None and len(choices) else None
    configs: dict[str, list[dict]] = {}
    for task, text in results.evaluations[["task", "config"]].drop_duplicates().itertuples(index=False):
        configs.setdefault(str(task), []).append(_free_of_encoder(json.loads(text)))
    lengths = sorted(int(n) for n in comparison["eval_length"].unique())
    return Baseline(folder, lengths, choose, configs)


def _free_of_encoder(config: dict) -> dict:
    """A run's identity configuration, flattened, without :data:`FREE_KEYS`."""
    flat = flatten_config(config)
    return {k: v for k, v in flat.items() if k.split(".")[0] not in FREE_KEYS}


def check_out(baseline: Baseline, out: Path) -> None:
    """``--out`` is not the baseline (which is never written) nor inside it."""
    base, target = baseline.folder.resolve(), Path(out).resolve()
    if target == base or base in target.parents:
        raise PosencError(
            f"--out {out} is the baseline {baseline.folder} or inside it; the baseline is never "
            "written: name another folder, e.g. --out results/mine"
        )


def check_configs(baseline: Baseline, configs: dict[str, dict]) -> None:
    """Each run's configuration (run folder -> its ``config.yaml`` mapping) is one of the baseline's but for its
    encoder and seed; else one line naming the run and the keys that differ from the closest baseline run."""
    for run, config in configs.items():
        mine = _free_of_encoder(json.loads(run_identity(config).config))
        task = str(mine.get("task.name"))
        theirs = baseline.configs.get(task)
        if not theirs:
            raise PosencError(
                f"{run}: the baseline {baseline.folder} has no runs of task '{task}' (it has "
                f"{', '.join(sorted(baseline.configs))})"
            )
        if mine in theirs:
            continue
        closest = min(theirs, key=lambda other: len(_differences(mine, other)))
        diff = ", ".join(
            f"{k}={_show(mine.get(k))} here, {_show(closest.get(k))} there" for k in _differences(mine, closest)
        )
        raise PosencError(
            f"{run} differs from the baseline {baseline.folder}'s runs in more than its encoder and "
            f"seed: {diff}; train it under the baseline's protocol (its experiment config)"
        )


def _differences(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))


_MISSING = object()


def _show(value: object) -> str:
    return "(none)" if value is None else json.dumps(value) if not isinstance(value, str) else value


def check_fingerprints(baseline_evaluations: pd.DataFrame, new_evaluations: pd.DataFrame) -> None:
    """Every new row's evaluation sequences are the baseline's at the same task and length (same fingerprint);
    else one line saying why the pairing would be wrong. Baseline rows without a fingerprint (tables made
    before posenc recorded them) cannot vouch for anything: refused too."""
    base = baseline_evaluations[baseline_evaluations["note"].fillna("") == ""]
    new = new_evaluations[new_evaluations["note"].fillna("") == ""]
    for row in new.itertuples(index=False):
        same = base[
            (base["task"] == row.task)
            & (base["eval_length"] == row.eval_length)
            & ((base["depth"] == row.depth) | (base["depth"].isna() & pd.isna(row.depth)))
        ]
        prints = set(same["fingerprint"].fillna("")) - {""}
        where = f"{row.task} at length {row.eval_length}"
        if same.empty:
            continue  # a length the baseline has no rows at: nothing to pair, nothing to contradict
        if not prints:
            raise PosencError(
                f"the baseline's tables record no fingerprint of their evaluation sequences ({where}): "
                "they cannot show that a new run saw the same sequences; add them with "
                "`python scripts/fingerprint_tables.py FOLDER` under the torch version that "
                "evaluated them"
            )
        if str(row.fingerprint) not in prints:
            raise PosencError(
                f"run {row.run} was evaluated on other sequences than the baseline ({where}: "
                f"fingerprint {row.fingerprint}, the baseline's {', '.join(sorted(prints))}): another "
                "torch version's random generator, or another task option, makes other sequences; "
                "evaluate with the torch version the baseline was made with"
            )


def seed_out(baseline: Baseline, out: Path) -> bool:
    """Copy the baseline's files into ``out`` when ``out`` holds no tables yet (its evaluations marked with the
    baseline's name); True if ``out`` was made here (the caller removes it again if the comparison fails)."""
    out = Path(out)
    if read_table(out, EVALUATIONS) is not None:
        return False
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(baseline.folder.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            shutil.copy2(path, out / path.name)
    results = read_results(out)
    ev = results.evaluations.copy()
    ev[BASELINE_COLUMN] = ev[BASELINE_COLUMN].where(ev[BASELINE_COLUMN].fillna("") != "", baseline.folder.name)
    write_results(out, type(results)(ev, results.sequences, results.positions))
    return made


def baseline_section(evidence, evaluations: pd.DataFrame, metric_of) -> list[str]:
    """The report's section for runs placed beside a baseline: per task, each new encoder minus every baseline
    encoder on the task's second metric (token accuracy; lm: loss), paired by sequence, at
    :data:`PAIRED_FACTORS` × the training length. Empty when no row came from a baseline."""
    if BASELINE_COLUMN not in evaluations or not (evaluations[BASELINE_COLUMN].fillna("") != "").any():
        return []
    marked = evaluations[BASELINE_COLUMN].fillna("") != ""
    names = sorted(set(evaluations.loc[marked, BASELINE_COLUMN]))
    parts = [
        f"## Beside the baseline ({', '.join(names)})\n",
        "Runs placed beside a committed comparison (`posenc compare --baseline`): the baseline's rows are its "
        "own tables, not retrained or re-evaluated; every run saw the same evaluation sequences (checked by "
        "their fingerprints), so each new encoder is paired with each baseline encoder by sequence. Mean "
        "[95% interval] of new minus baseline, at multiples of the training length.\n",
    ]
    for task in sorted(evaluations["task"].unique()):
        rows = evaluations[evaluations["task"] == task]
        new = sorted(set(rows.loc[rows[BASELINE_COLUMN].fillna("") == "", "encoder"]))
        base = sorted(set(rows.loc[rows[BASELINE_COLUMN].fillna("") != "", "encoder"]) - set(new))
        if new and base:
            parts += _task_pairs(evidence, task, new, base, metric_of(task))
    return parts


def _task_pairs(evidence, task: str, new: list[str], base: list[str], metric: str) -> list[str]:
    rows = []
    for mine in new:
        learned = evidence.learned(task, Side(mine))
        if learned is None or held_back(learned, task):
            rows.append({"encoder": f"{mine} (not learned: not compared past L)"})
            continue
        for other in base:
            row = {"encoder": f"{mine} − {other}"}
            for factor in PAIRED_FACTORS:
                a, b = (
                    evidence.values(task, Side(mine), factor, metric),
                    evidence.values(task, Side(other), factor, metric),
                )
                row[f"{factor}×"] = (
                    "—"
                    if not a or not b
                    else paired_difference(
                        a, b, metric != "loss", block=sequence_block(task, min(len(v) for v in a))
                    ).format(signed=True)
                )
            rows.append(row)
    table = pd.DataFrame(rows).fillna("—")
    return [
        f"### {task}: {metric.replace('_', ' ')}, new minus baseline\n\n"
        + table.to_markdown(index=False, disable_numparse=True)
        + "\n"
    ]
