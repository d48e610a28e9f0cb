"""posenc/pipeline.py: which runs `compare --extend` compares."""

import pandas as pd

from posenc.pipeline import _extended


def test_extend_keeps_earlier_runs_but_a_candidate_given_again_and_not_chosen_leaves(tmp_path):
    """Runs a, b, c compared before; now b (lr 3e-3) and d (lr 1e-3) are given with --choose and d is chosen:
    b must leave the comparison (two lrs of one configuration are never compared side by side), a and c stay."""
    pd.DataFrame({"run_ids": ["a,b", "c"], "eval_length": [32, 32]}).to_parquet(tmp_path / "comparison.parquet")
    run_ids, choices = _extended(tmp_path, {"d"}, None, replaced={"b", "d"})
    assert run_ids == {"a", "c", "d"} and choices is None
    assert _extended(tmp_path, {"d"}, None)[0] == {"a", "b", "c", "d"}  # nothing given again: all kept
