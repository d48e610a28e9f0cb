"""The quick views of the evaluation table (terminal, extrapolation_summary.md): seed means of what was run."""

import math

from fake_results import fake_run, results_of

from posenc.analysis.views import summary, summary_markdown


def test_summary_has_only_the_evaluated_task_and_encoder_combinations():
    """A copy/rope run and a passkey/t5 run give two rows, never "copy t5" or "passkey rope"."""
    table = results_of(
        fake_run("rope", {64: [1, 1], 128: [0, 1]}, task="copy"), fake_run("t5", {64: [1, 0]}, task="passkey")
    ).evaluations
    view = summary(table)
    assert list(view.index) == [("copy", "rope", 64), ("passkey", "t5", 64)]
    assert view.loc[("copy", "rope", 64), 128] == 0.5
    assert math.isnan(view.loc[("passkey", "t5", 64), 128])  # not evaluated there: empty, not invented
    text = summary_markdown(table)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "task" not in line]
    assert len(rows) == 3 * 2  # three metrics, two evaluated combinations each
    assert not any("copy" in r and "t5" in r or "passkey" in r and "rope" in r for r in rows)


def test_summary_averages_seeds_of_one_configuration_and_keeps_configurations_scalings_depths_apart():
    table = results_of(
        fake_run("rope", {64: [1, 1]}, seed=0),
        fake_run("rope", {64: [0, 0]}, seed=1),
        fake_run("rope", {64: [1, 1]}, seed=0, steps=3000),
        fake_run("rope", {64: [0, 1]}, scaling="yarn"),
        fake_run("rope", {64: [0, 0]}, scaling="ntk:4"),
        fake_run("alibi", {64: [1, 0]}, task="passkey", depth=0.25),
    ).evaluations
    view = summary(table)[64]
    assert view[("copy", "rope [train.steps=300]", 64)] == 0.5  # mean over its two seeds
    assert view[("copy", "rope [train.steps=3000]", 64)] == 1.0  # another configuration: its own row
    assert view[("copy", "rope [train.steps=300] +yarn", 64)] == 0.5
    assert view[("copy", "rope [train.steps=300] +ntk:4", 64)] == 0.0
    assert view[("passkey", "alibi @depth 0.25", 64)] == 0.5
    assert len(view) == 5
    assert summary(table, "perplexity")[64][("copy", "rope [train.steps=3000]", 64)] == 1.0  # exp(1 - 1)
