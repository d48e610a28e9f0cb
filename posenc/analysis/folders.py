"""Result files written all-or-nothing, file by file: a command's new tables, figures and report replace
their old versions together or not at all, whatever stops the writer (an error, a full disk, Ctrl-C,
``kill -9``), and nothing else in the folder is touched.

A command that writes result files into a folder ``out`` (``compare``, ``report``, ``extrapolate``,
``runs --out``, ``kernels``) does it inside :func:`updating`:

1. refuse an ``out`` that is no result folder (:func:`posenc.files.check_out_folder`: the root of a git
   repository, a run folder, a symlink to nothing) and follow a symlink to the folder it names (the link
   stays a link);
2. take the folder's lock (a sibling file ``.<name>.posenc-lock``), so that two commands into one folder run
   one after the other and each merges into the other's result; then finish or clean up what a killed
   writer left (:func:`recover`);
3. hand the command an empty staging folder to write its new files into (``out/.posenc-staging-XXXX``; while
   ``out`` does not exist yet, ``.<name>.posenc-staging-XXXX`` beside it). :func:`discard` marks files of an
   earlier command for removal (``compare`` without ``--choose`` drops an earlier ``choices.*``);
4. commit. A new ``out`` is the staging folder renamed into place in one step (``renameat2`` with
   ``RENAME_NOREPLACE`` on Linux). Into an existing ``out``, a commit record is written into the staging
   folder first (atomically, naming every file to move and to remove); then each new file is renamed over
   its old version, the discarded ones are removed, and the staging folder is deleted. A writer stopped
   before the record leaves the old set (the next writer deletes its staging folder); stopped after it, the
   next writer into ``out`` (or :func:`recover`) finishes the renames from the record: the new set.

Nothing else in ``out`` is read, copied, moved or deleted: run folders (a training run writing under
``out/runs/`` at that moment), a user's notes and other commands' tables keep their inode, content and
mtime, and ``out`` itself stays the same folder (a shell inside it stays inside it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from posenc.errors import PosencError
from posenc.files import _umask, check_out_folder

_STAGING = "posenc-staging"  # out/.posenc-staging-XXXX, or .<name>.posenc-staging-XXXX beside a new `out`
_OLD = "posenc-old"  # .<name>.posenc-old-XXXX: an old set renamed aside by posenc versions that swapped folders
_RECORD = ".posenc-commit.json"  # in a staging folder: its files are committed, to be moved into `out`
_RESERVE = len(".." + _STAGING + "-") + 40  # a result folder's name leaves room for its staging names
_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100
_DISCARDS: dict[Path, list[str]] = {}  # staging folder -> glob patterns of files to remove from `out`
_PUBLISHED: dict[str, str] = {}  # result folder (real path) -> "recorded" (commit record written) or "published"
_HELD: set[str] = set()  # result folders (real paths) whose lock this process holds (inside `updating`)


def interrupted_message(out: Path) -> str:
    """What a command stopped by Ctrl-C says about result folder ``out``: whether this process published its
    new files there (all of them, or the commit record that the next posenc command into ``out`` finishes),
    or changed nothing there (the old files stay)."""
    state = _PUBLISHED.get(os.path.realpath(out))
    if state == "published":
        return (
            f"interrupted after the new files were published in {out} (all of them; only the summary printed here "
            "is missing)"
        )
    if state == "recorded":
        return (
            f"interrupted while publishing the new files in {out}: the next posenc command writing there "
            "puts the rest in place"
        )
    return f"interrupted; nothing in {out} was changed (its old files are as they were)"


def lock_path(out: Path) -> Path:
    """The lock file of result folder ``out``: beside it, so that creating ``out`` is under the lock too."""
    return out.parent / f".{out.name}.posenc-lock"


def _stages(out: Path) -> list[Path]:
    """Staging folders of ``out`` (beside it, then inside it), oldest first within each place."""
    found = sorted(out.parent.glob(f".{out.name}.{_STAGING}-*"), key=_mtime)
    if out.is_dir():
        found += sorted(out.glob(f".{_STAGING}-*"), key=_mtime)
    return [p for p in found if p.is_dir() and not p.is_symlink()]


def _mtime(path: Path) -> int:
    try:
        return path.lstat().st_mtime_ns
    except OSError:
        return 0


def recover(out: Path) -> None:
    """Finish the commit of a writer killed while moving its files into ``out`` (the new set), and delete
    staging folders of writers killed before committing (the old set stays). Also puts back an old set left
    aside by a posenc version that swapped whole folders.

    Call with the folder's lock held (:func:`updating` does)."""
    out = Path(os.path.abspath(out))
    old = sorted(out.parent.glob(f".{out.name}.{_OLD}-*"))
    if old and not out.exists():
        os.rename(old[-1], out)
        old = old[:-1]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    for stage in _stages(out):
        record = _read_record(stage)
        if record is None:
            shutil.rmtree(stage, ignore_errors=True)
        else:
            _move_in(stage, out, record)


