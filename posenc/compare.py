"""Aggregating evaluations across seeds: mean, standard deviation and a 95% confidence interval.

One row per (task, encoder, train_length, eval_length, scaling, depth). The interval is Student's t interval of the mean
over seeds, ``mean ± t_{0.975, n-1} · std / sqrt(n)`` with the sample standard deviation (``ddof=1``);
it is undefined (NaN) for a single seed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from posenc.errors import PosencError
from posenc.evaluate import perplexity

GROUP = ["task", "encoder", "train_length", "eval_length", "scaling", "depth"]
METRICS = ("exact_match", "token_accuracy", "loss", "perplexity")
TABLE_STEM = "comparison"

# Two-sided 95% quantiles of Student's t, t_{0.975, df} for df = 1..30 (standard tables; checked against
# scipy.stats.t.ppf(0.975, df) to 4 decimals).
_T975 = [
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
]  # fmt: skip


def t_quantile_975(df: int) -> float:
    """``t_{0.975, df}``: the table for df <= 30, beyond it the Cornish-Fisher expansion around the normal
    quantile (Abramowitz & Stegun 26.7.5; error < 1e-4 for df > 30). NaN for df < 1."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def mean_std_ci(values: pd.Series) -> tuple[int, float, float, float]:
    """``(n, mean, std, ci95 half-width)`` of the non-NaN values; NaN where undefined."""
    v = values.dropna().astype(float)
    n = len(v)
    if n == 0:
        return 0, math.nan, math.nan, math.nan
    mean = float(v.mean())
    if n == 1:
        return 1, mean, math.nan, math.nan
    std = float(v.std(ddof=1))
    return n, mean, std, t_quantile_975(n - 1) * std / math.sqrt(n)


