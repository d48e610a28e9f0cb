"""``report.md`` and the figures of a comparison, rendered from its tables alone (no checkpoints, no torch).

:func:`render` is what both ``posenc compare`` and ``posenc report DIR`` call, so a committed report is
regenerated from the committed tables by one command and can be checked for staleness.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from posenc.analysis.baseline import baseline_section
from posenc.analysis.claims import Side, check, paired_by_seed, paper_vs_posenc, ungated
from posenc.analysis.compare import (
    NO_SCALING,
    held_back,
    labels,
    pivot,
    sequence_block,
    steps_table,
    task_unigram_loss,
    with_depth_means,
)
from posenc.analysis.evidence import TableEvidence
from posenc.analysis.literature import claims_for
from posenc.analysis.mastery import MIN_LEARNED_SEEDS
from posenc.analysis.plots import plot_all, plot_positions, plot_steps
from posenc.analysis.selection import choices_markdown
from posenc.analysis.stats import group_estimate, paired_difference
from posenc.analysis.store import Results
from posenc.task_facts import NESTED_EVALUATION, has_mastery_criterion, report_metrics

GENERATED = "Generated"  # the first word of the report's one line that changes between regenerations

#: How the report states the mastery rule (:mod:`posenc.analysis.mastery`) where no configuration has
#: :data:`MIN_LEARNED_SEEDS` seeds, so that only "every seed" can make it learned ...
ALL_SEEDS_RULE = (
    "A group whose seeds did not all reach the mastery criterion over its training lengths (held-out exact "
    "match ≥ `train.target_exact_match`) is marked *not learned* and not compared past it ('n/l')."
)
#: ... and where one has, so that the quorum can.
QUORUM_RULE = (
    "A group counts as learned when all its seeds reached the mastery criterion over its training lengths "
    "(held-out exact match ≥ `train.target_exact_match`), or at least "
    f"{MIN_LEARNED_SEEDS} of them did (*learned by quorum*, fixed before the results: `posenc.analysis.mastery`): "
    "then at every length but the training length (which keeps every seed) its tables, intervals, figures, "
    "paired differences and literature checks use only the seeds that learned, and its share is shown ('seeds "
    "learned k/n' at the training length and in the figures' legends; the mastery table gives every group's). "
    "Any other group is marked *not learned* and not compared past its training length ('n/l')."
)


def method(comparison: pd.DataFrame) -> str:
    """The report's paragraph on how cells are computed, with the mastery rule as it applies to
    ``comparison``: the quorum is stated where a configuration has at least :data:`MIN_LEARNED_SEEDS`
    seeds (with fewer, "every seed" is the rule, and reports of such comparisons read as before it existed)."""
    trained = comparison["n_trained"] if "n_trained" in comparison else pd.Series(dtype=float)
    rule = QUORUM_RULE if (trained >= MIN_LEARNED_SEEDS).any() else ALL_SEEDS_RULE
    return (
        "Each cell is the mean over seeds with its 95% interval in brackets. The interval counts both sources of "
        "uncertainty: the spread between seeds, with Student's t on S − 1 degrees of freedom, and the finite "
        "number of evaluated sequences (lm: batch means of about √n consecutive windows), as Wilson's score "
        "interval at an effective sample size (`posenc.analysis.stats`), so it stays inside [0, 1] and is never of "
        "zero width for a share. Runs are pooled only when their whole configuration but the seed is the same. "
        f"{rule} Every run sees the same evaluation sequences at a given length, so differences between encoders "
        "are paired by sequence. '—': not evaluated, or not representable (a learned table has no rows past its "
        "training length). Full numbers: `comparison.*`; per run and length: `extrapolation.*`; per sequence: "
        "`sequences.parquet`; by answer position: `positions.parquet`."
    )


LM_METHOD = (
    "lm has no mastery criterion: a run *converged* when its held-out loss at the training length, checked every "
    "`train.check_every` steps, fell by under 2% over the last quarter of its budget (`posenc.task_facts."
    "converged`; the fall per run: `training.*`, `heldout_loss_fall`). A group with a seed that did not converge "
    "is shown at every length, its share of converged seeds given at the training length (dotted in figures, "
    "labelled *not converged*), and a "
    "literature check on it is not testable. The lm claims are checked on each window's change of loss from the "
    "training length (the same bytes read with the shorter context; `posenc.analysis.evidence`), not on the loss "
    "itself."
)


def _position_length(rows: pd.DataFrame) -> int | None:
    """The evaluation length the accuracy-by-position figure shows: 4x the training length if evaluated,
    else the longest evaluated length."""
    lengths = sorted(rows["eval_length"].unique())
    if not lengths:
        return None
    want = int(rows["train_length"].iloc[0]) * 4
    return want if want in lengths else int(lengths[-1])


def _budget(config: object) -> float:
    """A run's training budget (``train.steps``) from its configuration JSON; NaN where not recorded."""
    try:
        return float(json.loads(config)["train"]["steps"])
    except (TypeError, ValueError, KeyError):
        return float("nan")