def settle(out: Path) -> None:
    """Before ``out``'s tables are read: finish a publish that a writer killed between two renames left half
    done (its commit record names the rest), under the folder's lock, which also waits for a writer that is
    publishing right now. Nothing is locked or created where no committed staging folder waits (the usual
    case), nor inside :func:`updating` (its lock is held, and it recovered first)."""
    out = Path(os.path.realpath(out))
    if str(out) in _HELD or not any(_read_record(stage) is not None for stage in _stages(out)):
        return
    try:
        with _locked(out):
            recover(out)
    except OSError as err:
        raise PosencError(
            f"cannot finish publishing the tables in {out}: {err.strerror or err}; the next posenc "
            "command writing there tries again"
        ) from err


@contextmanager
def _locked(out: Path, handle=None) -> Iterator[None]:
    """Hold result folder ``out``'s lock (waiting for another command holding it) for the block; ``handle``:
    its lock file, already opened (else opened here); closed at the end."""
    with handle or open(lock_path(out), "a") as handle:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock
            pass
        _HELD.add(os.path.realpath(out))
        try:
            yield
        finally:
            _HELD.discard(os.path.realpath(out))


def discard(stage: Path, pattern: str) -> None:
    """Inside :func:`updating`: remove the files of ``out`` matching ``pattern`` (a glob relative to
    ``out``) when the new set is committed, unless the new set holds a file of that name."""
    _DISCARDS.setdefault(Path(stage), []).append(pattern)


def _staged(stage: Path) -> list[str]:
    """Every file (and symlink) under ``stage``, as names relative to it, the commit record's left out."""
    names = []
    for root, dirs, files in os.walk(stage):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            names.append(Path(os.path.relpath(os.path.join(root, name), stage)).as_posix())
    return sorted(n for n in names if not n.startswith(_RECORD))


def _read_record(stage: Path) -> dict | None:
    try:
        record = json.loads((stage / _RECORD).read_text())
        return {"files": [str(n) for n in record["files"]], "remove": [str(n) for n in record["remove"]]}
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no record (or none whole: it is written atomically): the staging folder was not committed


def _write_record(stage: Path, record: dict) -> None:
    tmp = stage / f"{_RECORD}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, stage / _RECORD)
    _fsync_dir(stage)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a file system without directory fsync
        pass
    finally:
        os.close(fd)


def _inside(out: Path, name: str) -> Path | None:
    """``out / name`` for a plain relative name; None for anything that would leave ``out``."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        return None
    return out / name


def _move_in(stage: Path, out: Path, record: dict) -> None:
    """Rename the record's files from ``stage`` into ``out`` and remove its discarded ones, then delete
    ``stage``. Idempotent: files already moved are skipped, so a killed commit is finished by running this
    again."""
    out.mkdir(parents=True, exist_ok=True)
    for name in record["files"]:
        source, target = stage / name, _inside(out, name)
        if target is None or not os.path.lexists(source):
            continue
        if target.parent != out:
            target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
    for name in record["remove"]:
        target = _inside(out, name)
        if target is not None:
            with suppress(FileNotFoundError):
                os.unlink(target)
    _fsync_dir(out)
    os.unlink(stage / _RECORD)
    shutil.rmtree(stage, ignore_errors=True)


def _rename_noreplace(source: Path, target: Path) -> bool:
    """Rename folder ``source`` to ``target`` unless ``target`` exists, in one step (Linux ``renameat2``);
    False where ``target`` exists or the call is not offered."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EEXIST, errno.ENOTEMPTY, errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False  # `target` appeared meanwhile, or a file system or kernel without the call
    raise OSError(err, os.strerror(err), str(target))


def _in_the_way(out: Path, names: list[str]) -> None:
    """Raise unless every staged file can be renamed into ``out``: no folder where a file goes, no file
    where a folder goes (checked before the commit record, so that a commit does not stop half-way)."""
    for name in names:
        target = _inside(out, name)
        if target is None:
            raise PosencError(f"cannot write {name!r} into {out}: not a name inside it")
        for parent in reversed(target.relative_to(out).parents[:-1]):
            if os.path.lexists(out / parent) and not (out / parent).is_dir():
                raise PosencError(f"cannot write tables to {out}: {out / parent} is a file, not a folder")
        if target.is_dir() and not target.is_symlink():
            raise PosencError(f"cannot write {target}: a folder of that name is in the way")


