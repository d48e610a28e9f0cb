"""Quick views of the per-run evaluation table for the terminal and ``extrapolation_summary.md``: the seed
mean of one metric by evaluation length. Intervals and pooling rules live in :mod:`posenc.analysis.compare`."""

from __future__ import annotations

import pandas as pd

from posenc.analysis.compare import labels, variants

SUMMARY_METRICS = ("exact_match", "token_accuracy", "perplexity")


def summary(table: pd.DataFrame, metric: str = "exact_match") -> pd.DataFrame:
    """``metric`` as (task, encoder label, train length) x eval length, the mean over the seeds of each
    configuration; only combinations that were evaluated (no cross product of tasks and encoders)."""
    view = table.assign(variant=variants(table))
    view = view.assign(encoder=labels(view))
    means = view.groupby(["task", "encoder", "train_length", "eval_length"], sort=True)[metric].mean()
    return means.unstack("eval_length")


def summary_markdown(table: pd.DataFrame) -> str:
    """Exact match, token accuracy and perplexity by evaluation length, one Markdown table each (seed means;
    ``comparison.md`` and ``report.md`` give intervals)."""
    parts = []
    for metric in SUMMARY_METRICS:
        pivot = summary(table, metric).reset_index()
        pivot.columns = [str(c) for c in pivot.columns]
        parts.append(
            f"### {metric.replace('_', ' ')} by evaluation length (mean over seeds)\n\n"
            + pivot.to_markdown(index=False, floatfmt=".3f")
        )
    return "\n\n".join(parts) + "\n"
