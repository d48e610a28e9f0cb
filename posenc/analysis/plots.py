"""Figures of a comparison: a metric against evaluation length (one line per encoder, its 95% interval as a
band), steps-to-learn, and accuracy by answer position. Reads only tables: no torch."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import pandas as pd

from posenc import files as run_files
from posenc.analysis.compare import NOT_CONVERGED, held_back
from posenc.analysis.mastery import by_quorum, share_text
from posenc.task_facts import has_mastery_criterion

LABELS = {
    "exact_match": "exact match", "token_accuracy": "token accuracy", "loss": "loss (nats per answer token)",
    "perplexity": "perplexity (per answer token)",
}  # fmt: skip
BOUNDED = ("exact_match", "token_accuracy")  # shares: axis and bands clipped to [0, 1]


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (works without a display, in jobs and CI)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "posenc"  # fixed SVG ids: the same figure gives the same file
    import matplotlib.pyplot as plt

    return plt


def _colours(names: list[str]) -> dict[str, tuple]:
    """A distinct colour per name: matplotlib's tab10, or tab20 when there are more than 10 names."""
    plt = pyplot()
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def _draw(
    ax, view: pd.DataFrame, metric: str, by: pd.Series, colours: dict[str, tuple], styles: dict[str, str] | None = None
) -> None:
    """One line per value of ``by`` (mean over seeds) with its 95% interval as a band; axes dressed.

    Groups that did not learn their task in distribution are drawn as one hollow grey marker at the
    training length, labelled "not learned" in the legend: nothing past it is compared. The training length's
    label then starts right of the marker, not on it. A group learned by quorum (its line past the training
    length: the seeds that learned, :mod:`posenc.analysis.mastery`) names its share in the legend.
    """
    unlearned = False
    for name, rows in view.groupby(by, sort=False):
        rows = rows[rows[f"{metric}_mean"].notna()].sort_values("eval_length")
        if rows.empty:
            continue
        colour = colours[name]
        if held_back(bool(rows["learned"].all()), rows["task"].iloc[0] if "task" in rows else None):
            unlearned = True
            first = rows[rows["eval_length"] == rows["train_length"]]
            ax.plot(
                first["eval_length"],
                first[f"{metric}_mean"],
                marker="o",
                markersize=NOT_LEARNED_SIZE,
                linestyle="none",
                markerfacecolor="none",
                color=colour,
                label=f"{name} (not learned)",
            )
            continue
        converged = bool(rows["learned"].all())  # lm: a group with a seed that did not converge is dotted
        label = name if converged else f"{name} ({NOT_CONVERGED})"
        seeds = (int(rows["n_learned"].iloc[0]), int(rows["n_trained"].iloc[0])) if "n_learned" in rows else (0, 0)
        if converged and by_quorum(*seeds):  # learned by quorum: the share beside the name
            task = rows["task"].iloc[0] if "task" in rows else None
            label = f"{name} ({share_text(*seeds, has_mastery_criterion(task))})"
        ax.plot(
            rows["eval_length"],
            rows[f"{metric}_mean"],
            marker="o",
            markersize=3,
            color=colour,
            label=label,
            linestyle=(styles or {}).get(name, "-") if converged else ":",
        )
        low, high = rows[f"{metric}_low"], rows[f"{metric}_high"]
        ax.fill_between(rows["eval_length"], low, high, color=colour, alpha=0.18, linewidth=0)
    # a not-learned marker sits on the training length's line: its label starts right of the marker
    mark_training_lengths(ax, view["train_length"].unique(), gap=NOT_LEARNED_GAP if unlearned else 2)
    if metric == "token_accuracy" and "chance_token_accuracy" in view:
        for chance in view["chance_token_accuracy"].dropna().unique():
            _chance_line(ax, chance, at_left=False)
    _unigram_line(ax, view, metric)
    _length_axis(ax, sorted(view["eval_length"].unique()))
    if metric in BOUNDED:
        ax.set_ylim(-0.02, 1.02)
    elif metric == "perplexity":
        ax.set_yscale("log")
    ax.grid(alpha=0.3)


def _chance_line(ax, chance: float, at_left: bool) -> None:
    """A dashed grey line at the chance level ``chance``, labelled just above it at the left or right edge."""
    ax.axhline(chance, color="grey", linestyle="--", linewidth=0.8)
    ax.annotate(
        f"chance {chance:.3g}",
        (0.0 if at_left else 1.0, chance),
        xycoords=("axes fraction", "data"),
        fontsize=7,
        color="grey",
        ha="left" if at_left else "right",
        va="bottom",
        xytext=(2 if at_left else -2, 1),
        textcoords="offset points",
    )


