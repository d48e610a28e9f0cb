"""report.md from tables alone: `posenc report DIR` regenerates what `posenc compare` wrote, without the runs,
and the modules that render it import no torch."""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import posenc_cli
from fake_results import fake_run, results_of

import posenc.analysis
from posenc.analysis.pipeline import REPORT, compare_into, regenerate
from posenc.analysis.report import GENERATED, same_report
from posenc.errors import PosencError

TORCH_FREE = sorted(
    f"posenc.analysis.{p.stem}" for p in Path(posenc.analysis.__file__).parent.glob("*.py") if p.stem != "__init__"
)  # the whole results package, by construction


def test_rendering_modules_import_no_torch():
    """A report regenerates on a machine without torch (and fast): none of these pulls it in."""
    script = (
        "import importlib, sys\n"
        f"for name in {TORCH_FREE!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'torch' in sys.modules:\n"
        "        sys.exit('torch imported by ' + name)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_same_report_ignores_only_the_generated_line():
    a = f"# posenc comparison\n\n{GENERATED} on 2026-01-01 00:00 UTC by `posenc compare`.\n\nbody\n"
    b = f"# posenc comparison\n\n{GENERATED} on 2027-05-05 10:10 UTC by `posenc report x`.\n\nbody\n"
    assert same_report(a, b)
    assert not same_report(a, b.replace("body", "other body"))
    assert not same_report(a, a.replace("# posenc comparison", "# posenc"))


def _fake_sweep():
    runs = []
    for seed in (0, 1):
        runs.append(fake_run("rope", {64: [1, 1, 1, 1], 128: [1, 0, 0, 0], 256: [0, 0, 0, 0]}, seed=seed))
        runs.append(
            fake_run("alibi", {64: [1, 1, 1, 1], 128: [1, 1, 1, 0], 256: [1, 1, 0, 0]}, seed=seed, steps_to_learn=300.0)
        )
        runs.append(fake_run("nope", {64: [1, 0, 0, 0]}, seed=seed, learned=False, steps_to_learn=None))
    return results_of(*runs)


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_regenerate_rewrites_the_same_report_from_the_tables(tmp_path):
    results = _fake_sweep()
    run_ids = set(results.evaluations["run_id"])
    comparison, _, figures = compare_into(tmp_path, results, run_ids, None, "posenc compare --out x")
    written = (tmp_path / REPORT).read_text()
    assert "posenc compare --out x" in written and figures
    assert "| nope      | 0.250 (not learned: 0/2 seeds)" in written  # its in-distribution value, marked
    assert "| alibi − rope |" in written
    assert "## Against the literature" not in written  # no claim has all its encoders in this sweep
    for name in ("extrapolation.parquet", "sequences.parquet", "positions.parquet", "comparison.parquet"):
        assert (tmp_path / name).is_file(), name
    before = pd.read_parquet(tmp_path / "comparison.parquet")
    for png in tmp_path.glob("*.png"):
        png.unlink()  # figures are redrawn too
    again, _, figures_again = regenerate(tmp_path, "posenc report x")
    fresh = (tmp_path / REPORT).read_text()
    assert same_report(written, fresh) and "posenc report x" in fresh and written != fresh
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "comparison.parquet"), before)
    assert sorted(figures_again) == sorted(figures) and all(p.is_file() for p in figures_again.values())


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_regenerate_keeps_to_the_runs_and_lengths_that_were_compared(tmp_path):
    results = _fake_sweep()
    rope = set(results.evaluations.loc[results.evaluations["encoder"] == "rope", "run_id"])
    compare_into(tmp_path, results, rope, [64, 128], "posenc compare")  # all runs stored, rope compared
    written = (tmp_path / REPORT).read_text()
    regenerate(tmp_path, "posenc report")
    assert same_report(written, (tmp_path / REPORT).read_text())
    comparison = pd.read_parquet(tmp_path / "comparison.parquet")
    assert set(comparison["encoder"]) == {"rope"} and sorted(set(comparison["eval_length"])) == [64, 128]
    assert set(pd.read_parquet(tmp_path / "extrapolation.parquet")["encoder"]) == {"rope", "alibi", "nope"}


def test_regenerate_needs_a_comparison(tmp_path):
    with pytest.raises(PosencError) as err:
        regenerate(tmp_path, "posenc report")
    assert len(str(err.value).splitlines()) == 1 and "posenc compare --out" in str(err.value)


def test_regenerating_a_missing_folder_creates_nothing(tmp_path):
    with pytest.raises(PosencError, match="no comparison"):
        regenerate(tmp_path / "typo", "posenc report typo")
    assert not (tmp_path / "typo").exists()  # a command that only reads tables leaves no folder behind