def with_depth_means(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` plus, for each (run, length, scaling) evaluated at several depths (passkey), a row with depth
    NaN holding the mean over its depths: the task's score at that length. Perplexity is ``exp`` of the
    mean loss (every depth scores the same number of answer tokens)."""
    deep = table[table["depth"].notna()]
    if deep.empty:
        return table
    keys = ["run", "encoder", "task", "train_length", "eval_length", "scaling", "seed"]
    means = deep.groupby(keys, sort=False, dropna=False).agg(
        scaling_factor=("scaling_factor", "first"), loss=("loss", "mean"),
        token_accuracy=("token_accuracy", "mean"), exact_match=("exact_match", "mean"),
        n_sequences=("n_sequences", "sum"), seconds=("seconds", "sum"),
        note=("note", lambda notes: next((n for n in notes.fillna("") if n), "")),
    ).reset_index()
    means = means.assign(depth=math.nan, perplexity=means["loss"].map(perplexity))
    return pd.concat([table, means[table.columns]], ignore_index=True)


def aggregate(table: pd.DataFrame) -> pd.DataFrame:
    """Per :data:`GROUP`: ``n_seeds`` (seeds with a value), ``scaling_factor``, and for each metric
    ``<metric>_mean``, ``_std``, ``_ci95`` (half-width), ``_ci95_low``, ``_ci95_high``; plus ``note``
    (the first note of the group's rows, e.g. why a learned table has no value).

    Args:
        table: the tidy evaluation table (see :data:`posenc.extrapolate.COLUMNS`), one row per run and length.
    """
    rows = []
    for key, group in with_depth_means(table).groupby(GROUP, sort=True, dropna=False):
        row = dict(zip(GROUP, key))
        row["n_seeds"] = int(group["exact_match"].notna().sum())
        row["seeds"] = ",".join(str(s) for s in sorted(group["seed"].unique()))
        row["scaling_factor"] = group["scaling_factor"].iloc[0]  # set by scaling and lengths
        for metric in METRICS:
            _, mean, std, half = mean_std_ci(group[metric])
            row.update({f"{metric}_mean": mean, f"{metric}_std": std, f"{metric}_ci95": half,
                        f"{metric}_ci95_low": mean - half, f"{metric}_ci95_high": mean + half})
        notes = [n for n in group["note"].fillna("") if n]
        row["note"] = notes[0] if notes else ""
        rows.append(row)
    return pd.DataFrame(rows)


def report_metrics(task: str) -> tuple[str, ...]:
    """The metrics tables and figures show for ``task`` (its ``report_metrics``; lm: perplexity first)."""
    from posenc.tasks import TASKS, Task

    return TASKS.get(task, Task).report_metrics


def pivot(comparison: pd.DataFrame, metric: str = "exact_match", task: str | None = None) -> pd.DataFrame:
    """``mean ± ci95`` strings, (task, encoder label) x eval length: the table a paper shows.

    The label carries the RoPE scaling and depth where rows have them (:func:`posenc.extrapolate.labels`).
    """
    from posenc.extrapolate import labels

    view = comparison if task is None else comparison[comparison["task"] == task]
    view = view.assign(encoder=labels(view))

    def cell(row: pd.Series) -> str:
        mean, half = row[f"{metric}_mean"], row[f"{metric}_ci95"]
        if math.isnan(mean):
            return "—"
        return f"{mean:.3f}" if math.isnan(half) else f"{mean:.3f} ± {half:.3f}"

    cells = view.assign(cell=view.apply(cell, axis=1))
    out = cells.pivot_table(index=["task", "encoder"], columns="eval_length", values="cell", aggfunc="first")
    out.columns = [str(c) for c in out.columns]
    return out.reset_index().fillna("—")


def write_comparison(
    out: Path, new: pd.DataFrame, runs: list[Path], lengths: list[int] | None, skipped: list[str], command: str
) -> tuple[pd.DataFrame, list[Path], dict[tuple, Path]]:
    """Merge ``new`` evaluations into ``out``'s evaluation table, aggregate ``runs`` (at ``lengths``, or all
    evaluated lengths) and write the tables, figures and ``report.md``. Call it holding ``table_lock(out)``.

    Returns:
        The comparison table, the table files written and the figures (see :func:`posenc.plots.plot_all`).
    """
    from posenc.extrapolate import TABLE_STEM as EVAL_STEM
    from posenc.extrapolate import merge_into, summary_markdown
    from posenc.io import atomic_write_text
    from posenc.plots import plot_all
    from posenc.report import write_report
    from posenc.tables import describe_run, read_table, write_tables

    merged = merge_into(read_table(out, EVAL_STEM), new)
    mine = merged[merged["run"].isin({describe_run(run) for run in runs})]
    if lengths is not None:
        mine = mine[mine["eval_length"].isin(lengths)]
    if mine.empty:
        raise PosencError("no evaluations of these runs to compare")
    comparison = aggregate(mine)
    paths = write_tables(merged, out, EVAL_STEM, summary=summary_markdown(merged))
    paths += write_tables(comparison, out, TABLE_STEM)
    figures = plot_all(comparison, out, {task: report_metrics(task) for task in comparison["task"].unique()})
    report = write_report(comparison, figures, out, command, len(runs), skipped, data=data_descriptions(runs))
    atomic_write_text(out / "report.md", report)
    return comparison, paths, figures


def data_descriptions(runs: list[Path]) -> dict[str, list[str]]:
    """Task name -> the distinct :meth:`~posenc.tasks.Task.describe_data` lines of ``runs`` (as the data reads
    now, which is what the evaluations read); tasks that generate their data, or unreadable runs, add none."""
    import yaml

    from posenc.config import run_config_from_dict
    from posenc.io import CONFIG_FILE
    from posenc.tasks import build_task

    found: dict[str, list[str]] = {}
    for run in runs:
        try:
            cfg = run_config_from_dict(yaml.safe_load((run / CONFIG_FILE).read_text()))
            line = build_task(cfg.task.name, cfg.task.options).describe_data()
        except (OSError, yaml.YAMLError, PosencError):
            continue
        if line and line not in found.setdefault(cfg.task.name, []):
            found[cfg.task.name].append(line)
    return found
