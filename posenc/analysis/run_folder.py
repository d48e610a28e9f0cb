"""One run folder, read once: its configuration, its metrics, its identity and whether it learned (torch-free).

Every reader of a run's own files goes through :class:`RunFolder` (:mod:`posenc.running.extrapolate` to evaluate it,
:mod:`posenc.analysis.tables` to tabulate it, ``posenc compare`` to name it), so a run's identity is computed once and
"learned" is decided in one place, :meth:`RunFolder.learned`, from the rule its task has
(:mod:`posenc.task_facts`). The checkpoint (weights) is read by :func:`posenc.running.runs.load_run`, on the torch side.
"""

from __future__ import annotations

import collections
import functools
import io
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from posenc import files as run_files
from posenc.analysis.store import RunIdentity, run_identity, without_neutral
from posenc.analysis.tables import describe_run, read_table
from posenc.errors import PosencError
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
        problem is kept, so a caller that must refuse it says why without reading it again). Files of different
        runs in one folder (:func:`disagreement`: ``config.yaml``, ``metrics.json``, ``checkpoint.pt``) read as
        unfinished too, the problem naming two of them."""
        config, config_problem = _read_or_why(read_config, path)
        metrics, metrics_problem = _read_or_why(run_files.read_metrics, path)
        checkpoint = Path(path) / run_files.CHECKPOINT_FILE
        held = peek_checkpoint(checkpoint) if checkpoint.is_file() else None
        if why := disagreement(Path(path), config, metrics, held):
            metrics, metrics_problem = {}, why
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


def config_difference(
    old: dict[str, Any], new: dict[str, Any], prefix: str = "", names: tuple[str, str] = ("there", "now")
) -> str | None:
    """The first key (dotted) whose value differs between two configs, or None: ``"a.b (1 there, 2 now)"``
    (``names``: what the two values are called)."""
    for key in sorted(set(old) | set(new), key=lambda k: (k != "name", k)):  # a changed name says most
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = config_difference(a, b, f"{prefix}{key}.", names)
            if found:
                return found
        elif a != b:
            return f"{prefix}{key} ({a!r} {names[0]}, {b!r} {names[1]})"
    return None


# metrics.json's own record of its run, for files written before metrics carried the run id: (key, config path)
_METRICS_FACTS = (
    ("encoder", ("encoder", "name")),
    ("task", ("task", "name")),
    ("train_length", ("task", "length")),
    ("seed", ("seed",)),
    ("budget", ("train", "steps")),
)


def metrics_disagreement(config: dict[str, Any], metrics: dict[str, Any], source: str = "config.yaml") -> str | None:
    """Why ``metrics`` (a ``metrics.json``) is not of the run ``config`` (a ``config.yaml``) describes, or None:
    the run id it records (:func:`posenc.analysis.store.run_identity`, so run-neutral keys never count), or, in
    metrics written before they recorded one, its encoder, task, training length, seed or budget. ``source``:
    the file ``config`` was read from, as the line names it."""
    if "run_id" in metrics:
        mine = run_identity(config).run_id
        return None if metrics["run_id"] == mine else f"run {metrics['run_id']} in metrics.json, run {mine} in {source}"
    for key, where in _METRICS_FACTS:
        value: Any = config
        for part in where:
            value = value.get(part) if isinstance(value, dict) else None
        if key in metrics and value is not None and metrics[key] != value:
            return f"{key} {metrics[key]!r} in metrics.json, {'.'.join(where)} {value!r} in {source}"
    return None


def mixed_runs(run: Path, stray: str, kept: str, why: str) -> str:
    """The one line naming two files of run folder ``run`` that belong to different runs."""
    return (
        f"{run}: {stray} and {kept} are of different runs ({why}); a run folder holds one run's files: move "
        "the other run's away, or train the run again into an empty folder"
    )


def disagreement(
    run: Path, config: dict[str, Any], metrics: dict[str, Any], checkpoint: dict[str, Any] | None
) -> str | None:
    """Why the files of run folder ``run`` are not one run's, in one line naming two of them; None where they
    agree: ``config`` (its ``config.yaml``), ``metrics`` (its ``metrics.json``: the run id it records, and the
    step training ended at) and ``checkpoint`` (its payload: its config and step), each as far as it is present
    (empty or None where missing or damaged: whoever reads a damaged file names it). Run-neutral keys never
    count (:func:`posenc.analysis.store.without_neutral`)."""
    if config and metrics and (why := metrics_disagreement(config, metrics)):
        return mixed_runs(run, run_files.METRICS_FILE, run_files.CONFIG_FILE, why)
    held = checkpoint.get("config") if isinstance(checkpoint, dict) else None
    if not isinstance(held, dict):
        return None
    if config and (
        diff := config_difference(
            without_neutral(config), without_neutral(held), names=("in config.yaml", "in checkpoint.pt")
        )
    ):
        return mixed_runs(run, run_files.CHECKPOINT_FILE, run_files.CONFIG_FILE, diff)
    if metrics and (why := metrics_disagreement(held, metrics, source=run_files.CHECKPOINT_FILE)):
        return mixed_runs(run, run_files.METRICS_FILE, run_files.CHECKPOINT_FILE, why)
    step, steps = checkpoint.get("step"), metrics.get("steps")
    if isinstance(step, int) and isinstance(steps, int) and step != steps:
        return (
            f"{run}: metrics.json and checkpoint.pt are not of one moment of training (it ended at step {steps} "
            f"in metrics.json, checkpoint.pt is at step {step}); move the stray file away, or train the run "
            "again into an empty folder"
        )
    return None


class _Stub:
    """Whatever a checkpoint's pickle builds that is not plain data (tensors, storages): read as nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _PlainData(pickle.Unpickler):
    """Unpickles plain data only (dicts, lists, tuples, numbers, strings); every class or function the pickle
    names is :class:`_Stub`, every tensor storage None: nothing is imported and no code runs."""

    _PLAIN = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("builtins", "slice"): slice,
    }

    def find_class(self, module: str, name: str) -> Any:
        return self._PLAIN.get((module, name), _Stub)

    def persistent_load(self, pid: Any) -> None:
        return None