def _figures(results: Results, comparison: pd.DataFrame, out_dir: Path) -> dict[tuple, Path]:
    """Every figure: metrics by length, steps-to-learn, accuracy by answer position (learned groups)."""
    figures = plot_all(comparison, out_dir, {t: report_metrics(t) for t in comparison["task"].unique()})
    ev = results.evaluations
    runs = ev.drop_duplicates("run_id").assign(label=lambda t: labels(t.assign(scaling=NO_SCALING, depth=float("nan"))))
    runs = runs.assign(learned=runs["learned"].astype(bool), budget=runs["config"].map(_budget))
    mastered = runs[runs["task"].map(has_mastery_criterion)]  # lm: no criterion
    if len(mastered):
        figures[("steps",)] = plot_steps(mastered, out_dir)[0]
    learned_rows = ev[(ev["scaling"] == NO_SCALING) & ev["depth"].isna() & ev["learned"].astype(bool)]
    pos = results.positions.merge(
        learned_rows[
            ["run_id", "eval_length", "scaling", "task", "train_length", "encoder", "variant", "config"]
        ],  # config: the chance line
        on=["run_id", "eval_length", "scaling"],
    )
    pos = pos.assign(label=labels(pos.assign(depth=float("nan"))))
    for task in sorted(pos["task"].unique()):
        length = _position_length(pos[pos["task"] == task])
        if length is not None and has_mastery_criterion(task):
            figures[(task, "positions")] = plot_positions(pos, task, length, out_dir)[0]
    return figures


REFERENCE = Side("rope")  # paired differences are shown against the most widely used encoder
PAIRED_FACTORS = (2, 4)  # ... at these multiples of the training length: just past it, and well past it


CHANGE_FACTORS = (2, 4, 8)  # lm: the change of loss from the training length, where the lm claims look


def loss_change_table(evidence: TableEvidence, comparison: pd.DataFrame, task: str) -> pd.DataFrame | None:
    """Each encoder's change of loss from the training length at :data:`CHANGE_FACTORS` (each window's loss
    minus that of the same bytes read at ``L``: :meth:`posenc.analysis.evidence.TableEvidence.loss_change`), mean [95%
    interval] over seeds and windows (batch means); rotary checkpoints under each scaling method evaluated too.
    None where the task's evaluation sequences do not nest (every task but lm)."""
    if task not in NESTED_EVALUATION:
        return None
    mine = comparison[comparison["task"] == task]
    sides = sorted(
        {Side(e, sc) for e, sc in zip(mine["encoder"], mine["scaling"])},
        key=lambda side: (side.encoder, side.scaling != NO_SCALING, side.scaling),
    )
    rows = []
    for side in sides:
        train, row = evidence.train_length(task, side), {"encoder": side.label()}
        for factor in CHANGE_FACTORS:
            found = evidence.at_length(task, side, train * factor, "loss_change") if train else None
            values = list(found.values()) if found else []
            block = sequence_block(task, min(v.size for v in values)) if values else None
            row[f"{factor}×"] = (
                group_estimate(values, bounded=False, block=block).format(signed=True) if values else "—"
            )
        rows.append(row)
    return pd.DataFrame(rows) if rows else None


