"""scripts/scale_check.py: each pairwise ordering judged at two scales, and every outcome it can give."""

from pathlib import Path

import pandas as pd
import pytest
from conftest import load_script
from fake_results import config_of, fake_run, results_of

from posenc.analysis.pipeline import compare_into
from posenc.analysis.store import run_identity


def _script():
    return load_script("scale_check")


@pytest.mark.parametrize(
    "first, second, outcome",
    [
        (1, 1, "holds"),
        (-1, -1, "holds"),
        (1, -1, "reverses"),
        (-1, 1, "reverses"),
        (1, 0, "not confirmed"),
        (0, -1, "new"),
        (0, 0, "open at both"),
        (None, 1, "not testable"),
        (1, None, "not testable"),
    ],
)
def test_classify_gives_every_outcome(first, second, outcome):
    assert _script().classify(first, second) == outcome


def _comparison(folder, train_length, ahead, behind, n=40):
    """A comparison of two encoders, 3 seeds each, trained at ``train_length``: ``ahead`` copies every sequence
    in (1×, 2×] and ``behind`` none; past 2× both score half the sequences (no ordering)."""
    lengths = (train_length, 2 * train_length, 4 * train_length)

    def values(score):
        return {train_length: [1.0] * n, 2 * train_length: [score] * n, 4 * train_length: [1.0, 0.0] * (n // 2)}

    runs = [
        fake_run(enc, values(score), seed=s, train_length=train_length)
        for enc, score in ((ahead, 1.0), (behind, 0.0))
        for s in range(3)
    ]
    ids = {run_identity(config_of(enc, "copy", s, train_length)).run_id for enc in (ahead, behind) for s in range(3)}
    compare_into(folder, results_of(*runs), ids, list(lengths), "test")
    return folder


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_pair_table_says_holds_and_reverses_from_real_comparison_folders(tmp_path):
    script = _script()
    first = _comparison(tmp_path / "first", 32, "nope", "rope")
    same = _comparison(tmp_path / "same", 64, "nope", "rope")
    flipped = _comparison(tmp_path / "flipped", 64, "rope", "nope")
    for second, expected in ((same, "holds"), (flipped, "reverses")):
        table = script.pair_table(first, second, "copy", ["nope", "rope"]).set_index(["metric", "window"])
        assert table.loc[("exact match", "(1×, 2×]"), "outcome"] == expected
        assert table.loc[("exact match", "(2×, 32×]"), "outcome"] == "open at both"  # 0.5 each side: no order
    assert script.main(["--task", f"copy={first}:{flipped}", "--encoders", "nope,rope"]) == 0
    assert "reverses" in (flipped / "scale_check.md").read_text()


def test_bad_task_spec_is_one_line_and_exit_2(tmp_path, capsys):
    assert _script().main(["--task", "copy=onlyone"]) == 2
    assert capsys.readouterr().err.startswith("error: --task copy=onlyone")


@pytest.mark.parametrize("by", [None, "bash scripts/t5_layout.sh"])
def test_report_names_the_command_that_ran_it(by):
    table = pd.DataFrame([{"task": "copy", "metric": "exact match", "outcome": "holds"}])
    sources = {"copy": (Path("first"), Path("second"))}
    text = _script().markdown({"copy": table}, sources, *([by] if by else []))
    assert f"(run by `{by or 'bash scripts/scale.sh'}`)" in text
