"""Files written atomically (temporary file in the same folder, then rename), and the names of a run
directory's files. No torch: tables, figures and reports use this without loading a model.

A reader never sees a half-written checkpoint or table: an error or an interrupt leaves either the
old file or the new one.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import yaml

CONFIG_FILE = "config.yaml"  # the resolved config, human-readable
OVERRIDES_FILE = "overrides.yaml"  # the command-line overrides the run was started with
CHECKPOINT_FILE = "checkpoint.pt"  # model weights + the resolved config they belong to
METRICS_FILE = "metrics.json"  # final in-distribution metrics of training
HISTORY_FILE = "history.csv"  # training curve
LOG_FILE = "train.log"


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
    """Call ``write`` on a temporary file beside ``path``, then atomically rename it to ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        from posenc.errors import PosencError

        raise PosencError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        cause = _os_error(err)
        if cause is None:
            raise
        from posenc.errors import PosencError

        kept = "; its previous version is kept" if path.exists() else ""
        raise PosencError(f"cannot write {path}: {cause.strerror or cause}{kept}") from err


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")



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
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path, what: str) -> None:
    """Raise a one-line error when ``path`` exists but is no regular file (a FIFO would block a reader)."""
    from posenc.errors import PosencError

    kind = special_file(path)
    if kind is not None:
        raise PosencError(f"{path} is {kind}, not a file: {what} must be a regular file; move it away")


# metrics.json keys whose type posenc relies on: (accepted types, what the message says)
_METRIC_TYPES = {
    "exact_match": ((int, float, type(None)), "a number"), "token_accuracy": ((int, float, type(None)), "a number"),
    "loss": ((int, float, type(None)), "a number"), "steps_to_learn": ((int, type(None)), "an integer or null"),
    "learned": ((bool,), "true or false"), "checks": ((list, bool, int), "a list"),
}  # fmt: skip


def read_metrics(run: Path) -> dict[str, Any]:
    """A finished run's ``metrics.json``, checked before it is trusted: missing, special (a FIFO), unreadable,
    empty, truncated, not a JSON object, or holding a mistyped field raises one line naming the file (never
    read as "not learned")."""
    from posenc.errors import PosencError

    path = Path(run) / METRICS_FILE
    if not os.path.lexists(path):
        raise PosencError(f"{run} is unfinished (no {METRICS_FILE}); finish training first")
    check_regular(path, "a run's metrics")
    damaged = f"damaged {path}"
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError:
        raise PosencError(f"{damaged}: not text; it records whether the run learned: restore it or train the run "
                          "again") from None
    except OSError as err:
        raise PosencError(f"cannot read {path}: {err.strerror or err}") from None
    if not text.strip():
        raise PosencError(f"{damaged}: empty; it records whether the run learned: restore it or train the run again")
    try:
        metrics = json.loads(text)
    except ValueError as err:
        raise PosencError(f"{damaged}: not valid JSON (truncated? {str(err).split(':')[0]}); it records whether the "
                          "run learned: restore it or train the run again") from None
    if not isinstance(metrics, dict):
        raise PosencError(f"{damaged}: a JSON {type(metrics).__name__}, not posenc's metrics (an object)")
    for key, (types, shown) in _METRIC_TYPES.items():
        value = metrics.get(key)
        if key in metrics and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            raise PosencError(f"{damaged}: {key} is {value!r}, not {shown} (a foreign or mistyped metrics file)")
    return metrics
