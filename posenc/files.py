"""Files written atomically (temporary file in the same folder, then rename), and the names of a run
directory's files. No torch: tables, figures and reports use this without loading a model.

A reader never sees a half-written checkpoint or table: an error or an interrupt leaves either the
old file or the new one.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import glob
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from posenc.errors import PosencError

CONFIG_FILE = "config.yaml"  # the resolved config, human-readable
OVERRIDES_FILE = "overrides.yaml"  # the command-line overrides the run was started with
CHECKPOINT_FILE = "checkpoint.pt"  # model weights + the resolved config they belong to
METRICS_FILE = "metrics.json"  # final in-distribution metrics of training
HISTORY_FILE = "history.csv"  # training curve
LOG_FILE = "train.log"
TRACKING_FILE = "tracking.json"  # posenc.running.tracking's: the tracked run's id, so that a resumed run logs into it
# A run trained on past mastery (train.stop_at_mastery=false): its training state at the first check that met the
# criterion, where the same run stopping at mastery ends (resume=<run>/mastery.pt with the flag true ends there)
MASTERY_FILE = "mastery.pt"
# The files `posenc train` writes into a run folder (train.log is Hydra's, appended to by every start).
RUN_FILES = (CONFIG_FILE, OVERRIDES_FILE, CHECKPOINT_FILE, METRICS_FILE, HISTORY_FILE, TRACKING_FILE, MASTERY_FILE)
TRAIN_LOCK = ".train.posenc-lock"  # held by the one `posenc train` writing the folder (fcntl.flock)
TEMP_MARK = "posenc-tmp"  # in the name of every temporary file of an atomic write: .<name>.posenc-tmp-XXXX.tmp


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    """The process's umask, read once when first needed (not at import): set and restored, as POSIX
    offers no plain getter."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _os_error(err: BaseException) -> OSError | None:
    """The OS error (a full disk, a quota, an I/O error) behind ``err``: itself, or what a writer such as
    ``torch.save`` raised it from (torch wraps a failed write in a RuntimeError); None for anything else."""
    seen = 0
    while err is not None and seen < 5:
        if isinstance(err, OSError):
            return err
        if not isinstance(err, RuntimeError):
            return None
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, then atomically rename it to ``path``.

    The temporary file is named ``.<name>.posenc-tmp-<pid>-XXXX.tmp``: one a killed writer left is removed by
    the next write of ``path`` (:func:`_remove_dead_writers`), and by the next training holding a run folder's
    lock (:func:`remove_stale_temporaries`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{TEMP_MARK}-{os.getpid()}-", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise PosencError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
        _remove_dead_writers(path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        cause = _os_error(err)
        if cause is None:
            raise

        kept = "; its previous version is kept" if path.exists() else ""
        raise PosencError(f"cannot write {path}: {cause.strerror or cause}{kept}") from err


def _remove_dead_writers(path: Path) -> None:
    """Remove the temporary files of writes of ``path`` whose writer is gone (a kill): their names hold the
    writer's process id. One of a live process, or of another machine's process id that is alive here, is
    left; a kill's leftover named by an earlier posenc is removed by :func:`remove_stale_temporaries`."""
    mark = f".{path.name}.{TEMP_MARK}-"
    for leftover in path.parent.glob(f"{glob.escape(mark)}*.tmp"):
        pid = leftover.name[len(mark) :].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's: alive
        return True
    except (ProcessLookupError, OverflowError, ValueError):  # none, or no process id at all
        return False
    return True


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the temporary files of atomic writes into ``folder`` that a killed writer left (posenc's
    ``.<name>.posenc-tmp-XXXX.tmp``, and earlier versions' ``.<run file>.XXXXXXXX.tmp``); the paths removed.
    Call with the folder's lock held, so that no live writer's file is among them."""
    found = list(Path(folder).glob(f".*.{TEMP_MARK}-*.tmp"))
    for name in RUN_FILES:
        found += Path(folder).glob(f".{name}.{'?' * 8}.tmp")  # tempfile's 8 random characters
    removed = []
    for path in found:
        if path.is_file() and not path.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


@contextlib.contextmanager
def train_lock(run_dir: Path) -> Iterator[None]:
    """Hold run folder ``run_dir``'s lock (created, with the folder, if needed) while the block writes it: the
    file ``.train.posenc-lock`` inside it, locked with ``fcntl.flock`` (released when the process ends, however
    it ends) and removed when the block ends. Another ``posenc train`` holding it is refused in one line, before
    anything is read or written; stale temporary files of a killed writer are removed once it is taken."""

    run_dir, path = Path(run_dir), Path(run_dir) / TRAIN_LOCK
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle = _locked_file(path)
    except OSError as err:
        raise PosencError(f"cannot write {run_dir}: {err.strerror or err}") from err
    if handle is None:
        raise PosencError(
            f"{run_dir} is being written by another posenc train right now; wait until it ends (the "
            "same command then resumes or skips the run), or train into another hydra.run.dir"
        )
    with handle:
        try:
            remove_stale_temporaries(run_dir)
            yield
        finally:
            with contextlib.suppress(OSError):
                path.unlink()  # while it is held: whoever opened this file before retries on the path's new one


def _locked_file(path: Path):
    """``path`` opened and locked (``fcntl.flock``, exclusive), or None where another process holds it. A lock
    taken on a file that its holder removed meanwhile (its training ended) is taken again on the path's new file,
    so that two processes never both hold "the" lock."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return open(path, "a")
    for _ in range(100):
        handle = open(path, "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        try:
            mine, now = os.fstat(handle.fileno()), os.stat(path)
            if (mine.st_ino, mine.st_dev) == (now.st_ino, now.st_dev):
                return handle
        except FileNotFoundError:
            pass
        handle.close()
    raise OSError(f"could not lock {path}")


def history_csv(rows: list[dict[str, Any]]) -> str:
    """``history.csv``'s text: the training curve's rows (a header from the first row's keys)."""
    out = io.StringIO()
    if rows:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out.getvalue()


def dump_yaml(data: dict[str, Any] | list[Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def special_file(path: Path) -> str | None:
    """What ``path`` is when it exists but is no regular file (``"a FIFO"``, ``"a folder"``, ...), else None.

    Opening a FIFO for reading blocks until a writer appears, so every run file and corpus file is checked
    with this before it is read (a symlink to a regular file is a regular file)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing or unreadable: reading it says so
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path, what: str) -> None:
    """Raise a one-line error when ``path`` exists but is no regular file (a FIFO would block a reader)."""

    kind = special_file(path)
    if kind is not None:
        raise PosencError(f"{path} is {kind}, not a file: {what} must be a regular file; move it away")


# metrics.json keys whose type posenc relies on: (accepted types, what the message says)
_METRIC_TYPES = {
    "exact_match": ((int, float, type(None)), "a number"), "token_accuracy": ((int, float, type(None)), "a number"),
    "loss": ((int, float, type(None)), "a number"), "steps_to_learn": ((int, type(None)), "an integer or null"),
    "learned": ((bool,), "true or false"), "checks": ((list, bool, int), "a list"), "run_id": ((str,), "a string"),
}  # fmt: skip


def read_metrics(run: Path) -> dict[str, Any]:
    """A finished run's ``metrics.json``, checked before it is trusted: missing, special (a FIFO), unreadable,
    empty, truncated, not a JSON object, or holding a mistyped field raises one line naming the file (never
    read as "not learned")."""

    path = Path(run) / METRICS_FILE
    if not os.path.lexists(path):
        raise PosencError(f"{run} is unfinished (no {METRICS_FILE}); finish training first")
    check_regular(path, "a run's metrics")
    damaged = f"damaged {path}"
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError:
        raise PosencError(
            f"{damaged}: not text; it records whether the run learned: restore it or train the run again"
        ) from None
    except OSError as err:
        raise PosencError(f"cannot read {path}: {err.strerror or err}") from None
    if not text.strip():
        raise PosencError(f"{damaged}: empty; it records whether the run learned: restore it or train the run again")
    try:
        metrics = json.loads(text)
    except ValueError as err:
        raise PosencError(
            f"{damaged}: not valid JSON (truncated? {str(err).split(':')[0]}); it records whether the "
            "run learned: restore it or train the run again"
        ) from None
    if not isinstance(metrics, dict):
        raise PosencError(f"{damaged}: a JSON {type(metrics).__name__}, not posenc's metrics (an object)")
    for key, (types, shown) in _METRIC_TYPES.items():
        value = metrics.get(key)
        if key in metrics and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            raise PosencError(f"{damaged}: {key} is {value!r}, not {shown} (a foreign or mistyped metrics file)")
    return metrics


def check_out_folder(out: str | os.PathLike, what: str = "--out", working_directory: bool = False) -> Path:
    """Refuse a result folder ``out`` that is no place for result files, in one line naming it and why; return
    it resolved (absolute, symlinks followed: results are written through a link, which stays a link).

    Refused: the working directory (where an empty ``--out ''`` ends up too; ``working_directory=True``
    allows it, for ``posenc report .`` inside a comparison's folder), the root of a git repository (a folder
    holding ``.git``), a run folder (holding ``checkpoint.pt``, or a run's ``config.yaml`` with its other
    files: a run killed before its first checkpoint) and a symlink to nothing. Only reads the file system.
    ``what`` begins the message: ``--out``, or e.g. ``cannot write results to``.
    """
    text = os.fspath(out)
    path = Path(os.path.expanduser(text or "."))
    shown = text or "''"
    if os.path.islink(path) and not os.path.exists(path):
        raise PosencError(
            f"{what} {shown}: it is a symlink to {os.readlink(path)}, which does not exist; create "
            "that folder or name another"
        )
    real = Path(os.path.realpath(path))
    try:
        here = Path(os.path.realpath(os.getcwd()))
    except OSError:  # the working directory was deleted: it cannot be `out`
        here = None
    if real == here and not working_directory:
        raise PosencError(
            f"{what} {shown}: it is the working directory ({real}), where an empty {what} ends up "
            f"too; name a result folder, e.g. {what} results/tables"
        )
    try:
        folder = real.is_dir()
    except OSError:  # a name too long, a loop of links: check_writable and the write say what is wrong
        return real
    if folder:
        if os.path.lexists(real / ".git"):
            raise PosencError(
                f"{what} {shown}: it is the root of a git repository (it holds .git), not a result "
                f"folder; name one inside it, e.g. {real / 'results' / 'tables'}"
            )
        if (real / CHECKPOINT_FILE).is_file():
            marker = CHECKPOINT_FILE
        elif (real / CONFIG_FILE).is_file() and any(
            os.path.lexists(real / name) for name in (OVERRIDES_FILE, LOG_FILE, METRICS_FILE, HISTORY_FILE, ".hydra")
        ):
            marker = CONFIG_FILE
        else:
            marker = None
        if marker is not None:
            raise PosencError(
                f"{what} {shown}: it is a run folder (it holds {marker}), which only training "
                "writes; name a result folder outside it"
            )
    return real
