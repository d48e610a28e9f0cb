"""The plain train() function: files it writes, determinism by seed, the learning-rate schedule."""

import json
import math

import pytest
import torch
from conftest import tiny_config, tiny_dict

from posenc import io as run_io
from posenc.encoders import ENCODERS
from posenc.extrapolate import extrapolate
from posenc.train import lr_factor, short_dirname, train


def test_train_writes_checkpoint_metrics_history(tmp_path):
    cfg = tiny_config()
    metrics = train(cfg, tmp_path, tiny_dict())
    for name in (run_io.CHECKPOINT_FILE, run_io.METRICS_FILE, run_io.HISTORY_FILE):
        assert (tmp_path / name).is_file()
    saved = json.loads((tmp_path / run_io.METRICS_FILE).read_text())
    assert saved == metrics
    assert saved["eval_length"] == cfg.task.length and saved["n_sequences"] == cfg.train.eval_sequences
    assert 0 <= saved["exact_match"] <= saved["token_accuracy"] <= 1
    loaded_cfg, task, model = run_io.load_run(tmp_path)
    assert loaded_cfg == cfg
    assert not model.training


def test_same_seed_gives_identical_metrics(tmp_path):
    a, b, c = (train(tiny_config(f"seed={s}"), tmp_path / d, tiny_dict(f"seed={s}")) for s, d in
               [(3, "a"), (3, "b"), (4, "c")])
    drop = lambda m: {k: v for k, v in m.items() if k != "train_seconds"}  # noqa: E731
    assert drop(a) == drop(b)
    assert drop(a) != drop(c)
    sa = torch.load(tmp_path / "a" / run_io.CHECKPOINT_FILE, weights_only=True)["model"]
    sb = torch.load(tmp_path / "b" / run_io.CHECKPOINT_FILE, weights_only=True)["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    assert lr_factor(0, 10, 100) == pytest.approx(0.1)
    assert lr_factor(9, 10, 100) == pytest.approx(1.0)
    assert lr_factor(10, 10, 100) == pytest.approx(1.0)
    assert lr_factor(100, 10, 100) == pytest.approx(0.1)
    assert lr_factor(55, 10, 100) == pytest.approx(0.55)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_train_runs_on_cuda(tmp_path):
    metrics = train(tiny_config("device=cuda"), tmp_path, tiny_dict("device=cuda"))
    assert metrics["device"].startswith("cuda")


@pytest.mark.slow
def test_default_rope_learns_copy(tmp_path):
    """The README's promise: the default run (rope on copy) reaches >= 0.99 exact match at its length."""
    from conftest import compose_dict
    from posenc.config import run_config_from_dict

    config = compose_dict(["progress=false"])
    metrics = train(run_config_from_dict(config), tmp_path, config)
    assert metrics["exact_match"] >= 0.99


def test_long_override_dirnames_are_shortened_stably():
    short = "model.n_layers=3,task.length=128"
    assert short_dirname(short) == short
    long = ",".join(f"train.option{i}={i}" for i in range(40))
    name = short_dirname(long)
    assert len(name) <= 100 and name == short_dirname(long) and name != short_dirname(long + "x")


@pytest.mark.parametrize("encoder", ENCODERS)
def test_every_encoder_trains_then_evaluates_past_its_training_length(encoder, tmp_path):
    """The whole path for every registry entry: train (a few steps), reload, evaluate at 1x and 2x."""
    metrics = train(tiny_config(f"encoder={encoder}"), tmp_path, tiny_dict(f"encoder={encoder}"))
    assert 0 <= metrics["token_accuracy"] <= 1 and math.isfinite(metrics["loss"])
    table, skipped = extrapolate([tmp_path], [16, 32], sequences=4, device="cpu", progress=False)
    assert skipped == [] and list(table["eval_length"]) == [16, 32]
    at_16 = table.set_index("eval_length").loc[16]
    assert at_16["loss"] == pytest.approx(metrics["loss"], rel=1e-5)  # the reloaded model, same sequences
    if encoder == "learned":  # no rows past the training length: a NaN row with a note, not a crash
        assert math.isnan(table.set_index("eval_length").loc[32, "loss"])
    else:
        assert table["loss"].notna().all()
