"""A run folder's files always belong together (issue 38): training refuses, in one line and touching nothing,
a folder holding another run's files or files it did not write; one training at a time writes a folder;
resume=PATH never writes over a run; extrapolate, compare and runs refuse a folder whose files disagree; a
resume under another thread count says so; no temporary file of a killed write outlives the next start."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import TINY, learned_run, tiny_config, tiny_dict

from posenc import files as run_files
from posenc.analysis.run_folder import RunFolder, training_table
from posenc.analysis.store import RUN_NEUTRAL_KEYS, run_identity
from posenc.errors import PosencError
from posenc.running.extrapolate import extrapolate
from posenc.running.runs import load_run
from posenc.running.train import train


def state_of(run: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below ``run`` (hidden ones too), with its bytes and modification time."""
    return {
        str(p.relative_to(run)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(run.rglob("*")) if p.is_file()
    }


def refused(run: Path, *overrides: str, match: str) -> str:
    """Training ``overrides`` into ``run`` is refused with one line matching ``match``, and changes nothing."""
    before = state_of(run) if run.exists() else None
    with pytest.raises(PosencError, match=match) as caught:
        train(tiny_config(*overrides), run, tiny_dict(*overrides))
    assert "\n" not in str(caught.value)
    assert (state_of(run) if run.exists() else None) == before
    return str(caught.value)


def finished(run: Path, *overrides: str) -> dict:
    return train(tiny_config(*overrides), run, tiny_dict(*overrides))


# --- training refuses files that are not this run's -------------------------------------------------------


def test_a_finished_run_whose_checkpoint_was_removed_is_not_trained_over(tmp_path):
    finished(tmp_path / "run")
    (tmp_path / "run" / run_files.CHECKPOINT_FILE).unlink()  # what `compare --extend --choose` weighs
    refused(tmp_path / "run", match="holds metrics.json but no checkpoint.pt .* restore the run's checkpoint.pt")


@pytest.mark.parametrize("name, text, match", [
    (run_files.CONFIG_FILE, "lr: 3\n", r"config.yaml belongs to a different run: encoder \(None there"),
    (run_files.CONFIG_FILE, "[unclosed\n", "damaged .*config.yaml: not YAML"),
    (run_files.HISTORY_FILE, "step,loss\n1,2.0\n", "holds history.csv but no checkpoint.pt"),
    (run_files.METRICS_FILE, '{"exact_match": 1.0}\n', "holds metrics.json but no checkpoint.pt"),
    (run_files.OVERRIDES_FILE, "- lr=3\n", "overrides.yaml is not this run's: posenc writes it only beside"),
    (run_files.TRACKING_FILE, "{}\n", "tracking.json is not this run's"),
    (run_files.MASTERY_FILE, "weights\n", "mastery.pt is not this run's: .* which no checkpoint here records"),
])  # fmt: skip
def test_a_users_own_file_in_the_folder_is_refused_and_left_alone(tmp_path, name, text, match):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).write_text(text)
    refused(tmp_path / "run", match=match)


def test_a_mastery_snapshot_beside_a_run_that_never_met_the_target_is_refused(tmp_path):
    finished(tmp_path / "run", "train.check_every=0")  # no checks: learned_at stays None
    (tmp_path / "run" / run_files.MASTERY_FILE).write_bytes(b"another run's")
    refused(tmp_path / "run", "train.check_every=0", "resume=true", match="mastery.pt is not this run's: .* not yet")


def test_a_refused_start_removes_only_the_empty_log_hydra_opened_for_it(tmp_path):
    for logged in ("", "[an earlier run's log]\n"):
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / run_files.CONFIG_FILE).write_text("lr: 3\n")
        (tmp_path / "run" / run_files.LOG_FILE).write_text(logged)  # Hydra opens it before training starts
        with pytest.raises(PosencError, match="config.yaml belongs to a different run"):
            finished(tmp_path / "run")
        kept = {run_files.CONFIG_FILE: "lr: 3\n", **({run_files.LOG_FILE: logged} if logged else {})}
        assert {p.name: p.read_text() for p in (tmp_path / "run").iterdir()} == kept


