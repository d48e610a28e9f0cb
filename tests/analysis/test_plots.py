"""What a reader sees in the figures, checked on the drawn matplotlib objects (issue 27, newcomer friction):
no title runs past the figure's edges, seeds with equal values stay visible, accuracy by position has its
interval and chance line, and no label sits on the not-learned marker."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from posenc.analysis import plots


@pytest.fixture
def captured(monkeypatch):
    """The figures plots.save_figure was handed (no file written), still open for inspection."""
    figures = []

    def keep(fig, out_dir, stem):
        figures.append(fig)
        return [f"{out_dir}/{stem}.png"]

    monkeypatch.setattr(plots, "save_figure", keep)
    yield figures
    plt = plots.pyplot()
    for fig in figures:
        plt.close(fig)


def _renderer(fig):
    """A drawn figure's renderer (layout done), as when it is saved as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _titles(fig) -> list:
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        if ax.get_visible():
            texts += [ax.title, ax.xaxis.label]
    return [t for t in texts if t.get_text()]


def _assert_titles_inside(fig) -> None:
    """Every title and x label inside the figure, at least 2 points from its edges (as saved)."""
    plots.fit_titles(fig) if hasattr(plots, "fit_titles") else None  # what save_figure does before writing
    renderer = _renderer(fig)
    frame = fig.bbox.padded(-2 * fig.dpi / 72)
    for text in _titles(fig):
        box = text.get_window_extent(renderer)
        assert box.x0 >= frame.x0 and box.x1 <= frame.x1, f"clipped: {text.get_text()!r}"
        assert box.y0 >= frame.y0 and box.y1 <= frame.y1, f"clipped: {text.get_text()!r}"


def _steps_runs(tasks=("copy",)) -> pd.DataFrame:
    rows = []
    for task in tasks:
        for encoder, steps in {"rope": [3000, 3000, 2200], "alibi": [3800, 3900, 4400]}.items():
            rows += [
                {
                    "task": task,
                    "label": encoder,
                    "seed": s,
                    "steps_to_learn": float(v),
                    "learned": True,
                    "budget": 10000.0,
                }
                for s, v in enumerate(steps)
            ]
        rows += [
            {
                "task": task,
                "label": "randomized",
                "seed": s,
                "steps_to_learn": math.nan,
                "learned": False,
                "budget": 10000.0,
            }
            for s in range(3)
        ]
    return pd.DataFrame(rows)


def test_steps_to_learn_title_fits_with_one_task(captured, tmp_path):
    """One task (README's first example) made the figure narrower than its title."""
    plots.plot_steps(_steps_runs(), tmp_path)
    _assert_titles_inside(captured[0])


def test_kernel_bias_title_fits_with_one_panel(captured, tmp_path):
    """`posenc kernels encoder=alibi`: one panel, and the bias figure's long title ran past both edges."""
    from posenc.analysis import kernel_views

    distance = np.arange(0, 257)
    table = pd.concat(
        [
            pd.DataFrame(
                {
                    "encoder": "alibi",
                    "source": "untrained default",
                    "scaling": "none",
                    "scaling_factor": math.nan,
                    "train_length": 64,
                    "head": pd.array([head] * len(distance), dtype="Int64"),
                    "distance": distance,
                    "component": "bias",
                    "value": -(2.0 ** -(head + 1)) * distance,
                }
            )
            for head in range(4)
        ]
    )
    kernel_views.write_figures(table, tmp_path)
    assert captured, "no figure drawn"
    for fig in captured:
        _assert_titles_inside(fig)


def test_metric_title_fits_with_a_long_title(captured, tmp_path):
    comparison = _comparison([("rope", True, [1.0, 0.6, 0.1])])
    plots.plot_metric(
        comparison,
        "copy",
        "exact_match",
        tmp_path,
        title="copy, trained on 64 tokens under the per-batch length draw of Ruoss et al.",
    )
    _assert_titles_inside(captured[0])


def _seed_points(ax) -> list[tuple[float, float]]:
    points = []
    for line in ax.get_lines():
        if line.get_linestyle() in ("None", "none", "") and line.get_marker() not in (None, "None", ""):
            points += list(zip(np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)))
    return points


def test_seeds_with_equal_steps_are_drawn_apart(captured, tmp_path):
    """rope's two seeds at 3000 steps, randomized's three crosses at the budget: each seed its own point."""
    runs = _steps_runs(("copy", "reverse"))
    plots.plot_steps(runs, tmp_path)
    fig = captured[0]
    for ax in fig.axes:
        points = _seed_points(ax)
        assert len(points) == len(runs) // 2  # every seed of the task drawn
        assert len(set(points)) == len(points), f"seeds drawn on top of each other: {sorted(points)}"
        # the value is not moved: x is still the seed's steps (or its budget), only the row offset differs
        assert sorted(x for x, _ in points) == sorted([3000, 3000, 2200, 3800, 3900, 4400] + [10000] * 3)
        # and each seed stays within its row (closer to its own tick than to the next)
        assert all(abs(y - round(y)) < 0.5 for _, y in points)


def _positions(chance_config: bool = True) -> pd.DataFrame:
    rows = []
    config = json.dumps({"task": {"name": "copy", "n_symbols": 16}})
    for label, accuracy in {"rope": 0.9, "alibi": 0.4}.items():
        for seed in range(2):
            for position in range(64, 128, 4):
                rows.append(
                    {
                        "run_id": f"{label}{seed}",
                        "eval_length": 128,
                        "scaling": "none",
                        "depth": math.nan,
                        "position": position,
                        "bin_width": 4,
                        "correct": int(accuracy * 100),
                        "total": 100,
                        "task": "copy",
                        "train_length": 32,
                        "encoder": label,
                        "variant": "",
                        "label": label,
                        **({"config": config} if chance_config else {}),
                    }
                )
    return pd.DataFrame(rows)