def _unigram_line(ax, view: pd.DataFrame, metric: str) -> None:
    """lm's reference for "has lost the text" on a loss or perplexity axis: a dashed line at the loss of a
    model that reads no context (:func:`posenc.analysis.compare.unigram_loss`, from the rows' ``data``
    lines; its exponential for perplexity), labelled at the shortest length, where every line is still low.
    Nothing where the rows record none."""
    from posenc.analysis.compare import task_unigram_loss

    if metric not in ("loss", "perplexity") or "task" not in view or view.empty:
        return
    loss = task_unigram_loss(view, view["task"].iloc[0])
    if math.isnan(loss):  # none recorded
        return
    level = math.exp(loss) if metric == "perplexity" else loss
    shown = f"{level:.1f}" if metric == "perplexity" else f"{level:.3f}"
    ax.axhline(level, color="grey", linestyle="--", linewidth=0.8)
    start = float(view["eval_length"].min())  # labelled at the left, right of the training length: lines rise
    ax.annotate(
        f"unigram (no context) {shown}",
        (start, level),
        xycoords="data",
        fontsize=7,  # to the right
        color="grey",
        ha="left",
        va="bottom",
        xytext=(4, 1),
        textcoords="offset points",
    )


NOT_LEARNED_SIZE = 5  # points: the hollow marker of a group that did not learn
NOT_LEARNED_GAP = NOT_LEARNED_SIZE / 2 + 4  # points from the line to the "train N" label, clear of that marker


