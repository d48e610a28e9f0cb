"""Aggregation across seeds (numbers computed by hand, pooling only seeds of one configuration), intervals,
not-learned groups, depth means, and `posenc compare` end to end."""

import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import LEARNS, TINY, posenc_cli
from fake_results import fake_run, results_of

from posenc.analysis.compare import aggregate, cell, held_back, labels, pivot, steps_table, variants, with_depth_means
from posenc.analysis.report import same_report
from posenc.analysis.stats import Z95, group_estimate
from posenc.running.extrapolate import default_lengths, doubling_lengths
from posenc.tasks import TASKS


def _row(comparison, **where):
    mask = np.ones(len(comparison), dtype=bool)
    for key, value in where.items():
        column = comparison[key]
        mask &= (
            column.isna().to_numpy() if isinstance(value, float) and math.isnan(value) else (column == value).to_numpy()
        )
    rows = comparison[mask]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_aggregate_pools_the_seeds_of_one_configuration_by_hand():
    seeds = {0: [1, 1, 1, 0], 1: [1, 0, 0, 0], 2: [1, 1, 0, 0]}
    results = results_of(*(fake_run("rope", {64: v, 128: [0, 0, 0, 0]}, seed=s) for s, v in seeds.items()))
    comparison = aggregate(results)
    assert len(comparison) == 2  # one row per length
    rope = _row(comparison, eval_length=64)
    assert (rope["n_seeds"], rope["seeds"], rope["n_sequences"], rope["variant"]) == (3, "0,1,2", 12, "")
    assert rope["run_ids"] == ",".join(sorted(results.evaluations["run_id"].unique()))
    assert rope["exact_match_mean"] == pytest.approx(np.mean([0.75, 0.25, 0.5]))  # the mean of seed means
    est = group_estimate([np.array(v, dtype=float) for v in seeds.values()], bounded=True)
    assert (rope["exact_match_low"], rope["exact_match_high"]) == pytest.approx((est.low, est.high))
    loss = group_estimate([1 - np.array(v, dtype=float) for v in seeds.values()], bounded=False)
    assert (rope["loss_mean"], rope["loss_low"], rope["loss_high"]) == pytest.approx((loss.mean, loss.low, loss.high))
    assert rope["perplexity_mean"] == pytest.approx(math.exp(loss.mean))
    assert rope["perplexity_high"] == pytest.approx(math.exp(loss.high))
    assert bool(rope["learned"]) and rope["n_learned"] == 3 and rope["steps_to_learn"] == 100.0
    assert cell(rope, "exact_match") == f"0.500 [{est.low:.3f}, {est.high:.3f}]"


def test_mixed_sweeps_are_never_pooled():
    """Runs of one task and encoder in two configurations (train.steps 300 and 3000) are two rows, each
    labelled by the key that differs, with its own seeds; an encoder run in one configuration has no label."""
    short = [fake_run("rope", {64: [0, 0, 0, 0], 128: [0, 0, 0, 0]}, seed=s, steps=300) for s in (0, 1)]
    long = [fake_run("rope", {64: [1, 1, 1, 1], 128: [1, 1, 0, 0]}, seed=s, steps=3000) for s in (0, 1, 2)]
    alibi = [fake_run("alibi", {64: [1, 1, 1, 1], 128: [1, 1, 1, 1]}, seed=s, steps=3000) for s in (0, 1)]
    results = results_of(*short, *long, *alibi)
    assert results.evaluations.loc[results.evaluations["encoder"] == "rope", "config_id"].nunique() == 2
    comparison = aggregate(results)
    assert len(comparison) == 6  # (rope x 2 configurations + alibi) x 2 lengths
    few = _row(comparison, encoder="rope", eval_length=64, variant="train.steps=300")
    many = _row(comparison, encoder="rope", eval_length=64, variant="train.steps=3000")
    assert (few["n_seeds"], few["seeds"], few["n_sequences"]) == (2, "0,1", 8)  # seeds counted per configuration
    assert (many["n_seeds"], many["seeds"], many["n_sequences"]) == (3, "0,1,2", 12)
    assert few["exact_match_mean"] == 0.0 and many["exact_match_mean"] == 1.0  # never averaged to 0.6
    assert few["config_id"] != many["config_id"]
    assert set(comparison.loc[comparison["encoder"] == "alibi", "variant"]) == {""}
    table = pivot(comparison, "exact_match").set_index("encoder")
    assert sorted(table.index) == ["alibi", "rope [train.steps=3000]", "rope [train.steps=300]"]
    assert table.loc["rope [train.steps=300]", "64"].startswith("0.000 [")
    assert table.loc["rope [train.steps=3000]", "128"].startswith("0.500 [")
    ev = results.evaluations
    assert sorted(set(variants(ev))) == ["", "train.steps=300", "train.steps=3000"]


