"""The plain train() function: files it writes, determinism by seed, the learning-rate schedule."""

import io
import json
import math

import pytest
import torch
from conftest import learned_run, tiny_config, tiny_dict

from posenc import files as run_files
from posenc.encoders import ENCODERS
from posenc.errors import PosencError
from posenc.running import runs as run_dirs
from posenc.running.extrapolate import extrapolate
from posenc.running.train import lr_factor, train


def test_train_writes_checkpoint_metrics_history(tmp_path):
    cfg = tiny_config()
    metrics = train(cfg, tmp_path, tiny_dict())
    for name in (run_files.CHECKPOINT_FILE, run_files.METRICS_FILE, run_files.HISTORY_FILE):
        assert (tmp_path / name).is_file()
    saved = json.loads((tmp_path / run_files.METRICS_FILE).read_text())
    assert saved == metrics
    assert saved["eval_length"] == cfg.task.length and saved["n_sequences"] == cfg.train.eval_sequences
    assert 0 <= saved["exact_match"] <= saved["token_accuracy"] <= 1
    loaded_cfg, task, model = run_dirs.load_run(tmp_path)
    assert loaded_cfg == cfg
    assert not model.training


def test_same_seed_gives_identical_metrics(tmp_path):
    a, b, c = (
        train(tiny_config(f"seed={s}"), tmp_path / d, tiny_dict(f"seed={s}")) for s, d in [(3, "a"), (3, "b"), (4, "c")]
    )
    drop = lambda m: {k: v for k, v in m.items() if k != "train_seconds"}  # noqa: E731
    assert drop(a) == drop(b)
    assert drop(a) != drop(c)
    sa = torch.load(tmp_path / "a" / run_files.CHECKPOINT_FILE, weights_only=True)["model"]
    sb = torch.load(tmp_path / "b" / run_files.CHECKPOINT_FILE, weights_only=True)["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_lr_schedule_warms_up_then_decays_to_the_final_ratio():
    """The formula, always with an explicit end point: training passes train.final_lr_ratio (default 0.0)."""
    for final in (0.0, 0.25):
        assert lr_factor(0, 10, 100, final) == pytest.approx(0.1)  # warmup: (step + 1) / warmup
        assert lr_factor(9, 10, 100, final) == pytest.approx(1.0)
        assert lr_factor(10, 10, 100, final) == pytest.approx(1.0)
        assert lr_factor(55, 10, 100, final) == pytest.approx(final + (1 - final) * 0.5)  # half way down
        assert lr_factor(100, 10, 100, final) == pytest.approx(final, abs=1e-12)
        assert lr_factor(150, 10, 100, final) == pytest.approx(final, abs=1e-12)  # stays there


@pytest.mark.parametrize("ratio", [None, 0.25])  # None: the configured default
def test_training_uses_the_configured_schedule_and_ends_at_lr_times_final_ratio(tmp_path, ratio):
    overrides = ["train.steps=12", "train.warmup_steps=4", "train.log_every=1"]
    overrides += [] if ratio is None else [f"train.final_lr_ratio={ratio}"]
    cfg = tiny_config(*overrides)
    if ratio is None:
        assert cfg.train.final_lr_ratio == 0.0  # conf/train/default.yaml: the cosine decays to zero
    train(cfg, tmp_path, tiny_dict(*overrides))
    history = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=True)["history"]
    assert [row["step"] for row in history] == list(range(1, 13))
    lrs = [row["lr"] for row in history]  # logged after each step's scheduler.step()
    t = cfg.train
    expected = [t.lr * lr_factor(s, t.warmup_steps, t.steps, t.final_lr_ratio) for s in range(1, 13)]
    assert lrs == pytest.approx(expected)
    assert lrs[3] == pytest.approx(t.lr)  # warmed up
    assert lrs[-1] == pytest.approx(t.lr * t.final_lr_ratio, abs=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("encoder", ["rope", "fox", "cope", "pope", "fire"])
def test_train_runs_on_cuda(encoder, tmp_path):
    """Default and data-dependent attention paths on CUDA (bf16 autocast, compiled): FoX's fused key bias, CoPE's
    own attention, PoPE's wider queries, FIRE's FlexAttention."""
    overrides = ("device=cuda", f"encoder={encoder}")
    metrics = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert metrics["device"].startswith("cuda") and math.isfinite(metrics["loss"])


@pytest.mark.slow
def test_default_rope_learns_copy(tmp_path):
    """The README's promise: the default run (rope on copy) reaches >= 0.99 exact match at its length."""
    from conftest import compose_dict

    from posenc.running.config import run_config_from_dict

    config = compose_dict(["progress=false"])
    metrics = train(run_config_from_dict(config), tmp_path, config)
    assert metrics["exact_match"] >= 0.99


@pytest.mark.parametrize("encoder", ENCODERS)
def test_every_encoder_trains_then_evaluates_past_its_training_length(encoder, tmp_path, always_learns):
    """The whole path for every registry entry: train (a few steps), reload, evaluate at 1x and 2x."""
    metrics = learned_run(tmp_path, f"encoder={encoder}")
    assert metrics["learned"] and metrics["steps"] == 2
    assert 0 <= metrics["token_accuracy"] <= 1 and math.isfinite(metrics["loss"])
    results, skipped = extrapolate([tmp_path], [16, 32], sequences=4, device="cpu", progress=False)
    table = results.evaluations
    assert skipped == [] and list(table["eval_length"]) == [16, 32]
    assert table["learned"].all()
    at_16 = table.set_index("eval_length").loc[16]
    assert at_16["loss"] == pytest.approx(metrics["loss"], rel=1e-5)  # the reloaded model, same sequences
    if encoder == "learned":  # no rows past the training length: a NaN row with a note, not a crash
        assert math.isnan(table.set_index("eval_length").loc[32, "loss"])
        assert set(results.sequences["eval_length"]) == {16}
    else:
        assert table["loss"].notna().all()
        assert sorted(results.sequences.groupby("eval_length").size().items()) == [(16, 4), (32, 4)]


# --- the mastery protocol: checks on held-out sequences, stop when learned -------------------------------


def scripted_checks(monkeypatch, scores):
    """Make posenc.running.train.mastery_check return ``scores`` in turn (then the last one); record its arguments."""
    import posenc.running.train

    calls = []

    def check(model, task, length, sequences):
        calls.append((length, sequences))
        return scores[min(len(calls) - 1, len(scores) - 1)]

    monkeypatch.setattr(posenc.running.train, "mastery_check", check)
    return calls


def history_steps(run_dir):
    return [int(line.split(",")[0]) for line in (run_dir / run_files.HISTORY_FILE).read_text().splitlines()[1:]]


def test_training_stops_at_the_first_check_that_meets_the_target(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [0.0, 0.5, 0.99, 0.2])
    overrides = ("train.steps=20", "train.check_every=3", "train.check_sequences=7", "train.log_every=1")
    metrics = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert calls == [([16], 7)] * 3  # at the training length, check_sequences sequences; none after the stop
    assert metrics["checks"] == [[3, 0.0], [6, 0.5], [9, 0.99]]  # 0.99 meets the target 0.99
    assert (metrics["steps_to_learn"], metrics["steps"], metrics["budget"]) == (9, 9, 20)
    assert metrics["learned"] is True
    assert json.loads((tmp_path / run_files.METRICS_FILE).read_text()) == metrics
    assert history_steps(tmp_path) == list(range(1, 10))  # nothing trained past the stop
    state = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=False)
    assert state["step"] == 9 and state["learned_at"] == 9 and state["checks"] == metrics["checks"]
    assert metrics["eval_length"] == 16 and metrics["n_sequences"] == 4  # the final test sample, as before


