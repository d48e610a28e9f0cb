"""posenc/analysis/pipeline.py: which runs `compare --extend` compares."""

import pandas as pd

from posenc.analysis.pipeline import _extended


def test_extend_keeps_earlier_runs_but_a_candidate_given_again_and_not_chosen_leaves(tmp_path):
    """Runs a, b, c compared before; now b (lr 3e-3) and d (lr 1e-3) are given with --choose and d is chosen:
    b must leave the comparison (two lrs of one configuration are never compared side by side), a and c stay."""
    pd.DataFrame({"run_ids": ["a,b", "c"], "eval_length": [32, 32]}).to_parquet(tmp_path / "comparison.parquet")
    run_ids, choices = _extended(tmp_path, {"d"}, None, replaced={"b", "d"})
    assert run_ids == {"a", "c", "d"} and choices is None
    assert _extended(tmp_path, {"d"}, None)[0] == {"a", "b", "c", "d"}  # nothing given again: all kept


def test_with_facts_overwrites_a_runs_stored_columns_and_nothing_else():
    from fake_results import fake_run, results_of

    from posenc.analysis.pipeline import with_facts

    stored = results_of(
        fake_run("rope", {64: [1, 1], 128: [1, 0]}, task="lm", seed=0),
        fake_run("rope", {64: [1, 1]}, task="lm", seed=1),
    )
    ids = list(dict.fromkeys(stored.evaluations["run_id"]))
    fresh = with_facts(stored, {ids[0]: {"learned": False, "steps_to_learn": float("nan")}})
    ev = fresh.evaluations.set_index("run_id")
    assert not ev.loc[ids[0], "learned"].any() and ev.loc[ids[1], "learned"].all()
    assert ev.loc[ids[0], "steps_to_learn"].isna().all() and (ev.loc[ids[1], "steps_to_learn"] == 100).all()
    assert fresh.sequences is stored.sequences and with_facts(stored, {}) is stored
