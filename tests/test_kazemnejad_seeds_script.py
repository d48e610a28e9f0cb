"""scripts/kazemnejad_seeds.py: every seed's test-range exact match, and the stopping rule paired by seed."""

import math

import pandas as pd
import pytest
from conftest import load_script


def _rows(arm_shift, seeds=(0, 1, 2)):
    script = load_script("kazemnejad_seeds")
    rows = []
    for seed in seeds:
        for length in (script.TRAIN_LENGTH, *script.TEST, *script.BEYOND, 100):  # 100: outside every window
            value = 1.0 if length == script.TRAIN_LENGTH else 0.1 * seed + arm_shift + (0.5 if length == 100 else 0)
            rows.append(
                {
                    "task": "copy",
                    "encoder": "t5",
                    "seed": seed,
                    "eval_length": length,
                    "scaling": "none",
                    "learned": seed != 2,
                    "steps_to_learn": 3000,
                    "exact_match": value,
                }
            )
            rows.append(
                {
                    "task": "copy",
                    "encoder": "t5",
                    "seed": seed,
                    "eval_length": length,
                    "scaling": "linear",
                    "learned": seed != 2,
                    "steps_to_learn": 3000,
                    "exact_match": 9.0,
                }
            )  # not read
    return script, pd.DataFrame(rows)


def test_per_seed_means_the_windows_and_keeps_not_learned_seeds():
    script, table = _rows(0.2)
    seeds = script.per_seed(table)
    assert len(seeds) == 3 and seeds["learned"].tolist() == [True, True, False]
    assert seeds["test_exact_match"].tolist() == pytest.approx([0.2, 0.3, 0.4])  # length 100 and scaling left out
    assert seeds["beyond_exact_match"].tolist() == pytest.approx([0.2, 0.3, 0.4])
    assert seeds["train_exact_match"].tolist() == [1.0, 1.0, 1.0]
    spread = script.distribution(seeds).iloc[0]
    assert spread["seeds"] == 3 and spread["learned"] == 2 and spread["max"] == pytest.approx(0.4)
    assert spread["share>=0.5"] == 0 and spread["mean"] == pytest.approx(0.3) and spread["sd"] == pytest.approx(0.1)
    short = script.per_seed(table[table["eval_length"] != script.TEST[3]])  # a test length missing: no mean
    assert short["test_exact_match"].isna().all()


def test_arms_are_paired_by_seed():
    script, mastery = _rows(0.2)
    _, schedule = _rows(0.5, seeds=(0, 1, 2, 3))  # seed 3 has no mastery run: not paired
    pairs = script.paired(script.per_seed(mastery), script.per_seed(schedule)).iloc[0]
    assert pairs["seeds"] == 3 and pairs["difference"] == pytest.approx(0.3) and pairs["rose"] == 3
    assert pairs["low"] == pytest.approx(0.3) and pairs["high"] == pytest.approx(0.3)  # no spread in d
    assert not math.isnan(pairs["mastery"])
    assert (pairs["learned_mastery"], pairs["learned_schedule"]) == (2, 2)  # seed 2 did not learn in either


def test_each_arm_beside_mastery_gets_its_paired_table(tmp_path, monkeypatch):
    """The schedule arm's stopping_rule.md and the long arm's budget.md, each only where both arms have runs."""
    import sys

    script, mastery = _rows(0.2)
    _, long = _rows(0.5)
    for arm, table in (("mastery", mastery), ("long", long)):
        (tmp_path / arm).mkdir()
        table.assign(learned=True if arm == "long" else table["learned"]).to_csv(tmp_path / arm / "extrapolation.csv")
    monkeypatch.setattr(sys, "argv", ["kazemnejad_seeds.py", "--root", str(tmp_path)])
    script.main()
    assert not (tmp_path / "stopping_rule.md").exists()
    budget = (tmp_path / "budget.md").read_text()
    assert budget.startswith("# The budget, paired by seed") and "40000 steps" in budget
    row = next(line for line in budget.splitlines() if line.startswith("| copy"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:5] == ["copy", "t5", "3", "2", "3"]  # seeds, learned in mastery, learned in long
    assert float(cells[7]) == pytest.approx(0.3)  # the mean difference


def test_the_seed_figure_says_what_its_marks_are_and_nothing_runs_past_its_edges(tmp_path, monkeypatch):
    import matplotlib.figure
    from analysis.test_figure_layout import problems

    script, table = _rows(0.2)
    saved, save = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig) or save(fig, *a, **k)
    )
    both = pd.concat([table, table.assign(task="reverse")])
    for tasks in (table, both):  # one panel (a key on two lines) and two
        script.figure(script.per_seed(tasks), tmp_path / "seeds", "Kazemnejad matched, arm mastery: every seed")
        (key,) = saved[-1].legends
        labels = [text.get_text() for text in key.get_texts()]
        assert labels == ["a seed that learned", "a seed that did not learn", "mean over seeds", "generalizes (0.5)"]
        assert problems(saved[-1]) == []