def test_configurations_differing_in_several_keys_name_all_of_them():
    results = results_of(
        fake_run("rope", {64: [1]}, steps=300, lr=0.01),
        fake_run("rope", {64: [0]}, steps=3000, lr=0.001),
        fake_run("rope", {64: [1]}, seed=1, steps=3000, lr=0.001),
    )
    comparison = aggregate(results)
    assert sorted(comparison["variant"]) == ["train.lr=0.001,train.steps=3000", "train.lr=0.01,train.steps=300"]
    assert sorted(comparison["n_seeds"]) == [1, 2]


def test_intervals_stay_inside_0_1_and_are_never_zero_width_for_shares():
    zeros = [fake_run("rope", {64: [0] * 8}, seed=s) for s in range(3)]
    ones = [fake_run("alibi", {64: [1] * 8}, seed=s) for s in range(3)]
    spread = [fake_run("nope", {64: v}, seed=s) for s, v in enumerate([[1] * 8, [0] * 8, [1, 0] * 4])]
    comparison = aggregate(results_of(*zeros, *ones, *spread))
    zero, one, mixed = (_row(comparison, encoder=e) for e in ("rope", "alibi", "nope"))
    n = 24
    for metric in ("exact_match", "token_accuracy"):
        assert zero[f"{metric}_low"] == 0.0 and zero[f"{metric}_high"] == pytest.approx(Z95**2 / (n + Z95**2))
        assert one[f"{metric}_high"] == 1.0 and one[f"{metric}_low"] == pytest.approx(n / (n + Z95**2))
        for row in (zero, one, mixed):
            assert 0.0 <= row[f"{metric}_low"] < row[f"{metric}_high"] <= 1.0
            assert row[f"{metric}_low"] <= row[f"{metric}_mean"] <= row[f"{metric}_high"]
    # seeds that disagree widen the interval beyond what 24 sequences alone would give
    assert mixed["exact_match_high"] - mixed["exact_match_low"] > 0.4
    assert zero["loss_low"] == zero["loss_high"] == 1.0  # an unbounded value: zero width only when all equal


