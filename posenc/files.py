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


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, then atomically rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")



def dump_yaml(data: dict[str, Any] | list[Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def learned_from_metrics(metrics: dict[str, Any], exact_match_task: bool = True) -> bool:
    """Whether a run learned its task in distribution, from its ``metrics.json``: a mastery check on
    held-out sequences met the target (``steps_to_learn`` set) when checks ran; else what the run recorded
    (a task without an exact-match criterion, lm, counts as learned); a run trained before mastery checks
    existed, when its final exact match reached 0.99, the default target."""
    if not exact_match_task:
        return True
    if metrics.get("checks"):
        return metrics.get("steps_to_learn") is not None
    if "learned" in metrics:
        return bool(metrics["learned"])
    return float(metrics.get("exact_match") or 0.0) >= 0.99
