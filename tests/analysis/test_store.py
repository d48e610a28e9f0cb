"""The results store: run identity, merging the three tables by key, reading and writing an output folder."""

import json
import math

import pandas as pd
import pytest
from fake_results import config_of, fake_run, results_of

from posenc.analysis.store import (
    COLUMNS,
    KEY,
    POSITION_COLUMNS,
    SEQUENCE_COLUMNS,
    Results,
    describe_config,
    differing_keys,
    merge,
    read_results,
    run_identity,
    write_results,
)  # fmt: skip
from posenc.errors import PosencError

# --- identity ----------------------------------------------------------------------------------------------


def test_run_identity_ignores_the_seed_and_how_a_run_was_computed_but_not_what():
    base = config_of("rope")
    ident = run_identity(base)
    assert len(ident.run_id) == len(ident.config_id) == 12 and ident.run_id != ident.config_id
    assert run_identity(json.loads(json.dumps(base))) == ident  # a pure function of the mapping

    def changed(**top):
        return run_identity({**base, **top})

    other_seed = changed(seed=1)
    assert other_seed.config_id == ident.config_id and other_seed.run_id != ident.run_id  # seeds of one config
    assert other_seed.config == ident.config and '"seed"' not in ident.config
    for neutral in (
        changed(device="cuda"),
        changed(progress=True),
        changed(resume=False),
        changed(paths={"results": "elsewhere"}),
        changed(hydra={"job": 1}),
    ):
        assert neutral == ident  # where or how it ran is not what it computed
    for group, key, value in [
        ("train", "compile", True),
        ("train", "log_every", 7),
        ("train", "checkpoint_every", 3),
        ("train", "eval_sequences", 9),
        ("model", "attention", "blocked"),
    ]:
        assert run_identity({**base, group: {**base[group], key: value}}) == ident, key
    for group, key, value in [
        ("train", "lr", 0.001),
        ("train", "steps", 3000),
        ("model", "d_model", 32),
        ("task", "length", 32),
        ("encoder", "base", 500.0),
    ]:
        moved = run_identity({**base, group: {**base[group], key: value}})
        assert moved.config_id != ident.config_id and moved.run_id != ident.run_id, key
        assert moved.config != ident.config


def test_differing_keys_name_what_tells_configurations_apart():
    a = run_identity(config_of("rope")).config
    b = run_identity(config_of("rope", steps=3000)).config
    c = run_identity(config_of("rope", steps=3000, lr=0.001)).config
    assert differing_keys([a, a]) == []
    assert differing_keys([a, b]) == ["train.steps"]
    assert differing_keys([a, b, c]) == ["train.lr", "train.steps"]
    assert describe_config(c, ["train.lr", "train.steps"]) == "train.lr=0.001,train.steps=3000"
    assert describe_config(a, ["train.steps"]) == "train.steps=300"


# --- merge -------------------------------------------------------------------------------------------------


def _key_counts(table: pd.DataFrame) -> dict:
    return table.assign(depth=table["depth"].fillna(-1.0)).groupby(KEY).size().to_dict()


def test_merge_replaces_by_key_across_all_three_tables():
    old = results_of(
        fake_run("rope", {64: [1, 1, 0, 0], 128: [0, 0, 0, 1]}),
        fake_run("rope", {64: [1, 0, 0, 0]}, scaling="yarn"),
        fake_run("alibi", {64: [1, 1, 1, 1]}),
    )
    new = results_of(
        fake_run("rope", {64: [1, 1]}),  # the same run and length, re-evaluated on fewer sequences
        fake_run("alibi", {64: []}, note={64: "out of memory at length 64"}),  # now a NaN row, no sequences
        fake_run("rope", {64: [0, 1, 1]}, seed=1),  # a new run
    )
    merged = merge(old, new)
    rope0 = fake_run("rope", {64: []}).evaluations["run_id"].iloc[0]
    alibi = fake_run("alibi", {64: []}).evaluations["run_id"].iloc[0]
    ev = merged.evaluations
    assert len(ev) == 5 and not ev.assign(depth=ev["depth"].fillna(-1)).duplicated(KEY).any()
    assert list(ev.columns) == COLUMNS and list(merged.sequences.columns) == SEQUENCE_COLUMNS
    assert list(merged.positions.columns) == POSITION_COLUMNS
    counts = _key_counts(merged.sequences)
    assert counts[(rope0, 64, "none", -1.0)] == 2  # the old 4 sequences are gone, not mixed in
    assert counts[(rope0, 128, "none", -1.0)] == 4  # other lengths kept
    assert counts[(rope0, 64, "yarn", -1.0)] == 4  # other scalings kept
    assert (alibi, 64, "none", -1.0) not in counts  # replaced by a row without sequences
    assert len(merged.sequences) == 2 + 4 + 4 + 3
    row = ev[(ev["run_id"] == rope0) & (ev["eval_length"] == 64) & (ev["scaling"] == "none")].iloc[0]
    assert row["exact_match"] == 1.0 and row["n_sequences"] == 2
    assert ev.loc[ev["run_id"] == alibi, "note"].tolist() == ["out of memory at length 64"]
    pos = merged.positions
    assert pos[(pos["run_id"] == rope0) & (pos["eval_length"] == 64) & (pos["scaling"] == "none")][
        "total"
    ].tolist() == [2]
    assert alibi not in set(pos["run_id"])
    pd.testing.assert_frame_equal(
        merge(None, new).evaluations, merge(Results.empty(), new).evaluations, check_dtype=False
    )