def _paired_cell(evidence: TableEvidence, task: str, side: Side, reference: Side, factor: int, metric: str) -> str:
    """``side − reference`` on ``metric`` at ``factor`` × the training length, mean [95% interval], paired
    by sequence, and by seed too where both sides are the same checkpoints
    (:func:`posenc.analysis.claims.paired_by_seed`, as the claims pair them); "—" where a side was not
    evaluated."""
    a, b = (evidence.per_seed(task, s, factor, metric) for s in (side, reference))
    if not a or not b:
        return "—"
    by_seed = paired_by_seed(evidence, task, side, reference, list(a), list(b))
    return paired_difference(
        list(a.values()),
        list(b.values()),
        metric != "loss",
        same_seeds=by_seed,
        block=sequence_block(task, min(len(v) for v in a.values())),
    ).format(signed=True)


def paired_table(evidence: TableEvidence, comparison: pd.DataFrame, task: str, metric: str) -> pd.DataFrame | None:
    """Each learned encoder (as trained) minus :data:`REFERENCE` on ``metric``, paired by sequence, with its
    95% interval (:func:`posenc.analysis.stats.paired_difference`), at :data:`PAIRED_FACTORS`; None when the
    reference did not learn ``task`` or was not run (lm: groups that did not converge are shown too, as in
    every table; only the literature checks hold them back)."""
    learned = evidence.learned(task, REFERENCE)
    if learned is None or held_back(learned, task):
        return None
    rows = []
    rows_of_task = comparison[comparison["task"] == task]
    shown = [not held_back(bool(k), task) for k in rows_of_task["learned"]]
    encoders = sorted(set(rows_of_task.loc[shown, "encoder"]))
    for encoder in encoders:
        if encoder == REFERENCE.encoder:
            continue
        row = {"encoder": f"{encoder} − {REFERENCE.encoder}"}
        for factor in PAIRED_FACTORS:
            row[f"{factor}×"] = _paired_cell(evidence, task, Side(encoder), REFERENCE, factor, metric)
        rows.append(row)
    return pd.DataFrame(rows) if rows else None


def scaling_paired_table(
    evidence: TableEvidence, comparison: pd.DataFrame, task: str, metric: str
) -> pd.DataFrame | None:
    """Each RoPE scaling method minus the same checkpoints as trained, on ``metric`` at
    :data:`PAIRED_FACTORS`: one checkpoint per seed read two ways, so paired by seed as well as by sequence
    (a seed's own effect, shared by both readings, cancels instead of being counted twice); None where no
    learned encoder was evaluated under a method."""
    mine = comparison[(comparison["task"] == task) & (comparison["scaling"] != NO_SCALING)]
    rows = []
    for encoder, scaling in sorted(set(zip(mine["encoder"], mine["scaling"]))):
        trained, learned = Side(encoder), evidence.learned(task, Side(encoder))
        if learned is None or held_back(learned, task):
            continue
        side = Side(encoder, scaling)
        row = {"encoder": f"{side.label()} − {trained.label()}"}
        for factor in PAIRED_FACTORS:
            row[f"{factor}×"] = _paired_cell(evidence, task, side, trained, factor, metric)
        rows.append(row)
    return pd.DataFrame(rows) if rows else None


def render(
    results: Results, comparison: pd.DataFrame, out_dir: Path, command: str, choices: pd.DataFrame | None = None
) -> tuple[str, dict]:
    """Draw every figure into ``out_dir`` and return ``report.md``'s text and the figures.

    Args:
        results: the evaluations compared (with ``variant``; see :func:`posenc.analysis.compare.variants`).
        comparison: :func:`posenc.analysis.compare.aggregate` of them.
        command: the command that made it, named in the report.
        choices: :func:`posenc.analysis.selection.choose_runs`'s table when the runs compared were chosen among
            candidates (``--choose``), else None.
    """
    figures = _figures(results, comparison, out_dir)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    seeds = sorted({s for cell in comparison["seeds"] for s in str(cell).split(",") if s}, key=int)
    n_runs = results.evaluations["run_id"].nunique()
    parts = [
        "# posenc comparison\n",
        f"{GENERATED} on {when} by `{command}`.\n",
        f"{n_runs} runs (seeds {', '.join(seeds)}). {method(comparison)}"
        + (f" {LM_METHOD}" if "lm" in set(comparison["task"]) else "")
        + "\n",
    ]
    if choices is not None and (section := choices_markdown(choices)):
        key = choices["key"].iloc[0]
        parts.append(
            f"## Runs compared: `{key}` chosen per configuration\n\n"
            f"Where runs differ only in `{key}`, the value compared is the one whose seeds learned best "
            "at the training length (most seeds learned, then fewest mean steps-to-learn, then the "
            "closest to learning; `posenc.analysis.selection`): nothing past the training length is looked at.\n\n"
            + section
            + "\n"
        )
    evidence = TableEvidence(with_depth_means(results))
    steps = steps_table(comparison)
    for task in sorted(comparison["task"].unique()):
        parts += _task_section(task, comparison, steps, evidence, figures)
    if ("steps",) in figures:
        parts.append(f"## Steps to learn\n\n![steps to learn]({figures[('steps',)].name})\n")
    parts += baseline_section(evidence, results.evaluations, _paired_metric)
    parts += _literature_section(comparison, evidence)
    return "\n".join(parts), figures