def test_a_run_that_never_meets_the_target_trains_its_whole_budget_and_is_not_learned(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [0.5])
    overrides = ("train.steps=7", "train.check_every=2", "train.target_exact_match=0.6")
    metrics = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert len(calls) == 3 and metrics["checks"] == [[2, 0.5], [4, 0.5], [6, 0.5]]
    assert (metrics["steps"], metrics["budget"], metrics["steps_to_learn"]) == (7, 7, None)
    assert metrics["learned"] is False
    more = scripted_checks(monkeypatch, [0.6])  # the target is inclusive
    metrics = train(tiny_config(*overrides), tmp_path / "b", tiny_dict(*overrides))
    assert len(more) == 1 and (metrics["steps_to_learn"], metrics["steps"], metrics["learned"]) == (2, 2, True)


def test_past_mastery_the_whole_budget_is_trained_when_asked(tmp_path, monkeypatch):
    """train.stop_at_mastery=false (the Kazemnejad schedule arm): steps-to-learn is the first check that met the
    target, training goes on to the budget and keeps checking, and resuming it does not stop at mastery."""
    calls = scripted_checks(monkeypatch, [0.0, 1.0, 0.5, 1.0])
    overrides = ("train.steps=9", "train.check_every=2", "train.checkpoint_every=4", "train.stop_at_mastery=false")
    metrics = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert len(calls) == 4 and metrics["checks"] == [[2, 0.0], [4, 1.0], [6, 0.5], [8, 1.0]]
    assert (metrics["steps_to_learn"], metrics["steps"], metrics["budget"], metrics["learned"]) == (4, 9, 9, True)
    assert history_steps(tmp_path)[-1] == 9
    state = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=False)
    assert (state["step"], state["learned_at"]) == (9, 4)
    # killed at its step-4 checkpoint (already learned): resuming trains on from step 5, not stopping
    state["step"], state["checks"], state["history"] = 4, metrics["checks"][:2], state["history"][:2]
    torch.save(state, tmp_path / run_files.CHECKPOINT_FILE)
    (tmp_path / run_files.HISTORY_FILE).write_text(run_files.history_csv(state["history"]))  # as a kill leaves it
    (tmp_path / run_files.METRICS_FILE).unlink()
    scripted_checks(monkeypatch, [0.5, 1.0])
    again = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert (again["steps_to_learn"], again["steps"]) == (4, 9) and again["checks"] == metrics["checks"]


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
def test_a_stopped_run_continued_past_mastery_is_the_run_that_never_stopped(tmp_path, monkeypatch, encoder):
    """resume=PATH of a run that stopped at mastery, with train.stop_at_mastery=false, trains exactly what
    the schedule-arm run started afresh trains: the same weights, optimizer state and metrics, bit for bit
    (in one process). Every encoder: any randomness the loop draws (randomized positions) must be in the
    checkpoint. The other way, the run that never stopped, stopped at its ``mastery.pt`` (taken at its first
    check that met the target), is the run that stopped; its end past mastery cannot stop there and is refused."""
    base = (f"encoder={encoder}", "train.steps=9", "train.check_every=2", "train.checkpoint_every=3")
    schedule = (*base, "train.stop_at_mastery=false")
    scripted_checks(monkeypatch, [0.0, 1.0, 0.5, 1.0])
    stopped = train(tiny_config(*base), tmp_path / "mastery", tiny_dict(*base))
    assert (stopped["steps"], stopped["steps_to_learn"]) == (4, 4)
    scripted_checks(monkeypatch, [0.0, 1.0, 0.5, 1.0])
    fresh = train(tiny_config(*schedule), tmp_path / "fresh", tiny_dict(*schedule))
    scripted_checks(monkeypatch, [0.5, 1.0])  # the checks after step 4, as the fresh run saw them
    continued = (*schedule, f"resume={tmp_path / 'mastery'}")
    went_on = train(tiny_config(*continued), tmp_path / "continued", tiny_dict(*continued))
    drop = lambda m: {k: v for k, v in m.items() if k != "train_seconds"}  # noqa: E731
    assert drop(went_on) == drop(fresh) and (fresh["steps"], fresh["steps_to_learn"]) == (9, 4)
    a, b = (torch.load(tmp_path / d / run_files.CHECKPOINT_FILE, weights_only=False) for d in ("fresh", "continued"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    flat = lambda state: [v for g in state["state"].values() for v in g.values() if torch.is_tensor(v)]  # noqa: E731
    assert all(torch.equal(x, y) for x, y in zip(flat(a["optimizer"]), flat(b["optimizer"]), strict=True))
    assert history_steps(tmp_path / "continued") == history_steps(tmp_path / "fresh")
    snapshot = tmp_path / "fresh" / run_files.MASTERY_FILE
    assert torch.load(snapshot, weights_only=False)["step"] == 4
    back = (*base, f"resume={snapshot}")
    calls = scripted_checks(monkeypatch, [0.0])
    assert drop(train(tiny_config(*back), tmp_path / "back", tiny_dict(*back))) == drop(stopped)
    assert calls == []  # stopping at the snapshot trains and checks nothing
    c, d = (torch.load(tmp_path / f / run_files.CHECKPOINT_FILE, weights_only=False) for f in ("mastery", "back"))
    assert same_state(c, d)  # weights, optimizer, scheduler, every RNG, checks, history: all but the clock
    assert not (tmp_path / "mastery" / run_files.MASTERY_FILE).exists()  # a run that stops needs none
    with pytest.raises(PosencError, match="belongs to a different run: train.stop_at_mastery"):
        past = (*base, f"resume={tmp_path / 'fresh'}")
        train(tiny_config(*past), tmp_path / "past", tiny_dict(*past))


def same_state(a: dict, b: dict) -> bool:
    """Two checkpoint payloads hold the same training state: every entry but the clock, config and threads."""

    def equal(x, y) -> bool:
        if torch.is_tensor(x) or torch.is_tensor(y):
            return torch.is_tensor(x) and torch.is_tensor(y) and torch.equal(x, y)
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(equal(x[k], y[k]) for k in x)
        if isinstance(x, list | tuple) and isinstance(y, list | tuple):
            return len(x) == len(y) and all(equal(u, v) for u, v in zip(x, y, strict=True))
        return x == y

    skip = {"elapsed", "config", "threads"}
    return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a if k not in skip)


def stop_at_step(monkeypatch, at: int) -> None:
    """A stop signal (SIGTERM) arrives during training step ``at``, before that step's mastery check."""
    import signal

    import posenc.running.train as training

    steps, stops, real_step = [0], [], training.optimizer_step

    class Signals(training.StopSignals):
        def __enter__(self):
            stops.append(self)
            return super().__enter__()

    def step(*args, **kwargs):
        steps[0] += 1
        if steps[0] == at:
            stops[-1].received = signal.SIGTERM
        return real_step(*args, **kwargs)

    monkeypatch.setattr(training, "StopSignals", Signals)
    monkeypatch.setattr(training, "optimizer_step", step)


def test_a_stop_signal_at_a_check_step_saves_after_the_check(tmp_path, monkeypatch):
    """SIGTERM during step 4, a check step where the target is first met: the check runs, its mastery.pt and
    the checkpoint are written, and the run resumed from there is the run never interrupted."""
    from posenc.running.checkpoint import TrainingInterrupted

    overrides = ("train.steps=9", "train.check_every=2", "train.checkpoint_every=5", "train.stop_at_mastery=false")
    scripted_checks(monkeypatch, [0.0, 1.0, 0.5, 1.0])
    whole = train(tiny_config(*overrides), tmp_path / "whole", tiny_dict(*overrides))
    scripted_checks(monkeypatch, [0.0, 1.0])
    stop_at_step(monkeypatch, 4)
    with pytest.raises(TrainingInterrupted, match="SIGTERM at step 4/9"):
        train(tiny_config(*overrides), tmp_path / "cut", tiny_dict(*overrides))
    state = torch.load(tmp_path / "cut" / run_files.CHECKPOINT_FILE, weights_only=False)
    assert (state["step"], state["learned_at"], state["checks"]) == (4, 4, [[2, 0.0], [4, 1.0]])
    monkeypatch.undo()
    scripted_checks(monkeypatch, [0.5, 1.0])
    again = train(tiny_config(*overrides), tmp_path / "cut", tiny_dict(*overrides))
    drop = lambda m: {k: v for k, v in m.items() if k != "train_seconds"}  # noqa: E731
    assert drop(again) == drop(whole)
    a, b = (torch.load(tmp_path / f / run_files.MASTERY_FILE, weights_only=False) for f in ("whole", "cut"))
    assert same_state(a, b) and a["step"] == 4


def test_a_kill_between_the_checkpoint_and_mastery_pt_loses_no_snapshot(tmp_path, monkeypatch):
    """The checkpoint of the first check that met the target is written first, then mastery.pt: killed between
    the two, the resumed run writes mastery.pt from that checkpoint, and ends as the run never killed."""
    overrides = ("train.steps=9", "train.check_every=2", "train.checkpoint_every=5", "train.stop_at_mastery=false")
    scripted_checks(monkeypatch, [0.0, 1.0, 0.5, 1.0])
    whole = train(tiny_config(*overrides), tmp_path / "whole", tiny_dict(*overrides))
    cut = tmp_path / "cut"
    cut.mkdir()
    snapshot = torch.load(tmp_path / "whole" / run_files.MASTERY_FILE, weights_only=False)
    torch.save(snapshot, cut / run_files.CHECKPOINT_FILE)  # as the kill leaves it: the checkpoint at step 4 only
    (cut / run_files.CONFIG_FILE).write_bytes((tmp_path / "whole" / run_files.CONFIG_FILE).read_bytes())
    (cut / run_files.HISTORY_FILE).write_text(run_files.history_csv(snapshot["history"]))
    scripted_checks(monkeypatch, [0.5, 1.0])
    again = train(tiny_config(*overrides, "resume=true"), cut, tiny_dict(*overrides, "resume=true"))
    drop = lambda m: {k: v for k, v in m.items() if k != "train_seconds"}  # noqa: E731
    assert drop(again) == drop(whole)
    assert same_state(torch.load(cut / run_files.MASTERY_FILE, weights_only=False), snapshot)


def test_a_mastery_snapshot_of_another_run_is_refused_beside_a_run_and_as_a_source(tmp_path, monkeypatch):
    """mastery.pt must hold the step where its folder's checkpoint first met the target (e.g. not one left
    beside a run trained afresh elsewhere since): refused in one line, in training and as resume=PATH."""
    overrides = ("train.steps=9", "train.check_every=2", "train.stop_at_mastery=false")
    scripted_checks(monkeypatch, [0.0, 0.0, 1.0])
    train(tiny_config(*overrides), tmp_path / "run", tiny_dict(*overrides))  # first met at step 6
    scripted_checks(monkeypatch, [1.0])
    train(tiny_config(*overrides), tmp_path / "other", tiny_dict(*overrides))  # first met at step 2
    (tmp_path / "run" / run_files.MASTERY_FILE).write_bytes((tmp_path / "other" / run_files.MASTERY_FILE).read_bytes())
    (tmp_path / "run" / run_files.METRICS_FILE).unlink()  # so that training reads the folder again
    state = torch.load(tmp_path / "run" / run_files.CHECKPOINT_FILE, weights_only=False)
    state["step"] = 8
    torch.save(state, tmp_path / "run" / run_files.CHECKPOINT_FILE)
    (tmp_path / "run" / run_files.HISTORY_FILE).write_text(run_files.history_csv(state["history"][:-1]))
    message = "mastery.pt is not this run's: it holds step 2, and .* first met its target at step 6"
    with pytest.raises(PosencError, match=message):
        train(tiny_config(*overrides, "resume=true"), tmp_path / "run", tiny_dict(*overrides, "resume=true"))
    source = f"resume={tmp_path / 'run' / run_files.MASTERY_FILE}"
    with pytest.raises(PosencError, match=message):
        train(tiny_config(source), tmp_path / "twin", tiny_dict(source))


def test_the_default_stop_at_mastery_keeps_every_earlier_run_identity():
    from posenc.analysis.store import run_identity

    default = tiny_dict()
    old = {**default, "train": {k: v for k, v in default["train"].items() if k != "stop_at_mastery"}}
    assert default["train"]["stop_at_mastery"] is True
    assert run_identity(old) == run_identity(default)
    assert run_identity(tiny_dict("train.stop_at_mastery=false")) != run_identity(default)


def test_without_checks_the_whole_budget_is_trained(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [1.0])
    metrics = train(tiny_config("train.check_every=0"), tmp_path, tiny_dict("train.check_every=0"))
    assert calls == []
    assert (metrics["steps"], metrics["budget"], metrics["steps_to_learn"], metrics["checks"]) == (4, 4, None, [])
    assert metrics["learned"] == (metrics["exact_match"] >= 0.99)  # then the final exact match decides
    assert history_steps(tmp_path)[-1] == 4


def test_resuming_a_learned_run_trains_no_further(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [0.0, 1.0])
    overrides = ("train.steps=12", "train.check_every=2", "train.checkpoint_every=1")
    cfg, config = tiny_config(*overrides), tiny_dict(*overrides)
    first = train(cfg, tmp_path, config)
    assert (first["steps"], first["steps_to_learn"], first["learned"]) == (4, 4, True) and len(calls) == 2
    checkpoint = (tmp_path / run_files.CHECKPOINT_FILE).read_bytes()
    assert train(cfg, tmp_path, config) == first  # finished: its metrics, nothing run
    assert len(calls) == 2 and (tmp_path / run_files.CHECKPOINT_FILE).read_bytes() == checkpoint
    # killed after its last checkpoint but before metrics.json: resuming evaluates, it does not train
    (tmp_path / run_files.METRICS_FILE).unlink()
    again = train(cfg, tmp_path, config)
    assert len(calls) == 2  # no further check: nothing was trained
    drop = lambda m: {k: v for k, v in m.items() if k != "train_seconds"}  # noqa: E731
    assert drop(again) == drop(first)
    state = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=False)
    before = torch.load(io.BytesIO(checkpoint), weights_only=False)
    assert state["step"] == 4 and all(torch.equal(state["model"][k], before["model"][k]) for k in state["model"])
    assert history_steps(tmp_path)[-1] == 4