def test_files_of_another_run_beside_this_runs_checkpoint_are_refused(tmp_path):
    finished(tmp_path / "a")
    finished(tmp_path / "b", "seed=1")
    shutil.copy(tmp_path / "b" / run_files.METRICS_FILE, tmp_path / "a" / run_files.METRICS_FILE)
    refused(
        tmp_path / "a",
        match=r"metrics.json belongs to a different run \(run \w+ in metrics.json, run \w+ in the "
        "config trained now",
    )
    finished(tmp_path / "c", "train.steps=6")
    shutil.copy(tmp_path / "c" / run_files.CONFIG_FILE, tmp_path / "b" / run_files.CONFIG_FILE)
    refused(tmp_path / "b", "seed=1", match=r"config.yaml belongs to a different run: seed \(0 there, 1 now\)")
    shutil.copy(tmp_path / "c" / run_files.HISTORY_FILE, tmp_path / "c" / "saved.csv")
    (tmp_path / "c" / run_files.HISTORY_FILE).write_text("step,loss\n2,9.0\n")
    refused(tmp_path / "c", "train.steps=6", match="history.csv is not the training curve of")


def test_a_metrics_file_that_does_not_end_the_checkpoint_is_refused(tmp_path):
    finished(tmp_path / "run", "train.steps=8", "train.checkpoint_every=4")
    state = torch.load(tmp_path / "run" / run_files.CHECKPOINT_FILE, weights_only=True)
    state["step"] = 4  # the finished run's metrics beside a checkpoint from half way
    torch.save(state, tmp_path / "run" / run_files.CHECKPOINT_FILE)
    refused(
        tmp_path / "run",
        "train.steps=8",
        "train.checkpoint_every=4",
        match="metrics.json does not end .*checkpoint.pt .training ended at step 8 there, the checkpoint is at step 4",
    )


def test_a_checkpoint_copied_from_another_run_is_refused_not_read_under_the_folders_config(tmp_path):
    finished(tmp_path / "a")
    finished(tmp_path / "b", "encoder=alibi")
    shutil.copy(tmp_path / "b" / run_files.CHECKPOINT_FILE, tmp_path / "a" / run_files.CHECKPOINT_FILE)
    refused(tmp_path / "a", match=r"belongs to a different run: encoder.name \('alibi' there, 'rope' now\)")


def test_a_run_with_overrides_nested_in_the_folder_and_notes_beside_it_are_not_in_the_way(tmp_path):
    finished(tmp_path / "run" / "train.steps=6", "train.steps=6")
    (tmp_path / "run" / "notes.txt").write_text("mine\n")
    metrics = finished(tmp_path / "run")
    assert metrics["run_id"] == run_identity(tiny_dict()).run_id
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine\n"


def test_metrics_name_their_run_and_run_neutral_keys_never_make_copies_disagree(tmp_path):
    metrics = finished(tmp_path / "run", "train.steps=8", "train.checkpoint_every=4")
    assert metrics["run_id"] == run_identity(tiny_dict("train.steps=8")).run_id
    assert metrics["config_id"] == run_identity(tiny_dict("train.steps=8")).config_id
    neutral = ("train.steps=8", "train.checkpoint_every=2", "device=cpu", "train.log_every=1")
    assert finished(tmp_path / "run", *neutral) == metrics  # the same run: finished, not retrained
    config = yaml.safe_load((tmp_path / "run" / run_files.CONFIG_FILE).read_text())
    config.update(device="cuda", progress=True, logger={"name": "tensorboard"})  # where and how, not what
    if "plugins" in RUN_NEUTRAL_KEYS:
        config["plugins"] = {"my_encoder": "plugins/mine.py:MyEncoder"}  # provenance of plugin code
    (tmp_path / "run" / run_files.CONFIG_FILE).write_text(yaml.safe_dump(config))
    folder = RunFolder.read(tmp_path / "run")
    assert folder.metrics_problem is None and folder.finished and folder.run_id == metrics["run_id"]