def test_not_learned_groups_show_their_in_distribution_value_and_nothing_past_it():
    # seed 0 did not learn (a check once met the target, the final one did not: its steps do not count)
    runs = [
        fake_run("rope", {64: [1, 1, 0, 0], 128: [1, 1, 1, 1]}, seed=0, learned=False, steps_to_learn=50.0),
        fake_run("rope", {64: [1, 1, 1, 1], 128: [1, 1, 1, 1]}, seed=1, steps_to_learn=200.0),
        fake_run("alibi", {64: [1, 1, 1, 1], 128: [0, 0, 1, 1]}, seed=0, steps_to_learn=300.0),
        fake_run("alibi", {64: [1, 1, 1, 1], 128: [0, 0, 1, 1]}, seed=1, steps_to_learn=500.0),
    ]
    comparison = aggregate(results_of(*runs))
    rope_1x, rope_2x = (_row(comparison, encoder="rope", eval_length=n) for n in (64, 128))
    assert not rope_1x["learned"] and rope_1x["n_learned"] == 1 and rope_1x["n_seeds"] == 2
    assert rope_1x["steps_to_learn"] == 200.0  # the mean over the seeds that learned
    assert cell(rope_1x, "exact_match") == "0.750 (not learned: 1/2 seeds)"
    assert cell(rope_2x, "exact_match") == "n/l" and cell(rope_2x, "token_accuracy") == "n/l"
    alibi = _row(comparison, encoder="alibi", eval_length=128)
    assert alibi["learned"] and alibi["steps_to_learn"] == 400.0
    assert cell(alibi, "exact_match").startswith("0.500 [")
    table = pivot(comparison, "exact_match").set_index("encoder")
    assert table.loc["rope", "128"] == "n/l" and table.loc["rope", "64"].endswith("(not learned: 1/2 seeds)")
    steps = steps_table(comparison).set_index("encoder")
    assert steps.loc["rope", "seeds learned"] == "1/2" and steps.loc["alibi", "seeds learned"] == "2/2"
    assert steps.loc["alibi", "steps to learn"] == "400" and steps.loc["rope", "steps to learn"] == "200"
    assert list(steps.index) == ["rope", "alibi"]  # fastest learner first


def test_an_lm_group_that_did_not_converge_is_shown_at_every_length_and_marked_once():
    # lm has no mastery criterion: learned means converged (task_facts.converged); such a group is still a
    # language model, so its values are compared past L; only the literature checks hold it back
    runs = [
        fake_run("rope", {64: [0.5, 0.5], 128: [0.4, 0.4]}, task="lm", seed=0, learned=False, steps_to_learn=None),
        fake_run("rope", {64: [0.5, 0.5], 128: [0.4, 0.4]}, task="lm", seed=1, steps_to_learn=None),
    ]
    comparison = aggregate(results_of(*runs))
    at_l, at_2l = (_row(comparison, encoder="rope", eval_length=n) for n in (64, 128))
    assert not at_l["learned"] and (at_l["n_learned"], at_l["n_trained"]) == (1, 2)
    assert cell(at_l, "token_accuracy").startswith("0.500 [") and cell(at_l, "token_accuracy").endswith(
        "(converged: 1/2 seeds)"
    )
    assert cell(at_2l, "token_accuracy").startswith("0.400 [") and "not" not in cell(at_2l, "token_accuracy")
    assert not held_back(False, "lm") and held_back(False, "copy") and not held_back(True, "copy")


def test_mastery_belongs_to_the_configuration_not_to_the_length():
    # as compare evaluates them: the seed that did not learn only at its training length, the other everywhere
    runs = [
        fake_run("rope", {64: [1, 1, 0, 0]}, seed=0, learned=False, steps_to_learn=None),
        fake_run("rope", {64: [1, 1, 1, 1], 128: [1, 1, 1, 1]}, seed=1, steps_to_learn=200.0),
    ]
    comparison = aggregate(results_of(*runs))
    twice = _row(comparison, encoder="rope", eval_length=128)
    assert twice["n_seeds"] == 1 and (twice["n_learned"], twice["n_trained"]) == (1, 2)
    assert not twice["learned"] and cell(twice, "exact_match") == "n/l"


def test_rows_without_a_value_and_scalings_and_depths_are_groups_of_their_own():
    note = "learned position table has 64 positions"
    runs = [
        fake_run("learned", {64: [1, 1], 128: []}, note={128: note}),
        fake_run("rope", {64: [1, 1], 128: [0, 1]}),
        fake_run("rope", {128: [1, 1]}, scaling="yarn"),
        fake_run("rope", {128: [0, 0]}, scaling="ntk:4"),
    ]
    comparison = aggregate(results_of(*runs))
    nan_row = _row(comparison, encoder="learned", eval_length=128)
    assert math.isnan(nan_row["exact_match_mean"]) and nan_row["n_sequences"] == 0 and nan_row["note"] == note
    assert cell(nan_row, "exact_match") == "—"
    assert sorted(labels(comparison[comparison["eval_length"] == 128])) == [
        "learned",
        "rope",
        "rope +ntk:4",
        "rope +yarn",
    ]
    assert _row(comparison, encoder="rope", scaling="yarn")["exact_match_mean"] == 1.0
    passkey = aggregate(fake_run("alibi", {64: [1]}, task="passkey", depth=0.25))
    assert list(labels(passkey)) == ["alibi @depth 0.25", "alibi"]  # and the mean over depths