def test_resume_from_a_learned_run_elsewhere_trains_no_further(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [1.0])
    overrides = ("train.steps=12", "train.check_every=2")
    first = train(tiny_config(*overrides), tmp_path / "a", tiny_dict(*overrides))
    assert (first["steps"], first["steps_to_learn"]) == (2, 2)
    resumed = (*overrides, f"resume={tmp_path / 'a'}")
    second = train(tiny_config(*resumed), tmp_path / "b", tiny_dict(*resumed))
    assert len(calls) == 1
    assert (second["steps"], second["steps_to_learn"], second["learned"]) == (2, 2, True)


def _lm_overrides(tmp_path, *extra):
    corpus = tmp_path / "texts"
    corpus.mkdir(exist_ok=True)
    for i in range(8):
        (corpus / f"t{i}.txt").write_text(f"line {i}\n" * 60)
    return ("task=lm", f"task.corpus={corpus}", "task.pattern=*.txt", *extra)


@pytest.mark.parametrize(
    ("losses", "learned", "fall"),
    [
        ([2.0, 1.5, 1.2, 1.19], True, 0.01 / 1.2),  # the last quarter (step 3 -> 4) bought under 2%: converged
        ([2.0, 1.5, 1.2, 1.0], False, 0.2 / 1.2),  # still falling: not converged, hence not learned
    ],
)
def test_lm_is_learned_once_its_heldout_loss_converged(tmp_path, monkeypatch, losses, learned, fall):
    import posenc.running.train

    calls = scripted_checks(monkeypatch, [0.0])
    seen = []

    def loss(model, task, length, sequences):
        seen.append((length, sequences))
        return losses[len(seen) - 1]

    monkeypatch.setattr(posenc.running.train, "heldout_loss", loss)
    overrides = _lm_overrides(tmp_path, "train.check_every=1", "train.check_sequences=8")
    metrics = train(tiny_config(*overrides), tmp_path / "run", tiny_dict(*overrides))
    assert calls == [] and metrics["steps_to_learn"] is None  # lm: no mastery checks, no early stop
    assert seen == [(metrics["train_length"], 8)] * 4
    assert metrics["checks"] == [[step, value] for step, value in zip(range(1, 5), losses)]
    assert metrics["check_metric"] == "loss" and metrics["heldout_loss_fall"] == pytest.approx(fall)
    assert (metrics["steps"], metrics["learned"]) == (4, learned)