def test_a_run_that_left_the_comparison_is_not_among_the_seeds(tmp_path):
    """An arm's extrapolation table keeps every run ever evaluated there; a run its comparison no longer covers
    (a T5 trained before the arm took the paper's layout, the same seed) is left out, not counted twice."""
    script, table = _rows(0.2)
    superseded = table[table["seed"] == 0].assign(exact_match=0.9)
    table = pd.concat([table.assign(run_id=[f"now{s}" for s in table["seed"]]), superseded.assign(run_id="old0")])
    table.to_csv(tmp_path / "extrapolation.csv", index=False)
    mixed = script.per_seed(script.compared_rows(tmp_path))  # no comparison yet: every run, old0 pooled in
    assert mixed["test_exact_match"].iloc[0] == pytest.approx((0.2 + 0.9) / 2)
    pd.DataFrame({"run_ids": ["now0,now1", "now2"], "eval_length": [44, 44]}).to_parquet(
        tmp_path / "comparison.parquet"
    )
    seeds = script.per_seed(script.compared_rows(tmp_path))
    assert list(seeds["seed"]) == [0, 1, 2]
    assert seeds["test_exact_match"].tolist() == pytest.approx([0.2, 0.3, 0.4])


def test_the_seed_figure_is_the_same_file_for_the_same_seeds(tmp_path):
    """No creation date and fixed SVG ids: a retabulation that adds no seed changes no committed figure."""
    script, table = _rows(0.2)
    for name in ("a", "b"):
        script.figure(script.per_seed(table), tmp_path / name, "every seed")
    for suffix in (".svg", ".png"):
        assert (tmp_path / "a").with_suffix(suffix).read_bytes() == (tmp_path / "b").with_suffix(suffix).read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, nothing left beside


def test_the_schedule_arm_pairs_with_its_own_runs_stopped_at_mastery_and_compares_verdicts(tmp_path, monkeypatch):
    """stopping_rule.md: schedule minus schedule_at_mastery (the same runs), with both sides' claim verdicts;
    the mastery arm, other runs, is not its pair."""
    import sys

    script, stopped = _rows(0.2)
    _, schedule = _rows(0.6)
    _, mastery = _rows(0.0)
    for arm, table in (("mastery", mastery), ("schedule_at_mastery", stopped), ("schedule", schedule)):
        (tmp_path / arm).mkdir()
        table.to_csv(tmp_path / arm / "extrapolation.csv")
    asked = []
    outcomes = pd.DataFrame({"claim": ["kazemnejad2023_copy"], "schedule_at_mastery": ["open"], "schedule": ["x"]})
    monkeypatch.setattr(script, "verdicts", lambda folders: asked.append(folders) or outcomes)
    monkeypatch.setattr(sys, "argv", ["kazemnejad_seeds.py", "--root", str(tmp_path)])
    script.main()
    text = (tmp_path / "stopping_rule.md").read_text()
    assert text.startswith("# The stopping rule, paired by run") and "learned_schedule_at_mastery" in text
    row = next(line for line in text.splitlines() if line.startswith("| copy"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:3] == ["copy", "t5", "3"] and float(cells[7]) == pytest.approx(0.4)  # 0.6 - 0.2, not 0.6 - 0.0
    assert asked == [{"schedule_at_mastery": tmp_path / "schedule_at_mastery", "schedule": tmp_path / "schedule"}]
    assert "## The claims' verdicts on both sides" in text and "| kazemnejad2023_copy | open" in text


def test_verdicts_say_whether_two_arms_agree_on_each_claim():
    """On the committed arms: mastery (10000 steps: sides short of mastery) and long (40000) differ on every
    claim, judged on the runs both hold (mastery's 101 of long's 150); an arm beside itself agrees."""
    from pathlib import Path

    script = load_script("kazemnejad_seeds")
    root = Path("results/kazemnejad")
    differ = script.verdicts({"mastery": root / "mastery", "long": root / "long"})
    assert differ["claim"].tolist() == list(script.CLAIMS) and not differ["same"].any()
    assert set(differ["runs_long"]) == set(differ["runs_mastery"]) == {101}  # seeds 0-9, and NoPE copy's 14
    assert set(differ["mastery"]) == {"not testable"} and set(differ["long"]) == {"inconclusive"}
    agree = script.verdicts({"mastery": root / "mastery", "again": root / "mastery"})
    assert agree["same"].all()
