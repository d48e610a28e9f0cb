"""Figures of a comparison: a metric against evaluation length, one line per encoder, a band across seeds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posenc import io as run_io

LABELS = {"exact_match": "exact match", "token_accuracy": "token accuracy", "loss": "loss (nats per answer token)"}


def plot_metric(comparison: pd.DataFrame, task: str, metric: str, out_dir: Path) -> list[Path]:
    """Draw ``metric`` vs evaluation length for ``task`` and write ``<task>_<metric>.png`` and ``.svg``.

    x: evaluation length on a log2 axis; one line per encoder (its mean over seeds) with the 95% interval
    as a band (clipped to [0, 1] for accuracies); dotted vertical lines at the training lengths.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, in jobs and CI
    import matplotlib.pyplot as plt

    view = comparison[comparison["task"] == task].sort_values("eval_length")
    fig, ax = plt.subplots(figsize=(6.4, 4.0), constrained_layout=True)
    for encoder, rows in view.groupby("encoder", sort=True):
        rows = rows[rows[f"{metric}_mean"].notna()]
        if rows.empty:
            continue
        mean = rows[f"{metric}_mean"]
        (line,) = ax.plot(rows["eval_length"], mean, marker="o", markersize=3, label=encoder)
        low, high = rows[f"{metric}_ci95_low"], rows[f"{metric}_ci95_high"]
        if metric != "loss":
            low, high = low.clip(0, 1), high.clip(0, 1)
        ax.fill_between(rows["eval_length"], low, high, color=line.get_color(), alpha=0.18, linewidth=0)
    for length in sorted(view["train_length"].unique()):
        ax.axvline(length, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"train {length}", (length, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                    color="grey", ha="left", va="top", xytext=(2, -2), textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(LABELS.get(metric, metric))
    if metric != "loss":
        ax.set_ylim(-0.02, 1.02)
    seeds = view["n_seeds"].max() if not view.empty else 0
    ax.set_title(f"{task}: {LABELS.get(metric, metric)} (mean of {seeds} seeds, 95% CI band)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    paths = []
    for ext in ("png", "svg"):
        path = Path(out_dir) / f"{task}_{metric}.{ext}"
        run_io.atomic_write(path, lambda f, ext=ext: fig.savefig(f, format=ext, dpi=150))
        paths.append(path)
    plt.close(fig)
    return paths


def plot_all(comparison: pd.DataFrame, out_dir: Path, metrics: tuple[str, ...]) -> dict[tuple[str, str], Path]:
    """Every (task, metric) figure; returns the PNG path of each."""
    figures = {}
    for task in sorted(comparison["task"].unique()):
        for metric in metrics:
            if comparison.loc[comparison["task"] == task, f"{metric}_mean"].notna().any():
                figures[(task, metric)] = plot_metric(comparison, task, metric, out_dir)[0]
    return figures