def mark_training_lengths(ax, lengths, at_top: bool = False, gap: float = 2) -> None:
    """A dotted vertical line at each training length, labelled "train N" at the bottom (or top) of ``ax``,
    ``gap`` points right of the line."""
    for length in sorted({int(n) for n in lengths}):
        ax.axvline(length, color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            f"train {length}",
            (length, 1.0 if at_top else 0.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="grey",
            ha="left",
            va="top" if at_top else "bottom",
            xytext=(gap, -2 if at_top else 2),
            textcoords="offset points",
        )


def _length_axis(ax, lengths: list[int], fontsize: float = 7) -> None:
    """A log2 axis with a tick at each evaluated length, labelled with the lengths themselves (64, 128, ...
    not 2^6) where the labels fit side by side (:func:`length_labels`)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    if lengths:
        ax.xaxis.set_major_locator(FixedLocator(lengths))
        ax.xaxis.set_major_formatter(length_labels())
        ax.tick_params(axis="x", labelsize=fontsize, labelrotation=0)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())


DIGIT_WIDTH = 0.64  # em: DejaVu Sans's digits (matplotlib's default font) are 0.636 em wide; rounded up
LABEL_GAP = 0.8  # em kept free between two tick labels


def shown_lengths(values: list[float], points: list[float], em: float) -> list[bool]:
    """Which of the lengths ``values`` (at ``points`` along the axis, in points) get a label: evaluated lengths
    crowd together where they are dense on a log axis (copy's 32, 36, ..., 64), so a label is shown only where
    it keeps :data:`LABEL_GAP` from those already shown - powers of two first (the lengths a reader looks
    for), then the others from the left. Widths are estimated from the digit count and the font size ``em``
    (points), not measured, so the choice is the same on every machine."""
    half = [len(f"{v:g}") * DIGIT_WIDTH * em / 2 for v in values]
    order = sorted(range(len(values)), key=lambda i: (not _power_of_two(values[i]), values[i]))
    shown: list[int] = []
    for i in order:
        if all(abs(points[i] - points[j]) >= half[i] + half[j] + LABEL_GAP * em for j in shown):
            shown.append(i)
    return [i in shown for i in range(len(values))]


def length_labels():  # a class made on first use: matplotlib is imported only when drawing
    """A matplotlib formatter for a length axis: each tick's length, or nothing where :func:`shown_lengths`
    leaves it out (its tick stays, unlabelled)."""
    from matplotlib.ticker import Formatter

    class _LengthLabels(Formatter):
        def __call__(self, x, pos=None) -> str:
            return f"{x:g}"

        def format_ticks(self, values) -> list[str]:
            values = [float(v) for v in values]
            ax = self.axis.axes if self.axis is not None else None
            if not values or ax is None:
                return [self(v) for v in values]
            scale = 72 / ax.figure.dpi  # display pixels to points
            points = [ax.transData.transform((v, 1.0))[0] * scale for v in values]
            em = float(self.axis.get_tick_params().get("labelsize", 10.0))
            return [self(v) if keep else "" for v, keep in zip(values, shown_lengths(values, points, em))]

    return _LengthLabels()


def _power_of_two(value: float) -> bool:
    return value >= 1 and float(value).is_integer() and int(value) & (int(value) - 1) == 0


def _seeds(view: pd.DataFrame) -> str:
    n = int(view["n_seeds"].max()) if len(view) else 0
    return (
        f"{n} seeds; band: 95% interval over seeds and sequences"
        if n > 1
        else f"{n} seed; band: 95% interval over sequences"
    )


VARIANT = re.compile(r"(?P<name>.*?) \[(?P<variant>.*)\](?P<rest>.*)")  # compare.labels: "name [variant] +scaling"
SHORT_NAME = 32  # characters: a label with its configuration difference up to this long stays in the legend


def short_names(names) -> tuple[dict[str, str], str]:
    """Legend names for the labels ``names`` (:func:`posenc.analysis.compare.labels`) and the caption that
    goes with them. A configuration difference that makes a label longer than :data:`SHORT_NAME` ("nope
    [task.min_length=32,train.lr=0.003]") would take the figure's width from its plot: the configurations of
    that name then become numbers ("nope #1", the same number wherever one appears) and the caption spells
    them out ("configurations: nope #1: task.min_length=32,..."; "" where nothing is numbered). Short ones
    ("t5 [encoder.max_distance=128]") are kept whole; the tables keep every label whole."""
    found = {full: VARIANT.fullmatch(full) for full in sorted(set(names))}
    long = {m["name"] for m in found.values() if m and len(f"{m['name']} [{m['variant']}]") > SHORT_NAME}
    mapping: dict[str, str] = {}
    numbers: dict[tuple[str, str], int] = {}
    for full, match in found.items():
        if match is None or match["name"] not in long:
            mapping[full] = full
            continue
        key = (match["name"], match["variant"])
        numbers.setdefault(key, sum(name == key[0] for name, _ in numbers) + 1)
        mapping[full] = f"{match['name']} #{numbers[key]}{match['rest']}"
    caption = "; ".join(f"{name} #{n}: {variant}" for (name, variant), n in numbers.items())
    return mapping, f"configurations: {caption}" if caption else ""


def _caption(fig, text: str) -> None:
    """``text`` under every panel of ``fig`` (the constrained layout keeps room for it; wrapped to the width
    when saved, :func:`fit_titles`)."""
    if text:
        fig.supxlabel(text, fontsize=7, color="dimgrey")


def _titles(fig) -> list:
    """The centred texts of ``fig`` that can outgrow it: its suptitle and caption, each visible axes' title and
    x label."""
    texts = [t for t in (getattr(fig, "_suptitle", None), getattr(fig, "_supxlabel", None)) if t is not None]
    for ax in fig.axes:
        if ax.get_visible():
            texts += [ax.title, ax.xaxis.label]
    return [t for t in texts if t.get_text()]


def _canvas(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)


COLLAPSED = "constrained_layout not applied"  # matplotlib's warning when decorations leave the axes no room


def _draw_laid_out(fig) -> bool:
    """Draw ``fig``; False where its constrained layout gave up (its legend or labels would need more than the
    figure's width or height: drawn without a layout, they run off its edges)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=COLLAPSED)
        try:
            _canvas(fig).draw()
        except UserWarning as warning:
            if COLLAPSED not in str(warning):
                raise
            return False
    return True


def fit_layout(fig, rounds: int = 8, step: float = 1.25) -> None:
    """Grow ``fig`` until its constrained layout holds: in the direction its drawn texts and legends overflow
    (both where neither does), ``step`` times per round. Nothing is shrunk, so a figure that fits is left as
    it is."""
    for _ in range(rounds):
        if _draw_laid_out(fig):
            return
        box, frame = fig.get_tightbbox(_canvas(fig).get_renderer()), fig.bbox_inches
        wide = box.x0 < frame.x0 or box.x1 > frame.x1
        tall = box.y0 < frame.y0 or box.y1 > frame.y1
        width, height = fig.get_size_inches()
        fig.set_size_inches(width * (step if wide or not tall else 1), height * (step if tall or not wide else 1))


def fit_titles(fig, margin: float = 4.0, rounds: int = 4) -> None:
    """Wrap, between words, every title, x label and caption of ``fig`` that would run past its edges (less
    ``margin`` points): a one-panel figure is narrower than a long title, and the layout does not shorten text.
    Drawn as when saved (the constrained layout then makes room for the extra lines)."""
    import textwrap

    canvas = _canvas(fig)
    pad = margin * fig.dpi / 72
    for _ in range(rounds):
        fit_layout(fig)
        renderer = canvas.get_renderer()
        changed = False
        for text in _titles(fig):
            box = text.get_window_extent(renderer)
            middle = (box.x0 + box.x1) / 2  # centred: the room is twice the distance to the nearer edge
            room = 2 * min(middle - fig.bbox.x0 - pad, fig.bbox.x1 - pad - middle)
            if box.width <= room:
                continue
            lines = text.get_text().split("\n")
            longest = max(len(line) for line in lines)
            width = max(12, int(longest * max(room, 0) / box.width) - 1)
            wrapped = "\n".join(textwrap.fill(line, width, break_long_words=False) for line in lines)
            if wrapped != text.get_text():
                text.set_text(wrapped)
                changed = True
        if not changed:
            return


def save_figure(fig, out_dir: Path, stem: str) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` and ``<stem>.svg`` (atomically, without a creation date), its layout
    made to hold (:func:`fit_layout`) and its long titles wrapped to fit (:func:`fit_titles`)."""
    fit_titles(fig)
    paths = []
    for ext in ("png", "svg"):
        path = Path(out_dir) / f"{stem}.{ext}"
        metadata = {"Date": None} if ext == "svg" else None
        run_files.atomic_write(path, lambda f, ext=ext, m=metadata: fig.savefig(f, format=ext, dpi=150, metadata=m))
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
    from posenc.analysis.compare import labels

    plt = pyplot()
    view = comparison[comparison["task"] == task]
    full = labels(view)
    short, caption = short_names(full)  # a configuration difference: numbered here, spelled out in the caption
    names = full.map(short)
    fig, ax = plt.subplots(figsize=(7.6, 4.2), constrained_layout=True)
    _draw(ax, view, metric, names, _colours(sorted(set(names))))
    _caption(fig, caption)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(LABELS.get(metric, metric))
    ax.set_title(f"{title or task}: {LABELS.get(metric, metric)} ({_seeds(view)})", fontsize=10)
    handles, texts = ax.get_legend_handles_labels()
    order = sorted(range(len(texts)), key=texts.__getitem__)
    ax.legend(
        [handles[i] for i in order],
        [texts[i] for i in order],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    paths = save_figure(fig, out_dir, stem or f"{task}_{metric}")
    plt.close(fig)
    return paths


AS_TRAINED = "as trained"
LINE_STYLES = ("-", "--", "-.", ":")  # cycled in small multiples, so that lines with equal values both show


def plot_panels(
    view: pd.DataFrame,
    metric: str,
    panel: pd.Series,
    line: pd.Series,
    out_dir: Path,
    stem: str,
    title: str,
    order: list[str] | None = None,
) -> list[Path]:
    """Small multiples of ``metric`` vs evaluation length: one panel per value of ``panel``, one line per
    value of ``line`` (the same colour and style in every panel; legend in ``order``, else sorted), a shared
    y axis; writes ``<stem>.png`` and ``.svg``."""
    plt = pyplot()
    short, caption = short_names([*panel, *line])
    view = view.assign(panel=panel.map(short), line=line.map(short))
    order = [short.get(n, n) for n in order or []]
    panels = list(view.groupby("panel", sort=True))
    present = set(view["line"])
    names = [n for n in order or [] if n in present] + sorted(present - set(order or []))
    colours = _colours(names)
    styles = {name: LINE_STYLES[i % len(LINE_STYLES)] for i, name in enumerate(names)}
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(max(7.0, 3.7 * cols + 1.6), 3.0 * rows + 0.7),
        sharey=True,
        squeeze=False,
        constrained_layout=True,
    )
    for ax, (name, part) in zip(axes.flat, panels):
        _draw(ax, part, metric, part["line"], colours, styles)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("evaluation length (tokens)", fontsize=8)
        ax.tick_params(which="both", labelsize=7)  # a log y axis labels minor ticks too (perplexity)
    for ax in axes[:, 0]:
        ax.set_ylabel(LABELS.get(metric, metric), fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colours[n], linestyle=styles[n], marker="o", markersize=3) for n in names]
    fig.legend(handles, names, fontsize=8, loc="outside right upper", frameon=False)
    fig.suptitle(f"{title}: {LABELS.get(metric, metric)}\n({_seeds(view)})", fontsize=10)
    _caption(fig, caption)
    paths = save_figure(fig, out_dir, stem)
    plt.close(fig)
    return paths


def plot_all(comparison: pd.DataFrame, out_dir: Path, metrics: dict[str, tuple[str, ...]]) -> dict[tuple, Path]:
    """Every figure of a comparison; returns the PNG path of each, keyed as below.

    Args:
        metrics: the metrics to draw for each task (e.g. perplexity for ``lm``, exact match for copy).

    Returns:
        ``(task, metric)``: the encoders as trained (one line each); ``(task, metric, "rope_scaling")``: a
        panel per rotary encoder, a line per evaluated RoPE scaling method, when some were evaluated;
        ``(task, metric, "depth")``: tasks evaluated per depth, a panel per encoder (and scaling), a line
        per depth. The first two show a depth task's score over all depths (the rows whose depth is NaN,
        see :func:`posenc.analysis.compare.aggregate`).
    """
    from posenc.analysis.compare import NO_SCALING, labels

    figures: dict[tuple, Path] = {}
    for task in sorted(comparison["task"].unique()):
        rows = comparison[comparison["task"] == task]
        overall = rows[rows["depth"].isna()]
        trained = overall[overall["scaling"] == NO_SCALING]
        scaled_encoders = set(overall.loc[overall["scaling"] != NO_SCALING, "encoder"])
        scaled = overall[overall["encoder"].isin(scaled_encoders)]
        deep = rows[rows["depth"].notna()]
        for metric in metrics.get(task, ("exact_match", "token_accuracy", "loss")):
            if trained[f"{metric}_mean"].notna().any():
                figures[(task, metric)] = plot_metric(trained, task, metric, out_dir)[0]
            if scaled_encoders and scaled[f"{metric}_mean"].notna().any():
                method = scaled["scaling"].where(scaled["scaling"] != NO_SCALING, AS_TRAINED)
                figures[(task, metric, "rope_scaling")] = plot_panels(
                    scaled,
                    metric,
                    scaled["encoder"],
                    method,
                    out_dir,
                    f"{task}_rope_scaling_{metric}",
                    f"{task}, RoPE scaling at evaluation",
                    order=[AS_TRAINED],
                )[0]
            if len(deep) and deep[f"{metric}_mean"].notna().any():
                figures[(task, metric, "depth")] = plot_panels(
                    deep,
                    metric,
                    labels(deep.assign(depth=float("nan"))),
                    deep["depth"].map("depth {:g}".format),
                    out_dir,
                    f"{task}_{metric}_by_depth",
                    f"{task} by depth of the information",
                )[0]
    return figures


SEED_SPREAD = 0.14  # rows: vertical distance between the seeds of one row in the steps-to-learn figure


def _spread(rows: pd.DataFrame) -> pd.Series:
    """A vertical offset per seed of a row (seed order, centred on the row), so that seeds with the same steps
    (or the same budget) are not drawn on top of each other; the steps themselves are not moved."""
    order = rows.sort_values("seed" if "seed" in rows else "label", kind="stable").index
    n = len(order)
    step = min(SEED_SPREAD, 0.7 / (n - 1)) if n > 1 else 0.0
    return pd.Series([(i - (n - 1) / 2) * step for i in range(n)], index=order)


def plot_steps(runs: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Steps-to-learn: a panel per task, a row per encoder label, a dot per seed (its first mastery check
    that met the criterion), the seeds of a row spread apart vertically so that equal values all show; a
    seed that never did is a red cross at the right edge. ``runs``: one row
    per run with ``task``, ``label``, ``steps_to_learn``, ``learned`` and ``budget`` (where a seed that
    did not learn is drawn; its right edge when unknown). Writes ``steps_to_learn.png/.svg``."""
    plt = pyplot()
    short, caption = short_names(runs["label"])
    runs = runs.assign(label=runs["label"].map(short))
    tasks = sorted(runs["task"].unique())
    height = max(2.4, 0.28 * runs.groupby("task")["label"].nunique().max() + 1.2)
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(3.6 * len(tasks) + 1.4, height), squeeze=False, constrained_layout=True
    )
    budget = runs["budget"] if "budget" in runs else pd.Series(float("nan"), index=runs.index)
    right = float(pd.concat([runs["steps_to_learn"], budget]).max())
    right = 1.0 if math.isnan(right) else right  # NaN: nothing recorded
    for ax, task in zip(axes.flat, tasks):
        part = runs[runs["task"] == task]
        order = part.groupby("label")["steps_to_learn"].mean().sort_values(na_position="last").index.tolist()
        where = {name: i for i, name in enumerate(order)}
        offset = pd.concat([_spread(rows) for _, rows in part.groupby("label")]) if len(part) else pd.Series()
        row = part["label"].map(where) + offset.reindex(part.index)
        done = part[part["learned"]]
        ax.plot(done["steps_to_learn"], row[done.index], "o", color="tab:blue", alpha=0.7, markersize=4)
        missed = part[~part["learned"]]
        at = budget.loc[missed.index].fillna(right * 1.08)  # a cross at the budget the seed spent
        ax.plot(at, row[missed.index], "x", color="tab:red", markersize=6)
        ax.set_yticks(range(len(order)), order, fontsize=7)
        ax.set_xlim(0, right * 1.15)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("steps to learn (x: not learned within its budget)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(
        "steps until held-out exact match reached the target (one dot per seed, a row's seeds spread vertically)",
        fontsize=10,
    )
    _caption(fig, caption)
    paths = save_figure(fig, out_dir, "steps_to_learn")
    plt.close(fig)
    return paths


def _chance(view: pd.DataFrame) -> list[float]:
    """The chance token accuracies of ``view``'s runs: its ``chance_token_accuracy`` column, else each run's
    answer alphabet read from its ``config`` (:func:`posenc.analysis.compare.chance_token_accuracy`); none when neither
    is there (no line is guessed)."""
    from posenc.analysis.compare import chance_token_accuracy

    if "chance_token_accuracy" in view:
        values = view["chance_token_accuracy"]
    elif "config" in view:
        values = pd.Series([chance_token_accuracy(c) for c in view["config"].dropna().unique()], dtype=float)
    else:
        return []
    return sorted(float(v) for v in values.dropna().unique())


def plot_positions(positions: pd.DataFrame, task: str, length: int, out_dir: Path) -> list[Path]:
    """Answer-token accuracy by position in the sequence at evaluation length ``length``, a line per encoder
    label (correct / total pooled over seeds, per position bin) with Wilson's 95% interval of that pooled count
    as a band (the tokens taken as independent: seed-to-seed variation is not in it); the training length and
    chance (a uniform guess over the answer alphabet, where ``chance_token_accuracy`` or ``config`` is given)
    marked. ``positions``: the positions table joined with ``task``, ``label``, ``train_length``. Writes
    ``<task>_accuracy_by_position.png/.svg``."""
    from posenc.analysis.stats import wilson_interval

    plt = pyplot()
    view = positions[(positions["task"] == task) & (positions["eval_length"] == length)]
    short, caption = short_names(view["label"])
    view = view.assign(label=view["label"].map(short))
    pooled = view.groupby(["label", "position"], sort=True)[["correct", "total"]].sum().reset_index()
    names = sorted(pooled["label"].unique())
    colours = _colours(names)
    fig, ax = plt.subplots(figsize=(7.6, 4.2), constrained_layout=True)
    for name in names:
        rows = pooled[pooled["label"] == name]
        share = rows["correct"] / rows["total"]
        ax.plot(rows["position"], share, label=name, color=colours[name], linewidth=1.2)
        band = [wilson_interval(float(p), float(n)) for p, n in zip(share, rows["total"])]
        ax.fill_between(
            rows["position"], [b[0] for b in band], [b[1] for b in band], color=colours[name], alpha=0.18, linewidth=0
        )
    for chance in _chance(view):  # labelled at the left: answers come last, the right is where the lines are
        _chance_line(ax, chance, at_left=True)
    for train in sorted(view["train_length"].unique()):
        ax.axvline(train, color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            f"train {train}",
            (train, 0.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="grey",
            ha="left",
            va="bottom",
            xytext=(2, 2),
            textcoords="offset points",
        )
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"position of the answer token in a {length}-token sequence")
    ax.set_ylabel("token accuracy")
    ax.set_title(
        f"{task}: where answers fail at length {length} (learned runs, seeds pooled; band: 95% Wilson "
        "interval of the pooled answer tokens)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    _caption(fig, caption)
    paths = save_figure(fig, out_dir, f"{task}_accuracy_by_position")
    plt.close(fig)
    return paths
