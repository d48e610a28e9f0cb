"""Result folders updated all-or-nothing: a reader sees a folder's old set of files or its new set, never
a mix, whatever stops the writer (an error, a full disk, Ctrl-C, ``kill -9``).

A command that writes a result folder ``out`` (``compare``, ``report``, ``extrapolate``, ``runs --out``,
``kernels``) does it inside :func:`updating`:

1. take the folder's lock (a sibling file ``.<name>.posenc-lock``: a lock inside the folder would be swapped
   away with it), so that two commands into one folder run one after the other and each merges into the
   other's result;
2. copy the folder into a staging folder beside it and write the new files there (copies, not hard
   links: a writer editing a hard-linked file in place would edit the old set too; result folders are
   megabytes, so the copy costs little);
3. swap the staging folder and ``out`` in one atomic ``renameat2(RENAME_EXCHANGE)`` (Linux), then delete
   the old set. Where the exchange is not offered, ``out`` is renamed aside and the new set renamed into
   place; a kill between the two renames leaves no ``out`` but its old set beside it, which the next
   command into ``out`` (or :func:`recover`) puts back before anything else.

Leftover staging folders of killed writers are deleted by the next writer, under the lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from posenc.errors import PosencError
from posenc.files import _umask

_STAGING = "posenc-staging"  # .<name>.posenc-staging-XXXX: a new set being written
_OLD = "posenc-old"  # .<name>.posenc-old-XXXX: an old set renamed aside (the fallback swap)
_RESERVE = len(".." + _STAGING + "-") + 40  # a result folder's name leaves room for its staging names
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def lock_path(out: Path) -> Path:
    """The lock file of result folder ``out``: beside it, so that it survives the folder's swap."""
    return out.parent / f".{out.name}.posenc-lock"


def _siblings(out: Path, kind: str) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.{kind}-*"))


def recover(out: Path) -> None:
    """Put back an old set left aside by a writer killed mid-swap, and delete staging leftovers.

    Call with the folder's lock held (:func:`updating` does)."""
    old = _siblings(out, _OLD)
    if old and not out.exists():
        os.rename(old[-1], out)
        old = old[:-1]
    for path in old + _siblings(out, _STAGING):
        shutil.rmtree(path, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the directories ``a`` and ``b`` (Linux ``renameat2``); False where not offered."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # file system or kernel without the exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(stage: Path, out: Path) -> None:
    """Make ``stage`` the folder ``out`` in one step and delete ``out``'s old set."""
    if not out.exists():
        os.rename(stage, out)
        return
    if _exchange(stage, out):
        shutil.rmtree(stage, ignore_errors=True)  # `stage` now holds the old set
        return
    aside = out.parent / f".{out.name}.{_OLD}-{uuid.uuid4().hex}"
    os.rename(out, aside)  # rename(2) does not replace a non-empty folder: `out` has to go first
    os.rename(stage, out)  # a kill between the two leaves `aside` for recover() to put back
    shutil.rmtree(aside, ignore_errors=True)


def check_writable(what: str, location: str | Path, reserve: int = 0) -> None:
    """Raise a one-line :class:`PosencError` unless folder ``location`` exists or can be created: each name
    fits the file system, nothing in the way is a file, and its nearest existing folder takes a new entry
    (tried by creating and removing an empty folder there, which works for every user, root included).
    ``reserve``: bytes a name must leave free for the names derived from it (staging folders)."""
    path = Path(location).expanduser()
    if any(len(os.fsencode(part)) > 255 - reserve for part in path.parts):
        raise PosencError(f"cannot write to {what}={location}: a name in it is longer than {255 - reserve} "
                          "bytes")
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise PosencError(f"cannot write to {what}={location}: {ancestor} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".posenc-write-check-", dir=ancestor))
    except OSError as err:
        raise PosencError(f"cannot write to {what}={location}: {err.strerror or err}") from None


def check_destination(out: Path) -> None:
    """Refuse, before any work, a result folder :func:`updating` could not write."""
    check_writable("--out", out, reserve=_RESERVE)
    _check_folder(Path(out))


def _check_folder(out: Path) -> None:
    """``out`` is a folder this user may change, or nothing yet (a swap would bypass a folder's mode)."""
    if out.exists() and not out.is_dir():
        raise PosencError(f"cannot write tables to {out}: it is a file, not a folder")
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise PosencError(f"cannot write tables to {out}: Permission denied")


@contextmanager
def updating(out: Path) -> Iterator[Path]:
    """Lock result folder ``out`` and yield a staging copy of it to write into; on a normal exit the
    staging folder becomes ``out`` atomically, on any exception (or interrupt) it is deleted and ``out`` is
    untouched. OS errors become one :class:`PosencError` line."""
    out = Path(os.path.abspath(out))
    stage: Path | None = None
    try:
        _check_folder(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_path(out), "a")
    except OSError as err:
        raise PosencError(f"cannot write tables to {out}: {err.strerror or err}") from err
    with handle:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock
            pass
        try:
            recover(out)
            stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_STAGING}-", dir=out.parent))
            os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes 0700; a new result folder gets the usual mode
            if out.is_dir():
                os.rmdir(stage)
                shutil.copytree(out, stage, symlinks=True)
            yield stage
            publish(stage, out)
            stage = None
        except OSError as err:
            raise PosencError(f"cannot write tables to {out}: {err.strerror or err}") from err
        finally:
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)


def moved(paths, stage: Path, out: Path):
    """``paths`` written under ``stage``, named where they are once published under ``out``."""
    return [Path(out) / Path(p).relative_to(stage) for p in paths]
