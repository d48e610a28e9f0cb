"""What a newcomer sees in every figure (issue 38): no text - legend, label, title, caption - runs past the
figure's edges, legends put beside the axes cover none of them, tick labels never run into each other, a
configuration difference is a short legend name (the difference itself in the figure's caption and the
tables), and drawing raises no library warning. Checked on the drawn matplotlib objects, after the
save_figure every figure goes through, for figures of made-up tables and (integration) for every committed
comparison under results/, redrawn from its tables by `posenc report`'s own code."""

from __future__ import annotations

import itertools
import math
import re
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import COMMITTED_COMPARISONS as COMMITTED
from conftest import RESULTS
from fake_results import config_of, fake_run, results_of

from posenc.analysis import plots
from posenc.analysis.compare import aggregate, labels, variants
from posenc.analysis.pipeline import REPORT, regenerate, select
from posenc.analysis.report import render, same_report
from posenc.analysis.store import Results, run_identity

LONGEST_NAME = plots.SHORT_NAME + len(" (not converged)")  # characters: a label and its mark, at most
PLOT_SHARE = 0.5  # of the figure's width, at least, for the axes of a one-panel figure


# -- what is checked ---------------------------------------------------------------------------------------


def _renderer(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _tick_labels(axis) -> list:
    """The tick labels ``axis`` draws: those of ticks inside its view, with text."""
    low, high = sorted(axis.get_view_interval())
    drawn = []
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        if low <= tick.get_loc() <= high:
            drawn += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text().strip()]
    return drawn


def _texts(fig, renderer) -> list:
    """Every text ``fig`` draws: titles, labels, captions, annotations, legend entries, drawn tick labels."""
    from matplotlib.text import Text

    ticks = {
        id(t)
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for tick in axis.get_major_ticks() + axis.get_minor_ticks()
        for t in (tick.label1, tick.label2)
    }
    texts = []
    for text in fig.findobj(lambda artist: isinstance(artist, Text)):
        if id(text) in ticks or not text.get_visible() or not text.get_text().strip():
            continue
        if text.axes is not None and not text.axes.get_visible():
            continue
        if hasattr(text, "_check_xy") and not text._check_xy(renderer):  # an annotation whose point is off
            continue
        texts.append(text)
    return texts + [t for ax in fig.axes if ax.get_visible() for a in (ax.xaxis, ax.yaxis) for t in _tick_labels(a)]


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _legends(fig) -> list[tuple]:
    """(legend, the axes it belongs to or None for a figure legend)."""
    return [(lg, None) for lg in fig.legends] + [(ax.get_legend(), ax) for ax in fig.axes if ax.get_legend()]


def problems(fig) -> list[str]:
    """What a reader of ``fig`` would trip over, as drawn: texts past its edges, tick labels run together,
    a legend over another axes (or, for a legend beside its axes, over its own), legend names too long."""
    renderer = _renderer(fig)
    frame = fig.bbox
    found = []
    for text in _texts(fig, renderer):
        box = text.get_window_extent(renderer)
        if box.x0 < frame.x0 or box.x1 > frame.x1 or box.y0 < frame.y0 or box.y1 > frame.y1:
            found.append(f"past the figure's edge: {text.get_text()!r}")
    for ax in (a for a in fig.axes if a.get_visible()):
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _tick_labels(axis)]
            found += [
                f"tick labels {a!r} and {b!r} overlap"
                for (a, one), (b, two) in itertools.combinations(boxes, 2)
                if _overlap(one, two)
            ]
    for legend, owner in _legends(fig):
        box = legend.get_window_extent(renderer)
        outside = owner is None or not _overlap(box, owner.bbox)  # placed beside its axes (all of plots.py's)
        for ax in (a for a in fig.axes if a.get_visible()):
            if (ax is not owner or outside) and _overlap(box, ax.bbox):
                found.append(f"a legend covers the plot of {ax.get_title()!r}")
        found += [
            f"legend name too long: {t.get_text()!r}" for t in legend.get_texts() if len(t.get_text()) > LONGEST_NAME
        ]
    return found