def test_depth_rows_get_a_mean_over_depths_per_sequence():
    runs = [
        fake_run("rope", {64: [1, 1, 0]}, task="passkey", depth=0.0, seed=0),
        fake_run("rope", {64: [0, 1, 0]}, task="passkey", depth=1.0, seed=0),
        fake_run("rope", {64: [1, 0, 0]}, task="passkey", depth=0.0, seed=1),
        fake_run("rope", {64: [1, 0, 0]}, task="passkey", depth=1.0, seed=1),
        fake_run("rope", {64: [1, 1, 1]}),
    ]  # copy: no depths, left alone
    results = results_of(*runs)
    means = with_depth_means(results)
    ev, seq = means.evaluations, means.sequences
    overall = ev[(ev["task"] == "passkey") & ev["depth"].isna()].set_index("seed")
    assert len(ev) == 5 + 2 and list(overall["exact_match"]) == pytest.approx([0.5, 1 / 3])
    assert list(overall["n_sequences"]) == [6, 6]
    run0 = overall.loc[0, "run_id"]
    per_sequence = seq[(seq["run_id"] == run0) & seq["depth"].isna()].sort_values("sequence")
    assert list(per_sequence["exact_match"]) == [0.5, 1.0, 0.0]  # sequence i: its mean over the depths
    assert len(seq[seq["depth"].isna()]) == 3 + 6  # copy's own rows and the two passkey runs' means
    comparison = aggregate(results)
    row = _row(comparison, task="passkey", depth=math.nan)
    assert row["n_seeds"] == 2 and row["exact_match_mean"] == pytest.approx((0.5 + 1 / 3) / 2)
    assert len(comparison[comparison["task"] == "passkey"]) == 3  # depth 0, depth 1, over all depths


def test_default_lengths_step_finely_to_twice_the_training_length_then_double():
    assert default_lengths(32, 8192, variable=True) == [
        8,
        16,
        24,
        32,
        36,
        40,
        44,
        48,
        52,
        56,
        60,
        64,
        128,
        256,
        512,
        1024,
        2048,
        4096,
        8192,
    ]
    assert default_lengths(32, 256) == [32, 36, 40, 44, 48, 52, 56, 60, 64, 128, 256]  # fixed: none below L
    assert default_lengths(100, 50) == [100]  # up_to below the training length: the training length alone


def test_lm_intervals_count_the_correlation_of_consecutive_windows():
    from posenc.analysis.compare import sequence_block

    assert sequence_block("lm", 1024) == 32 and sequence_block("copy", 1024) is None
    assert sequence_block("lm", 3) is None  # too few windows for two blocks


def test_doubling_lengths():
    assert doubling_lengths(64, 8192) == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert doubling_lengths(100, 50) == [100]


# --- `posenc compare` end to end --------------------------------------------------------------------------