# --- one training at a time ---------------------------------------------------------------------------------


def test_a_folder_another_training_holds_is_refused_and_nothing_is_written(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = refused(run, match="is being written by another posenc train right now; wait until it ends")
        assert str(run) in line
        assert sorted(os.listdir(run)) == [run_files.TRAIN_LOCK]
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    finished(run)  # the lock dies with its process: no stale lock to remove by hand


_HOLD = """
import sys, time
from pathlib import Path
from posenc.files import train_lock
with train_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(120)
"""
# A budget no test run gets through, without checks that could end it early: the first training is still
# running when the second starts, and is stopped with SIGTERM (a checkpoint, exit 143) once that is refused.
ENDLESS = [*TINY, "train.steps=10000000", "train.checkpoint_every=50", "train.log_every=50", "train.check_every=0"]
# Long enough that two trainings started at once overlap.
RACING = [*TINY, "train.steps=300", "train.checkpoint_every=50", "train.log_every=50", "train.check_every=0"]


def _start(cwd: Path, *overrides: str, config: list[str] = RACING) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "posenc", "train", *config, *overrides, "hydra.run.dir=run"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _one_run(run: Path) -> None:
    """Every file in ``run`` is of one run: config.yaml, checkpoint.pt and metrics.json agree."""
    config = yaml.safe_load((run / run_files.CONFIG_FILE).read_text())
    state = torch.load(run / run_files.CHECKPOINT_FILE, weights_only=True)
    assert run_identity(state["config"]).run_id == run_identity(config).run_id
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    if not (run / run_files.METRICS_FILE).exists():  # stopped before it finished
        return
    metrics = json.loads((run / run_files.METRICS_FILE).read_text())
    assert run_identity(state["config"]).run_id == run_identity(config).run_id == metrics["run_id"]
    assert state["step"] == metrics["steps"]
    assert (run / run_files.HISTORY_FILE).read_bytes().decode() == run_files.history_csv(state["history"])


@pytest.mark.integration  # processes started by _start
def test_two_trainings_racing_into_one_folder_never_mix(tmp_path):
    """The second training into a folder a first one is writing is refused in one line, whatever its config;
    two started at the same moment: one trains, the other is refused, and the folder holds one run's files."""
    first = _start(tmp_path, config=ENDLESS)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / run_files.CONFIG_FILE).exists():  # it holds the lock from before this file
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
        time.sleep(0.02)
    for overrides, message in (
        ((), "is being written by another posenc train right now"),  # the same command
        (("encoder=alibi",), ""),
    ):  # another config: that, or its config.yaml is another's
        second = _start(tmp_path, *overrides, config=ENDLESS)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2, err
        errors = [line for line in err.splitlines() if line.strip()]
        assert len(errors) == 1 and errors[0].startswith("error: ") and message in err, err
    while not (tmp_path / "run" / run_files.CHECKPOINT_FILE).exists():  # its loop runs: SIGTERM saves and stops
        assert first.poll() is None and time.monotonic() < deadline + 120, first.stderr.read()
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 143, err
    _one_run(tmp_path / "run")
    assert yaml.safe_load((tmp_path / "run" / run_files.CONFIG_FILE).read_text())["encoder"]["name"] == "rope"

    shutil.rmtree(tmp_path / "run")
    both = [_start(tmp_path), _start(tmp_path, "encoder=alibi")]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in both]
    assert sorted(code for code, _ in results) == [0, 2], results
    assert all("Traceback" not in err for _, err in results)
    _one_run(tmp_path / "run")


# --- resume=PATH ------------------------------------------------------------------------------------------


