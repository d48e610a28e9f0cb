"""Aggregating evaluations across seeds, with intervals that count seeds and evaluated sequences.

Runs are pooled only when they share their whole configuration but the seed (``config_id``, see
:mod:`posenc.analysis.store`): one row per (task, encoder, configuration, train length, eval length, scaling, depth).
Where one task and encoder were run in several configurations, each is its own row, labelled by the keys
that differ (``variant``), never averaged together. Intervals are :func:`posenc.analysis.stats.group_estimate`'s.
This module imports no torch: it works from the tables alone.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

from posenc.analysis.claims import DEFAULT_MIXER, Side, mixer_of
from posenc.analysis.mastery import by_quorum, compared_rows, mastery, share_text
from posenc.analysis.stats import group_estimate, sequence_block
from posenc.analysis.store import KEY, NO_DEPTH, NO_SCALING, Results, describe_config, differing_keys
from posenc.task_facts import ANSWER_ALPHABET, has_mastery_criterion

GROUP = ["task", "encoder", "config_id", "train_length", "eval_length", "scaling", "depth"]
METRICS = ("exact_match", "token_accuracy", "loss")
BOUNDED = {"exact_match": True, "token_accuracy": True, "loss": False}
TABLE_STEM = "comparison"
NOT_LEARNED = "not learned"
NOT_CONVERGED = "not converged"


def held_back(learned: bool, task: str | None) -> bool:
    """Whether a group is not compared past its training length: it did not learn a task with a mastery
    criterion (nothing to extrapolate). An lm group that did not converge (task_facts.converged) is still a
    language model: it is shown at every length, marked, and only the literature checks hold it back."""
    return not learned and has_mastery_criterion(task)


def with_depth_means(results: Results) -> Results:
    """``results`` plus, for each (run, length, scaling) evaluated at several depths (passkey), the task's
    score over all depths: rows with depth NaN whose sequence ``i`` is the mean of sequence ``i`` over the
    depths (the same index is the same sequence for every run at each depth, so pairing still holds)."""
    ev, seq = results.evaluations, results.sequences
    deep = ev[ev["depth"].notna()]
    if deep.empty:
        return results
    keys = ["run_id", "eval_length", "scaling"]
    first = deep.groupby(keys, sort=False).first().reset_index()
    means = deep.groupby(keys, sort=False)[["loss", "token_accuracy", "exact_match"]].mean().reset_index()
    sums = deep.groupby(keys, sort=False)[["n_sequences", "seconds"]].sum().reset_index()
    rows = first.drop(columns=["loss", "token_accuracy", "exact_match", "n_sequences", "seconds"])
    rows = rows.merge(means, on=keys).merge(sums, on=keys).assign(depth=math.nan)
    rows["perplexity"] = np.exp(rows["loss"].clip(upper=700))
    deep_seq = seq[seq["depth"].notna() & (seq["depth"] != NO_DEPTH)]
    seq_means = deep_seq.groupby([*keys, "sequence"], sort=False)[["exact_match", "token_accuracy", "loss"]]
    seq_means = seq_means.mean().reset_index().assign(depth=math.nan)
    return Results(
        pd.concat([ev, rows[ev.columns]], ignore_index=True),
        pd.concat([seq, seq_means[seq.columns]], ignore_index=True),
        results.positions,
    )


MIXER_KEY = "model.mixer"  # named first in a variant whose sequence mixer is not attention (see labels)


def variants(evaluations: pd.DataFrame) -> pd.Series:
    """Per row, what tells its configuration apart from the other configurations of the same task, encoder
    and sequence mixer (``key=value`` pairs); empty where those were run in one configuration only. A mixer
    other than attention is named first (``model.mixer=base_conv``): :func:`labels` names the row by it, as a
    model without positional encoding is then told apart by its mixer, not by the keys that differ."""

    out = pd.Series("", index=evaluations.index, dtype=object)
    for _, rows in evaluations.groupby(["task", "encoder"], sort=False):
        mixers = rows["config"].map({c: mixer_of(c) for c in rows["config"].unique()})  # parsed once each
        for mixer, part in rows.groupby(mixers, sort=False):
            configs = part.drop_duplicates("config_id")
            keys = [k for k in differing_keys(list(configs["config"])) if k != MIXER_KEY] if len(configs) > 1 else []
            named = [] if mixer == DEFAULT_MIXER else [f"{MIXER_KEY}={mixer}"]
            names = {
                cid: ",".join(named + ([describe_config(c, keys)] if keys else []))
                for cid, c in zip(configs["config_id"], configs["config"])
            }
            out[part.index] = part["config_id"].map(names)
    return out


def _per_seed(sequences: pd.DataFrame, metric: str) -> list[np.ndarray]:
    return [part[metric].to_numpy(dtype=float) for _, part in sequences.groupby("run_id", sort=True)]


def aggregate(results: Results) -> pd.DataFrame:
    """One row per :data:`GROUP` with ``variant``, ``n_seeds`` (seeds evaluated there), ``seeds``, ``run_ids``,
    ``n_learned`` of ``n_trained`` seeds of the configuration that met the mastery criterion, ``learned``
    (the configuration counts as learned: :func:`posenc.analysis.mastery.learned_by_rule`), ``steps_to_learn``
    (mean over the seeds that learned), ``n_sequences`` (over the seeds compared there), and for each metric of
    :data:`METRICS` ``<metric>_mean``, ``_low``, ``_high`` (95% interval, :func:`posenc.analysis.stats.group_estimate`);
    ``perplexity_*`` is ``exp`` of the loss's; ``note``: the first note of the group's rows (e.g. why a learned
    table has no value). A configuration learned by quorum is compared past its training length on the seeds
    that learned only (:func:`posenc.analysis.mastery.compared_rows`): ``n_seeds`` and ``seeds`` say which."""
    results = with_depth_means(results)
    ev = results.evaluations.assign(variant=variants(results.evaluations))
    seq = results.sequences.assign(depth=results.sequences["depth"].fillna(NO_DEPTH))  # NaN never matches a key
    seq_groups = {key: part for key, part in seq.groupby(KEY, sort=False)}
    # Mastery is a property of a configuration (its seeds), not of a length: runs that did not learn are
    # evaluated at their training length only, so the seeds present at longer lengths are the learned ones and
    # would otherwise make a group that did not learn look learned there.
    per_run = ev.drop_duplicates("run_id").assign(learned=lambda t: t["learned"].astype(bool))
    counts = mastery(ev)
    rows = []
    for key, group in compared_rows(ev).groupby(GROUP, sort=True, dropna=False):
        row = dict(zip(GROUP, key))
        runs = group.drop_duplicates("run_id")
        found = counts.loc[row["config_id"]]
        row.update(
            variant=group["variant"].iloc[0],
            n_seeds=len(runs),
            seeds=",".join(str(s) for s in sorted(runs["seed"])),
            run_ids=",".join(sorted(runs["run_id"])),
            n_learned=int(found["n_learned"]),
            n_trained=int(found["n_trained"]),
            scaling_factor=group["scaling_factor"].iloc[0],
        )
        row["learned"] = bool(found["learned"])
        configs = per_run[per_run["config_id"] == row["config_id"]]
        steps = configs.loc[configs["learned"], "steps_to_learn"].dropna()
        row["steps_to_learn"] = float(steps.mean()) if len(steps) else math.nan
        keys = zip(runs["run_id"], runs["eval_length"], runs["scaling"], runs["depth"].fillna(NO_DEPTH))
        parts = [seq_groups[k] for k in keys if k in seq_groups]
        mine = pd.concat(parts) if parts else seq.iloc[:0]
        row["n_sequences"] = len(mine)
        for metric in METRICS:
            per_seed = _per_seed(mine, metric)
            block = sequence_block(row["task"], min((len(v) for v in per_seed), default=0))
            est = group_estimate(per_seed, bounded=BOUNDED[metric], block=block)
            row.update({f"{metric}_mean": est.mean, f"{metric}_low": est.low, f"{metric}_high": est.high})
        for end in ("mean", "low", "high"):
            loss = row[f"loss_{end}"]
            row[f"perplexity_{end}"] = math.exp(min(loss, 700.0)) if not math.isnan(loss) else math.nan
        row["data"] = group["data"].fillna("").iloc[0]  # what text a task read (lm), for the report
        notes = [n for n in group["note"].fillna("") if n]
        row["note"] = notes[0] if notes else ""
        row["chance_token_accuracy"] = chance_token_accuracy(group["config"].iloc[0] if "config" in group else None)
        rows.append(row)
    return pd.DataFrame(rows)


def chance_token_accuracy(config: str | None) -> float:
    """Token accuracy of a uniform guess over a task's answer alphabet (1/16 for copy's default); NaN for
    tasks without a fixed one (lm). ``config``: a run's configuration as JSON (:class:`RunIdentity`)."""
    if not isinstance(config, str):
        return math.nan
    task = json.loads(config).get("task") or {}
    key, default = ANSWER_ALPHABET.get(task.get("name"), (None, None))
    size = task.get(key, default) if key else default
    return 1.0 / size if size else math.nan