def test_accuracy_by_position_has_an_interval_band_and_the_chance_line(captured, tmp_path):
    from matplotlib.collections import PolyCollection

    from posenc.analysis.stats import wilson_interval

    plots.plot_positions(_positions(), "copy", 128, tmp_path)
    fig = captured[0]
    ax = fig.axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # one per label
    # the band is Wilson's interval of the pooled count: 180 of 200 for rope at every position
    low, high = wilson_interval(0.9, 200)
    ys = np.concatenate([p.vertices[:, 1] for b in bands for p in b.get_paths()])
    assert np.isclose(ys, low).any() and np.isclose(ys, high).any()
    chance = [
        line
        for line in ax.get_lines()
        if np.allclose(np.asarray(line.get_ydata(), float), 1 / 16) and line.get_linestyle() == "--"
    ]
    assert chance, "no chance line at 1/16"
    assert any("chance" in t.get_text() for t in ax.texts)
    _assert_titles_inside(fig)


def test_accuracy_by_position_without_a_known_alphabet_draws_no_chance_line(captured, tmp_path):
    plots.plot_positions(_positions(chance_config=False), "copy", 128, tmp_path)
    ax = captured[0].axes[0]
    assert not any("chance" in t.get_text() for t in ax.texts)


def _comparison(groups) -> pd.DataFrame:
    rows = []
    for encoder, learned, values in groups:
        for length, value in zip((64, 128, 256), values):
            if not learned and length != 64:
                continue
            rows.append(
                {
                    "task": "copy",
                    "encoder": encoder,
                    "variant": "",
                    "scaling": "none",
                    "depth": math.nan,
                    "train_length": 64,
                    "eval_length": length,
                    "learned": learned,
                    "n_seeds": 1,
                    "chance_token_accuracy": 1 / 16,
                    **{
                        f"{m}_{s}": value + d
                        for m in ("exact_match", "token_accuracy", "loss")
                        for s, d in (("mean", 0.0), ("low", -0.01), ("high", 0.01))
                    },
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("value", [0.0, 0.5, 0.97])
@pytest.mark.parametrize("metric", ["exact_match", "token_accuracy"])
def test_no_label_sits_on_the_not_learned_marker(captured, tmp_path, value, metric):
    """README's `encoder=alibi task=retrieval` ends not learned: one hollow marker at the training length,
    where the "train 64" label was drawn (exact match 0: on top of it)."""
    comparison = _comparison([("alibi", False, [value]), ("rope", True, [1.0, 0.5, 0.1])])
    plots.plot_metric(comparison, "copy", metric, tmp_path)
    fig = captured[0]
    ax = fig.axes[0]
    renderer = _renderer(fig)
    hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"]
    assert len(hollow) == 1
    x, y = ax.transData.transform((hollow[0].get_xdata()[0], hollow[0].get_ydata()[0]))
    radius = (hollow[0].get_markersize() / 2 + hollow[0].get_markeredgewidth()) * fig.dpi / 72
    for text in ax.texts:
        box = text.get_window_extent(renderer)
        apart = box.x0 > x + radius or box.x1 < x - radius or box.y0 > y + radius or box.y1 < y - radius
        assert apart, f"{text.get_text()!r} drawn on the not-learned marker"


def test_saved_figures_have_their_long_titles_wrapped(tmp_path):
    """save_figure (used by every figure, kernels' included) wraps before it writes, and the files are written."""
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(4.0, 3.0), constrained_layout=True)
    fig.suptitle("score bias per head (light) and mean over heads (own y axis per panel)", fontsize=10)
    paths = plots.save_figure(fig, tmp_path, "long")
    assert [p.name for p in paths] == ["long.png", "long.svg"] and all(p.stat().st_size for p in paths)
    assert "\n" in fig._suptitle.get_text()
    _assert_titles_inside(fig)
    plt.close(fig)


UNIGRAM_DATA = "some text: 3 files; unigram loss 0.700 nats/byte (the training split's byte frequencies, ...)"


@pytest.mark.parametrize("metric, level", [("loss", 0.7), ("perplexity", math.exp(0.7))])
def test_lm_loss_figures_draw_the_unigram_line(captured, tmp_path, metric, level):
    """lm's reference for "has lost the text", read from the rows' data line: a dashed line at the unigram
    loss (its exponential on a perplexity axis), labelled; none on other metrics or without a recorded
    value."""
    comparison = _comparison([("rope", True, [0.2, 0.5, 0.9])]).assign(task="lm", data=UNIGRAM_DATA)
    for m in ("loss", "perplexity"):
        comparison[[f"{m}_{s}" for s in ("mean", "low", "high")]] = comparison[
            ["loss_mean", "loss_low", "loss_high"]
        ].values
    plots.plot_metric(comparison, "lm", metric, tmp_path)
    plots.plot_metric(comparison, "lm", "token_accuracy", tmp_path)
    plots.plot_metric(comparison.assign(data="some text: 3 files"), "lm", metric, tmp_path)
    drawn, other, without = (fig.axes[0] for fig in captured)

    def dashed_at(ax, y):
        return [
            line
            for line in ax.get_lines()
            if line.get_linestyle() == "--" and np.allclose(np.asarray(line.get_ydata(), float), y)
        ]

    assert dashed_at(drawn, level) and any("unigram" in t.get_text() for t in drawn.texts)
    assert not dashed_at(other, level) and not any("unigram" in t.get_text() for t in other.texts)
    assert not any("unigram" in t.get_text() for t in without.texts)