def test_resume_from_elsewhere_never_writes_over_a_run(tmp_path):
    source = tmp_path / "source"
    finished(source, "train.steps=8", "train.checkpoint_every=4")
    other = tmp_path / "other"
    finished(other, "train.steps=6")
    resume = ("train.steps=8", f"resume={source}")
    refused(other, *resume, match=r"config.yaml belongs to a different run: train.steps \(6 there, 8 now\)")
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)  # this configuration's own finished run: still not written over
    refused(
        copy,
        *resume,
        match=f"resume={source}: {copy} already holds checkpoint.pt, metrics.json, history.csv; "
        "resume=PATH starts a run folder .* continue .* with resume=true",
    )
    metrics = finished(source, *resume)  # resume=PATH naming the folder itself: resume=true
    assert metrics == json.loads((source / run_files.METRICS_FILE).read_text())


def test_a_refused_resume_leaves_no_empty_folder_behind(tmp_path):
    results = tmp_path / "results"
    source = results / "runs" / "copy" / "rope" / "seed0"
    finished(source)
    target = results / "runs" / "copy" / "alibi" / "seed0"
    overrides = ("encoder=alibi", f"resume={source}", f"paths.results={results}")
    refused(target, *overrides, match=rf"resume={source}: .* belongs to a different run: encoder.name")
    assert not (results / "runs" / "copy" / "alibi").exists() and source.is_dir()


def test_a_damaged_resume_source_is_named_and_never_advised_deleted(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / run_files.CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    line = refused(tmp_path / "run", f"resume={tmp_path / 'source'}", match="cannot read checkpoint")
    assert "delete" not in line and f"resume={tmp_path / 'source'} must name a whole checkpoint" in line
    assert not (tmp_path / "run").exists()


# --- evaluating and listing refuse a folder whose files disagree ---------------------------------------------


@pytest.fixture
def mixed(tmp_path, always_learns) -> Path:
    """A learned run's folder whose checkpoint was replaced by another configuration's."""
    learned_run(tmp_path / "run")
    learned_run(tmp_path / "other", "encoder=alibi")
    shutil.copy(tmp_path / "other" / run_files.CHECKPOINT_FILE, tmp_path / "run" / run_files.CHECKPOINT_FILE)
    return tmp_path / "run"


def test_extrapolate_and_runs_refuse_a_folder_mixing_two_runs_naming_the_files(mixed):
    results, skipped = extrapolate([mixed, mixed.parent / "other"], [16], sequences=2, device="cpu", progress=False)
    assert set(results.evaluations["encoder"]) == {"alibi"}  # the whole run only
    assert skipped == [
        f"{mixed}: checkpoint.pt and config.yaml are of different runs (encoder.name ('rope' in "
        "config.yaml, 'alibi' in checkpoint.pt)); a run folder holds one run's files: move the other "
        "run's away, or train the run again into an empty folder"
    ]
    with pytest.raises(PosencError, match="checkpoint.pt and config.yaml are of different runs"):
        load_run(mixed)  # whoever loads the weights checks too
    notes: list[str] = []
    table = training_table([mixed], notes)
    assert notes == skipped and table["exact_match"].isna().all()


def test_a_metrics_file_of_another_run_is_named_by_every_reader(tmp_path, always_learns):
    learned_run(tmp_path / "run")
    learned_run(tmp_path / "other", "seed=1")
    shutil.copy(tmp_path / "other" / run_files.METRICS_FILE, tmp_path / "run" / run_files.METRICS_FILE)
    folder = RunFolder.read(tmp_path / "run")
    assert not folder.finished and "metrics.json and config.yaml are of different runs (run " in folder.metrics_problem
    notes: list[str] = []
    training_table([tmp_path / "run"], notes)
    assert notes == [folder.metrics_problem]
    metrics = json.loads((tmp_path / "other" / run_files.METRICS_FILE).read_text())
    del metrics["run_id"]  # written before metrics named their run: its own record of encoder, seed, ...
    (tmp_path / "run" / run_files.METRICS_FILE).write_text(json.dumps(metrics))
    assert "(seed 1 in metrics.json, seed 0 in config.yaml)" in RunFolder.read(tmp_path / "run").metrics_problem


# --- threads, temporary files -----------------------------------------------------------------------------


def test_resuming_under_another_thread_count_says_so_in_one_warning(tmp_path, caplog):
    short = ("train.steps=8", "train.checkpoint_every=4")
    finished(tmp_path, *short)
    state = torch.load(tmp_path / run_files.CHECKPOINT_FILE, weights_only=True)
    assert state["threads"] == torch.get_num_threads()
    for threads, warned in ((state["threads"] + 1, True), (torch.get_num_threads(), False)):
        state.update(step=4, threads=threads)  # stopped half way under another thread count
        torch.save(state, tmp_path / run_files.CHECKPOINT_FILE)
        (tmp_path / run_files.METRICS_FILE).unlink()
        (tmp_path / run_files.HISTORY_FILE).unlink()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="posenc.running.train"):
            finished(tmp_path, *short)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "threads" in r.getMessage()]
        assert lines == (
            [
                f"resuming under {torch.get_num_threads()} threads, where this run trained under {threads} "
                "until step 4: its result will differ from an uninterrupted run's in the last bits (set "
                f"OMP_NUM_THREADS={threads} to match)"
            ]
            if warned
            else []
        )


