"""posenc.analysis.baseline: runs placed beside a committed comparison (``posenc compare --baseline``)."""

from __future__ import annotations

import json

import pytest
from fake_results import config_of, fake_run, results_of

from posenc.analysis.baseline import (
    BASELINE_COLUMN,
    Baseline,
    baseline_section,
    check_configs,
    check_fingerprints,
    check_out,
    read_baseline,
    seed_out,
)
from posenc.analysis.compare import TABLE_STEM, aggregate
from posenc.analysis.evidence import TableEvidence
from posenc.analysis.store import read_results, write_results
from posenc.analysis.tables import write_tables
from posenc.errors import PosencError

HIGH, LOW = [1.0] * 8, [1.0, 0.0] * 4


def _baseline_folder(tmp_path, fingerprint="fp"):
    """A committed comparison of rope and alibi on copy, two seeds, at 64 and 128 (trained at 64)."""
    folder = tmp_path / "base"
    runs = [
        fake_run(enc, {64: HIGH, 128: LOW}, seed=s, fingerprint=fingerprint)
        for enc in ("rope", "alibi")
        for s in (0, 1)
    ]
    results = results_of(*runs)
    folder.mkdir()
    write_results(folder, results)
    write_tables(
        aggregate(
            results.__class__(results.evaluations.assign(variant="as trained"), results.sequences, results.positions)
        ),
        folder,
        TABLE_STEM,
    )
    return folder


def test_read_baseline_takes_its_lengths_and_its_runs_configurations(tmp_path):
    base = read_baseline(_baseline_folder(tmp_path))
    assert base.lengths == [64, 128] and base.choose is None
    assert list(base.configs) == ["copy"]
    assert all("encoder.name" not in c and "task.name" in c for c in base.configs["copy"])
    with pytest.raises(PosencError, match="holds no comparison"):
        read_baseline(tmp_path / "nowhere")


def test_out_is_never_the_baseline_nor_inside_it(tmp_path):
    base = read_baseline(_baseline_folder(tmp_path))
    for out in (tmp_path / "base", tmp_path / "base" / "sub"):
        with pytest.raises(PosencError, match="the baseline is never written"):
            check_out(base, out)
    check_out(base, tmp_path / "mine")


def test_a_run_may_differ_only_in_encoder_and_seed(tmp_path):
    base = read_baseline(_baseline_folder(tmp_path))
    check_configs(base, {"mine": config_of("log_alibi", seed=7)})  # another encoder, another seed: fine
    with pytest.raises(PosencError, match=r"mine differs .* train\.lr=0\.01 here, 0\.003 there"):
        check_configs(base, {"mine": config_of("log_alibi", lr=0.01)})
    with pytest.raises(PosencError, match="has no runs of task 'reverse'"):
        check_configs(base, {"mine": config_of("log_alibi", task="reverse")})
    options = config_of("log_alibi")
    options["encoder"]["scale"] = 2.0  # the encoder's own options are the encoder's
    check_configs(base, {"mine": options})


def test_fingerprints_must_be_the_baselines(tmp_path):
    baseline = results_of(fake_run("rope", {64: HIGH, 128: LOW}, fingerprint="fp")).evaluations
    same = fake_run("mine", {64: HIGH, 128: LOW}, fingerprint="fp").evaluations
    check_fingerprints(baseline, same)
    other = fake_run("mine", {64: HIGH, 128: LOW}, fingerprint="xx").evaluations
    with pytest.raises(PosencError, match=r"other sequences than the baseline \(copy at length 64: fingerprint xx64"):
        check_fingerprints(baseline, other)
    unrecorded = results_of(fake_run("rope", {64: HIGH})).evaluations
    with pytest.raises(PosencError, match="record no fingerprint"):
        check_fingerprints(unrecorded, same)
    elsewhere = fake_run("mine", {256: HIGH}, fingerprint="zz").evaluations
    check_fingerprints(baseline, elsewhere)  # a length the baseline has no rows at: nothing to contradict


def test_seed_out_copies_the_baseline_and_marks_its_rows(tmp_path):
    folder = _baseline_folder(tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    out = tmp_path / "mine"
    assert seed_out(read_baseline(folder), out) is True
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # the baseline is never written
    copied = read_results(out).evaluations
    assert set(copied[BASELINE_COLUMN]) == {"base"}
    assert seed_out(read_baseline(folder), out) is False  # tables there already: extended, not copied again


def _section(tmp_path, new_learned=True):
    runs = [
        fake_run(enc, {64: HIGH, 128: LOW if enc == "rope" else HIGH}, seed=s)
        for enc in ("rope", "mine")
        for s in (0, 1)
    ]
    if not new_learned:
        runs = runs[:2] + [fake_run("mine", {64: LOW}, seed=s, learned=False) for s in (0, 1)]
    results = results_of(*runs)
    ev = results.evaluations.copy()
    ev[BASELINE_COLUMN] = ev["encoder"].map({"rope": "length_generalization"}).fillna("")
    results = results.__class__(ev, results.sequences, results.positions)
    return baseline_section(TableEvidence(results), ev, lambda task: "token_accuracy")


def test_the_report_section_pairs_each_new_encoder_with_every_baseline_encoder(tmp_path):
    text = "\n".join(_section(tmp_path))
    assert "## Beside the baseline (length_generalization)" in text
    row = next(line for line in text.splitlines() if line.startswith("| mine − rope"))
    assert "+0.500" in row  # mine copies every sequence at 2x, rope half of them: +0.5, paired by sequence
    assert "not learned" in "\n".join(_section(tmp_path, new_learned=False))
    assert baseline_section(None, fake_run("rope", {64: HIGH}).evaluations, str) == []  # no baseline rows


def test_baseline_dataclass_checks_delegate(tmp_path):
    folder = _baseline_folder(tmp_path)
    base = read_baseline(folder)
    assert isinstance(base, Baseline)
    base.check_fingerprints(fake_run("mine", {64: HIGH}, fingerprint="fp").evaluations)
    with pytest.raises(PosencError):
        base.check_configs({"x": json.loads(json.dumps(config_of("mine", lr=1.0)))})
