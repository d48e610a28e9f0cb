"""Result files are written all-or-nothing: after an error, a full disk, Ctrl-C or kill -9 at any moment
a folder holds its old set of posenc's files or its new set, never a mix, and every other file in it is
left as it was (posenc/analysis/folders.py; tests/test_result_writes.py checks the commands)."""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_results import fake_run, results_of

from posenc import files
from posenc.analysis.folders import discard, lock_path, recover, updating
from posenc.analysis.pipeline import compare_into, regenerate
from posenc.errors import PosencError


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(out: Path) -> list[str]:
    """Anything beside ``out`` but its lock file, and any staging folder inside it: staging or old sets."""
    beside = [p.name for p in out.parent.glob(f".{out.name}.*") if p != lock_path(out)]
    inside = [p.name for p in out.glob(".posenc-staging-*")] if out.is_dir() else []
    return sorted(beside + inside)


def test_a_new_folder_appears_whole_and_nothing_else_is_left(tmp_path):
    out = tmp_path / "report"
    with updating(out) as stage:
        (stage / "a.txt").write_text("a")
        assert not out.exists()  # nothing visible before the end
    assert snapshot(out) == {"a.txt": b"a"} and leftovers(out) == []
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask  # a folder's usual mode, not mkdtemp's 0700


def test_files_not_written_are_kept_and_written_ones_replaced(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "keep.md").write_text("mine")
    (out / "table.csv").write_text("old")
    with updating(out) as stage:
        files.atomic_write_text(stage / "table.csv", "new")
    assert snapshot(out) == {"keep.md": b"mine", "table.csv": b"new"} and leftovers(out) == []


@pytest.mark.parametrize(
    "fault", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device"), RuntimeError("bug")]
)
def test_a_fault_leaves_the_old_set_and_no_staging(tmp_path, fault):
    out = tmp_path / "report"
    out.mkdir()
    (out / "table.csv").write_text("old")
    expected = PosencError if isinstance(fault, OSError) else type(fault)
    with pytest.raises(expected):
        with updating(out) as stage:
            files.atomic_write_text(stage / "table.csv", "new")
            raise fault
    assert snapshot(out) == {"table.csv": b"old"} and leftovers(out) == []


def _sweep(lengths=(64, 128)):
    return results_of(
        *(fake_run(e, {n: [1.0, 0.0, 1.0] for n in lengths}, seed=s) for e in ("rope", "alibi") for s in (0, 1))
    )