@pytest.fixture
def drawn(monkeypatch):
    """The figures save_figure wrote (the real one: its layout and wrapping are what is checked), still open;
    drawing under warnings as errors."""
    figures = []
    save = plots.save_figure

    def keep(fig, out_dir, stem):
        paths = save(fig, out_dir, stem)
        fig.set_label(stem)
        figures.append(fig)
        return paths

    monkeypatch.setattr(plots, "save_figure", keep)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield figures
    plt = plots.pyplot()
    for fig in figures:
        plt.close(fig)


# -- made-up tables ----------------------------------------------------------------------------------------


def _mixer_run(
    encoder: str, values: dict[int, list[float]], mixer: str | None = None, seed: int = 0, **train
) -> Results:
    """fake_run's run, its model mixing tokens with ``mixer`` (model.mixer) where given."""
    run = fake_run(encoder, values, seed=seed, task="retrieval", **train)
    if mixer is None:
        return run
    config = config_of(encoder, "retrieval", seed, **train)
    config["model"]["mixer"] = mixer
    identity = run_identity(config)
    ev = run.evaluations.assign(config=identity.config, config_id=identity.config_id, run_id=identity.run_id)
    return Results(ev, run.sequences.assign(run_id=identity.run_id), run.positions.assign(run_id=identity.run_id))


def _zoology(long_keys: bool = True) -> Results:
    """headline's retrieval in small: NoPE attention in one configuration, BaseConv (NoPE, mixer base_conv)
    at two learning rates, and rope at two configurations differing in many keys."""
    lengths = {64: [1, 1, 0, 1], 128: [1, 0, 0, 1], 256: [0, 1, 0, 0]}
    keys = {"check_every": 100, "target_exact_match": 0.95, "eval_sequences": 256} if long_keys else {}
    return results_of(
        *(_mixer_run("nope", lengths, seed=s) for s in (0, 1)),
        *(_mixer_run("nope", {64: [0, 0, 0, 1]}, "base_conv", seed=s, lr=lr) for s in (0, 1) for lr in (1e-3, 3e-3)),
        *(_mixer_run("rope", lengths, seed=s, steps=300) for s in (0, 1)),
        *(_mixer_run("rope", lengths, seed=s, steps=3000, **keys) for s in (0, 1)),
    )


def test_a_model_without_positional_encoding_is_labelled_by_its_mixer():
    """BaseConv's rows were labelled "nope [model.mixer=base_conv,...]"; a mixer names them, attention's NoPE
    stays "nope", and only what differs within one mixer is a variant."""
    results = _zoology(long_keys=False)
    ev = results.evaluations.assign(variant=variants(results.evaluations))
    assert sorted(set(labels(ev))) == [
        "base_conv [train.lr=0.001]",
        "base_conv [train.lr=0.003]",
        "nope",
        "rope [train.steps=3000]",
        "rope [train.steps=300]",
    ]
    alibi_conv = _mixer_run("alibi", {64: [1]}, "base_conv").evaluations
    assert list(labels(alibi_conv.assign(variant=variants(alibi_conv)))) == ["alibi base_conv"]


