"""Evaluating trained runs at lengths: what is evaluated (learned runs past their training
length, not-learned runs at it only), and the three tables it returns."""

import math

import pytest
from conftest import learned_run, tiny_config, tiny_dict

from posenc.analysis.run_folder import run_config
from posenc.analysis.store import COLUMNS, POSITION_COLUMNS, SEQUENCE_COLUMNS, run_identity
from posenc.running.extrapolate import extrapolate, not_learned_note


def test_a_single_scaling_method_labels_only_rotary_runs_with_it(trained_runs):
    """`--rope-scaling yarn` alone: rope evaluated under YaRN, learned as trained (and labelled so)."""
    from posenc.functional.rope_scaling_spec import RopeScaling
    from posenc.running.extrapolate import scaling_note
    from posenc.running.runs import find_runs

    scalings = [RopeScaling("yarn")]
    results, skipped = extrapolate(
        find_runs([trained_runs]), [16, 32], sequences=4, device="cpu", progress=False, scalings=scalings
    )
    table = results.evaluations
    assert skipped == []
    assert dict(table.groupby("encoder")["scaling"].unique().map(list)) == {"learned": ["none"], "rope": ["yarn"]}
    assert table.loc[table["encoder"] == "learned", "scaling_factor"].isna().all()
    assert scaling_note(table, scalings).endswith("evaluated as trained: learned")
    assert set(results.sequences["scaling"]) == {"none", "yarn"}


def test_a_run_that_did_not_learn_is_evaluated_at_its_training_length_only(tmp_path, always_learns):
    from posenc.running.train import train

    failed = tmp_path / "failed"
    metrics = train(tiny_config(), failed, tiny_dict())  # 4 steps, no check: not learned
    assert metrics["learned"] is False and metrics["steps_to_learn"] is None
    learned = tmp_path / "learned"
    assert learned_run(learned)["learned"] is True
    results, skipped = extrapolate([failed, learned], [16, 32, 64], sequences=4, device="cpu", progress=False)
    assert skipped == []
    ev = results.evaluations
    lengths = {bool(k): sorted(v) for k, v in ev.groupby("learned")["eval_length"]}
    assert lengths == {False: [16], True: [16, 32, 64]}
    assert ev.loc[~ev["learned"].astype(bool), "steps_to_learn"].isna().all()
    assert list(ev.loc[ev["learned"].astype(bool), "steps_to_learn"].unique()) == [2.0]
    note = not_learned_note(ev, [16, 32, 64])
    assert note.startswith("not learned at the training length") and f"({failed})" in note
    assert f"({learned})" not in note
    assert not_learned_note(ev, [16]) is None  # nothing past the training length asked for
    assert not_learned_note(ev[ev["learned"].astype(bool)], None) is None
    by_default, _ = extrapolate([failed], None, sequences=4, device="cpu", progress=False, up_to=64)
    assert list(by_default.evaluations["eval_length"]) == [16]  # not the doubling lengths either
    other, _ = extrapolate([failed], [32, 64], sequences=4, device="cpu", progress=False)
    assert list(other.evaluations["eval_length"]) == [16]  # its training length, even when not asked for


def test_seeds_of_a_configuration_that_did_not_all_learn_are_evaluated_at_the_training_length_only(
    tmp_path, always_learns
):
    import json

    first, second = tmp_path / "seed0", tmp_path / "seed1"
    learned_run(first, "seed=0")
    learned_run(second, "seed=1")
    metrics = json.loads((second / "metrics.json").read_text())
    (second / "metrics.json").write_text(json.dumps({**metrics, "steps_to_learn": None, "learned": False}))
    results, _ = extrapolate([first, second], [16, 32], sequences=4, device="cpu", progress=False)
    assert sorted(results.evaluations["eval_length"]) == [16, 16]  # seed 0 learned, but its configuration did not
    note = not_learned_note(results.evaluations, [16, 32])  # names both: neither was evaluated at 32
    assert f"seed 0 ({first})" in note and f"seed 1 (not learned) ({second})" in note
    (second / "metrics.json").unlink()  # seed 1 unfinished (interrupted): skipped, and says nothing of mastery
    results, skipped = extrapolate([first, second], [16, 32], sequences=4, device="cpu", progress=False)
    assert sorted(results.evaluations["eval_length"]) == [16, 32] and len(skipped) == 1