def peek_checkpoint(path: Path) -> dict[str, Any] | None:
    """``checkpoint.pt``'s payload with its tensors left out (its ``config``, ``step``, ``history``), read
    without torch from the archive's pickle alone (fast, whatever the weights' size); None where the file is
    no readable posenc checkpoint (loading its weights says why)."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if name is None:
                return None
            payload = _PlainData(io.BytesIO(archive.read(name))).load()
    except Exception:  # not a zip, truncated, a pickle of something else: not for this check to name
        return None
    return payload if isinstance(payload, dict) else None


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
        raise PosencError(
            f"{run} has no {run_files.CONFIG_FILE} (it names the run's configuration); not a posenc "
            "run folder, or a damaged one"
        )
    run_files.check_regular(path, "a run's config")
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as err:
        raise PosencError(f"cannot read {path}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise PosencError(f"damaged {path}: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(config, dict) or not config:
        raise PosencError(
            f"damaged {path}: {'empty' if not config else 'not a mapping'}; it names the run's "
            "configuration: restore it or train the run again"
        )
    return config


TRAINING_COLUMNS = [
    "run", "encoder", "task", "train_length", "seed", "learned", "steps_to_learn", "steps", "budget",
    "train_seconds", "exact_match", "token_accuracy", "loss", "n_sequences", "device", "heldout_loss_fall",
]  # fmt: skip
# heldout_loss_fall: lm's convergence record, the held-out loss's relative fall over the last quarter of the
# budget (posenc.task_facts.loss_fall; learned = converged = under 2%); empty for other tasks.


def training_table(runs: list[Path], notes: list[str] | None = None) -> pd.DataFrame:
    """One row per run: its final in-distribution metrics from ``metrics.json`` (NaN where missing). A damaged,
    special or mistyped ``metrics.json`` (not an unfinished run's missing one), or one in a folder whose files
    are of different runs (:func:`disagreement`), leaves the row empty and adds a line naming it to ``notes``
    when given."""
    rows = []
    for run in runs:
        try:
            metrics = run_files.read_metrics(run)
        except PosencError as err:
            metrics = {}
            if notes is not None and os.path.lexists(run / run_files.METRICS_FILE):
                notes.append(str(err))
        checkpoint = run / run_files.CHECKPOINT_FILE
        if metrics and (
            why := disagreement(
                run, run_config(run), metrics, peek_checkpoint(checkpoint) if checkpoint.is_file() else None
            )
        ):
            metrics = {}  # files of two runs: neither one's numbers
            if notes is not None:
                notes.append(why)
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
    shared = {column: dtype for column, dtype in table.dtypes.items() if column in kept.columns}  # an older
    merged = pd.concat([kept.astype(shared, errors="ignore"), table], ignore_index=True)  # table lacks new ones
    return merged.sort_values("run", kind="stable").reset_index(drop=True)
