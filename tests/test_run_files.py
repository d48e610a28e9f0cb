"""Run files are checked before they are trusted (issue 27): one run reached by two paths is pooled once,
folders that cannot be read are reported, a damaged metrics.json is named (never read as "not learned")."""

from __future__ import annotations

import os
import shutil
import signal

import pandas as pd
import pytest
from conftest import learned_run
from typer.testing import CliRunner

from posenc.cli.app import app
from posenc.files import METRICS_FILE

runner = CliRunner()


def _hung(signum, frame):
    raise TimeoutError("posenc blocked")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_one_run_reached_by_a_copy_and_a_symlink_is_evaluated_and_pooled_once(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    shutil.copytree(tmp_path / "run", tmp_path / "run.bak")  # a backup copy of the run folder
    os.symlink(tmp_path / "run", tmp_path / "link")
    args = ["--runs", "run", "--runs", "run.bak", "--runs", "link", "--lengths", "16,24", "--sequences", "8"]
    result = runner.invoke(app, ["compare", *args, "--out", "tables"])
    assert result.exit_code == 0, result.output
    sequences = pd.read_parquet(tmp_path / "tables" / "sequences.parquet")
    assert len(sequences) == 2 * 8, "each sequence of the one run once, not once per path"
    comparison = pd.read_parquet(tmp_path / "tables" / "comparison.parquet")
    assert set(comparison["n_sequences"]) == {8} and set(comparison["n_seeds"]) == {1}
    notes = [line for line in _lines(result.stderr) if "more than one path" in line]
    assert len(notes) == 1 and notes[0].startswith("note:") and notes[0].endswith("kept run"), result.stderr


def test_a_folder_that_cannot_be_listed_is_reported_not_dropped(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "sweep" / "a")
    learned_run(tmp_path / "sweep" / "b", "seed=1")
    locked = str(tmp_path / "sweep" / "b")
    real_scandir = os.scandir

    def scandir(path="."):  # as for a folder without read permission (root reads those anyway)
        if os.path.abspath(path) == locked:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = runner.invoke(
        app, ["extrapolate", "--runs", "sweep", "--lengths", "16", "--sequences", "4", "--out", "tables"]
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in _lines(result.stderr) if "sweep/b" in line]
    assert len(lines) == 1 and lines[0].startswith("skipped: cannot read folder") and "Permission denied" in lines[0]


def test_a_learned_run_with_a_damaged_metrics_file_is_named_not_reported_as_not_learned(
    tmp_path, always_learns, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "sweep" / "good")
    learned_run(tmp_path / "sweep" / "damaged", "seed=1")
    whole = (tmp_path / "sweep" / "damaged" / METRICS_FILE).read_text()
    for damage in ("", whole[: len(whole) // 2]):  # empty, truncated
        (tmp_path / "sweep" / "damaged" / METRICS_FILE).write_text(damage)
        result = runner.invoke(
            app, ["extrapolate", "--runs", "sweep", "--lengths", "16,32", "--sequences", "4", "--out", "tables"]
        )
        assert result.exit_code == 0, result.output
        stderr = result.stderr
        assert "not learned" not in stderr and "train longer" not in stderr, stderr
        named = [line for line in _lines(stderr) if "metrics.json" in line]
        assert len(named) == 1 and named[0].startswith(f"skipped: damaged sweep/damaged/{METRICS_FILE}"), stderr
        table = pd.read_parquet(tmp_path / "tables" / "extrapolation.parquet")
        assert set(table["run"]) == {"sweep/good"}
        listed = runner.invoke(app, ["runs", "--runs", "sweep"])
        assert listed.exit_code == 0 and _lines(listed.stderr) == [named[0]], listed.output


def test_a_fifo_metrics_file_does_not_block_runs(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    (tmp_path / "run" / METRICS_FILE).unlink()
    os.mkfifo(tmp_path / "run" / METRICS_FILE)
    signal.signal(signal.SIGALRM, _hung)
    signal.alarm(60)
    try:
        result = runner.invoke(app, ["runs", "--runs", "run"])  # blocked forever in open() before
    finally:
        signal.alarm(0)
    assert result.exit_code == 0, result.output
    assert _lines(result.stderr) == [
        f"skipped: run/{METRICS_FILE} is a FIFO, not a file: a run's metrics must be a regular file; move it away"
    ]


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_report_refuses_tables_whose_sequence_rows_were_deleted(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    assert (
        runner.invoke(
            app, ["compare", "--runs", "run", "--lengths", "16", "--sequences", "8", "--out", "tables"]
        ).exit_code
        == 0
    )
    path = tmp_path / "tables" / "sequences.parquet"
    pd.read_parquet(path).iloc[:5].to_parquet(path)
    before = {p.name: p.read_bytes() for p in (tmp_path / "tables").iterdir() if p.is_file()}
    result = runner.invoke(app, ["report", "tables"])
    assert result.exit_code == 2
    lines = _lines(result.stderr)
    assert (
        len(lines) == 1
        and lines[0].startswith("error: ")
        and "has 5 sequence rows where n_sequences says 8" in lines[0]
    )
    assert {p.name: p.read_bytes() for p in (tmp_path / "tables").iterdir() if p.is_file()} == before


def test_lm_learned_is_what_the_run_recorded_its_convergence_to_be():
    from posenc.analysis.run_folder import learned_from_metrics

    assert learned_from_metrics({"learned": False, "heldout_loss_fall": 0.03}, exact_match_task=False) is False
    assert learned_from_metrics({"learned": True}, exact_match_task=False) is True
    assert learned_from_metrics({}, exact_match_task=False) is True  # recorded before the rule: learned