def _count_writes(monkeypatch, action) -> int:
    calls = []
    real = files.atomic_write
    monkeypatch.setattr(files, "atomic_write", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    action()
    monkeypatch.setattr(files, "atomic_write", real)
    return len(calls)


@pytest.mark.integration  # seven whole compares per fault, figures included
@pytest.mark.parametrize("fault", ["interrupt", "full disk"])
def test_compare_stopped_at_any_write_leaves_the_old_set(tmp_path, monkeypatch, fault):
    """compare adding a length, stopped at each of its file writes in turn: the folder is the old set."""
    out = tmp_path / "report"
    first = _sweep((64,))
    compare_into(out, first, set(first.evaluations["run_id"]), None, "posenc compare")
    old = snapshot(out)
    more = _sweep((64, 128))
    ids = set(more.evaluations["run_id"])
    scratch = tmp_path / "elsewhere" / "scratch"
    n = _count_writes(monkeypatch, lambda: compare_into(scratch, more, ids, None, "posenc compare"))
    assert n > 10  # tables, figures, report: many files, so many moments to be stopped at
    real = files.atomic_write
    for k in sorted({0, 1, 2, n // 3, n // 2, n - 2, n - 1}):
        calls = []

        def failing(path, write, k=k, calls=calls):
            calls.append(path)
            if len(calls) > k:
                raise KeyboardInterrupt() if fault == "interrupt" else OSError(errno.ENOSPC, "No space left")
            real(path, write)

        monkeypatch.setattr(files, "atomic_write", failing)
        with pytest.raises(KeyboardInterrupt if fault == "interrupt" else PosencError):
            compare_into(out, more, ids, None, "posenc compare")
        assert snapshot(out) == old, f"stopped at write {k} of {n}"
        assert leftovers(out) == []
    monkeypatch.setattr(files, "atomic_write", real)
    compare_into(out, more, ids, None, "posenc compare")  # and then it goes through
    assert snapshot(out) != old and leftovers(out) == []


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_regenerate_stopped_leaves_the_old_set(tmp_path, monkeypatch):
    out = tmp_path / "report"
    results = _sweep()
    compare_into(out, results, set(results.evaluations["run_id"]), None, "posenc compare")
    old = snapshot(out)
    real = files.atomic_write
    calls = []

    def failing(path, write):
        calls.append(path)
        if len(calls) > 3:
            raise KeyboardInterrupt()
        real(path, write)

    monkeypatch.setattr(files, "atomic_write", failing)
    with pytest.raises(KeyboardInterrupt):
        regenerate(out, "posenc report")
    assert snapshot(out) == old and leftovers(out) == []


def test_a_file_where_the_folder_should_be_is_one_error(tmp_path):
    out = tmp_path / "report"
    out.write_text("not a folder")
    with pytest.raises(PosencError, match="is a file"):
        with updating(out):
            pass
    assert out.read_text() == "not a folder"


def test_recover_puts_back_an_old_set_left_aside_by_a_kill(tmp_path):
    """Upgrading from posenc versions that swapped whole folders: their fallback swap renamed the old set
    aside first; killed right then, the next writer finds no folder and puts the old set back first."""
    out = tmp_path / "report"
    aside = tmp_path / ".report.posenc-old-1234"
    aside.mkdir()
    (aside / "table.csv").write_text("old")
    (tmp_path / ".report.posenc-staging-99").mkdir()  # a killed writer's new set, not yet in place
    recover(out)
    assert snapshot(out) == {"table.csv": b"old"} and leftovers(out) == []


def _stat(path: Path) -> tuple:
    st = path.lstat()
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def test_only_the_files_written_are_replaced_in_place(tmp_path):
    """The folder is not copied or swapped: a file posenc did not write keeps its inode and mtime, a
    subfolder (a run) is left alone, and the folder itself is the same folder."""
    out = tmp_path / "results"
    (out / "runs" / "r").mkdir(parents=True)
    (out / "runs" / "r" / "train.log").write_text("step 1\n")
    (out / "notes.md").write_text("mine")
    (out / "table.csv").write_text("old")
    kept = {p: _stat(p) for p in (out / "notes.md", out / "runs" / "r" / "train.log")}
    folder = out.stat().st_ino
    with updating(out) as stage:
        assert stage.parent == out and list(stage.iterdir()) == []  # an empty staging folder, no copy
        files.atomic_write_text(stage / "table.csv", "new")
    assert {p: _stat(p) for p in kept} == kept and out.stat().st_ino == folder
    assert (out / "table.csv").read_text() == "new" and leftovers(out) == []


def test_discard_removes_only_matching_files_not_rewritten(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    for name in ("choices.csv", "choices.md", "choices-mine.txt", "table.csv"):
        (out / name).write_text("old")
    with updating(out) as stage:
        files.atomic_write_text(stage / "choices.md", "new")
        discard(stage, "choices.*")
    assert snapshot(out) == {"choices-mine.txt": b"old", "choices.md": b"new", "table.csv": b"old"}


def test_a_folder_in_the_way_stops_the_write_before_any_file_moves(tmp_path):
    out = tmp_path / "report"
    (out / "b.csv").mkdir(parents=True)  # where the new b.csv would go
    (out / "a.csv").write_text("old")
    with pytest.raises(PosencError, match="b.csv: a folder of that name is in the way"):
        with updating(out) as stage:
            files.atomic_write_text(stage / "a.csv", "new")
            files.atomic_write_text(stage / "b.csv", "new")
    assert snapshot(out) == {"a.csv": b"old"} and leftovers(out) == []


def test_recover_finishes_a_commit_stopped_half_way_and_drops_an_uncommitted_one(tmp_path):
    """A staging folder with its commit record is the new set: the files still in it are moved in (those
    already moved are not touched again); one without a record never became anything and is deleted."""
    out = tmp_path / "report"
    out.mkdir()
    for name in ("a.csv", "b.csv", "stale.md", "mine.txt"):
        (out / name).write_text("old")
    (out / "a.csv").write_text("new")  # moved before the kill
    committed = out / ".posenc-staging-1"
    committed.mkdir()
    (committed / "b.csv").write_text("new")
    (committed / ".posenc-commit.json").write_text('{"files": ["a.csv", "b.csv"], "remove": ["stale.md"]}')
    abandoned = out / ".posenc-staging-2"
    abandoned.mkdir()
    (abandoned / "mine.txt").write_text("never committed")
    recover(out)
    assert snapshot(out) == {"a.csv": b"new", "b.csv": b"new", "mine.txt": b"old"} and leftovers(out) == []


_WRITER = """
import os, sys, time
from pathlib import Path
import posenc.analysis.folders as folders
if sys.argv[2] == "no renameat2":
    folders._rename_noreplace = lambda a, b: False
real = os.replace
def slow(a, b):
    real(a, b)
    time.sleep(0.02)  # widen the windows between the commit's renames
folders.os.replace = slow
print("ready", flush=True)
with folders.updating(Path(sys.argv[1])) as stage:
    for i in range(20):
        (stage / f"f{i}.txt").write_text("new")
        time.sleep(0.005)
"""


@pytest.mark.integration
@pytest.mark.parametrize("case", ["existing folder", "new folder", "no renameat2"])
def test_kill_9_at_random_moments_leaves_one_whole_set(tmp_path, case):
    """A writer killed at moments spread over its writes and its commit: after what the next writer does
    first (recover), the folder holds the old set or the new one, and a file posenc did not write, a run's
    log beside them, is exactly as it was."""
    out = tmp_path / "report"
    old = {} if case != "existing folder" else {f"f{i}.txt": b"old" for i in range(20)}
    new = {f"f{i}.txt": b"new" for i in range(20)}
    seen = set()
    trials = 14
    for trial in range(trials):
        if out.exists():
            for name in new:
                (out / name).unlink(missing_ok=True)
        if case == "existing folder":
            out.mkdir(exist_ok=True)
            for name, data in old.items():
                (out / name).write_bytes(data)
            (out / "runs").mkdir(exist_ok=True)
            (out / "runs" / "train.log").write_text("step 1\n")
            mine = _stat(out / "runs" / "train.log")
        elif out.exists():
            import shutil

            shutil.rmtree(out)
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), case], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.6 * trial / (trials - 1))  # from the first write to past the last rename
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        recover(out)  # what the next writer does first
        now = {k: v for k, v in snapshot(out).items() if not k.startswith("runs")} if out.exists() else {}
        assert now in (old, new), f"trial {trial}: a mix of {sorted(set(now.values()))} ({len(now)} files)"
        seen.add("new" if now == new else "old")
        assert leftovers(out) == []
        if case == "existing folder":
            assert _stat(out / "runs" / "train.log") == mine
    assert seen == {"old", "new"}  # the kills did land both before and after the commit


def test_reading_a_table_finishes_a_publish_killed_half_way_first(tmp_path):
    """read_table (every command's first read of --out) finishes a committed publish before it reads, under
    the folder's lock (so the writers that left staging folders are gone: a live one holds it)."""
    import pandas as pd

    from posenc.analysis.tables import read_table, write_tables

    out = tmp_path / "tables"
    write_tables(pd.DataFrame({"run": ["old"]}), out, "training")
    committed = out / ".posenc-staging-1"
    write_tables(pd.DataFrame({"run": ["new"]}), committed, "training")
    (committed / ".posenc-commit.json").write_text(
        '{"files": ["training.csv", "training.md", "training.parquet"], "remove": []}'
    )
    (out / ".posenc-staging-2").mkdir()  # a writer killed before its commit record: its set never was
    assert list(read_table(out, "training")["run"]) == ["new"]
    assert leftovers(out) == [] and "new" in (out / "training.md").read_text()


def test_a_process_holding_the_lock_is_waited_for_before_a_half_published_folder_is_read(tmp_path):
    import threading

    from posenc.analysis.folders import settle

    out = tmp_path / "tables"
    out.mkdir()
    (out / "a.csv").write_text("old")
    stage = out / ".posenc-staging-1"
    stage.mkdir()
    (stage / "a.csv").write_text("new")
    (stage / ".posenc-commit.json").write_text('{"files": ["a.csv"], "remove": []}')
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock_path(out))], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        reader = threading.Thread(target=settle, args=(out,))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and (out / "a.csv").read_text() == "old"  # waits for the writer
        holder.kill()
        reader.join(30)
        assert not reader.is_alive() and (out / "a.csv").read_text() == "new" and leftovers(out) == []
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


_HOLDER = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""