#: How an lm evaluation row's ``data`` line states the unigram reference
#: (:meth:`posenc.tasks.lm.LanguageModelling.unigram_loss`): ``..., unigram loss 3.198 nats/byte (...)``.
UNIGRAM = re.compile(r"unigram loss (\d+(?:\.\d+)?) nats/byte")


def unigram_loss(data: object) -> float:
    """The unigram reference a ``data`` line records: the loss on the evaluated text of a model that reads no
    context (each byte predicted by the training split's byte frequencies), in nats per byte; NaN where the
    line records none (other tasks, or tables evaluated before lm recorded it)."""
    found = UNIGRAM.search(data) if isinstance(data, str) else None
    return float(found.group(1)) if found else math.nan


def task_unigram_loss(table: pd.DataFrame, task: str) -> float:
    """``task``'s unigram reference over the rows of ``table`` (comparison or evaluations): the one value
    their ``data`` lines record; NaN when none does, or they record several (different texts: no one line)."""
    if "data" not in table:
        return math.nan
    lines = table.loc[table["task"] == task, "data"].unique()
    found = {v for v in map(unigram_loss, lines) if not math.isnan(v)}
    return found.pop() if len(found) == 1 else math.nan


def labels(table: pd.DataFrame) -> pd.Series:
    """What a row is about, for tables and legends: the encoder - or, where the model mixes tokens with
    something other than attention, the mixer (``base_conv``; ``alibi base_conv`` with an encoder) -, then
    ``[variant]``, ``+scaling`` and ``@depth`` where set."""
    variant = table["variant"] if "variant" in table else pd.Series("", index=table.index)

    def label(encoder: str, var: str, scaling: str, depth: float) -> str:
        name = encoder
        if var.startswith(f"{MIXER_KEY}="):  # see variants: the mixer, then the keys that differ
            mixer, _, var = var[len(MIXER_KEY) + 1 :].partition(",")
            name = Side(encoder, mixer=mixer).label()
        text = name if not var else f"{name} [{var}]"
        text = text if scaling == NO_SCALING else f"{text} +{scaling}"
        return text if math.isnan(depth) else f"{text} @depth {depth:g}"

    return pd.Series(
        [label(*r) for r in zip(table["encoder"], variant.fillna(""), table["scaling"], table["depth"])],
        index=table.index,
        dtype=object,
    )