def test_compare_evaluates_once_then_reuses(trained_runs: Path, tmp_path):
    out = tmp_path / "cmp"
    first = posenc_cli("compare", "--runs", str(trained_runs), "--up-to", "64", "--out", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lengths = default_lengths(16, 64)  # 16, every 2 to 32 (L/8 steps to 2L), then 64
    assert lengths == [16, 18, 20, 22, 24, 26, 28, 30, 32, 64]
    assert f"{2 * len(lengths)} new evaluations" in first.stderr  # 2 runs x those lengths
    for name in [
        "comparison.csv",
        "comparison.parquet",
        "comparison.md",
        "extrapolation.parquet",
        "report.md",
        "sequences.parquet",
        "positions.parquet",
        "copy_exact_match.png",
        "copy_exact_match.svg",
        "copy_token_accuracy.png",
        "copy_loss.svg",
    ]:
        assert (out / name).stat().st_size > 0, name
    comparison = pd.read_parquet(out / "comparison.parquet")
    assert sorted(set(comparison["encoder"])) == ["learned", "rope"]
    assert sorted(set(comparison["eval_length"])) == lengths
    assert (comparison["n_seeds"] == 1).all() and comparison["learned"].all()
    report = (out / "report.md").read_text()
    assert "![copy: exact match](copy_exact_match.png)" in report and "| encoder" in report
    before = pd.read_parquet(out / "extrapolation.parquet")
    sequences = pd.read_parquet(out / "sequences.parquet")
    assert len(sequences) == before["n_sequences"].sum() > 0  # learned at 32 and 64: NaN rows, none
    again = posenc_cli("compare", "--runs", str(trained_runs), "--up-to", "64", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 new evaluations" in again.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(out / "extrapolation.parquet"), before)
    more = posenc_cli("compare", "--runs", str(trained_runs), "--lengths", "16,128", "--out", str(out), cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert "2 new evaluations" in more.stderr  # only 128 is new
    assert sorted(set(pd.read_parquet(out / "comparison.parquet")["eval_length"])) == [16, 128]
    assert sorted(set(pd.read_parquet(out / "extrapolation.parquet")["eval_length"])) == [*lengths, 128]


def test_compare_names_a_moved_run_where_it_now_is_and_reuses_its_evaluations(trained_runs: Path, tmp_path):
    """A run folder moved (a sweep reorganised) keeps its identity: compare evaluates nothing again, and its rows
    name the folder where it now is, which is what scripts read a run's variant from (scripts/t5_gap.py)."""
    out, moved = tmp_path / "cmp", tmp_path / "moved"
    first = posenc_cli("compare", "--runs", str(trained_runs), "--lengths", "16,32", "--out", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    shutil.copytree(trained_runs, moved)
    again = posenc_cli("compare", "--runs", "moved", "--lengths", "16,32", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 new evaluations" in again.stderr
    runs = pd.read_parquet(out / "extrapolation.parquet")["run"]
    assert len(runs) == 4 and all(run.startswith("moved/") for run in runs), sorted(set(runs))


def test_compare_refuses_bad_input_in_one_line(tmp_path):
    for args, needle in [
        (["--runs", str(tmp_path / "missing")], "missing"),
        (["--lengths", "0,64"], "--lengths"),
        (["--up-to", "-5"], "--lengths"),
        (["--lengths", "6²"], "--lengths"),
    ]:
        result = posenc_cli("compare", *args, "--out", str(tmp_path / "o"), cwd=tmp_path)
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_two_compares_writing_at_once_lose_nothing(trained_runs: Path, tmp_path):
    out = tmp_path / "shared"
    env_args = [("--lengths", "16,32"), ("--lengths", "64,128")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "posenc", "compare", "--runs", str(trained_runs), *args, "--out", str(out)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for args in env_args
    ]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    table = pd.read_parquet(out / "extrapolation.parquet")
    assert sorted(set(table["eval_length"])) == [16, 32, 64, 128]  # both commands' rows are there
    assert len(table) == 8 and not table.duplicated(["run_id", "eval_length"]).any()
    sequences = pd.read_parquet(out / "sequences.parquet")
    assert sorted(set(sequences["eval_length"])) == [16, 32, 64, 128]


@pytest.fixture(scope="module")
def two_budgets(trained_runs: Path, tmp_path_factory) -> Path:
    """trained_runs (train.steps=4) in a/, and rope again with train.steps=6 in b/: one configuration's two
    candidates for `--choose train.steps` (trained once per module; tests copy it)."""
    root = tmp_path_factory.mktemp("two_budgets")
    sweep = root / "other"
    result = posenc_cli(
        "train",
        "-m",
        "encoder=rope",
        *TINY,
        *LEARNS,
        "train.steps=6",
        f"hydra.sweep.dir={sweep}",
        cwd=root,
        learns=True,
    )
    assert result.returncode == 0, result.stderr
    shutil.copytree(trained_runs, root / "runs" / "a")
    shutil.copytree(sweep, root / "runs" / "b")
    return root / "runs"


def test_compare_pools_nothing_across_configurations_end_to_end(two_budgets: Path, tmp_path):
    """A second sweep of the same task and encoder with another budget: two rows, never one pooled row."""
    runs = tmp_path / "runs"
    shutil.copytree(two_budgets, runs)
    out = tmp_path / "cmp"
    result = posenc_cli(
        "compare", "--runs", str(runs), "--lengths", "16", "--sequences", "4", "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    comparison = pd.read_parquet(out / "comparison.parquet")
    rope = comparison[comparison["encoder"] == "rope"]
    assert sorted(rope["variant"]) == ["train.steps=4", "train.steps=6"] and (rope["n_seeds"] == 1).all()
    report = (out / "report.md").read_text()
    assert "rope [train.steps=4]" in report and "rope [train.steps=6]" in report

    # --choose: the two budgets are candidates of one configuration; both learned, so one of them (fewer
    # steps to learn, then the value sorting first) is compared, and the learned encoder has no choice.
    chosen = tmp_path / "chosen"
    result = posenc_cli(
        "compare",
        "--runs",
        str(runs),
        "--lengths",
        "16",
        "--sequences",
        "4",
        "--out",
        str(chosen),
        "--choose",
        "train.steps",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    rope = pd.read_parquet(chosen / "comparison.parquet").query("encoder == 'rope'")
    assert list(rope["variant"]) == [""] and (pd.read_parquet(chosen / "choices.parquet")["chosen"].sum() == 2)
    report = (chosen / "report.md").read_text()
    assert "## Runs compared: `train.steps` chosen per configuration" in report
    regenerated = posenc_cli("report", str(chosen), cwd=tmp_path)
    assert regenerated.returncode == 0 and same_report(report, (chosen / "report.md").read_text())
    again = posenc_cli(
        "compare", "--runs", str(runs), "--lengths", "16", "--sequences", "4", "--out", str(chosen), cwd=tmp_path
    )  # without --choose: the old choice is not this comparison's
    assert again.returncode == 0 and not list(chosen.glob("choices.*"))
    assert "Runs compared" not in (chosen / "report.md").read_text()


def test_compare_extend_keeps_runs_trained_elsewhere(trained_runs: Path, tmp_path):
    """`--extend` adds runs to a comparison whose earlier runs are no longer on this machine (trained on another
    one, say): those come from OUT's tables; without it only the runs given are compared; `runs --extend`
    keeps the other runs' training rows the same way."""
    here = tmp_path / "here"
    shutil.copytree(trained_runs, here)
    out = tmp_path / "cmp"
    args = ("--lengths", "16,32", "--sequences", "4", "--out", str(out))
    first = posenc_cli("compare", "--runs", str(here / "copy" / "rope"), *args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert posenc_cli("runs", "--runs", str(here / "copy" / "rope"), "--out", str(out), cwd=tmp_path).returncode == 0
    shutil.rmtree(here / "copy" / "rope")  # rope's checkpoint is gone; its evaluations are in OUT's tables
    learned = str(here / "copy" / "learned")
    extended = posenc_cli("compare", "--runs", learned, *args, "--extend", cwd=tmp_path)
    assert extended.returncode == 0, extended.stderr
    comparison = pd.read_parquet(out / "comparison.parquet")
    assert sorted(set(comparison["encoder"])) == ["learned", "rope"] and len(comparison) == 4
    longer = posenc_cli(
        "compare", "--runs", learned, "--lengths", "64", "--sequences", "4", "--out", str(out), "--extend", cwd=tmp_path
    )  # the comparison keeps 16 and 32 and gains 64
    assert longer.returncode == 0, longer.stderr
    comparison = pd.read_parquet(out / "comparison.parquet")
    assert sorted(zip(comparison["encoder"], comparison["eval_length"])) == [
        ("learned", 16),
        ("learned", 32),
        ("learned", 64),
        ("rope", 16),
        ("rope", 32),
    ]
    assert "rope" in (out / "report.md").read_text() and "learned" in (out / "report.md").read_text()
    assert posenc_cli("runs", "--runs", learned, "--out", str(out), "--extend", cwd=tmp_path).returncode == 0
    assert sorted(pd.read_parquet(out / "training.parquet")["encoder"]) == ["learned", "rope"]
    regenerated = posenc_cli("report", str(out), cwd=tmp_path)
    assert regenerated.returncode == 0 and len(pd.read_parquet(out / "comparison.parquet")) == 5

    alone = posenc_cli("compare", "--runs", learned, *args, cwd=tmp_path)  # no --extend: these runs only
    assert alone.returncode == 0 and set(pd.read_parquet(out / "comparison.parquet")["encoder"]) == {"learned"}
    assert posenc_cli("runs", "--runs", learned, "--out", str(out), cwd=tmp_path).returncode == 0
    assert list(pd.read_parquet(out / "training.parquet")["encoder"]) == ["learned"]

    nothing = posenc_cli(
        "compare", "--runs", learned, "--lengths", "16", "--out", str(tmp_path / "new"), "--extend", cwd=tmp_path
    )
    assert nothing.returncode == 2 and "no comparison to extend" in nothing.stderr
    assert "Traceback" not in nothing.stderr and len(nothing.stderr.strip().splitlines()) == 1


def test_compare_with_rope_scaling_passkey_depths_and_lm_perplexity(tmp_path):
    """End to end through the CLI: the extension methods on a rotary checkpoint, passkey rows per depth,
    lm perplexity figures and the corpus named in the report; non-rotary runs evaluated as trained."""
    corpus = tmp_path / "texts"
    corpus.mkdir()
    for i in range(20):
        (corpus / f"t{i}.txt").write_text(f"def f{i}(x):\n    return x * {i}\n" * 40)
    sweep = tmp_path / "sweep"
    common = [*TINY, *LEARNS, f"hydra.sweep.dir={sweep}"]
    for args in (
        ["encoder=rope,alibi", "task=passkey"],
        ["encoder=rope", "task=lm", f"task.corpus={corpus}", "task.pattern=*.txt"],
    ):
        result = posenc_cli("train", "-m", *common, *args, cwd=tmp_path, learns=True)  # args override TINY
        assert result.returncode == 0, result.stderr
    out = tmp_path / "cmp"
    result = posenc_cli(
        "compare",
        "--runs",
        str(sweep),
        "--lengths",
        "16,32",
        "--rope-scaling",
        "none,yarn",
        "--sequences",
        "4",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "note: --rope-scaling applies to rotary encoders only; evaluated as trained: alibi" in result.stderr
    table = pd.read_parquet(out / "extrapolation.parquet")
    passkey = table[table["task"] == "passkey"]
    # rope: 2 scalings x 2 lengths x 5 depths; alibi: as trained only
    assert len(passkey[passkey["encoder"] == "rope"]) == 20 and len(passkey[passkey["encoder"] == "alibi"]) == 10
    assert sorted(set(passkey["depth"])) == [0.0, 0.25, 0.5, 0.75, 1.0]
    yarn = table[table["scaling"] == "yarn"]
    assert set(yarn["encoder"]) == {"rope"} and list(yarn.groupby("eval_length")["scaling_factor"].first()) == [1, 2]
    lm = table[table["task"] == "lm"]
    assert lm["depth"].isna().all() and (lm["perplexity"] > 1).all() and lm["learned"].all()
    comparison = pd.read_parquet(out / "comparison.parquet")
    rope = comparison[
        (comparison["task"] == "passkey")
        & (comparison["encoder"] == "rope")
        & (comparison["scaling"] == "none")
        & (comparison["eval_length"] == 32)
    ]
    overall = rope[rope["depth"].isna()]  # the score over all depths, next to one row per depth
    assert len(rope) == 6 and len(overall) == 1
    by_depth = rope.loc[rope["depth"].notna(), "token_accuracy_mean"]
    assert overall["token_accuracy_mean"].iloc[0] == pytest.approx(by_depth.mean())
    for name in [
        "lm_perplexity.png",
        "lm_rope_scaling_perplexity.svg",
        "passkey_exact_match.png",
        "passkey_rope_scaling_exact_match.png",
        "passkey_exact_match_by_depth.png",
    ]:
        assert (out / name).stat().st_size > 0, name
    report = (out / "report.md").read_text()
    assert "### lm: RoPE context extension at evaluation" in report and "rope +yarn" in report
    assert "rope @depth 0.5" in report and "Data: " in report and str(corpus) in report


def test_chance_token_accuracy_is_a_uniform_guess_over_the_answer_alphabet():
    import json
    import math

    from posenc.analysis.compare import chance_token_accuracy

    def config(**task):
        return json.dumps({"task": task})

    assert chance_token_accuracy(config(name="copy", n_symbols=8)) == 1 / 8
    assert chance_token_accuracy(config(name="reverse")) == 1 / 16  # the default alphabet
    assert chance_token_accuracy(config(name="retrieval", n_values=32, n_keys=64)) == 1 / 32
    assert chance_token_accuracy(config(name="passkey")) == 1 / 10
    assert math.isnan(chance_token_accuracy(config(name="lm")))
    assert math.isnan(chance_token_accuracy(None))


@pytest.mark.parametrize("name", TASKS)
def test_torch_free_task_facts_are_the_tasks_own(name):
    """The results side reads two task facts without torch (posenc.task_facts): each must be the task's own."""
    import json

    from posenc.analysis.compare import chance_token_accuracy
    from posenc.task_facts import report_metrics
    from posenc.tasks import build_task

    assert report_metrics(name) == TASKS[name].report_metrics
    option = {"copy": "n_symbols", "reverse": "n_symbols", "retrieval": "n_values"}.get(name)
    for given in ({}, {option: 7} if option else {}):
        # lm builds nothing here (it would read its corpus): its alphabet is the class's
        alphabet = TASKS[name].answer_alphabet if name == "lm" else build_task(name, given).answer_alphabet
        chance = chance_token_accuracy(json.dumps({"task": {"name": name, **given}}))
        assert chance == (1 / alphabet if alphabet else pytest.approx(math.nan, nan_ok=True))


def test_compare_extend_choose_weighs_candidates_brought_back_without_weights(two_budgets: Path, tmp_path):
    """Runs evaluated elsewhere and brought back without their checkpoints (metrics.json and config.yaml only)
    still count as `--choose` candidates under `--extend`: the choice is the one made with every checkpoint
    present, and the configuration is compared once (a candidate not chosen leaves the comparison)."""
    runs = tmp_path / "runs"
    shutil.copytree(two_budgets, runs)
    out = tmp_path / "cmp"
    args = ("--runs", str(runs), "--lengths", "16", "--sequences", "4", "--out", str(out), "--choose", "train.steps")
    assert posenc_cli("compare", *args, cwd=tmp_path).returncode == 0
    before = pd.read_parquet(out / "choices.parquet")
    for checkpoint in (runs / "b").rglob("checkpoint.pt"):
        checkpoint.unlink()  # b's runs: evaluated, then their weights left behind
    extended = posenc_cli("compare", *args, "--extend", cwd=tmp_path)
    assert extended.returncode == 0, extended.stderr
    after = pd.read_parquet(out / "choices.parquet")
    assert list(after.query("encoder == 'rope'")["chosen"]) == list(before.query("encoder == 'rope'")["chosen"])
    rope = pd.read_parquet(out / "comparison.parquet").query("encoder == 'rope'")
    assert len(rope) == 1 and list(rope["variant"]) == [""]  # one configuration, not both candidates