def test_report_figures_name_configurations_shortly_and_fit(drawn, tmp_path):
    """Through the report's own code: each configuration difference is a numbered name in legends and
    steps-to-learn rows, spelled out in the caption; every text inside the figure, the plot wide."""
    results = _zoology()
    chosen = select(results, set(results.evaluations["run_id"]), None)
    render(chosen, aggregate(chosen), tmp_path, "posenc report test")
    stems = {fig.get_label(): fig for fig in drawn}
    assert {"retrieval_exact_match", "steps_to_learn", "retrieval_accuracy_by_position"} <= set(stems)
    for stem, fig in stems.items():
        assert problems(fig) == [], stem
        caption = fig._supxlabel.get_text().replace("\n", " ")  # wrapped between words
        shown = [t.get_text() for lg, _ in _legends(fig) for t in lg.get_texts()]
        shown += [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
        numbered = {m.group(0) for name in shown for m in [re.match(r"\S+ #\d+", name)] if m}
        assert numbered and all(f"{name}: " in caption for name in numbered), (stem, numbered, caption)
        if len(fig.axes) == 1:
            assert fig.axes[0].bbox.width >= PLOT_SHARE * fig.bbox.width, f"{stem}: the legend squeezed the plot"
    caption = stems["retrieval_exact_match"]._supxlabel.get_text().replace("\n", " ")
    assert caption == (
        "configurations: rope #1: train.check_every=100,train.steps=3000,train.target_exact_match="
        "0.95; rope #2: train.check_every=None,train.steps=300,train.target_exact_match=None"
    )
    names = [t.get_text() for t in stems["retrieval_exact_match"].axes[0].get_legend().get_texts()]
    assert sorted(names) == [
        "base_conv [train.lr=0.001]",
        "base_conv [train.lr=0.003]",
        "nope",
        "rope #1",
        "rope #2",
    ]  # a short difference is kept whole
    rows = [t.get_text() for t in stems["steps_to_learn"].axes[0].get_yticklabels()]
    assert sorted(rows) == sorted(names)


def test_short_names_number_each_long_configuration_once():
    """A name whose configurations make long labels is numbered (all of its configurations, so that they read
    alike; the same number with or without a scaling method); a short difference stays whole."""
    one, two = "task.min_length=32,train.lr=0.003", "task.min_length=None,train.lr=0.001"
    names = [
        f"nope [{one}]",
        f"nope [{one}] +yarn",
        f"nope [{two}]",
        "nope [x=1]",
        "rope",
        "rope +yarn @depth 0.5",
        "t5 [encoder.max_distance=128]",
        "t5 [encoder.max_distance=None]",
    ]
    short, caption = plots.short_names(names)
    assert short == {
        f"nope [{one}]": "nope #1",
        f"nope [{one}] +yarn": "nope #1 +yarn",
        f"nope [{two}]": "nope #2",
        "nope [x=1]": "nope #3",
        "rope": "rope",
        "rope +yarn @depth 0.5": "rope +yarn @depth 0.5",
        "t5 [encoder.max_distance=128]": "t5 [encoder.max_distance=128]",
        "t5 [encoder.max_distance=None]": "t5 [encoder.max_distance=None]",
    }
    assert caption == f"configurations: nope #1: {one}; nope #2: {two}; nope #3: x=1"
    assert plots.short_names(["rope", "alibi", "t5 [encoder.max_distance=128]"])[1] == ""


def _comparison(lengths: list[int], encoders: list[str]) -> pd.DataFrame:
    rows = []
    for i, encoder in enumerate(encoders):
        for length in lengths:
            value = max(0.0, 1.0 - i / len(encoders) * math.log2(length / lengths[0]) / 4)
            rows.append(
                {
                    "task": "copy",
                    "encoder": encoder,
                    "variant": "",
                    "scaling": "none",
                    "depth": math.nan,
                    "train_length": 32,
                    "eval_length": length,
                    "learned": True,
                    "n_seeds": 3,
                    "chance_token_accuracy": 1 / 16,
                    **{
                        f"{m}_{s}": value + d
                        for m in ("exact_match", "token_accuracy", "loss")
                        for s, d in (("mean", 0.0), ("low", -0.01), ("high", 0.01))
                    },
                }
            )
    return pd.DataFrame(rows)


COPY_LENGTHS = [8, 16, 24, 32, *range(36, 64, 4), 64, 128, 256, 512, 1024, 2048, 4096, 8192]  # results/length_...


@pytest.mark.parametrize(
    "lengths", [COPY_LENGTHS, [64, *range(72, 128, 8), 128, 256, 512, 1024, 2048]], ids=["copy", "scale"]
)
def test_dense_lengths_keep_a_tick_each_and_labels_apart(drawn, tmp_path, lengths):
    """Copy's lengths 32, 36, ..., 64 on a log axis: their labels ran into each other. Every length keeps its
    tick; the powers of two keep their labels; no two labels touch."""
    plots.plot_metric(_comparison(lengths, ["rope", "alibi"]), "copy", "exact_match", tmp_path)
    fig = drawn[0]
    assert problems(fig) == []
    ax = fig.axes[0]
    assert sorted(ax.get_xticks()) == sorted(lengths)
    shown = {int(t.get_text()) for t in _tick_labels(ax.xaxis)}
    assert {n for n in lengths if n & (n - 1) == 0} <= shown and len(shown) < len(lengths)


def test_a_legend_wider_than_the_figure_grows_it_without_a_warning(drawn, tmp_path):
    """A name that no short form helps (a plugin's long encoder name) made the layout give up with a warning
    and the legend run off the figure; the figure grows instead."""
    long = "a_plugin_encoder_with_a_name_longer_than_any_figure_should_need_" * 3
    plots.plot_metric(_comparison([32, 64, 128], ["rope", long]), "copy", "exact_match", tmp_path)
    fig = drawn[0]
    assert [p for p in problems(fig) if not p.startswith("legend name too long")] == []
    assert fig.get_size_inches()[0] > 7.6


def test_length_labels_are_chosen_the_same_everywhere():
    """The tick labels kept depend on positions and font size alone (estimated widths, never measured): at
    40 points an octave and 7-point labels, two 2-digit labels need 2 x 4.48 + 5.6 points between centres;
    32, 64, 128 first, then 44 (18.4 from 32, 21.6 from 64), not 36, 40 (too near 32) nor 48 (near 44)."""
    values = [32.0, 36.0, 40.0, 44.0, 48.0, 64.0, 128.0]
    points = [100 + 40 * math.log2(v / 32) for v in values]
    assert plots.shown_lengths(values, points, 7.0) == [True, False, False, True, False, True, True]


# -- the committed figures ---------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_committed_comparison_regenerates_identically_and_its_figures_fit(drawn, folder, tmp_path):
    """Every committed comparison, redrawn from its committed tables alone as `posenc report` does: its
    report.md is the committed one but for the line saying when it was made (a report the code no longer
    produces fails), and every figure fits. One regeneration serves both checks: each redraws every figure
    of every committed folder, the costliest step of the suite (tests/test_committed_reports.py)."""
    name = folder.relative_to(RESULTS).as_posix()
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.png", "*.svg"))
    regenerate(copy, f"posenc report results/{name}")
    committed, fresh = (folder / REPORT).read_text(), (copy / REPORT).read_text()
    assert same_report(committed, fresh), f"results/{name}/report.md is stale: run `posenc report results/{name}`"
    assert drawn
    found = {fig.get_label(): problems(fig) for fig in drawn}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    squeezed = [
        fig.get_label() for fig in drawn if len(fig.axes) == 1 and fig.axes[0].bbox.width < PLOT_SHARE * fig.bbox.width
    ]
    assert not squeezed, f"plots squeezed by their legends: {squeezed}"


@pytest.mark.integration
def test_committed_kernel_figures_fit(drawn, tmp_path):
    """results/kernels' figures, redrawn from kernels.parquet with `posenc kernels`' own code."""
    from posenc.analysis.kernel_views import write_figures

    write_figures(pd.read_parquet(RESULTS / "kernels" / "kernels.parquet"), tmp_path)
    assert len(drawn) == 4
    assert all(problems(fig) == [] for fig in drawn), [problems(f) for f in drawn]


def test_nothing_checked_is_unreachable():
    """The checks read what matplotlib draws: a text past the edge and touching tick labels are found."""
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_xlim(0, 2)
    ax.set_xticks(np.array([1.0, 1.02]), ["first", "second"])
    fig.text(0.9, 0.5, "runs past the right edge")
    found = problems(fig)
    plt.close(fig)
    assert any("past the figure's edge" in p for p in found) and any("overlap" in p for p in found)
