"""Resumable training: kills at random steps, SIGTERM, finished runs, foreign checkpoints, divergence."""

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY, posenc_cli, tiny_config, tiny_dict

from posenc import files as run_files
from posenc.errors import PosencError
from posenc.running.checkpoint import config_difference, rng_states, set_rng_states
from posenc.running.train import train

# Long enough (a second or two of steps) that a kill lands mid-training; checkpoints every 7 steps.
LONG = [*TINY, "train.steps=600", "train.checkpoint_every=7", "train.log_every=25"]
# A budget no test run gets through (hours of steps), without mastery checks that could end it early: a stop
# signal sent once the loop runs always lands mid-training, the only way such a run ends within the test.
ENDLESS_STEPS = 10_000_000
ENDLESS = [
    *TINY,
    f"train.steps={ENDLESS_STEPS}",
    "train.checkpoint_every=7",
    "train.log_every=25",
    "train.check_every=0",
]


def metrics_without_time(run: Path) -> dict:
    metrics = json.loads((run / run_files.METRICS_FILE).read_text())
    metrics.pop("train_seconds")
    return metrics


def weights(run: Path) -> dict:
    return torch.load(run / run_files.CHECKPOINT_FILE, weights_only=True)["model"]


def start_training(cwd: Path, run: str, *extra: str, config: list[str] = LONG) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "posenc", "train", *config, f"hydra.run.dir={run}", *extra],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_training(process: subprocess.Popen, run_dir: Path, timeout: float = 60) -> None:
    """Until the run has written a checkpoint (its loop is running), or the process ended."""
    deadline = time.monotonic() + timeout
    while not (run_dir / run_files.CHECKPOINT_FILE).exists() and process.poll() is None:
        assert time.monotonic() < deadline, "training did not start"
        time.sleep(0.02)


def test_sigkill_at_random_steps_then_resume_is_bit_identical(tmp_path):
    reference = posenc_cli("train", *LONG, "hydra.run.dir=reference", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr

    rng = random.Random(0)
    kills, steps_seen = 0, []
    run = tmp_path / "killed"
    for _ in range(4):  # four kill points at random moments, then a final uninterrupted resume
        process = start_training(tmp_path, "killed")
        wait_for_training(process, run)
        time.sleep(rng.uniform(0.0, 1.5))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
        if (run / run_files.CHECKPOINT_FILE).exists():
            steps_seen.append(torch.load(run / run_files.CHECKPOINT_FILE, weights_only=True)["step"])
    final = posenc_cli("train", *LONG, "hydra.run.dir=killed", cwd=tmp_path)
    assert final.returncode == 0, final.stderr

    assert kills >= 2, "too few kills landed mid-training"
    assert any(0 < step < 600 for step in steps_seen), steps_seen
    assert metrics_without_time(run) == metrics_without_time(tmp_path / "reference")
    ref = weights(tmp_path / "reference")
    assert all(torch.equal(tensor, ref[name]) for name, tensor in weights(run).items())
    assert (run / run_files.HISTORY_FILE).read_text() == (tmp_path / "reference" / run_files.HISTORY_FILE).read_text()


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_signal_saves_a_checkpoint_and_exits_cleanly(tmp_path, signum, code):
    process = start_training(tmp_path, "run", config=ENDLESS)
    try:
        wait_for_training(process, tmp_path / "run")
        assert process.poll() is None, f"training ended before the signal: {process.communicate()[1]}"
        process.send_signal(signum)  # the loop is running (a checkpoint exists) and cannot finish on its own
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{signal.Signals(signum).name} did not stop training within 60 s")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr and "checkpoint saved" in stderr
    step = torch.load(tmp_path / "run" / run_files.CHECKPOINT_FILE, weights_only=True)["step"]
    assert 7 <= step < ENDLESS_STEPS  # at or after the first checkpoint, where the signal was sent
    assert not (tmp_path / "run" / run_files.METRICS_FILE).exists()


def test_finished_run_is_not_retrained(tmp_path):
    config = tiny_dict()
    first = train(tiny_config(), tmp_path, config)
    before = (tmp_path / run_files.CHECKPOINT_FILE).stat().st_mtime_ns
    again = train(tiny_config(), tmp_path, config)
    assert again == first
    assert (tmp_path / run_files.CHECKPOINT_FILE).stat().st_mtime_ns == before


def test_a_run_dir_of_another_config_is_refused_and_left_alone(tmp_path):
    train(tiny_config(), tmp_path, tiny_dict())
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(PosencError, match=r"different run: encoder.name \('rope' there, 'alibi' now\)"):
        train(tiny_config("encoder=alibi"), tmp_path, tiny_dict("encoder=alibi"))
    with pytest.raises(PosencError, match="already holds a checkpoint"):
        train(tiny_config("resume=false"), tmp_path, tiny_dict("resume=false"))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == snapshot


def test_how_switches_do_not_block_resuming(tmp_path):
    """train.compile and model.attention choose how, not what, is computed, train.log_every and
    train.checkpoint_every only how often progress is logged and saved, train.eval_sequences the size of the
    check after training: a run resumes across them (posenc.analysis.store.RUN_NEUTRAL_KEYS)."""
    short = ("train.steps=8", "train.checkpoint_every=4")
    train(tiny_config(*short), tmp_path, tiny_dict(*short))
    state = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=True)
    state["step"] = 4  # pretend it stopped half way
    torch.save(state, tmp_path / run_files.CHECKPOINT_FILE)
    (tmp_path / run_files.METRICS_FILE).unlink()
    switched = (
        "train.steps=8",
        "train.checkpoint_every=2",
        "train.compile=false",
        "model.attention=blocked",
        "train.log_every=1",
        "train.eval_sequences=3",
    )
    metrics = train(tiny_config(*switched), tmp_path, tiny_dict(*switched))
    assert metrics["steps"] == 8


