"""The results store: the one place that reads, merges and writes evaluation tables of an output folder.

An output folder (``--out``) holds three tidy tables, each as Parquet (the store reads it) and CSV:

* ``extrapolation`` - one row per (run, evaluation length, RoPE scaling, depth): the means, the run's
  identity and configuration, and whether the run learned its task in distribution;
* ``sequences`` - one row per evaluated sequence of each of those (exact match, token accuracy, loss):
  what the intervals and the paired comparisons between encoders are computed from;
* ``positions`` - answer-token accuracy by position in the sequence (bins), for each of those.

Rows are keyed by :data:`KEY`. A run is identified by a hash of its configuration including the seed
(``run_id``), not by its path, so the same run evaluated from another working directory is recognised;
``config_id`` hashes the configuration without the seed: runs that share it are seeds of one
configuration, and only those are ever pooled (see :mod:`posenc.analysis.compare`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from posenc.analysis.tables import read_table, write_tables
from posenc.errors import PosencError

NO_SCALING = "none"  # the RoPE scaling method "as trained": a value of --rope-scaling and of the `scaling` column

EVALUATIONS, SEQUENCES, POSITIONS = "extrapolation", "sequences", "positions"
KEY = ["run_id", "eval_length", "scaling", "depth"]
COLUMNS = [
    "run", "run_id", "config_id", "encoder", "task", "train_length", "eval_length", "scaling",
    "scaling_factor", "depth", "seed", "learned", "steps_to_learn", "loss", "perplexity", "token_accuracy",
    "exact_match", "n_sequences", "seconds", "note", "data", "fingerprint", "baseline", "config",
]  # fmt: skip
# Columns added after tables were committed: a table without one reads as holding this value in every row.
LATER_COLUMNS = {
    "fingerprint": "",  # of each row's evaluation sequences (posenc.running.evaluate.sequences_fingerprint)
    "baseline": "",  # the committed comparison a row was copied from (posenc.analysis.baseline), or ""
}
SEQUENCE_COLUMNS = [*KEY, "sequence", "exact_match", "token_accuracy", "loss"]
POSITION_COLUMNS = [*KEY, "position", "bin_width", "correct", "total"]
NO_DEPTH = -1.0  # the depth key of rows without one (NaN never equals itself in a key)

# The one declaration of the config keys that do not change what a run computes (dotted for nested keys). From
# it: a run's identity leaves them out (run_identity), a run resumes under other values of them
# (posenc.running.checkpoint.comparable), --choose refuses them (posenc.analysis.selection), and Hydra leaves them
# out of a run's
# folder name (conf/config.yaml's override_dirname.exclude_keys, held equal to this by tests/test_store.py).
RUN_NEUTRAL_KEYS = (
    "device", "progress", "resume", "paths", "logger",  # where and how it runs, and what it reports to
    "train.compile", "model.attention",  # how, not what: the same results within fp32 tolerance
    "train.log_every", "train.checkpoint_every",  # how often it reports and saves
    "train.eval_sequences",  # the size of the final check at L, after training: what is trained is the same
    "plugins",  # where a plugin's code lives (posenc.plugins.Origin): the same key and options, the same run
)  # fmt: skip
# Keys added after runs were recorded, at the value every earlier run had: a config without the key is the same
# run as one holding that value (left out where it holds it), so every earlier run keeps its identity and resumes.
LATER_DEFAULTS = {
    "model.mixer": "attention",
    "task.end_token": False,
    "train.stop_at_mastery": True,
    "encoder.fraction": 1.0,  # rope's (and rope_ntk's) rotated share, added 2026-11-28: the whole head
}
_NOT_IDENTITY = {"seed", "hydra"}  # the seed is in run_id, not config_id; hydra: Hydra's own settings


def without_neutral(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a resolved config mapping) without :data:`RUN_NEUTRAL_KEYS`, and without each of
    :data:`LATER_DEFAULTS` where it holds that default: what two configs of the same run share (a copy)."""
    out = dict(config)
    for key in RUN_NEUTRAL_KEYS:
        _drop(out, key)
    for key, default in LATER_DEFAULTS.items():
        _drop(out, key, only_if=default)
    return out


