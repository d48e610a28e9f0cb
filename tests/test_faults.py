"""Faults while posenc works (issue 27): a full disk during training and during compare, Ctrl-C before and
after the new tables are published, resume from posenc's own folder names. Each: one line, no traceback, and
nothing changed that the message does not say changed."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import LEARNS, TINY, learned_run
from typer.testing import CliRunner

import posenc.analysis.pipeline
from posenc.cli.app import app
from posenc.files import CHECKPOINT_FILE

runner = CliRunner()
# End to end: each test drives a posenc command (train, compare, report) through a fault injected into the
# filesystem or the process, so the module runs with the integration set (CI), not the fast unit suite.
pytestmark = pytest.mark.integration


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error(result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    errors = [line for line in _lines(result.stderr) if "error" in line.lower()]  # progress lines aside
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    assert _lines(result.stderr)[-1] == errors[0], "the error ends the output"
    return errors[0]


def _disk_full_for(monkeypatch, name: str, after: int = 0) -> None:
    """fsync of a file whose (temporary) name holds ``name`` fails with ENOSPC, after ``after`` that succeed."""
    real_fsync, seen = os.fsync, []

    def fsync(fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if name in os.path.basename(target):
            seen.append(target)
            if len(seen) > after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_disk_full_while_saving_a_checkpoint_is_one_line_and_keeps_the_previous_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _disk_full_for(monkeypatch, f".{CHECKPOINT_FILE}.", after=1)  # the step-2 checkpoint lands, step 4's does not
    result = runner.invoke(app, ["train", *TINY, "train.checkpoint_every=2", f"hydra.run.dir={tmp_path / 'run'}"])
    line = _one_error(result)
    assert (
        line == f"error: cannot write {tmp_path / 'run' / CHECKPOINT_FILE}: No space left on device; its previous "
        "version is kept"
    )
    state = torch.load(tmp_path / "run" / CHECKPOINT_FILE, weights_only=False)
    assert state["step"] == 2
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def compared_once(tmp_path_factory) -> Path:
    """A learned run and its comparison in ``tables/``, made once for this module (paths in it are relative)."""
    import posenc.running.train

    root = tmp_path_factory.mktemp("compared")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(posenc.running.train, "mastery_check", lambda *args: 1.0)  # as the always_learns fixture
        patch.chdir(root)
        learned_run(root / "run")
        result = runner.invoke(
            app, ["compare", "--runs", "run", "--lengths", "16", "--sequences", "4", "--out", "tables"]
        )
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def compared(compared_once, tmp_path, always_learns, monkeypatch) -> Path:
    """A fresh copy of :func:`compared_once` for each test to damage, as the working directory."""
    shutil.copytree(compared_once, tmp_path, symlinks=True, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_disk_full_during_compare_is_one_line_naming_the_file_and_changes_nothing(compared, monkeypatch):
    before = snapshot(compared)
    _disk_full_for(monkeypatch, ".extrapolation.parquet.")
    result = runner.invoke(
        app, ["compare", "--runs", "run", "--lengths", "16,24", "--sequences", "4", "--out", "tables"]
    )
    line = _one_error(result)
    tables = compared / "tables"
    assert line == (
        f"error: cannot write {tables / 'extrapolation.parquet'}: No space left on device; nothing in "
        f"{tables} was changed"
    )
    assert snapshot(compared) == before


def test_ctrl_c_before_the_tables_are_published_says_nothing_changed(compared, monkeypatch):
    before = snapshot(compared)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.analysis.pipeline, "render", interrupt)  # while the report is drawn, before the commit
    result = runner.invoke(
        app, ["compare", "--runs", "run", "--lengths", "16,24", "--sequences", "4", "--out", "tables"]
    )
    line = _one_error(result, 130)
    assert line == "error: interrupted; nothing in tables was changed (its old files are as they were)"
    assert snapshot(compared) == before


def test_ctrl_c_after_the_tables_are_published_says_so(compared, monkeypatch):
    before = snapshot(compared)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.analysis.pipeline, "_moved_figures", interrupt)  # just after the commit
    result = runner.invoke(
        app, ["compare", "--runs", "run", "--lengths", "16,24", "--sequences", "4", "--out", "tables"]
    )
    line = _one_error(result, 130)
    assert line.startswith("error: interrupted after the new files were published in tables")
    after = snapshot(compared)
    assert after["tables/comparison.parquet"] != before["tables/comparison.parquet"]  # they were: it says so


def test_ctrl_c_during_report_is_one_line(compared, monkeypatch):
    before = snapshot(compared)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.analysis.pipeline, "render", interrupt)
    line = _one_error(runner.invoke(app, ["report", "tables"]), 130)
    assert line == "error: interrupted; nothing in tables was changed (its old files are as they were)"
    assert snapshot(compared) == before


def test_resume_takes_posencs_own_folder_names(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "results" / "runs" / "copy" / "rope" / "seed0" / "train.steps=400,seed=1"
    learned_run(source)
    result = runner.invoke(app, ["train", *TINY, *LEARNS, f"resume={source}", f"hydra.run.dir={tmp_path / 'again'}"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "again" / CHECKPOINT_FILE).is_file()
    shutil.rmtree(tmp_path / "again")
    result = runner.invoke(app, ["train", *TINY, *LEARNS, f"resume={source}", f"hydra.run.dir={source}-copy"])
    assert result.exit_code == 0, result.output  # a run folder of that kind named for hydra.run.dir, too
    assert (Path(f"{source}-copy") / CHECKPOINT_FILE).is_file()


def test_work_beyond_the_memory_available_is_refused_before_it_starts_unless_asked(
    tmp_path, always_learns, monkeypatch
):
    import posenc.running.evaluation_budget

    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    monkeypatch.setattr(posenc.running.evaluation_budget, "available_memory", lambda: 2**20)  # 1 MiB free
    args = ["extrapolate", "--runs", "run", "--lengths", "16,64", "--sequences", "4", "--out", "tables"]
    line = _one_error(runner.invoke(app, args))
    assert line.startswith("error: this evaluation needs about ") and line.endswith("--no-memory-check to try anyway")
    assert not (tmp_path / "tables").exists()
    result = runner.invoke(app, [*args, "--no-memory-check"])
    assert result.exit_code == 0, result.output


def test_an_unreadable_table_in_report_is_one_line_and_changes_nothing(compared, monkeypatch):
    import pandas as pd

    before = snapshot(compared)
    real = pd.read_parquet

    def read_parquet(path, *args, **kwargs):  # as for a table without read permission (root reads those anyway)
        if str(path).endswith("sequences.parquet"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pd, "read_parquet", read_parquet)
    line = _one_error(runner.invoke(app, ["report", "tables"]))
    assert (
        line == f"error: cannot read {Path('tables') / 'sequences.parquet'}: Permission denied; make it readable or "
        "move it away"
    )
    assert snapshot(compared) == before


# A compare killed (SIGKILL, as `kill -9` or a SLURM job past its time) right after it renamed one new table
# over its old version: its commit record names the rest, which the next command into the folder puts in place.
_KILLED_AFTER = """
import os, signal, sys
import posenc.analysis.folders as folders
real, last = os.replace, sys.argv[1]
def replace(source, target):
    real(source, target)
    if os.path.basename(target) == last and ".posenc-staging-" not in str(target):
        os.kill(os.getpid(), signal.SIGKILL)