def _commit(stage: Path, out: Path, discards: list[str]) -> None:
    """Make the files written under ``stage`` ``out``'s, all or none (see the module docstring)."""
    if stage.parent != out:  # `out` did not exist when the writer began: it appears whole, in one rename
        if _rename_noreplace(stage, out):
            _PUBLISHED[os.path.realpath(out)] = "published"
            return
        out.mkdir(parents=True, exist_ok=True)  # it appeared meanwhile (or no renameat2): file by file
    names = _staged(stage)
    remove = sorted(
        {
            p.relative_to(out).as_posix()
            for pattern in discards
            for p in out.glob(pattern)
            if not p.is_dir() or p.is_symlink()
        }
        - set(names)
    )
    _in_the_way(out, names)
    record = {"files": names, "remove": remove}
    _write_record(stage, record)
    _PUBLISHED[os.path.realpath(out)] = "recorded"
    try:
        _move_in(stage, out, record)
    except KeyboardInterrupt:  # a few renames from done: finish them rather than leave the set half-moved
        _move_in(stage, out, record)
    except OSError as err:
        raise PosencError(
            f"cannot write tables to {out}: {err.strerror or err}; the rest of the new files "
            f"wait in {stage}, and the next posenc command writing there puts them in place"
        ) from err
    _PUBLISHED[os.path.realpath(out)] = "published"


def check_writable(what: str, location: str | Path, reserve: int = 0) -> None:
    """Raise a one-line :class:`PosencError` unless folder ``location`` exists or can be created: each name
    fits the file system, nothing in the way is a file, and its nearest existing folder takes a new entry
    (tried by creating and removing an empty folder there, which works for every user, root included).
    ``reserve``: bytes a name must leave free for the names derived from it (staging folders)."""
    path = Path(location).expanduser()
    if any(len(os.fsencode(part)) > 255 - reserve for part in path.parts):
        raise PosencError(f"cannot write to {what}={location}: a name in it is longer than {255 - reserve} bytes")
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
    """Refuse, before any work, an ``--out`` that is no result folder (:func:`check_out_folder`: the working
    directory, a git repository's root, a run folder, a symlink to nothing) or that :func:`updating` could not
    write."""
    real = check_out_folder(out, "--out")
    check_writable("--out", out, reserve=_RESERVE)
    _check_folder(real)


def _check_folder(out: Path) -> None:
    """``out`` is a folder this user may write into, or nothing yet."""
    if out.exists() and not out.is_dir():
        raise PosencError(f"cannot write tables to {out}: it is a file, not a folder")
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise PosencError(f"cannot write tables to {out}: Permission denied")


@contextmanager
def updating(out: Path) -> Iterator[Path]:
    """Lock result folder ``out`` and yield an empty staging folder to write the command's new files into;
    on a normal exit they replace their namesakes in ``out`` all together (see the module docstring), on any
    exception (or interrupt) before that the staging folder is deleted and ``out`` is untouched. Files of
    ``out`` the command did not write are never touched. OS errors become one :class:`PosencError` line."""
    out = check_out_folder(out, "cannot write results to", working_directory=True)  # absolute, links followed
    _PUBLISHED.pop(os.path.realpath(out), None)  # what this command publishes, not an earlier one's
    stage: Path | None = None
    try:
        _check_folder(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_path(out), "a")
    except OSError as err:
        raise PosencError(f"cannot write tables to {out}: {err.strerror or err}") from err
    with _locked(out, handle):
        try:
            recover(out)
            if out.is_dir():
                stage = Path(tempfile.mkdtemp(prefix=f".{_STAGING}-", dir=out))
            else:
                stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_STAGING}-", dir=out.parent))
                os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes 0700; a new result folder gets the usual mode
            yield stage
            _commit(stage, out, _DISCARDS.pop(stage, []))
            stage = None
        except OSError as err:
            raise PosencError(f"cannot write tables to {out}: {err.strerror or err}") from err
        except PosencError as err:  # a file of the new set could not be staged: name it where it belonged
            if stage is None or str(stage) not in str(err) or (stage / _RECORD).exists():
                raise
            raise PosencError(f"{str(err).replace(str(stage), str(out))}; nothing in {out} was changed") from err
        finally:
            if stage is not None:
                _DISCARDS.pop(stage, None)
                if not (stage / _RECORD).exists():  # committed, half moved: recover() finishes it
                    shutil.rmtree(stage, ignore_errors=True)


def moved(paths, stage: Path, out: Path):
    """``paths`` written under ``stage``, named where they are once committed into ``out``."""
    return [Path(out) / Path(p).relative_to(stage) for p in paths]