def test_lm_without_checks_counts_as_learned(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [0.0])
    overrides = _lm_overrides(tmp_path, "train.check_every=0")
    metrics = train(tiny_config(*overrides), tmp_path / "run", tiny_dict(*overrides))
    assert calls == [] and metrics["checks"] == [] and metrics["check_metric"] is None
    assert (metrics["steps"], metrics["learned"], metrics["heldout_loss_fall"]) == (4, True, None)


def test_heldout_loss_scores_the_same_heldout_text_each_check(tmp_path):
    from posenc.running.train import heldout_loss

    overrides = _lm_overrides(tmp_path)
    task, _, model = tiny_config(*overrides).build()
    first = heldout_loss(model, task, 16, 4)
    assert math.isfinite(first) and heldout_loss(model, task, 16, 4) == first


def test_mastery_check_scores_held_out_sequences_of_its_own(monkeypatch):
    import posenc.running.train
    from posenc.running.evaluate import EVAL_SEED, eval_generator, evaluate
    from posenc.running.train import CHECK_SEED, mastery_check

    assert CHECK_SEED != EVAL_SEED and CHECK_SEED != tiny_config().seed
    task, _, model = tiny_config().build()
    seen = []

    def spy(*args, **kwargs):
        seen.append((args[2:], kwargs))
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(posenc.running.train, "evaluate", spy)
    assert mastery_check(model, task, 16, 9) == evaluate(model, task, 16, 9, seed=CHECK_SEED)["exact_match"]
    assert seen == [((16, 9), {"seed": CHECK_SEED})]
    first = next(task.evaluation_batches(9, 16, 9, eval_generator(16, CHECK_SEED)))
    final = next(task.evaluation_batches(9, 16, 9, eval_generator(16)))
    assert not torch.equal(first.inputs, final.inputs)  # not the final evaluation's sequences