def test_merge_keeps_depths_apart_and_matches_rows_without_a_depth():
    old = results_of(
        fake_run("rope", {64: [1, 1]}, task="passkey", depth=0.5),
        fake_run("rope", {64: [0, 0]}, task="passkey", depth=1.0),
    )
    new = fake_run("rope", {64: [1]}, task="passkey", depth=0.5)
    merged = merge(old, new)
    assert sorted(merged.evaluations["depth"]) == [0.5, 1.0]
    assert sorted(merged.sequences["depth"]) == [0.5, 1.0, 1.0]
    no_depth = merge(fake_run("rope", {64: [0, 0]}), fake_run("rope", {64: [1]}))  # NaN == NaN as a key
    assert len(no_depth.evaluations) == 1 and no_depth.sequences["exact_match"].tolist() == [1.0]


def test_done_lists_what_need_not_be_evaluated_again():
    results = results_of(fake_run("rope", {64: [1], 128: []}), fake_run("alibi", {64: []}, note={64: "out of memory"}))
    rope, alibi = (fake_run(e, {64: []}).evaluations["run_id"].iloc[0] for e in ("rope", "alibi"))
    assert results.done() == {(rope, 64, "none"), (alibi, 64, "none")}  # 128: no sequences and no note


# --- reading and writing -----------------------------------------------------------------------------------


def test_write_then_read_round_trips_the_three_tables(tmp_path):
    results = merge(None, results_of(fake_run("rope", {64: [1, 0], 128: [0]}), fake_run("alibi", {64: [1]})))
    paths = write_results(tmp_path, results, summary="# summary\n")
    names = sorted(p.name for p in paths)
    assert names == [
        "extrapolation.csv",
        "extrapolation.md",
        "extrapolation.parquet",
        "extrapolation_summary.md",
        "positions.parquet",
        "sequences.parquet",
    ]
    assert "config" not in pd.read_csv(tmp_path / "extrapolation.csv").columns  # too long for CSV/Markdown
    back = read_results(tmp_path)
    pd.testing.assert_frame_equal(back.evaluations, results.evaluations, check_dtype=False)
    pd.testing.assert_frame_equal(back.sequences, results.sequences, check_dtype=False)
    pd.testing.assert_frame_equal(back.positions, results.positions, check_dtype=False)
    assert read_results(tmp_path / "nothing") is None


def test_read_results_refuses_a_foreign_table_in_one_line(tmp_path):
    old_version = pd.DataFrame(
        [
            {
                "run": "r",
                "encoder": "rope",
                "task": "copy",
                "train_length": 64,
                "eval_length": 64,
                "seed": 0,
                "exact_match": 1.0,
                "note": "",
            }
        ]
    )
    old_version.to_parquet(tmp_path / "extrapolation.parquet")
    with pytest.raises(PosencError) as err:
        read_results(tmp_path)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert "extrapolation.parquet is not a posenc extrapolation table" in message
    assert "run_id" in message and "config_id" in message and "move it away" in message
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    pd.DataFrame({"a": [1]}).to_parquet(foreign / "extrapolation.parquet")
    with pytest.raises(PosencError, match="not a posenc extrapolation table"):
        read_results(foreign)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "extrapolation.parquet").write_bytes(b"garbage")
    with pytest.raises(PosencError) as err:
        read_results(damaged)
    assert len(str(err.value).splitlines()) == 1 and "unreadable" in str(err.value)


def test_read_results_refuses_a_foreign_sequences_table(tmp_path):
    write_results(tmp_path, merge(None, fake_run("rope", {64: [1]})))
    pd.DataFrame({"run": ["r"], "value": [1.0]}).to_parquet(tmp_path / "sequences.parquet")
    with pytest.raises(PosencError) as err:
        read_results(tmp_path)
    assert len(str(err.value).splitlines()) == 1 and "sequences.parquet is not a posenc sequences table" in str(
        err.value
    )


def test_a_run_keeps_its_identity_wherever_it_is_evaluated_from():
    here, there = (fake_run("rope", {64: [1]}, run=path) for path in ("a/rope", "/elsewhere/rope"))
    merged = merge(here, there)
    assert len(merged.evaluations) == 1 and merged.evaluations["run"].iloc[0] == "/elsewhere/rope"
    assert not math.isnan(merged.evaluations["exact_match"].iloc[0])