def cell(row: pd.Series, metric: str) -> str:
    """``mean [low, high]`` of ``metric`` in a comparison row; '—' where undefined; groups that did not learn
    their task (:func:`posenc.analysis.mastery.learned_by_rule`) show only their in-distribution value, marked,
    and nothing past it; one learned by quorum shows its share of seeds that learned at the training length."""
    mean = row[f"{metric}_mean"]
    if held_back(row["learned"], row.get("task")):
        if row["eval_length"] != row["train_length"]:
            return "n/l"
        shown = "—" if math.isnan(mean) else f"{mean:.3f}"
        return f"{shown} ({NOT_LEARNED}: {row['n_learned']}/{row['n_trained']} seeds)"
    if math.isnan(mean):
        return "—"
    digits = 2 if metric == "perplexity" else 3
    text = f"{mean:.{digits}f} [{row[f'{metric}_low']:.{digits}f}, {row[f'{metric}_high']:.{digits}f}]"
    if row["eval_length"] == row["train_length"]:  # marked once, at L
        if not row["learned"]:  # lm: not converged
            text += f" (converged: {row['n_learned']}/{row['n_trained']} seeds)"
        elif by_quorum(row["n_learned"], row["n_trained"]):
            text += f" ({share_text(row['n_learned'], row['n_trained'], has_mastery_criterion(row.get('task')))})"
    return text


def pivot(comparison: pd.DataFrame, metric: str = "exact_match", task: str | None = None) -> pd.DataFrame:
    """``mean [95% interval]`` strings, (task, label) x eval length: the table a paper shows."""
    view = comparison if task is None else comparison[comparison["task"] == task]
    view = view.assign(encoder=labels(view), cell=[cell(r, metric) for _, r in view.iterrows()])
    out = view.pivot_table(index=["task", "encoder"], columns="eval_length", values="cell", aggfunc="first")
    out.columns = [str(c) for c in out.columns]
    return out.reset_index().fillna("—")


def steps_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """Steps-to-learn per (task, encoder label): seeds that learned, and the mean steps they needed."""
    first = comparison[
        (comparison["eval_length"] == comparison["train_length"])
        & (comparison["scaling"] == NO_SCALING)
        & comparison["depth"].isna()
    ]
    table = pd.DataFrame(
        {
            "task": first["task"],
            "encoder": labels(first),
            "train_length": first["train_length"],
            "seeds learned": [f"{a}/{b}" for a, b in zip(first["n_learned"], first["n_trained"])],
            "steps to learn": first["steps_to_learn"],
            "exact match at 1×": first["exact_match_mean"],
        }
    ).sort_values(["task", "steps to learn"], na_position="last", ignore_index=True)
    table["steps to learn"] = [f"{v:.0f}" if not math.isnan(v) else "—" for v in table["steps to learn"]]
    table["exact match at 1×"] = [f"{v:.3f}" if not math.isnan(v) else "—" for v in table["exact match at 1×"]]
    return table