def _paired_metric(task: str) -> str:
    """What paired differences are shown in: token accuracy (a share per sequence), lm's loss."""
    metrics = report_metrics(task)
    return "loss" if metrics[0] == "perplexity" else metrics[1]


def _task_section(
    task: str, comparison: pd.DataFrame, steps: pd.DataFrame, evidence: TableEvidence, figures: dict
) -> list[str]:
    """One task's part of the report: mastery, metrics by length, figures, paired differences and, for
    rotary checkpoints evaluated under RoPE scaling methods, their tables and figures."""
    trained = comparison[comparison["scaling"] == NO_SCALING]
    parts = [f"## {task}\n"]
    data = comparison.loc[comparison["task"] == task, "data"].dropna().unique() if "data" in comparison else []
    parts += [f"Data: {line}\n" for line in data if line]
    mine = steps[steps["task"] == task].drop(columns="task")
    if has_mastery_criterion(task):
        parts.append(
            "**In distribution** (mastery: seeds that learned, mean steps-to-learn of those)\n\n"
            + mine.to_markdown(index=False, disable_numparse=True)
            + "\n"
        )
    metrics = report_metrics(task)
    for metric in metrics[:2]:
        table = pivot(trained, metric, task).drop(columns="task")
        parts.append(
            f"**{metric.replace('_', ' ')}** by evaluation length\n\n"
            + table.to_markdown(index=False, disable_numparse=True)
            + "\n"
        )
    parts += [f"![{task}: {m.replace('_', ' ')}]({figures[(task, m)].name})\n" for m in metrics if (task, m) in figures]
    parts += [
        f"![{task}: {m.replace('_', ' ')} by depth]({figures[(task, m, 'depth')].name})\n"
        for m in metrics
        if (task, m, "depth") in figures
    ]
    if (task, "positions") in figures:
        parts.append(f"![{task}: accuracy by answer position]({figures[(task, 'positions')].name})\n")
    change = loss_change_table(evidence, comparison, task)
    if change is not None:
        parts.append(
            "**Change of loss from the training length** (nats per byte; each window minus the same bytes "
            "read at the training length; mean [95% interval] over seeds and windows; what the lm "
            "claims are checked on)\n\n" + change.to_markdown(index=False, disable_numparse=True) + "\n"
        )
    encoders = sorted(trained.loc[trained["task"] == task, "encoder"].unique())
    unigram = against_unigram(trained, task, [Side(e) for e in encoders], every=False)
    if unigram:
        parts.append(f"**Unigram reference** (dashed in the loss and perplexity figures): {unigram}.\n")
    diff_metric = _paired_metric(task)
    diffs = paired_table(evidence, comparison, task, diff_metric)
    if diffs is not None:
        parts.append(
            f"**Paired differences** in {diff_metric.replace('_', ' ')} against {REFERENCE.encoder} "
            "(same sequences, mean [95% interval]; positive: "
            f"{'higher loss' if diff_metric == 'loss' else 'better'} than {REFERENCE.encoder})\n\n"
            + diffs.to_markdown(index=False, disable_numparse=True)
            + "\n"
        )
    return parts + _scaling_section(task, comparison, evidence, figures)


