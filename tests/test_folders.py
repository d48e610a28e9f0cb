"""Result folders are replaced all-or-nothing: after an error, a full disk, Ctrl-C or kill -9 at any moment
a folder holds its old set of files or its new set, never a mix (posenc/folders.py)."""

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
from posenc.errors import PosencError
from posenc.folders import lock_path, recover, updating
from posenc.pipeline import compare_into, regenerate


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(out: Path) -> list[str]:
    """Anything beside ``out`` but its lock file: staging or old sets."""
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*") if p != lock_path(out))


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


@pytest.mark.parametrize("fault", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("bug")])
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
    return results_of(*(fake_run(e, {n: [1.0, 0.0, 1.0] for n in lengths}, seed=s)
                        for e in ("rope", "alibi") for s in (0, 1)))


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
    """The fallback swap (no atomic exchange) renames the old set aside first: killed right then, the next
    writer finds no folder and puts the old set back before anything else."""
    out = tmp_path / "report"
    aside = tmp_path / ".report.posenc-old-1234"
    aside.mkdir()
    (aside / "table.csv").write_text("old")
    (tmp_path / ".report.posenc-staging-99").mkdir()  # a killed writer's new set, not yet in place
    recover(out)
    assert snapshot(out) == {"table.csv": b"old"} and leftovers(out) == []


_WRITER = """
import os, sys, time
from pathlib import Path
import posenc.folders as folders
if sys.argv[2] == "fallback":
    folders._exchange = lambda a, b: False
    real = os.rename
    def slow(a, b):
        real(a, b)
        time.sleep(0.05)  # widen the window between the fallback's two renames
    folders.os.rename = slow
with folders.updating(Path(sys.argv[1])) as stage:
    for i in range(20):
        (stage / f"f{i}.txt").write_text("new")
        time.sleep(0.005)
"""


@pytest.mark.integration
@pytest.mark.parametrize("swap", ["exchange", "fallback"])
def test_kill_9_at_random_moments_leaves_one_whole_set(tmp_path, swap):
    out = tmp_path / "report"
    old = {f"f{i}.txt": b"old" for i in range(20)}
    new = {f"f{i}.txt": b"new" for i in range(20)}
    for trial in range(12):
        out.mkdir(exist_ok=True)
        for name, data in old.items():
            (out / name).write_bytes(data)
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), swap])
        time.sleep(0.25 + 0.03 * trial)  # interpreter start, then moments spread over the writes and swap
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        recover(out)  # what the next writer does first
        now = snapshot(out)
        assert now in (old, new), f"trial {trial}: a mix of {sorted(set(now.values()))}"
        assert leftovers(out) == []
        if now == new:
            for name in old:
                os.remove(out / name)