folders.os.replace = replace
sys.argv = ["posenc", *sys.argv[2:]]
from posenc.cli.app import app
app()
"""


@pytest.mark.parametrize("command", [
    ["compare", "--runs", "run", "--lengths", "16,24", "--sequences", "4", "--out", "tables"],
    ["extrapolate", "--runs", "run", "--lengths", "16", "--sequences", "4", "--out", "tables"],
    ["report", "tables"],
    ["runs", "--runs", "run", "--out", "tables"],
])  # fmt: skip
def test_the_next_command_finishes_a_publish_killed_between_two_renames(compared, command):
    import subprocess
    import sys

    import pandas as pd

    from posenc.analysis.store import read_results

    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            _KILLED_AFTER,
            "extrapolation.parquet",
            "compare",
            "--runs",
            "run",
            "--lengths",
            "16,24",
            "--sequences",
            "4",
            "--out",
            "tables",
        ],
        cwd=compared,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    tables = compared / "tables"
    assert list(tables.glob(".posenc-staging-*")), "the kill left the publish half done"
    assert 24 in set(pd.read_parquet(tables / "extrapolation.parquet")["eval_length"])  # renamed: the new one
    assert 24 not in set(pd.read_parquet(tables / "sequences.parquet")["eval_length"])  # not yet: the old one
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert not list(tables.glob(".posenc-staging-*"))
    read_results(tables)  # one set: sequences agree with the evaluations
    assert set(pd.read_parquet(tables / "comparison.parquet")["eval_length"]) == {16, 24}  # the killed one's
    assert "24" in (tables / "report.md").read_text()


def _damage(path: Path, column: str, value) -> None:
    """``path``'s table with ``column`` dropped (``value`` None) or, as text, its first cell set to ``value``."""
    import pandas as pd

    table = pd.read_parquet(path)
    if value is None:
        table = table.drop(columns=column)
    else:
        table[column] = table[column].astype(str)
        table.loc[table.index[0], column] = value
    table.to_parquet(path, index=False)


@pytest.mark.parametrize("stem, column, value, says", [
    ("comparison", "run_ids", None, "is not a posenc comparison table of this version (no column run_ids)"),
    ("comparison", "eval_length", "sixteen", "column eval_length holds 'sixteen' (row 1), not a whole number"),
    ("extrapolation", "eval_length", "sixteen", "column eval_length holds 'sixteen' (row 1), not a whole number"),
    ("extrapolation", "exact_match", "high", "column exact_match holds 'high' (row 1), not a number"),
    ("sequences", "loss", "low", "column loss holds 'low' (row 1), not a number"),
    ("extrapolation", "learned", "yes", "column learned holds 'yes' (row 1), not true or false"),
])  # fmt: skip
@pytest.mark.parametrize("command", [
    ["report", "tables"],
    ["compare", "--runs", "run", "--lengths", "16", "--sequences", "4", "--out", "tables"],
    ["compare", "--extend", "--runs", "run", "--lengths", "16", "--sequences", "4", "--out", "tables"],
])  # fmt: skip
def test_a_damaged_or_foreign_table_is_one_line_naming_the_file_and_column(
    compared, stem, column, value, says, command
):
    if stem == "comparison" and command[1] == "--runs":
        pytest.skip("compare without --extend does not read the comparison: it writes a new one")
    _damage(compared / "tables" / f"{stem}.parquet", column, value)
    before = snapshot(compared)
    line = _one_error(runner.invoke(app, command))
    assert str(Path("tables") / f"{stem}.parquet") in line and says in line, line
    assert snapshot(compared) == before
