"""Choosing among runs that differ in one key on in-distribution data (posenc/analysis/selection.py)."""

from __future__ import annotations

import json
import math

import pytest
from fake_results import config_of

from posenc.analysis.report import render
from posenc.analysis.selection import choices_markdown, choose_runs
from posenc.errors import PosencError


def _runs(tmp_path, specs):
    """Run folders with config.yaml-like mappings and metrics.json; specs: (encoder, lr, seed, steps or None)."""
    runs, configs = [], []
    for encoder, lr, seed, steps in specs:
        run = tmp_path / f"{encoder}-{lr}-{seed}"
        run.mkdir()
        metrics = {"checks": [[100, 0.5]], "steps_to_learn": steps, "exact_match": 1.0 if steps else 0.1}
        (run / "metrics.json").write_text(json.dumps(metrics))
        runs.append(run)
        configs.append(config_of(encoder, seed=seed, lr=lr))
    return runs, configs


def test_most_seeds_learned_wins_then_fewest_steps(tmp_path):
    runs, configs = _runs(tmp_path, [
        # nope: 3e-3 is faster where it learns but loses a seed; 1e-3 learns all three
        ("nope", 0.003, 0, 200), ("nope", 0.003, 1, 300), ("nope", 0.003, 2, None),
        ("nope", 0.001, 0, 900), ("nope", 0.001, 1, 800), ("nope", 0.001, 2, 1000),
        # rope: both learn every seed; 1e-3 needs fewer steps
        ("rope", 0.003, 0, 500), ("rope", 0.003, 1, 500), ("rope", 0.001, 0, 300), ("rope", 0.001, 1, 400),
        # alibi: one candidate only
        ("alibi", 0.003, 0, None),
    ])  # fmt: skip
    chosen, table = choose_runs(runs, configs, "train.lr")
    assert sorted(r.name for r in chosen) == sorted(
        ["nope-0.001-0", "nope-0.001-1", "nope-0.001-2", "rope-0.001-0", "rope-0.001-1", "alibi-0.003-0"]
    )
    row = table.set_index(["encoder", "value"])
    assert row.loc[("nope", "0.003"), "n_learned"] == 2 and row.loc[("nope", "0.003"), "n_trained"] == 3
    assert row.loc[("nope", "0.001"), "chosen"] and not row.loc[("nope", "0.003"), "chosen"]
    assert row.loc[("rope", "0.001"), "steps_to_learn"] == 350 and row.loc[("rope", "0.001"), "chosen"]
    assert row.loc[("alibi", "0.003"), "chosen"] and math.isnan(row.loc[("alibi", "0.003"), "steps_to_learn"])
    view = choices_markdown(table)
    assert "nope" in view and "rope" in view and "alibi" not in view  # only configurations with a choice
    assert "2/3" in view and "3/3" in view


def test_only_the_key_and_the_seed_may_differ_within_a_group(tmp_path):
    runs, configs = _runs(tmp_path, [("rope", 0.003, 0, 100), ("rope", 0.001, 0, 200)])
    configs[1]["train"]["steps"] = 999  # another budget: another configuration, not a candidate
    chosen, table = choose_runs(runs, configs, "train.lr")
    assert len(chosen) == 2 and table["chosen"].all()


def test_ties_go_to_the_value_that_sorts_first(tmp_path):
    runs, configs = _runs(tmp_path, [("rope", 0.003, 0, 100), ("rope", 0.001, 0, 100)])
    chosen, _ = choose_runs(runs, configs, "train.lr")
    assert [r.name for r in chosen] == ["rope-0.001-0"]


def test_unknown_key_and_unfinished_runs_are_refused(tmp_path):
    runs, configs = _runs(tmp_path, [("rope", 0.003, 0, 100)])
    with pytest.raises(PosencError, match="--choose train.nosuch: no run's config has the key"):
        choose_runs(runs, configs, "train.nosuch")
    (runs[0] / "metrics.json").unlink()
    with pytest.raises(PosencError, match="unfinished"):
        choose_runs(runs, configs, "train.lr")


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_report_shows_the_choice(tmp_path):
    from fake_results import fake_run, results_of

    from posenc.analysis.compare import aggregate, variants

    runs, configs = _runs(tmp_path, [("rope", 0.003, 0, 500), ("rope", 0.001, 0, 300)])
    _, table = choose_runs(runs, configs, "train.lr")
    results = results_of(fake_run("rope", {64: [1.0] * 8, 128: [0.0] * 8}))
    results = type(results)(
        results.evaluations.assign(variant=variants(results.evaluations)), results.sequences, results.positions
    )
    out = tmp_path / "out"
    out.mkdir()
    text, _ = render(results, aggregate(results), out, "posenc compare", table)
    assert "## Runs compared: `train.lr` chosen per configuration" in text and "| rope" in text
    plain, _ = render(results, aggregate(results), out, "posenc compare")
    assert "Runs compared" not in plain


