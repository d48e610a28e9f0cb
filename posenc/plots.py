"""Figures of a comparison: a metric against evaluation length, one line per encoder, a band across seeds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posenc import io as run_io

LABELS = {
    "exact_match": "exact match", "token_accuracy": "token accuracy", "loss": "loss (nats per answer token)",
    "perplexity": "perplexity (per answer token)",
}  # fmt: skip
BOUNDED = ("exact_match", "token_accuracy")  # shares: axis and bands clipped to [0, 1]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, in jobs and CI
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, view: pd.DataFrame, metric: str, by: pd.Series) -> None:
    """One line per value of ``by`` (mean over seeds) with its 95% interval as a band; axes dressed."""
    for name, rows in view.groupby(by, sort=True):
        rows = rows[rows[f"{metric}_mean"].notna()].sort_values("eval_length")
        if rows.empty:
            continue
        (line,) = ax.plot(rows["eval_length"], rows[f"{metric}_mean"], marker="o", markersize=3, label=name)
        low, high = rows[f"{metric}_ci95_low"], rows[f"{metric}_ci95_high"]
        if metric in BOUNDED:
            low, high = low.clip(0, 1), high.clip(0, 1)
        ax.fill_between(rows["eval_length"], low, high, color=line.get_color(), alpha=0.18, linewidth=0)
    for length in sorted(view["train_length"].unique()):
        ax.axvline(length, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"train {length}", (length, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                    color="grey", ha="left", va="top", xytext=(2, -2), textcoords="offset points")
    ax.set_xscale("log", base=2)
    if metric in BOUNDED:
        ax.set_ylim(-0.02, 1.02)
    elif metric == "perplexity":
        ax.set_yscale("log")
    ax.grid(alpha=0.3)


def _save(fig, out_dir: Path, stem: str) -> list[Path]:
    paths = []
    for ext in ("png", "svg"):
        path = Path(out_dir) / f"{stem}.{ext}"
        run_io.atomic_write(path, lambda f, ext=ext: fig.savefig(f, format=ext, dpi=150))
        paths.append(path)
    return paths


def plot_metric(
    comparison: pd.DataFrame, task: str, metric: str, out_dir: Path, stem: str | None = None, title: str = ""
) -> list[Path]:
    """Draw ``metric`` vs evaluation length for ``task`` and write ``<stem>.png`` and ``.svg``.

    x: evaluation length on a log2 axis; one line per encoder label (its mean over seeds; RoPE scaling and
    depth in the label where set) with the 95% interval as a band (clipped to [0, 1] for accuracies);
    dotted vertical lines at the training lengths. Perplexity uses a log y axis. ``stem`` defaults to
    ``<task>_<metric>``.
    """
    from posenc.extrapolate import labels

    plt = _pyplot()
    view = comparison[comparison["task"] == task]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), constrained_layout=True)
    _draw(ax, view, metric, labels(view))
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(LABELS.get(metric, metric))
    seeds = view["n_seeds"].max() if not view.empty else 0
    ax.set_title(f"{title or task}: {LABELS.get(metric, metric)} (mean of {seeds} seeds, 95% CI band)",
                 fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    paths = _save(fig, out_dir, stem or f"{task}_{metric}")
    plt.close(fig)
    return paths


def plot_by_depth(comparison: pd.DataFrame, task: str, metric: str, out_dir: Path) -> list[Path]:
    """``metric`` vs evaluation length for a task evaluated at several depths (passkey): one panel per
    encoder (and RoPE scaling), one line per depth; writes ``<task>_<metric>_by_depth.png`` and ``.svg``."""
    from posenc.extrapolate import labels

    plt = _pyplot()
    view = comparison[(comparison["task"] == task) & comparison["depth"].notna()]
    view = view.assign(panel=labels(view.assign(depth=float("nan"))), line=view["depth"].map("depth {:g}".format))
    panels = list(view.groupby("panel", sort=True))
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows + 0.4), sharey=True, squeeze=False,
                             constrained_layout=True)
    for ax, (panel, part) in zip(axes.flat, panels):
        _draw(ax, part, metric, part["line"])
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("evaluation length (tokens)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel(LABELS.get(metric, metric), fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{task}: {LABELS.get(metric, metric)} by depth of the information (mean over seeds, 95% CI)",
                 fontsize=10)
    paths = _save(fig, out_dir, f"{task}_{metric}_by_depth")
    plt.close(fig)
    return paths


def plot_all(comparison: pd.DataFrame, out_dir: Path, metrics: dict[str, tuple[str, ...]]) -> dict[tuple, Path]:
    """Every figure of a comparison; returns the PNG path of each, keyed as below.

    Args:
        metrics: the metrics to draw for each task (e.g. perplexity for ``lm``, exact match for copy).

    Returns:
        ``(task, metric)``: the encoders as trained; ``(task, metric, "rope_scaling")``: rotary runs under
        every evaluated RoPE scaling method, when some were evaluated; ``(task, metric, "depth")``: tasks
        evaluated per depth, by depth. The first two show a depth task's score over all depths (the rows
        whose depth is NaN, see :func:`posenc.compare.aggregate`).
    """
    from posenc.extrapolate import NO_SCALING

    figures: dict[tuple, Path] = {}
    for task in sorted(comparison["task"].unique()):
        rows = comparison[comparison["task"] == task]
        overall = rows[rows["depth"].isna()]
        trained = overall[overall["scaling"] == NO_SCALING]
        scaled_encoders = set(overall.loc[overall["scaling"] != NO_SCALING, "encoder"])
        scaled = overall[overall["encoder"].isin(scaled_encoders)]
        for metric in metrics.get(task, ("exact_match", "token_accuracy", "loss")):
            if trained[f"{metric}_mean"].notna().any():
                figures[(task, metric)] = plot_metric(trained, task, metric, out_dir)[0]
            if scaled_encoders and scaled[f"{metric}_mean"].notna().any():
                figures[(task, metric, "rope_scaling")] = plot_metric(
                    scaled, task, metric, out_dir, stem=f"{task}_rope_scaling_{metric}",
                    title=f"{task}, RoPE scaling at evaluation")[0]
            if rows["depth"].notna().any() and rows[f"{metric}_mean"].notna().any():
                figures[(task, metric, "depth")] = plot_by_depth(rows, task, metric, out_dir)[0]
    return figures