def test_resume_from_another_run_directory(tmp_path):
    short = tiny_dict("train.steps=8", "train.checkpoint_every=4")
    train(tiny_config("train.steps=8", "train.checkpoint_every=4"), tmp_path / "a", short)
    with pytest.raises(PosencError, match="different run: train.steps"):  # checkpoint_every is run-neutral
        train(tiny_config(f"resume={tmp_path / 'a'}"), tmp_path / "b", tiny_dict(f"resume={tmp_path / 'a'}"))
    resumed = [*("train.steps=8", "train.checkpoint_every=4"), f"resume={tmp_path / 'a'}"]
    metrics = train(tiny_config(*resumed), tmp_path / "d", tiny_dict(*resumed))
    assert metrics == json.loads((tmp_path / "a" / run_files.METRICS_FILE).read_text()) | {
        "train_seconds": metrics["train_seconds"]
    }
    with pytest.raises(PosencError, match="no checkpoint there"):
        train(tiny_config(f"resume={tmp_path / 'nowhere'}"), tmp_path / "c", tiny_dict())


def test_divergence_stops_with_a_clear_message_and_keeps_the_last_checkpoint(tmp_path):
    overrides = ["train.lr=1e30", "train.warmup_steps=0", "train.steps=50", "train.checkpoint_every=1"]
    with pytest.raises(PosencError, match="loss became non-finite by step"):
        train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    state = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=True)
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert not (tmp_path / run_files.METRICS_FILE).exists()


def test_rng_states_round_trip():
    data = torch.Generator().manual_seed(5)
    states = rng_states(data)
    expected = (torch.rand(3), torch.rand(3, generator=data), random.random())
    set_rng_states(states, data)
    assert torch.equal(torch.rand(3), expected[0]) and torch.equal(torch.rand(3, generator=data), expected[1])
    assert random.random() == expected[2]


def test_config_difference_names_the_first_changed_key():
    assert config_difference({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == "a.c (2 there, 3 now)"
    assert config_difference({"a": 1}, {"a": 1}) is None


def test_checkpoint_files_are_never_half_written(tmp_path, monkeypatch):
    """A failure while writing leaves the previous file intact and no temporary file behind."""
    target = tmp_path / "file.bin"
    run_files.atomic_write_text(target, "old")

    def explode(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(PosencError, match=f"cannot write {target}: disk full; its previous version is kept"):
        run_files.atomic_write(target, explode)  # one line naming the file (issue 27), not an OSError's traceback
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_cli_refuses_foreign_checkpoint_in_one_line(tmp_path):
    first = posenc_cli("train", *TINY, "hydra.run.dir=run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = posenc_cli("train", *TINY, "encoder=xpos", "hydra.run.dir=run", cwd=tmp_path)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert "belongs to a different run: encoder.name" in second.stderr