def _scaling_section(task: str, comparison: pd.DataFrame, evidence: TableEvidence, figures: dict) -> list[str]:
    """Rotary checkpoints evaluated under RoPE scaling methods: their tables, figures and each method's
    paired difference from the same checkpoints as trained (by seed and sequence); nothing where none was."""
    scaled_encoders = set(comparison.loc[comparison["scaling"] != NO_SCALING, "encoder"])
    scaled = comparison[comparison["encoder"].isin(scaled_encoders) & (comparison["task"] == task)]
    if not len(scaled) or not (scaled["scaling"] != NO_SCALING).any():
        return []
    metrics = report_metrics(task)
    parts = [
        (
            f"### {task}: RoPE context extension at evaluation\n\n"
            "The same rotary checkpoints under each `--rope-scaling` method, no retraining; the "
            "factor follows the evaluation length (s = L'/L) unless a label says `:<factor>` (so "
            "`dynamic_ntk`, Hugging Face's formula with factor 1, equals `ntk` here).\n"
        )
    ]
    for metric in metrics[:2]:
        table = pivot(scaled[scaled["depth"].isna()], metric, task).drop(columns="task")
        parts.append(
            f"**{metric.replace('_', ' ')}** by evaluation length\n\n"
            + table.to_markdown(index=False, disable_numparse=True)
            + "\n"
        )
    parts += [
        f"![{task}: {m.replace('_', ' ')} under RoPE scaling]({figures[(task, m, 'rope_scaling')].name})\n"
        for m in metrics
        if (task, m, "rope_scaling") in figures
    ]
    diff_metric = _paired_metric(task)
    diffs = scaling_paired_table(evidence, comparison, task, diff_metric)
    if diffs is not None:
        parts.append(
            f"**Paired differences** in {diff_metric.replace('_', ' ')} against the same "
            "checkpoints as trained (each seed's checkpoint read both ways: paired by seed and by "
            "sequence, mean [95% interval]; positive: "
            f"{'higher loss' if diff_metric == 'loss' else 'better'} than as trained)\n\n"
            + diffs.to_markdown(index=False, disable_numparse=True)
            + "\n"
        )
    return parts


def _literature_section(comparison: pd.DataFrame, evidence: TableEvidence) -> list[str]:
    """The verdict on each claim whose encoders were all run on its task here (a claim about encoders this
    comparison does not hold says nothing about it; one whose side did not learn or was not evaluated is "not
    testable"), and the paper's numbers beside posenc's for every encoder of the comparison."""
    claims = [
        c
        for c in claims_for(set(comparison["task"]))
        if all(evidence.learned(c.task, side) is not None for side in c.sides())
    ]
    verdicts = [check(c, evidence) for c in claims]
    if not verdicts:
        return []
    parts = [
        (
            "## Against the literature\n\n"
            "Each claim is checked by one rule (`posenc.analysis.claims.check`) over windows of evaluation lengths "
            "(e.g. (1×, 2×]: every length past the training length up to twice it, pooled per seed by "
            "length, then sequence, over the lengths both sides were evaluated at). A comparison holds "
            "when the paired interval of the difference lies on the expected side of 0, is contradicted "
            "when it lies on the other side (either only with two seeds or more a side: from one seed the "
            "spread between seeds is unknown), and is not testable when neither side is above chance "
            "(exact match 0, token accuracy 1/alphabet). A claim with k comparisons puts each interval "
            "at 1 − 0.05/k (Bonferroni), so a verdict is wrong with probability at most 5%. Judged on its "
            "testable comparisons: **agrees** when all hold, **differs** when any is contradicted, "
            "**inconclusive** otherwise, **not testable** when none is, or a side did not learn its task "
            "or was not run.\n"
        ),
        "\n".join(with_ungated(v, evidence) + _with_unigram(v, comparison) for v in verdicts) + "\n",
    ]
    trained = comparison[comparison["scaling"] == NO_SCALING]
    for claim in (v.claim for v in verdicts if v.claim.reported):
        mine = trained[(trained["task"] == claim.task) & (trained["variant"].fillna("") == "")]
        rows = paper_vs_posenc(claim, evidence, others=[Side(e) for e in sorted(mine["encoder"].unique())])
        table = pd.DataFrame(
            {
                "encoder": [r.side.label() for r, _, _ in rows],
                "paper": ["—" if math.isnan(r.value) else f"{r.value:.3f}" for r, _, _ in rows],
                f"posenc {claim.windows[0].label()}": [est.format() for _, est, _ in rows],
                "lengths": [", ".join(map(str, n)) or "—" for _, _, n in rows],
            }
        )
        parts.append(
            f"**{claim.source.split(',')[0]} ({claim.task}): paper vs posenc** "
            f"({claim.reported_where}; posenc: mean [95% interval] over seeds)\n\n"
            + table.to_markdown(index=False, disable_numparse=True)
            + "\n"
        )
    return parts


