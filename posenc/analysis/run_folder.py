"""One run folder, read once: its configuration, its metrics, its identity and whether it learned (torch-free).

Every reader of a run's own files goes through :class:`RunFolder` (:mod:`posenc.extrapolate` to evaluate it,
:mod:`posenc.analysis.tables` to tabulate it, ``posenc compare`` to name it), so a run's identity is computed once and
"learned" is decided in one place, :meth:`RunFolder.learned`, from the rule its task has
(:mod:`posenc.task_facts`). The checkpoint (weights) is read by :func:`posenc.runs.load_run`, on the torch side.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from posenc import files as run_files
from posenc.errors import PosencError
from posenc.analysis.store import RunIdentity, run_identity
from posenc.analysis.tables import describe_run, read_table
from posenc.task_facts import has_mastery_criterion

DEFAULT_TRAIN_LENGTH = 64  # conf/task/*.yaml's length: what a config without one was trained at


@dataclass(frozen=True)
class RunFolder:
    """A run directory as read from its files (nothing is loaded into torch).

    Attributes:
        path: the folder.
        config: its ``config.yaml`` as a mapping; empty where missing or damaged (``config_problem`` says why).
        metrics: its ``metrics.json``; empty while unfinished, or where damaged (``metrics_problem`` says why).
        config_problem: why ``config.yaml`` could not be trusted (:func:`read_config`'s line); None if it was read.
        metrics_problem: why ``metrics.json`` could not be trusted (unfinished, damaged:
            :func:`posenc.files.read_metrics`'s line); None if it was read.
    """

    path: Path
    config: dict[str, Any] = field(repr=False)
    metrics: dict[str, Any] = field(repr=False)
    config_problem: str | None = None
    metrics_problem: str | None = None

    @classmethod
    def read(cls, path: Path) -> RunFolder:
        """Read ``path``'s config and metrics once; never raises (a damaged file reads as empty and its
        problem is kept, so a caller that must refuse it says why without reading it again)."""
        config, config_problem = _read_or_why(read_config, path)
        metrics, metrics_problem = _read_or_why(run_files.read_metrics, path)
        return cls(Path(path), config, metrics, config_problem, metrics_problem)

    @functools.cached_property
    def identity(self) -> RunIdentity | None:
        """The run's identity (:func:`posenc.analysis.store.run_identity`), computed once; None without a config."""
        return run_identity(self.config) if self.config else None

    @property
    def run_id(self) -> str | None:
        return None if self.identity is None else self.identity.run_id

    @property
    def task(self) -> str | None:
        """The task's name (``task.name``), None where the config does not say."""
        task = self.config.get("task")
        return task.get("name") if isinstance(task, dict) else None

    @property
    def train_length(self) -> int:
        """``task.length``; :data:`DEFAULT_TRAIN_LENGTH` where the config does not say."""
        try:
            return int(self.config["task"]["length"])
        except (ValueError, KeyError, TypeError):
            return DEFAULT_TRAIN_LENGTH

    @property
    def finished(self) -> bool:
        """Whether training wrote its (readable) ``metrics.json``."""
        return bool(self.metrics)

    @property
    def learned(self) -> bool:
        """Whether the run learned its task in distribution (:func:`learned_from_metrics` under its task's rule)."""
        return learned_from_metrics(self.metrics, has_mastery_criterion(self.task))


def _read_or_why(reader, path: Path) -> tuple[dict[str, Any], str | None]:
    """``reader(path)`` and None, or an empty mapping and the one line it raised."""
    try:
        return reader(path), None
    except PosencError as err:
        return {}, str(err)


def learned_from_metrics(metrics: dict[str, Any], exact_match_task: bool = True) -> bool:
    """Whether a run learned its task in distribution, from its ``metrics.json``: a mastery check on
    held-out sequences met the target (``steps_to_learn`` set) when checks ran; else what the run recorded
    (a task without an exact-match criterion, lm: whether it converged, see
    :func:`posenc.task_facts.converged`; runs recorded before that rule count as learned); a run trained
    before mastery checks existed, when its final exact match reached 0.99, the default target."""
    if not exact_match_task:
        return bool(metrics.get("learned", True))
    if metrics.get("checks"):
        return metrics.get("steps_to_learn") is not None
    if "learned" in metrics:
        return bool(metrics["learned"])
    return float(metrics.get("exact_match") or 0.0) >= 0.99


def run_config(run: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as a mapping; empty if unreadable (:func:`read_config` says why)."""
    try:
        return read_config(run)
    except PosencError:
        return {}


def read_config(run: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as a mapping, checked before it is trusted (it gives the run its identity):
    missing, special (a FIFO), unreadable, not YAML or not a mapping raises one line naming the file."""
    path = Path(run) / run_files.CONFIG_FILE
    if not os.path.lexists(path):
        raise PosencError(f"{run} has no {run_files.CONFIG_FILE} (it names the run's configuration); not a posenc "
                          "run folder, or a damaged one")
    run_files.check_regular(path, "a run's config")
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as err:
        raise PosencError(f"cannot read {path}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise PosencError(f"damaged {path}: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(config, dict) or not config:
        raise PosencError(f"damaged {path}: {'empty' if not config else 'not a mapping'}; it names the run's "
                          "configuration: restore it or train the run again")
    return config


TRAINING_COLUMNS = [
    "run", "encoder", "task", "train_length", "seed", "learned", "steps_to_learn", "steps", "budget",
    "train_seconds", "exact_match", "token_accuracy", "loss", "n_sequences", "device", "heldout_loss_fall",
]  # fmt: skip
# heldout_loss_fall: lm's convergence record, the held-out loss's relative fall over the last quarter of the
# budget (posenc.task_facts.loss_fall; learned = converged = under 2%); empty for other tasks.


def training_table(runs: list[Path], notes: list[str] | None = None) -> pd.DataFrame:
    """One row per run: its final in-distribution metrics from ``metrics.json`` (NaN where missing). A damaged,
    special or mistyped ``metrics.json`` (not an unfinished run's missing one) leaves the row empty and adds a
    line naming it to ``notes`` when given."""
    rows = []
    for run in runs:
        try:
            metrics = run_files.read_metrics(run)
        except PosencError as err:
            metrics = {}
            if notes is not None and os.path.lexists(run / run_files.METRICS_FILE):
                notes.append(str(err))
        if metrics:
            metrics["learned"] = learned_from_metrics(metrics, has_mastery_criterion(metrics.get("task")))
        rows.append({**{c: None for c in TRAINING_COLUMNS}, **metrics, "run": describe_run(run)})
    table = pd.DataFrame(rows, columns=TRAINING_COLUMNS)
    # Counts stay integers when an unfinished run leaves them empty (not 32.000 and 0.000).
    for column in ("train_length", "seed", "steps_to_learn", "steps", "budget", "n_sequences"):
        table[column] = pd.to_numeric(table[column], errors="coerce").round().astype("Int64")
    return table


def extend_training_table(out_dir: Path, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` after the rows of ``out_dir``'s training table for other runs (``posenc runs --extend``):
    runs trained elsewhere keep their rows; a run in both takes its new row. Sorted by run."""
    earlier = read_table(out_dir, "training")
    if earlier is None:
        return table
    kept = earlier[~earlier["run"].isin(table["run"])]
    if kept.empty:
        return table
    merged = pd.concat([kept.astype(table.dtypes.to_dict(), errors="ignore"), table], ignore_index=True)
    return merged.sort_values("run", kind="stable").reset_index(drop=True)