def test_missed_configurations_are_those_with_a_seed_that_did_not_learn_at_that_value(tmp_path):
    from posenc.analysis.selection import missed_configurations

    runs, configs = _runs(tmp_path, [
        ("nope", 0.003, 0, 200), ("nope", 0.003, 1, None), ("rope", 0.003, 0, 100), ("alibi", 0.003, 0, None),
        ("rope", 0.001, 0, None),  # another value of the key: not this sweep's business
    ])  # fmt: skip
    configs[3]["task"]["name"] = "reverse"
    assert missed_configurations(runs, configs, "train.lr", 0.003) == {"copy": ["nope"], "reverse": ["alibi"]}
    configs[1]["model"] = {"mixer": "base_conv"}  # NoPE with BaseConv mixers: retried as that, not as attention
    assert missed_configurations(runs, configs, "train.lr", 0.003) == {
        "copy model.mixer=base_conv": ["nope"],
        "reverse": ["alibi"],
    }
    assert missed_configurations(runs, configs, "train.lr", 0.001) == {"copy": ["rope"]}


def test_retry_script_prints_one_override_line_per_task(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    runs, configs = _runs(
        tmp_path,
        [("nope", 0.003, 0, None), ("alibi", 0.003, 0, None), ("rope", 0.003, 0, 9), ("zconv", 0.003, 0, None)],
    )
    configs[3]["encoder"]["name"], configs[3]["model"] = "nope", {"mixer": "base_conv"}
    for run, config in zip(runs, configs):
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "checkpoint.pt").write_bytes(b"")  # what find_runs looks for
    script = Path(__file__).parents[2] / "scripts" / "retry_not_learned.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--lr", "0.003"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "task=copy encoder=alibi,nope",  # find_runs sorts the folders
        "task=copy encoder=nope model.mixer=base_conv",
    ]
    bad = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "none"), "--lr", "0.003"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: run directory not found")


def test_report_lists_only_configurations_that_had_a_choice(tmp_path):
    """Two budgets of one encoder are two configurations, each with one candidate: nothing was chosen."""
    runs, configs = _runs(tmp_path, [("rope", 0.003, 0, 100), ("rope", 0.003, 1, 100)])
    configs[1]["train"]["steps"] = 999
    configs[1]["seed"] = 0
    _, table = choose_runs(runs, configs, "train.lr")
    assert table["config_id"].nunique() == 2 and choices_markdown(table) == ""


def test_report_reads_a_choices_table_from_before_config_id(tmp_path):
    """results/headline's first choices table has no config_id: task and encoder named the configuration."""
    runs, configs = _runs(tmp_path, [("rope", 0.003, 0, 100), ("rope", 0.001, 0, None)])
    _, table = choose_runs(runs, configs, "train.lr")
    old = table.drop(columns="config_id")
    assert choices_markdown(old) == choices_markdown(table) != ""


def test_where_no_candidate_learned_the_one_closest_to_learning_is_compared(tmp_path):
    """BaseConv on MQAR at lr 1e-3 and 3e-3, no seed learned at either: the value that sorts first (1e-3) must
    not win by default when 3e-3 came closer (in-distribution exact match at the end of training)."""
    runs, configs = _runs(
        tmp_path,
        [("nope", 0.001, 0, None), ("nope", 0.001, 1, None), ("nope", 0.003, 0, None), ("nope", 0.003, 1, None)],
    )
    for run, exact in zip(runs, (0.0, 0.01, 0.41, 0.02)):
        metrics = json.loads((run / "metrics.json").read_text())
        (run / "metrics.json").write_text(json.dumps({**metrics, "exact_match": exact}))
    keep, table = choose_runs(runs, configs, "train.lr")
    assert keep == runs[2:] and list(table["chosen"]) == [False, True]


def test_an_earlier_choice_is_weighed_with_seeds_trained_later(tmp_path):
    """`compare --extend --choose`: PoPE's seeds 0 and 1 at 3e-3 were compared before (their runs are gone, only
    OUT's choices remain); seed 2 at 3e-3 and the retry at 1e-3 arrive now. The 3e-3 candidate pools all three
    seeds (1/3 learned), 1e-3 (3/3) wins, and OUT's 3e-3 runs are named to leave the comparison."""
    import pandas as pd

    from posenc.analysis.selection import losing_runs
    from posenc.analysis.store import run_identity

    (tmp_path / "first").mkdir()
    first_runs, first_configs = _runs(tmp_path / "first", [("pope", 0.003, 0, None), ("pope", 0.003, 1, None)])
    _, before = choose_runs(first_runs, first_configs, "train.lr")
    (tmp_path / "now").mkdir()
    runs, configs = _runs(
        tmp_path / "now",
        [("pope", 0.003, 2, 3300), ("pope", 0.001, 0, 2900), ("pope", 0.001, 1, 3100), ("pope", 0.001, 2, 3000)],
    )
    chosen, table = choose_runs(runs, configs, "train.lr", earlier=before)
    row = table.set_index("value")
    assert row.loc["0.003", "seeds"] == "0,1,2" and row.loc["0.003", "n_learned"] == 1
    assert row.loc["0.003", "n_trained"] == 3 and row.loc["0.003", "steps_to_learn"] == 3300
    assert row.loc["0.001", "chosen"] and not row.loc["0.003", "chosen"]
    assert sorted(r.name for r in chosen) == ["pope-0.001-0", "pope-0.001-1", "pope-0.001-2"]
    old = [run_identity(c) for c in first_configs]
    evaluations = pd.DataFrame({"run_id": [i.run_id for i in old], "config": [i.config for i in old]})
    assert losing_runs(evaluations, table, "train.lr") == {i.run_id for i in old}
    _, again = choose_runs(runs[:1], configs[:1], "train.lr", earlier=table)  # the same seed given again
    assert again.set_index("value").loc["0.003", "seeds"] == "2"  # the new row holds it, not pooled twice