def with_ungated(verdict, evidence: TableEvidence, *, mastery: bool = False) -> str:
    """A verdict's bullet, and under it, for a claim gated only by convergence (lm) or, with ``mastery``, by
    the mastery gate, what the check says with the gate lifted (:func:`posenc.analysis.claims.ungated`): a
    sensitivity line, not a verdict. Reports lift convergence only; scripts/ungated_claims.py lifts both."""
    lifted = ungated(verdict, evidence, mastery=mastery)
    if lifted is None:
        return verdict.markdown()
    counted = "learned (every seed)" if has_mastery_criterion(verdict.claim.task) else "converged"
    return (
        f"{verdict.markdown()}\n  - *Sensitivity, not a verdict:* with every side counted as {counted} the "
        f"check would say **{lifted.outcome}**: {'; '.join(lifted.details)}."
        + (f" {lifted.rule}." if lifted.rule else "")
    )


UNIGRAM_FACTORS = (4, 8)  # lm: where the loss is set against the unigram reference (where RoPE's blows up)


def _loss_at(comparison: pd.DataFrame, task: str, side: Side, factor: int) -> pd.Series | None:
    """The comparison row of ``side`` on ``task`` (depth mean, no variant) at ``factor`` × its training
    length; None where there is not exactly one."""
    rows = comparison[
        (comparison["task"] == task)
        & (comparison["encoder"] == side.encoder)
        & (comparison["scaling"] == side.scaling)
        & comparison["depth"].isna()
        & (comparison["eval_length"] == comparison["train_length"] * factor)
    ]
    if "variant" in rows:
        rows = rows[rows["variant"].fillna("") == ""]
    return rows.iloc[0] if len(rows) == 1 and not math.isnan(rows.iloc[0]["loss_mean"]) else None


def against_unigram(comparison: pd.DataFrame, task: str, sides: list[Side], every: bool = True) -> str:
    """Where each side's loss at :data:`UNIGRAM_FACTORS` × the training length sits against ``task``'s
    unigram reference (:func:`posenc.analysis.compare.task_unigram_loss`: the loss of a model that reads no
    context):
    above it (its interval too: the side reads the text worse than ignoring the context would), its interval
    holding it, or below it (listed only with ``every``). "" where the tables record no reference."""
    reference = task_unigram_loss(comparison, task)
    if math.isnan(reference):
        return ""
    where: dict[str, list[str]] = {"above": [], "around": [], "below": []}
    for side in sides:
        for factor in UNIGRAM_FACTORS:
            row = _loss_at(comparison, task, side, factor)
            if row is None:
                continue
            low, high = row["loss_low"], row["loss_high"]
            place = "above" if low > reference else "below" if high < reference else "around"
            where[place].append(f"{side.label()} {factor}× {row['loss_mean']:.2f} [{low:.2f}, {high:.2f}]")
    shown = [
        f"above it (the text read worse than with no context): {', '.join(where['above']) or 'none'}",
        f"its interval holds it: {', '.join(where['around']) or 'none'}",
    ]
    shown.append(f"below it: {', '.join(where['below']) or 'none'}" if every else "below it: every other")
    times = " and ".join(f"{f}×" for f in UNIGRAM_FACTORS)
    return (
        f"unigram loss {reference:.3f} nats/byte, a model that reads no context (the training split's "
        f"byte frequencies) on the same text; loss at {times} the training length, mean [95% interval]: "
        + "; ".join(shown)
    )


def _with_unigram(verdict, comparison: pd.DataFrame) -> str:
    """Under a testable verdict on a task whose tables record a unigram reference (lm), where the claim's
    sides' loss sits against it (:func:`against_unigram`): the reference for "has lost the text", not a
    verdict."""
    if verdict.outcome == "not testable":
        return ""
    text = against_unigram(comparison, verdict.claim.task, list(verdict.claim.sides()))
    return f"\n  - *Reference, not a verdict:* {text}." if text else ""


def same_report(a: str, b: str) -> bool:
    """Whether two report texts are the same but for the line saying when (and by what) they were made."""

    def body(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith(GENERATED)]

    return body(a) == body(b)