def test_temporary_files_of_a_killed_write_are_removed_by_the_next_start(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    stale = [
        run / f".{run_files.CHECKPOINT_FILE}.{run_files.TEMP_MARK}-x1y2.tmp",
        run / f".{run_files.METRICS_FILE}.ab_cd123.tmp",
    ]  # posenc's now, and an earlier version's
    for path in stale:
        path.write_bytes(b"half a file")
    (run / ".my-notes.tmp").write_text("mine\n")
    finished(run)
    assert not any(path.exists() for path in stale)
    assert (run / ".my-notes.tmp").read_text() == "mine\n"


def test_a_checkpoint_write_killed_mid_way_leaves_no_temporary_file_after_the_next_start(tmp_path):
    """SIGKILL while the checkpoint's temporary file is being written (its write made slow), then the same
    command again: the run finishes and no temporary file is left."""
    code = (
        "import sys, time, torch; real = torch.save\n"
        "def slow(obj, f, *a, **k):\n    real(obj, f, *a, **k); f.flush(); print('writing', flush=True); "
        "time.sleep(60)\n"
        "torch.save = slow\nsys.argv = ['posenc', 'train', *sys.argv[1:]]\n"
        "from posenc.cli.app import app\napp()\n"
    )
    args = [*TINY, "hydra.run.dir=run"]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert any(line.strip() == "writing" for line in proc.stdout)  # log lines may come first
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")]  # the kill left one
    done = subprocess.run(
        [sys.executable, "-m", "posenc", "train", *args], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")]


def test_a_write_removes_what_a_killed_write_of_the_same_file_left_and_nothing_else(tmp_path):
    """Outside run folders too (a script's output): the temporary files name their writer's process id, and a
    write removes those of writers that are gone, never a live writer's nor a file it did not write."""
    target = tmp_path / "table.csv"
    dead = tmp_path / f".table.csv.{run_files.TEMP_MARK}-999999999-ab12cd.tmp"  # no such process
    live = tmp_path / f".table.csv.{run_files.TEMP_MARK}-{os.getpid()}-ef34gh.tmp"  # this one: writing
    other = tmp_path / f".other.csv.{run_files.TEMP_MARK}-999999999-ij56kl.tmp"  # another file's: its own write
    for path in (dead, live, other):
        path.write_text("half")
    run_files.atomic_write_text(target, "whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, live.name, other.name])