# --- the length-generalization protocol: training lengths drawn per sequence, mastery over their range ----

from posenc.running.train import check_lengths, draw_batch  # noqa: E402
from posenc.tasks import build_task  # noqa: E402
from posenc.tasks.base import PAD  # noqa: E402


def test_check_lengths_span_the_training_range():
    assert check_lengths(32, 32) == [32]
    assert check_lengths(3, 32) == [3, 7, 11, 15, 20, 24, 28, 32]  # 8 lengths, both ends included
    assert check_lengths(8, 10) == [8, 9, 10]


def test_per_sequence_lengths_mix_in_one_batch_and_per_batch_lengths_do_not():
    task = build_task("copy", {})
    gen = torch.Generator().manual_seed(0)
    widths = set()
    for _ in range(20):
        batch, width = draw_batch(task, 64, 5, 20, "example", gen)
        ends = (batch.mask.long().cumsum(1) == batch.mask.sum(1, keepdim=True)) & batch.mask
        lengths = ends.float().argmax(1) + 1  # last answer position + 1: each sequence's own length
        assert lengths.min() >= 5 and lengths.max() <= 20 and len(set(lengths.tolist())) > 3
        assert batch.inputs.shape[1] == width == int(lengths.max())
        widths.add(width)
    batch, width = draw_batch(task, 64, 5, 20, "batch", gen)
    assert batch.inputs.shape[1] == width and not (batch.inputs == PAD)[:, 2:].any()  # no padding
    assert draw_batch(task, 4, 16, 16, "example", gen)[1] == 16  # fixed length: every sequence at it