_ANY = object()


def _drop(config: dict[str, Any], dotted: str, only_if: Any = _ANY) -> None:
    head, _, rest = dotted.partition(".")
    if head not in config:
        return
    if rest:
        if isinstance(config[head], dict):
            config[head] = dict(config[head])
            _drop(config[head], rest, only_if)
    elif only_if is _ANY or config[head] == only_if:
        del config[head]


@dataclass(frozen=True)
class RunIdentity:
    run_id: str  # the configuration with its seed
    config_id: str  # the configuration without its seed: what seeds of one configuration share
    config: str  # that configuration as canonical JSON (what differs between configurations is read here)


def run_identity(config: dict[str, Any]) -> RunIdentity:
    """The identity of a run from its resolved ``config.yaml`` mapping."""
    core = {k: v for k, v in without_neutral(config).items() if k not in _NOT_IDENTITY}
    text = json.dumps(core, sort_keys=True, default=str)
    seeded = json.dumps({"seed": config.get("seed"), **core}, sort_keys=True, default=str)
    return RunIdentity(_digest(seeded), _digest(text), text)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def differing_keys(configs: list[str]) -> list[str]:
    """Dotted keys whose values differ among the JSON ``configs`` (see :class:`RunIdentity`), sorted."""
    flat = [flatten_config(json.loads(c)) for c in configs]
    keys = sorted(set().union(*flat))
    return [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]


def describe_config(config: str, keys: list[str]) -> str:
    """``key=value`` pairs of ``config`` (JSON) for ``keys``, e.g. ``train.lr=0.001,train.steps=300``."""
    flat = flatten_config(json.loads(config))
    return ",".join(f"{k}={flat.get(k)}" for k in keys)


