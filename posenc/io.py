"""Files of a run directory, written atomically (temporary file in the same folder, then rename).

A reader never sees a half-written checkpoint or table: an error or an interrupt leaves either the
old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
import yaml

from posenc.config import RunConfig, run_config_from_dict
from posenc.errors import PosencError

CONFIG_FILE = "config.yaml"  # the resolved config, human-readable
OVERRIDES_FILE = "overrides.yaml"  # the command-line overrides the run was started with
CHECKPOINT_FILE = "checkpoint.pt"  # model weights + the resolved config they belong to
METRICS_FILE = "metrics.json"  # final in-distribution metrics of training
HISTORY_FILE = "history.csv"  # training curve
LOG_FILE = "train.log"

_UMASK = os.umask(0)
os.umask(_UMASK)


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
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def is_run_dir(path: Path) -> bool:
    return (path / CHECKPOINT_FILE).is_file()


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories named in ``paths``, or found below them (e.g. a multirun sweep folder), sorted."""
    runs: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise PosencError(f"run directory not found: {path}")
        if not path.is_dir():
            raise PosencError(f"not a directory: {path}")
        if is_run_dir(path):
            runs.add(path)
        else:
            runs.update(p.parent for p in path.rglob(CHECKPOINT_FILE))
    if not runs:
        raise PosencError(
            f"no trained runs (folders with {CHECKPOINT_FILE}) under: {', '.join(map(str, paths))}"
        )
    return sorted(runs)


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint payload at ``path`` (holding a ``config``).

    An unreadable, truncated or foreign file raises :class:`PosencError`.
    """
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
        payload["config"]
    except Exception as err:  # any truncated or foreign file: report it, do not crash
        reason = f"not a posenc checkpoint ({type(err).__name__})"
        raise PosencError(f"cannot read checkpoint {path}: {reason}") from err
    return payload


def load_run(run_dir: Path, device: torch.device | str = "cpu"):
    """``(RunConfig, task, model)`` of a trained run, the model in eval mode on ``device``."""
    path = Path(run_dir) / CHECKPOINT_FILE
    payload = read_checkpoint(path, device)
    cfg: RunConfig = run_config_from_dict(payload["config"])
    task, _, model = cfg.build()
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, KeyError) as err:
        raise PosencError(f"checkpoint {path} does not match its config: {str(err).splitlines()[0]}") from err
    return cfg, task, model.to(device).eval()


def dump_yaml(data: dict[str, Any] | list[Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False)