def test_posenc_report_regenerates_compares_report_after_the_runs_are_gone(trained_runs: Path, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(trained_runs, runs)
    out = tmp_path / "cmp"
    result = posenc_cli(
        "compare", "--runs", str(runs), "--lengths", "16,32", "--sequences", "4", "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    written = (out / REPORT).read_text()
    shutil.rmtree(runs)  # nothing but the tables is left
    for figure in out.glob("*.png"):
        figure.unlink()
    result = posenc_cli("report", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    fresh = (out / REPORT).read_text()
    assert same_report(written, fresh)
    assert "posenc report " in fresh and "posenc compare " in written
    assert (out / "copy_exact_match.png").stat().st_size > 0
    missing = posenc_cli("report", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "no comparison" in missing.stderr


def test_literature_checks_read_evidence_from_the_tables_and_never_pool_configurations():
    from posenc.analysis.claims import Side, check
    from posenc.analysis.compare import with_depth_means
    from posenc.analysis.evidence import TableEvidence
    from posenc.analysis.literature import CLAIMS

    ruoss = next(c for c in CLAIMS if c.key == "ruoss2023_copy")  # randomized beats sinusoidal at 2x, 4x
    n = 30
    randomized = [fake_run("randomized", {64: [1] * n, 128: [1] * n, 256: [1, 0] * (n // 2)}, seed=s) for s in (0, 1)]
    sinusoidal = [fake_run("sinusoidal", {64: [1] * n, 128: [0] * n, 256: [0] * n}, seed=s) for s in (0, 1)]
    evidence = TableEvidence(with_depth_means(results_of(*randomized, *sinusoidal)))
    assert evidence.learned("copy", Side("randomized")) is True and evidence.learned("copy", Side("rope")) is None
    values = evidence.values("copy", Side("sinusoidal"), 2, "token_accuracy")
    assert len(values) == 2 and all(list(v) == [0.0] * n for v in values)  # per seed, per sequence
    assert list(evidence.values("copy", Side("randomized"), 4, "token_accuracy")[0][:4]) == [1, 0, 1, 0]
    assert evidence.values("copy", Side("randomized"), 8, "token_accuracy") is None  # not evaluated there
    verdict = check(ruoss, evidence)
    assert verdict.outcome == "agrees", verdict.details
    # sinusoidal also run in another configuration: which one the claim means is ambiguous, so not testable
    other = fake_run("sinusoidal", {64: [1] * n, 128: [1] * n, 256: [1] * n}, seed=0, steps=3000)
    mixed = TableEvidence(with_depth_means(results_of(*randomized, *sinusoidal, other)))
    assert mixed.learned("copy", Side("sinusoidal")) is None
    assert check(ruoss, mixed).outcome == "not testable"
    # a side whose seeds did not all learn is not compared
    failed = fake_run("randomized", {64: [0] * n}, seed=2, learned=False, steps_to_learn=None)
    unlearned = TableEvidence(with_depth_means(results_of(*randomized, *sinusoidal, failed)))
    verdict = check(ruoss, unlearned)
    assert verdict.outcome == "not testable" and "randomized did not learn copy" in verdict.details[0]


def test_a_seed_that_did_not_learn_is_drawn_at_its_own_budget():
    """Steps-to-learn figure: a cross at the budget the seed spent (reverse at 3000 beside copy at 10000),
    read from each run's configuration."""
    import json

    from posenc.analysis.report import _budget

    assert _budget(json.dumps({"train": {"steps": 3000}})) == 3000.0
    assert _budget(json.dumps({"train": {}})) != _budget(json.dumps({"train": {}}))  # NaN: not recorded
    assert _budget(None) != _budget(None)


def test_lm_reports_each_encoders_change_of_loss_from_the_training_length():
    from fake_results import fake_run, results_of

    from posenc.analysis.compare import aggregate, with_depth_means
    from posenc.analysis.evidence import TableEvidence
    from posenc.analysis.report import loss_change_table

    at_l = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]  # losses 0.1 ... 0.8
    runs = [
        fake_run(e, {4: at_l, 8: [v - grow for v in (0.85, 0.65, 0.45, 0.25) * 2]}, task="lm", train_length=4, seed=s)
        for e, grow in (("alibi", 0.0), ("rope", 0.2))
        for s in (0, 1)
    ]
    results = with_depth_means(results_of(*runs))
    table = loss_change_table(TableEvidence(results), aggregate(results), "lm").set_index("encoder")
    assert list(table.columns) == ["2×", "4×", "8×"]
    assert table.loc["alibi", "2×"].startswith("+0.000 [") and table.loc["rope", "2×"].startswith("+0.200 [")
    assert table.loc["rope", "4×"] == "—"  # not evaluated there
    copy = with_depth_means(results_of(fake_run("rope", {4: [1, 1], 8: [1, 0]}, train_length=4)))
    assert loss_change_table(TableEvidence(copy), aggregate(copy), "copy") is None


def test_rope_scaling_rows_pair_by_seed_against_the_same_checkpoints():
    """The report's paired table for RoPE scaling: each method minus the same checkpoints as trained. Seed s's
    checkpoint scores 0.2, 0.5 or 0.8 either way, yarn +0.1 on top: paired by seed the seed effect cancels
    (interval above 0); adding the two sides' seed variances, as for different runs, it would hold 0."""
    from posenc.analysis.claims import Side
    from posenc.analysis.compare import aggregate, with_depth_means
    from posenc.analysis.evidence import TableEvidence
    from posenc.analysis.report import scaling_paired_table
    from posenc.analysis.stats import paired_difference

    n, base = 200, (0.2, 0.5, 0.8)
    noise = [0.05 * ((i % 5) - 2) for i in range(n)]
    runs = [
        fake_run(
            "rope",
            {32: [0.9] * n, **{k: [b + up + e for e in noise] for k in (64, 128)}},
            seed=s,
            train_length=32,
            scaling=method,
        )
        for s, b in enumerate(base)
        for method, up in (("none", 0.0), ("yarn", 0.1))
    ]
    runs += [
        fake_run("alibi", {32: [0.9] * n, 64: [0.5] * n, 128: [0.5] * n}, seed=s, train_length=32) for s in range(3)
    ]
    results = with_depth_means(results_of(*runs))
    evidence = TableEvidence(results)
    table = scaling_paired_table(evidence, aggregate(results), "copy", "token_accuracy").set_index("encoder")
    assert list(table.index) == ["rope +yarn − rope"]  # alibi was not evaluated under a method
    yarn, trained = (
        evidence.values("copy", side, 2, "token_accuracy") for side in (Side("rope", "yarn"), Side("rope"))
    )
    paired = paired_difference(yarn, trained, same_seeds=True)
    assert table.loc["rope +yarn − rope", "2×"] == paired.format(signed=True)
    assert paired.low > 0 > paired_difference(yarn, trained).low  # as different runs: open
    # different runs (alibi − rope) are not paired by seed
    from posenc.analysis.report import paired_table

    across = paired_table(evidence, aggregate(results), "copy", "token_accuracy").set_index("encoder")
    alibi = evidence.values("copy", Side("alibi"), 2, "token_accuracy")
    assert across.loc["alibi − rope", "2×"] == paired_difference(alibi, trained).format(signed=True)


def test_lm_losses_are_set_against_the_unigram_reference():
    """Where each side's loss at 4x and 8x sits against the unigram loss the data line records (0.5 here):
    above it with its whole interval, its interval holding it, or below; nothing without a recorded value."""
    from posenc.analysis.claims import Side
    from posenc.analysis.compare import aggregate, with_depth_means
    from posenc.analysis.report import against_unigram

    data = "text; unigram loss 0.500 nats/byte (the training split's byte frequencies, ...)"
    spread = [0.1, 0.9] * 8  # loss 1 - value: mean 0.5, wide
    runs = [
        fake_run(e, {4: [0.9] * 16, 16: vals, 32: vals}, task="lm", train_length=4, seed=s, data=data)
        for e, vals in (("sinusoidal", [0.1] * 16), ("rope", spread), ("alibi", [0.9] * 16))
        for s in (0, 1)
    ]
    comparison = aggregate(with_depth_means(results_of(*runs)))
    sides = [Side("alibi"), Side("rope"), Side("sinusoidal")]
    text = against_unigram(comparison, "lm", sides)
    assert text.startswith("unigram loss 0.500 nats/byte")
    above, around, below = text.split("; ")[1:]
    assert "sinusoidal 4× 0.90" in above and "sinusoidal 8× 0.90" in above and "rope" not in above
    assert "rope 4× 0.50" in around and "rope 8×" in around and "alibi" not in around
    assert below.startswith("below it: alibi 4× 0.10")
    assert against_unigram(comparison, "lm", sides, every=False).endswith("below it: every other")
    assert against_unigram(comparison.assign(data="text"), "lm", sides) == ""
