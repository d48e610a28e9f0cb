"""Choosing among runs that differ in one setting (e.g. the learning rate), on in-distribution data only.

A comparison at mastery needs each encoder trained well, and one learning rate rarely suits every encoder
(issue 12: lr "chosen per encoder from a small grid on in-distribution data only"). ``posenc compare
--choose train.lr`` groups the runs whose configurations differ only in that key (and their seed): each
group is one configuration of the comparison, each value of the key a *candidate*. The candidate compared
is the one whose seeds learned best at the training length:

1. the most seeds that met the mastery criterion (held-out checks at the training length);
2. then the fewest mean steps-to-learn over those seeds;
3. then the highest mean exact match at the training length at the end of training (``metrics.json``):
   where no candidate learned, the one that came closest;
4. then the value that sorts first (a deterministic tie-break).

Nothing past the training length is looked at, so the choice cannot favour extrapolation. The candidates,
their scores and the choice are a table (``choices.*`` in the comparison folder, and a report section).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from posenc import files as run_files
from posenc.analysis.run_folder import learned_from_metrics
from posenc.analysis.store import flatten_config, run_identity
from posenc.errors import PosencError
from posenc.task_facts import has_mastery_criterion

CHOICES_STEM = "choices"
COLUMNS = [
    "task",
    "encoder",
    "config_id",
    "key",
    "value",
    "seeds",
    "n_learned",
    "n_trained",
    "steps_to_learn",
    "chosen",
]  # config_id: the configuration without the key and the seed (posenc.analysis.store.run_identity)


def _candidate_rows(runs: list[Path], key: str, configs: list[dict]) -> pd.DataFrame:
    rows = []
    for run, config in zip(runs, configs):
        flat = flatten_config(config)
        metrics = run_files.read_metrics(run)  # unfinished or damaged: one line (--choose compares finished runs)
        task = (config.get("task") or {}).get("name")
        learned = learned_from_metrics(metrics, has_mastery_criterion(task))
        steps = metrics.get("steps_to_learn")
        rows.append({
            "run": run, "group": run_identity(_without(config, key)).config_id, "task": task,
            "encoder": (config.get("encoder") or {}).get("name"), "value": flat.get(key), "seed": config.get("seed"),
            "learned": learned, "steps_to_learn": float(steps) if learned and steps is not None else math.nan,
            "exact_match": _number(metrics.get("exact_match")),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _number(value: object) -> float:
    """A metric from metrics.json as a float; NaN where absent or not a number."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _without(config: dict, key: str) -> dict:
    """``config`` with dotted ``key`` removed (a copy): what candidates of one configuration share."""
    head, _, rest = key.partition(".")
    if head not in config:
        return config
    out = dict(config)
    if rest and isinstance(config[head], dict):
        out[head] = _without(config[head], rest)
    elif not rest:
        del out[head]
    return out


def _with_earlier(candidates: pd.DataFrame, earlier: pd.DataFrame) -> pd.DataFrame:
    """``candidates`` (one row per group and value) pooled with ``earlier``'s rows of the same group and value
    whose seeds are all new to it, and with ``earlier``'s other rows of the groups given now added."""
    earlier = earlier[earlier["config_id"].isin(set(candidates["group"]))]
    rows = candidates.assign(_key=candidates["value"].map(str)).to_dict("records")
    index = {(r["group"], r["_key"]): r for r in rows}
    for old in earlier.to_dict("records"):
        seeds = {s for s in str(old["seeds"]).split(",") if s}
        row = index.get((old["config_id"], str(old["value"])))
        if row is None:  # a value weighed before and not given now: still a candidate
            rows.append(
                {
                    "group": old["config_id"],
                    "value_text": json.dumps(old["value"]),
                    "task": old["task"],
                    "encoder": old["encoder"],
                    "value": old["value"],
                    "seeds": old["seeds"],
                    "n_learned": old["n_learned"],
                    "n_trained": old["n_trained"],
                    "steps_to_learn": old["steps_to_learn"],
                    "_exact": math.nan,
                    "_key": str(old["value"]),
                }
            )
            continue
        mine = set(str(row["seeds"]).split(","))
        if seeds & mine:  # the same runs given again: the new row holds them
            continue
        learned = row["n_learned"] + old["n_learned"]
        steps = [
            (m, n)
            for m, n in ((row["steps_to_learn"], row["n_learned"]), (old["steps_to_learn"], old["n_learned"]))
            if n and not math.isnan(m)
        ]
        row.update(
            seeds=",".join(sorted(mine | seeds, key=int)),
            n_learned=learned,
            n_trained=row["n_trained"] + old["n_trained"],
            steps_to_learn=sum(m * n for m, n in steps) / sum(n for _, n in steps) if steps else math.nan,
        )
    return pd.DataFrame(rows).drop(columns="_key")


def losing_runs(evaluations: pd.DataFrame, table: pd.DataFrame, key: str) -> set[str]:
    """The run ids in ``evaluations`` (OUT's table: ``run_id`` and its identity ``config``) that belong to a
    candidate ``table`` did not choose: under ``compare --extend --choose`` they leave the comparison."""
    lost = {(g, str(v)) for g, v, c in zip(table["config_id"], table["value"], table["chosen"]) if not c}
    out = set()
    for run_id, text in evaluations[["run_id", "config"]].drop_duplicates("run_id").itertuples(index=False):
        config = json.loads(text)
        if (run_identity(_without(config, key)).config_id, str(flatten_config(config).get(key))) in lost:
            out.add(run_id)
    return out


