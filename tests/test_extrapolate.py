"""The evaluation table's pure helpers: merge keys (run, length, scaling, depth), labels, old tables."""

import math

import pandas as pd
import pytest

from posenc.errors import PosencError
from posenc.extrapolate import COLUMNS, labels, merge_into, parse_scalings, scaling_label, summary, upgrade


def _row(run="r/rope/0", length=64, scaling="none", depth=math.nan, exact=1.0, **extra):
    row = {"run": run, "encoder": run.split("/")[1], "task": "copy", "train_length": 64, "eval_length": length,
           "scaling": scaling, "scaling_factor": math.nan, "depth": depth, "seed": 0, "loss": 0.5,
           "perplexity": math.exp(0.5), "token_accuracy": exact, "exact_match": exact, "n_sequences": 4,
           "seconds": 0.1, "note": ""}
    return {**row, **extra}


def test_merge_replaces_rows_with_the_same_key_and_keeps_the_others():
    old = pd.DataFrame([_row(exact=0.1), _row(scaling="yarn", exact=0.2), _row(length=128, exact=0.3),
                        _row(depth=0.5, exact=0.4)], columns=COLUMNS)
    new = pd.DataFrame([_row(exact=0.9), _row(depth=0.5, exact=0.8)], columns=COLUMNS)
    merged = merge_into(old, new)
    assert len(merged) == 4
    by_key = {(r.eval_length, r.scaling, -1 if math.isnan(r.depth) else r.depth): r.exact_match
              for r in merged.itertuples()}
    assert by_key == {(64, "none", -1): 0.9, (64, "yarn", -1): 0.2, (128, "none", -1): 0.3, (64, "none", 0.5): 0.8}


def test_a_table_from_before_scaling_and_depth_is_upgraded_on_merge():
    old_columns = [c for c in COLUMNS if c not in ("scaling", "scaling_factor", "depth", "perplexity")]
    old = pd.DataFrame([_row(length=128, exact=0.3)])[old_columns]
    up = upgrade(old)
    assert list(up.columns) == COLUMNS
    assert up.loc[0, "scaling"] == "none" and math.isnan(up.loc[0, "depth"])
    assert up.loc[0, "perplexity"] == pytest.approx(math.exp(0.5))
    merged = merge_into(old, pd.DataFrame([_row()], columns=COLUMNS))
    assert sorted(merged["eval_length"]) == [64, 128]


def test_labels_and_summary_keep_scalings_and_depths_apart():
    table = pd.DataFrame([_row(), _row(scaling="yarn", exact=0.5), _row(scaling="ntk:4", exact=0.25),
                          _row(run="r/alibi/0", depth=0.25, exact=0.0)], columns=COLUMNS)
    assert list(labels(table)) == ["rope", "rope +yarn", "rope +ntk:4", "alibi @depth 0.25"]
    pivot = summary(table).reset_index().set_index("encoder")
    assert pivot.loc["rope +yarn", 64] == 0.5 and pivot.loc["rope", 64] == 1.0


def test_parse_scalings():
    methods = parse_scalings("none, yarn,linear,yarn")
    assert [scaling_label(s) for s in methods] == ["none", "yarn", "linear"]
    assert [scaling_label(s) for s in parse_scalings("none,ntk", 4.0)] == ["none", "ntk:4"]
    with pytest.raises(PosencError, match="unknown method 'rope'; known methods: none, linear"):
        parse_scalings("rope")
    with pytest.raises(PosencError, match="--rope-factor must be a positive number"):
        parse_scalings("yarn", 0.0)


def test_a_single_scaling_method_labels_only_rotary_runs_with_it(trained_runs):
    """`--rope-scaling yarn` alone: rope evaluated under YaRN, learned as trained (and labelled so)."""
    from posenc.extrapolate import extrapolate, scaling_note
    from posenc.functional.rope_scaling import RopeScaling
    from posenc.io import find_runs

    scalings = [RopeScaling("yarn")]
    table, skipped = extrapolate(find_runs([trained_runs]), [16, 32], sequences=4, device="cpu",
                                 progress=False, scalings=scalings)
    assert skipped == []
    assert dict(table.groupby("encoder")["scaling"].unique().map(list)) == {"learned": ["none"], "rope": ["yarn"]}
    assert table.loc[table["encoder"] == "learned", "scaling_factor"].isna().all()
    assert scaling_note(table, scalings).endswith("evaluated as trained: learned")