def test_extrapolate_returns_rows_sequences_and_positions_that_agree(tmp_path, always_learns):
    learned_run(tmp_path / "run")
    results, _ = extrapolate([tmp_path / "run"], [16, 40], sequences=5, device="cpu", progress=False)
    ev, seq, pos = results.evaluations, results.sequences, results.positions
    assert list(ev.columns) == COLUMNS and list(seq.columns) == SEQUENCE_COLUMNS
    assert sorted(pos.columns) == sorted(POSITION_COLUMNS)  # (store.merge puts them in order)
    identity = run_identity(run_config(tmp_path / "run"))
    assert set(ev["run_id"]) == {identity.run_id} and set(ev["config_id"]) == {identity.config_id}
    assert set(ev["config"]) == {identity.config}
    for row in ev.itertuples():
        mine = seq[seq["eval_length"] == row.eval_length]
        assert list(mine["sequence"]) == list(range(5)) == list(range(row.n_sequences))
        assert mine["exact_match"].mean() == pytest.approx(row.exact_match)
        assert mine["loss"].between(0, math.inf).all() and mine["token_accuracy"].between(0, 1).all()
        answers = (row.eval_length - 1) // 2 * 5  # copy: (L - 1) // 2 answers per sequence
        bins = pos[pos["eval_length"] == row.eval_length]
        assert bins["total"].sum() == answers
        assert bins["correct"].sum() == pytest.approx(row.token_accuracy * answers)
        assert bins["position"].is_monotonic_increasing and (bins["position"] < row.eval_length).all()


def test_extrapolate_skips_what_is_done(tmp_path, always_learns):
    learned_run(tmp_path / "run")
    first, _ = extrapolate([tmp_path / "run"], [16, 32], sequences=2, device="cpu", progress=False)
    done = first.done()
    assert len(done) == 2
    again, skipped = extrapolate([tmp_path / "run"], [16, 32, 64], sequences=2, device="cpu", progress=False, done=done)
    assert list(again.evaluations["eval_length"]) == [64] and skipped == []
    nothing, _ = extrapolate(
        [tmp_path / "run"], [16, 32], sequences=2, device="cpu", progress=False, done=done, allow_empty=True
    )
    assert nothing.evaluations.empty and nothing.sequences.empty


def test_xpos_is_evaluated_past_float32s_range_of_its_centred_factors(tmp_path, always_learns):
    learned_run(tmp_path / "run", "encoder=xpos")  # train length 16: scale_base 8, head dim 8: centred to 767
    results, _ = extrapolate([tmp_path / "run"], [16, 4096], sequences=2, device="cpu", progress=False)
    row = results.evaluations.set_index("eval_length").loc[4096]
    assert math.isfinite(row["loss"]) and 0 <= row["exact_match"] <= 1 and row["note"] == ""
    assert set(results.sequences["eval_length"]) == {16, 4096}


def test_rope_method_options_change_results_and_name_their_rows(tmp_path, always_learns):
    """--rope-scaling yarn:beta_fast=1,beta_slow=0.1 is a scaling of its own: its own rows, other numbers (at
    head_dim 8 and 16 training tokens, YaRN's default betas and 4, 2 give the same ramp; 300 steps, so that
    attention is not uniform as at initialisation)."""
    from posenc.running.arguments import parse_scalings

    learned_run(tmp_path / "run", "train.steps=300", "train.check_every=300", "train.lr=0.01")  # rope, copy, 16
    scalings = parse_scalings("yarn,yarn:beta_fast=1,beta_slow=0.1,llama3,llama3:low_freq_factor=2,high_freq_factor=8")
    results, _ = extrapolate([tmp_path / "run"], [64], sequences=8, device="cpu", progress=False, scalings=scalings)
    rows = results.evaluations.set_index("scaling")
    assert list(rows.index) == [
        "yarn",
        "yarn(beta_fast=1,beta_slow=0.1)",
        "llama3",
        "llama3(high_freq_factor=8,low_freq_factor=2)",
    ]
    assert rows.loc["yarn", "loss"] != rows.loc["yarn(beta_fast=1,beta_slow=0.1)", "loss"]
    assert rows.loc["llama3", "loss"] != rows.loc["llama3(high_freq_factor=8,low_freq_factor=2)", "loss"]


def test_an_lm_run_that_did_not_converge_is_evaluated_at_every_length_and_its_rows_say_so(tmp_path):
    import json

    from posenc.running.train import train

    corpus = tmp_path / "texts"
    corpus.mkdir()
    for i in range(8):
        (corpus / f"t{i}.txt").write_text(f"line {i} of some text\n" * 80)
    overrides = ("task=lm", f"task.corpus={corpus}", "task.pattern=*.txt", "train.check_every=1")
    run = tmp_path / "lm"
    metrics = train(tiny_config(*overrides), run, tiny_dict(*overrides))
    assert metrics["check_metric"] == "loss" and len(metrics["checks"]) == 4
    metrics.update(learned=False, heldout_loss_fall=0.05)  # as a run still improving at its end records it
    (run / "metrics.json").write_text(json.dumps(metrics))
    results, skipped = extrapolate([run], [16, 32], sequences=4, device="cpu", progress=False)
    ev = results.evaluations
    assert skipped == [] and sorted(ev["eval_length"]) == [16, 32] and not ev["learned"].astype(bool).any()
    assert not_learned_note(ev, [16, 32]) is None  # nothing was held back
