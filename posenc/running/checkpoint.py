"""Resumable training state: RNG states, the checkpoint payload, and stop signals turned into a flag.

A checkpoint holds everything the training loop's future depends on (model, optimizer, scheduler, step,
every RNG state, the history so far), so a run resumed from any checkpoint continues bit-identically.
"""

from __future__ import annotations

import random
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc import files as run_files
from posenc.analysis.run_folder import config_difference  # noqa: F401  (here too: what resuming names)
from posenc.analysis.store import without_neutral
from posenc.errors import PosencError
from posenc.running import runs as run_dirs


class TrainingInterrupted(PosencError):
    """A stop signal arrived; a checkpoint was saved, and the process should exit with ``exit_code``."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def rng_states(data: torch.Generator) -> dict[str, Any]:
    """Every RNG state the loop can touch: torch (CPU and CUDA), numpy, python, and the task stream."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": random.getstate(),
        "data": data.get_state(),
    }


def set_rng_states(states: dict[str, Any], data: torch.Generator) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    name, keys, *rest = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    data.set_state(states["data"])


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run to resume: ``config`` without the run-neutral keys
    (:data:`posenc.analysis.store.RUN_NEUTRAL_KEYS`, the one list identity and Hydra's folder names use too)."""
    return without_neutral(config)


def _stops_at_mastery(config: dict[str, Any]) -> bool:
    train = config.get("train")
    return not isinstance(train, dict) or train.get("stop_at_mastery", True) is not False


def same_run_up_to_mastery(held: dict[str, Any], config: dict[str, Any], state: dict[str, Any]) -> bool:
    """Whether checkpoint ``state`` of ``held`` is also a checkpoint of ``config``, where the two configurations
    differ in ``train.stop_at_mastery`` (and in nothing else: the caller compares the rest). The flag only
    decides whether the loop ends at the first check that met the target; nothing the loop draws or updates
    depends on it. So up to that check the two are one run, and a checkpoint taken before it (``learned_at``
    None) or at it (``learned_at`` its step: the end of a run that stops, or a run's ``mastery.pt``) starts
    ``config`` exactly where the same configuration started afresh would be. Issue 39's stopping rule: a run
    that stopped at mastery continued over the rest of its schedule, and a run trained over its schedule
    stopped at its mastery snapshot, each the same run on both sides, paired by construction."""
    if _stops_at_mastery(held) == _stops_at_mastery(config):
        return False
    learned_at = state.get("learned_at")
    return learned_at is None or learned_at == state.get("step")


def _without_stop_rule(config: dict[str, Any]) -> dict[str, Any]:
    train = {k: v for k, v in config.get("train", {}).items() if k != "stop_at_mastery"}
    return {**config, "train": train}


def load_training_state(path: Path, config: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """The checkpoint at ``path``, checked to belong to ``config``; raises :class:`PosencError` if not.

    ``source``: ``resume=PATH``'s value when ``path`` is another folder's checkpoint (named, never advised
    to be deleted); None for the run folder's own."""
    elsewhere = "train this config in another hydra.run.dir"
    afresh = (
        f"resume={source} must name a whole checkpoint of this configuration (it is left as it is)"
        if source is not None
        else f"to start this run afresh, delete {path} (its weights are lost), or " + elsewhere
    )
    try:
        state = run_dirs.read_checkpoint(path)
    except PosencError as err:  # truncated or foreign: say how to go on
        raise PosencError(f"{err}; {afresh}") from err
    if not isinstance(state.get("config"), dict):
        raise PosencError(f"cannot resume from {path}: its config is not a mapping; {afresh}")
    if "optimizer" not in state:
        raise PosencError(f"cannot resume from {path}: it holds weights only, no training state")
    held = state["config"]
    if source is not None and same_run_up_to_mastery(held, config, state):
        held, config = _without_stop_rule(held), _without_stop_rule(config)
    diff = config_difference(comparable(held), comparable(config))
    if diff and source is not None:
        raise PosencError(
            f"resume={source}: {path} belongs to a different run: {diff}; name a checkpoint of this configuration"
        )
    if diff:
        raise PosencError(f"{path} belongs to a different run: {diff}; {elsewhere}")
    return state


class StopSignals:
    """Within the block, SIGINT and SIGTERM set ``received`` instead of killing the process.

    The loop checks ``received`` after each step, saves a checkpoint and stops. A second signal
    interrupts at once. Outside the main thread (where handlers cannot be set) this does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def save_training_state(run_dir: Path, payload: dict[str, Any], name: str = run_files.CHECKPOINT_FILE) -> None:
    """Write the checkpoint (``name``: the run's ``checkpoint.pt``, or its ``mastery.pt``) atomically: a kill at
    any moment leaves the previous one intact."""
    run_files.atomic_write(Path(run_dir) / name, lambda f: torch.save(payload, f))