def flatten_config(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config mapping as one level of dotted keys: ``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@dataclass
class Results:
    """The three tables of an output folder (see the module docstring)."""

    evaluations: pd.DataFrame
    sequences: pd.DataFrame
    positions: pd.DataFrame

    @classmethod
    def empty(cls) -> Results:
        return cls(
            pd.DataFrame(columns=COLUMNS),
            pd.DataFrame(columns=SEQUENCE_COLUMNS),
            pd.DataFrame(columns=POSITION_COLUMNS),
        )

    @classmethod
    def concat(cls, parts: list[Results]) -> Results:
        if not parts:
            return cls.empty()
        return cls(
            *(
                pd.concat([getattr(p, t) for p in parts], ignore_index=True)
                for t in ("evaluations", "sequences", "positions")
            )
        )

    def done(self) -> frozenset[tuple[str, int, str]]:
        """(run_id, eval_length, scaling) evaluated with their sequences: nothing to evaluate again."""
        have = set(zip(self.sequences["run_id"], self.sequences["eval_length"], self.sequences["scaling"]))
        noted = self.evaluations[self.evaluations["note"].fillna("") != ""]  # NaN rows: nothing per sequence
        have |= set(zip(noted["run_id"], noted["eval_length"], noted["scaling"]))
        return frozenset(have)


def _keys(table: pd.DataFrame) -> pd.Series:
    depth = table["depth"].astype(float).fillna(NO_DEPTH)
    return pd.Series(
        list(zip(table["run_id"], table["eval_length"].astype(int), table["scaling"], depth)),
        index=table.index,
        dtype=object,
    )


def merge(existing: Results | None, new: Results) -> Results:
    """``existing`` with every (run, length, scaling, depth) that ``new`` holds replaced by ``new``'s rows."""
    if existing is None:
        return _sorted(new)
    replaced = set(_keys(new.evaluations))
    parts = []
    for name in ("evaluations", "sequences", "positions"):
        old, fresh = getattr(existing, name), getattr(new, name)
        kept = old[~_keys(old).isin(replaced)] if len(old) else old
        parts.append(pd.concat([kept, fresh], ignore_index=True) if len(fresh) else kept.reset_index(drop=True))
    return _sorted(Results(*parts))


def _sorted(results: Results) -> Results:
    ev = results.evaluations.sort_values(
        ["task", "encoder", "config_id", "seed", "scaling", "depth", "eval_length"], ignore_index=True
    )
    seq = results.sequences.sort_values([*KEY, "sequence"], ignore_index=True)
    pos = results.positions.sort_values([*KEY, "position"], ignore_index=True)
    return Results(ev[COLUMNS], seq[SEQUENCE_COLUMNS], pos[POSITION_COLUMNS])


def read_results(out_dir: Path) -> Results | None:
    """The results in ``out_dir``, or None if it holds none; a foreign or damaged table raises one line."""
    evaluations = read_table(out_dir, EVALUATIONS)
    if evaluations is None:
        return None
    for column, value in LATER_COLUMNS.items():
        if column not in evaluations.columns:
            evaluations[column] = value
    tables = [evaluations, read_table(out_dir, SEQUENCES), read_table(out_dir, POSITIONS)]
    for table, columns, stem in zip(
        tables, (COLUMNS, SEQUENCE_COLUMNS, POSITION_COLUMNS), (EVALUATIONS, SEQUENCES, POSITIONS)
    ):
        if table is not None and set(columns) - set(table.columns):
            missing = ", ".join(sorted(set(columns) - set(table.columns)))
            raise PosencError(
                f"{Path(out_dir) / stem}.parquet is not a posenc {stem} table of this version "
                f"(no column {missing}); move it away or use another --out"
            )
    empty = Results.empty()
    results = Results(
        evaluations[COLUMNS],
        *(
            t[c] if t is not None else getattr(empty, n)
            for t, c, n in ((tables[1], SEQUENCE_COLUMNS, "sequences"), (tables[2], POSITION_COLUMNS, "positions"))
        ),
    )
    check_agreement(results, Path(out_dir))
    return results


def check_agreement(results: Results, out_dir: Path) -> None:
    """Raise one line where ``sequences`` disagrees with ``extrapolation``: every evaluated row's
    ``n_sequences`` must be the number of its rows in ``sequences`` (rows deleted from, or added to, one table
    would otherwise be re-aggregated in silence, with intervals over the wrong sequences)."""

    def normal(table: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "run_id": table["run_id"].astype(str),
                "eval_length": table["eval_length"].astype(int),
                "scaling": table["scaling"].astype(str),
                "depth": table["depth"].astype(float).fillna(NO_DEPTH),
            }
        )

    ev, seq = results.evaluations, results.sequences
    expected = normal(ev).assign(expected=pd.to_numeric(ev["n_sequences"], errors="coerce").fillna(0).astype(int))
    expected = expected.groupby(KEY, as_index=False)["expected"].sum()
    found = normal(seq).groupby(KEY, as_index=False).size().rename(columns={"size": "found"})
    both = expected.merge(found, on=KEY, how="outer").fillna({"expected": 0, "found": 0})
    wrong = both[both["expected"] != both["found"]]
    if wrong.empty:
        return
    first = wrong.iloc[0]
    depth = "" if first["depth"] == NO_DEPTH else f", depth {first['depth']:g}"
    more = f" (and {len(wrong) - 1} more evaluations)" if len(wrong) > 1 else ""
    raise PosencError(
        f"{out_dir / SEQUENCES}.parquet disagrees with {out_dir / EVALUATIONS}.parquet: run {first['run_id']} at "
        f"length {int(first['eval_length'])} ({first['scaling']}{depth}) has {int(first['found'])} sequence rows where "
        f"n_sequences says {int(first['expected'])}{more}; the tables were edited or damaged: restore them, or "
        "move them away and evaluate again"
    )


def write_results(out_dir: Path, results: Results, summary: str | None = None) -> list[Path]:
    """Write the three tables into ``out_dir`` (Parquet and CSV; Markdown for the evaluations only)."""
    paths = write_tables(
        results.evaluations.drop(columns="config"),
        out_dir,
        EVALUATIONS,
        summary=summary,
        markdown=True,
        parquet_table=results.evaluations,
    )
    paths += write_tables(results.sequences, out_dir, SEQUENCES, markdown=False, csv=False)
    paths += write_tables(results.positions, out_dir, POSITIONS, markdown=False, csv=False)
    return paths