def check_choose_key(key: str) -> None:
    """Refuse a ``--choose`` key that cannot name a setting to choose: the seed (seeds of one configuration are
    pooled; keeping the best seed would report luck) and keys that do not change what a run computes (left out
    of its identity: the device, logging, checkpoint interval, ...)."""
    from posenc.analysis.store import RUN_NEUTRAL_KEYS

    head = key.partition(".")[0]
    if key == "seed":
        raise PosencError(
            "--choose seed: seeds of one configuration are pooled, never chosen among (keeping the "
            "best seed would report luck); choose a setting, e.g. --choose train.lr"
        )
    if head == "hydra" or key in RUN_NEUTRAL_KEYS or head in RUN_NEUTRAL_KEYS:
        raise PosencError(
            f"--choose {key}: {key} does not change what a run computes (it is not part of a run's "
            "identity), so there is nothing to choose; choose a setting, e.g. --choose train.lr"
        )


def choose_runs(
    runs: list[Path], configs: list[dict], key: str, earlier: pd.DataFrame | None = None
) -> tuple[list[Path], pd.DataFrame]:
    """The runs of the chosen candidate of each configuration, and the table of every candidate.

    Args:
        runs: finished run directories.
        configs: their resolved ``config.yaml`` mappings, in the same order.
        key: dotted config key the candidates differ in, e.g. ``train.lr``.
        earlier: an earlier choice's table (``compare --extend``: OUT's ``choices``), whose candidates are
            weighed too: a configuration's candidate there with seeds not given now pools with the one given
            (seeds, learned counts, steps-to-learn), so a seed trained later joins its configuration's
            earlier seeds; a candidate only there stays a candidate (its runs are in OUT's tables).

    Returns:
        ``(chosen runs, table)``; the table has a row per (configuration, value of ``key``): :data:`COLUMNS`.

    Raises:
        PosencError: ``key`` is in no run's config, or a run is unfinished.
    """
    check_choose_key(key)
    if not any(key in flatten_config(c) for c in configs):
        raise PosencError(f"--choose {key}: no run's config has the key {key!r} (e.g. train.lr)")
    runs_table = _candidate_rows(runs, key, configs)
    candidates = (
        runs_table.assign(value_text=runs_table["value"].map(lambda v: json.dumps(v, default=str)))
        .groupby(["group", "value_text"], sort=False)
        .agg(task=("task", "first"), encoder=("encoder", "first"), value=("value", "first"),
             seeds=("seed", lambda s: ",".join(str(x) for x in sorted(s))), n_learned=("learned", "sum"),
             n_trained=("learned", "size"), steps_to_learn=("steps_to_learn", "mean"),
             _exact=("exact_match", "mean"))
        .reset_index()
    )  # fmt: skip
    if earlier is not None and not earlier.empty:
        candidates = _with_earlier(candidates, earlier[earlier["key"] == key])
    steps = candidates["steps_to_learn"].fillna(math.inf)
    exact = candidates["_exact"].fillna(-math.inf)
    order = candidates.assign(_steps=steps, _em=exact).sort_values(
        ["group", "n_learned", "_steps", "_em", "value_text"], ascending=[True, False, True, False, True]
    )
    winners = order.groupby("group", sort=False).head(1).index
    candidates["chosen"] = candidates.index.isin(winners)
    chosen = set(zip(candidates.loc[winners, "group"], candidates.loc[winners, "value_text"]))
    value_texts = runs_table["value"].map(lambda v: json.dumps(v, default=str))
    keep = [run for run, g, v in zip(runs_table["run"], runs_table["group"], value_texts) if (g, v) in chosen]
    table = candidates.assign(key=key, config_id=candidates["group"], n_learned=candidates["n_learned"].astype(int))
    table = table.sort_values(["task", "encoder", "value_text"], ignore_index=True)[COLUMNS]
    table["value"] = table["value"].map(str)  # one column type, whatever the key holds
    return keep, table


def choices_markdown(table: pd.DataFrame) -> str:
    """The report's view: configurations with more than one candidate, each candidate a row."""
    # Tables written before config_id was a column (results/headline's first choices) grouped by task and
    # encoder, which named the configuration then.
    by = "config_id" if "config_id" in table.columns else ["task", "encoder"]
    groups = table.groupby(by)["value"].transform("size")
    shown = table[groups > 1]
    if shown.empty:
        return ""
    key = shown["key"].iloc[0]
    view = pd.DataFrame({
        "task": shown["task"], "encoder": shown["encoder"], key: shown["value"],
        "seeds learned": [f"{a}/{b}" for a, b in zip(shown["n_learned"], shown["n_trained"])],
        "steps to learn": [f"{v:.0f}" if v == v else "—" for v in shown["steps_to_learn"]],
        "compared": ["✓" if c else "" for c in shown["chosen"]],
    })  # fmt: skip
    return view.to_markdown(index=False, disable_numparse=True)


def missed_configurations(runs: list[Path], configs: list[dict], key: str, value: object) -> dict[str, list[str]]:
    """Task -> encoders (in the order of ``runs``) with a run at ``key == value`` that did not learn:
    the configurations a fallback grid trains again at its next value (scripts/retry_not_learned.py). Runs
    whose sequence mixer is not attention group apart, under ``"<task> model.mixer=<mixer>"``: retrying
    their encoder alone would train attention instead."""
    missed: dict[str, list[str]] = {}
    for run, config in zip(runs, configs):
        if flatten_config(config).get(key) != value:
            continue
        metrics = run_files.read_metrics(run)  # unfinished or damaged: one line
        task, encoder = (config.get("task") or {}).get("name"), (config.get("encoder") or {}).get("name")
        if not learned_from_metrics(metrics, has_mastery_criterion(task)):
            mixer = (config.get("model") or {}).get("mixer", "attention")
            encoders = missed.setdefault(task if mixer == "attention" else f"{task} model.mixer={mixer}", [])
            if encoder not in encoders:
                encoders.append(encoder)
    return missed