@pytest.mark.parametrize(
    "overrides",
    [(f"encoder={e}",) for e in sorted(set(ENCODERS) - {"randomized"})]
    + [("encoder=nope", "model.mixer=base_conv", "model.n_layers=2")],
)
def test_right_padding_leaves_every_real_position_unchanged(overrides):
    """Training on a mixed, right-padded batch is training on each sequence alone: under the causal mask (or
    the causal convolution of ``model.mixer=base_conv``) no real token reads padding, and positions start at 0
    for every sequence. (randomized draws its positions for the whole width, so a padded short sequence reads
    other positions: not equal by design.)"""
    cfg = tiny_config(*overrides, "task.length=16")
    task, _, model = cfg.build()
    model.eval()
    short = task.sample(2, 9, torch.Generator().manual_seed(3))
    padded = torch.full((2, 16), PAD)
    padded[:, :9] = short.inputs
    with torch.no_grad():
        alone, inside = model(short.inputs), model(padded)[:, :9]
    torch.testing.assert_close(inside, alone, atol=1e-5, rtol=1e-5)


def test_a_variable_length_run_checks_mastery_over_its_range(tmp_path, monkeypatch):
    calls = scripted_checks(monkeypatch, [1.0])
    overrides = ("task.variable_length=true", "task.min_length=8", "train.check_every=2")
    metrics = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert calls == [(check_lengths(8, 16), 512)]
    assert metrics["train_lengths"] == [8, 16] and metrics["check_lengths"] == check_lengths(8, 16)
    assert metrics["learned"] is True
