"""Views of the attention-kernel table (``posenc kernels``): its summary and its figures. Reads only the
table: no torch (the table itself comes from :mod:`posenc.running.distance_profiles`)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

UNTRAINED = "untrained default"  # the `source` of a kernel drawn from an encoder's defaults, not a run
SUMMARY_DISTANCES = (1, 16, 128, 1024)  # distances the summary shows (with 0 and the largest)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per curve (mean over heads): its value at a few distances and at the largest one."""
    keys = ["encoder", "source", "scaling", "component"]
    mean = table.groupby([*keys, "distance"], sort=False)["value"].mean().reset_index()
    rows, top = [], int(table["distance"].max())
    for key, curve in mean.groupby(keys, sort=False):
        curve = curve.set_index("distance")["value"]
        row = dict(zip(keys, key))
        for d in (0, *(d for d in SUMMARY_DISTANCES if d < top)):
            row[f"d={d}"] = float(curve.get(d, math.nan))
        row["d=max"] = float(curve.iloc[-1])
        row["max_distance"] = int(curve.index[-1])
        rows.append(row)
    view = pd.DataFrame(rows)
    return view.dropna(axis=1, how="all")


def summary_markdown(table: pd.DataFrame, factor: float) -> str:
    return (
        "# Attention kernels by relative distance\n\n"
        "Mean over heads. `rotary`: all-ones q.k after `rotate`, 1 at distance 0; `rotary_bound`: RoFormer's "
        "relative upper bound (§3.4.3); `bias`: additive logit; `absolute`: cosine similarity of position "
        f"vectors. Scaled RoPE variants at factor {factor:g}.\n\n"
        + summary(table).to_markdown(index=False, floatfmt=".4f")
        + "\n"
    )


# ---------------------------------------------------------------------------------------------- figures


def _source_label(encoder: str, source: str) -> str:
    if source == UNTRAINED:
        return encoder
    parts = [p if len(p) <= 20 else p[:12] + "…" for p in Path(source).parts[-4:]]  # e.g. copy/rope/seed0/…
    return f"{encoder} ({'/'.join(parts)})"


def _scaling_label(scaling: str, factor: float) -> str:
    return "as trained" if scaling == "none" else f"{scaling} ×{factor:g}"


#: Figure of each component: (file stem, title, y label, log2 x axis, panels share the y axis). Biases
#: get their own y axes: ALiBi's steepest head reaches -500 at 2048, learned biases stay within a few units.
FIGURES = {
    "rotary": (
        "rotary",
        "rotary: score of all-ones q, k after rotate (1 at distance 0)",
        "normalised score",
        True,
        True,
    ),
    "rotary_bound": (
        "rotary_bound",
        "rotary: RoFormer relative upper bound (§3.4.3)",
        "relative upper bound",
        True,
        True,
    ),
    "bias": (
        "bias",
        "score bias per head (light) and mean over heads (own y axis per panel)",
        "additive logit",
        True,
        False,
    ),
    "absolute": (
        "absolute",
        "absolute: cosine similarity of embed(0) rows m and m − d",
        "cosine similarity",
        True,
        True,
    ),
}


def write_figures(table: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One PNG + SVG per component present (see :data:`FIGURES`); returns the PNG paths.

    Each figure has one panel per (encoder, source), sharing the y axis: one line per RoPE scaling method
    (mean over heads), and the heads as light lines where they differ (biases). Log2 x axes start at
    distance 1; a dotted line marks the training length.
    """
    from posenc.analysis.plots import mark_training_lengths, pyplot, save_figure

    plt = pyplot()

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    scalings = list(dict.fromkeys(table["scaling"]))
    colour = {s: colours[i % len(colours)] for i, s in enumerate(scalings)}
    pngs: list[Path] = []
    for component, (stem, title, ylabel, logx, sharey) in FIGURES.items():
        view = table[(table["component"] == component) & ((table["distance"] > 0) | (not logx))]
        if view.empty:
            continue
        panels = list(view.groupby(["encoder", "source"], sort=False))
        cols = min(4, len(panels))
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(
            rows,
            cols,
            figsize=(3.6 * cols + 0.4, 2.9 * rows + 0.5),
            sharey=sharey,
            squeeze=False,
            constrained_layout=True,
        )
        for ax, ((encoder, source), panel) in zip(axes.flat, panels):
            for scaling, curve in panel.groupby("scaling", sort=False):
                for _, head in curve.groupby("head", dropna=True) if curve["head"].notna().any() else []:
                    ax.plot(head["distance"], head["value"], color=colour[scaling], alpha=0.3, linewidth=0.7)
                mean = curve.groupby("distance")["value"].mean()
                label = _scaling_label(scaling, float(curve["scaling_factor"].iloc[0]))
                width = 1.4 if curve["head"].notna().any() else 0.9
                ax.plot(mean.index, mean.values, color=colour[scaling], linewidth=width, label=label)
            mark_training_lengths(
                ax, [n for n in set(panel["train_length"]) if n <= panel["distance"].max()], at_top=True
            )
            if logx:
                ax.set_xscale("log", base=2)
            ax.set_title(_source_label(encoder, source), fontsize=9)
            ax.set_xlabel("relative distance m − n", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if panel["scaling"].nunique() > 1:
                ax.legend(fontsize=6)
        for ax in axes[:, 0]:
            ax.set_ylabel(ylabel, fontsize=8)
        for ax in list(axes.flat)[len(panels) :]:
            ax.set_visible(False)
        fig.suptitle(title, fontsize=10)
        pngs.append(save_figure(fig, out_dir, stem)[0])
        plt.close(fig)
    return pngs
