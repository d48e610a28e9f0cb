"""Run directories: finding them, reading their checkpoints, loading a trained model (needs torch).

Writing files atomically and the names of a run's files live in :mod:`posenc.files` (no torch).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from posenc.config import RunConfig, run_config_from_dict
from posenc.errors import PosencError
from posenc.files import CHECKPOINT_FILE, CONFIG_FILE, METRICS_FILE, check_regular


def find_runs(paths: list[Path], unreadable: list[str] | None = None, weightless: bool = False) -> list[Path]:
    """Run directories named in ``paths`` and every one below them, sorted: a sweep folder's runs, and the
    runs with overrides that `posenc train` nests inside the default run's folder
    (``runs/copy/rope/seed0/train.steps=100/``). Symlinked folders below ``paths`` are not followed (name
    them in ``paths``).

    A folder that cannot be listed (no permission) may hold runs: it is never passed over in silence. Each
    is a line in ``unreadable`` when given (the command reports them as skipped), else an error.

    ``weightless``: also finished runs whose checkpoint was removed after they were evaluated (a folder with
    ``metrics.json`` and ``config.yaml``): ``compare --extend --choose`` weighs them as candidates, and a chosen
    one is aggregated from OUT's tables (runs trained on a GPU and evaluated there, brought back without weights)."""
    runs: set[Path] = set()
    problems: list[str] = []
    for path in paths:
        if not path.exists():
            raise PosencError(f"run directory not found: {path}")
        if not path.is_dir():
            raise PosencError(f"not a directory: {path}")

        def report(err: OSError) -> None:
            problems.append(f"cannot read folder {err.filename}: {err.strerror or err}; any runs in it are left "
                            "out (make it readable to include them)")

        for root, _, names in os.walk(path, onerror=report):
            if CHECKPOINT_FILE in names or (weightless and {METRICS_FILE, CONFIG_FILE} <= set(names)):
                runs.add(Path(root))
    if problems and unreadable is None:
        raise PosencError(problems[0])
    if unreadable is not None:
        unreadable.extend(problems)
    if not runs:
        where = ", ".join(map(str, paths))
        raise PosencError(problems[0] if problems else f"no trained runs (folders with {CHECKPOINT_FILE}) under: {where}")
    return sorted(runs)


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint payload at ``path`` (holding a ``config``).

    An unreadable, truncated or foreign file raises :class:`PosencError`.
    """
    check_regular(path, "a checkpoint")  # a FIFO would block torch.load forever
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
        payload["config"]
    except Exception as err:  # any truncated or foreign file: report it, do not crash
        reason = f"not a posenc checkpoint ({type(err).__name__})"
        raise PosencError(f"cannot read checkpoint {path}: {reason}") from err
    if not isinstance(payload, dict) or not isinstance(payload["config"], dict):
        raise PosencError(f"cannot read checkpoint {path}: its config is not a mapping (not a posenc checkpoint)")
    return payload


def load_run(run_dir: Path, device: torch.device | str = "cpu"):
    """``(RunConfig, task, model)`` of a trained run, the model in eval mode on ``device``."""
    path = Path(run_dir) / CHECKPOINT_FILE
    payload = read_checkpoint(path, device)
    try:
        cfg: RunConfig = run_config_from_dict(payload["config"])
    except PosencError as err:
        raise PosencError(f"cannot read checkpoint {path}: its config is invalid ({err})") from err
    task, _, model = cfg.build()
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, KeyError) as err:
        raise PosencError(f"checkpoint {path} does not match its config: {str(err).splitlines()[0]}") from err
    return cfg, task, model.to(device).eval()

