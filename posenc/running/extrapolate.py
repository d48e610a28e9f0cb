"""Length extrapolation: evaluate trained runs at exact lengths (rows, per-sequence scores, positions).

This module evaluates; :mod:`posenc.analysis.store` reads, merges and writes what it returns.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch

from posenc import files as run_files
from posenc.analysis.mastery import held_at_training_length
from posenc.analysis.run_folder import RunFolder
from posenc.analysis.store import COLUMNS, Results
from posenc.analysis.tables import describe_run
from posenc.encoders import ENCODERS
from posenc.errors import PosencError, PositionRangeError
from posenc.nn.subnormals import flush_subnormals
from posenc.progress import make_progress
from posenc.running import runs as run_dirs
from posenc.running.arguments import DEFAULT_MAX_HOURS, NO_SCALING
from posenc.running.evaluate import default_sequences, evaluate_detailed, resolve_device
from posenc.running.evaluation_budget import check_memory, check_time

if TYPE_CHECKING:
    from posenc.functional.rope_scaling_spec import RopeScaling

# One row per (run, evaluation length, RoPE scaling, depth), columns :data:`posenc.analysis.store.COLUMNS`:
# ``scaling`` is "none" (the encoder as trained) or an evaluation-time RoPE extension method (":<factor>"
# when the factor was fixed by the user); ``depth`` is NaN except for tasks evaluated at several depths.


def scaling_label(scaling: RopeScaling) -> str:
    """The ``scaling`` column's value: the method, ``:<factor>`` when the factor is fixed, ``(options)``
    when any are given (:meth:`RopeScaling.label`)."""
    return scaling.label()


def doubling_lengths(train_length: int, up_to: int) -> list[int]:
    """``train_length * 2**k`` for k = 0, 1, ... while <= ``up_to`` (at least the training length)."""
    lengths = [train_length]
    while lengths[-1] * 2 <= up_to:
        lengths.append(lengths[-1] * 2)
    return lengths


FINE_STEPS = 8  # evaluation lengths between 1x and 2x the training length (every L/8)


def default_lengths(train_length: int, up_to: int, variable: bool = False) -> list[int]:
    """The lengths a run is evaluated at by default, as the length-generalization literature reports them:

    * for a run trained on a range of lengths (``variable``), ``L/4, L/2, 3L/4`` inside it;
    * ``L``, then every ``L/8`` up to ``2L`` (Kazemnejad et al. 2023 test on lengths up to 2L, so the
      transition just past the training length is seen in fine steps);
    * then ``4L, 8L, ...`` while ``<= up_to``.
    Lengths are rounded to integers and kept unique; every one is at least 1.
    """
    inside = [round(train_length * k / 4) for k in (1, 2, 3)] if variable else []
    fine = [round(train_length * (1 + k / FINE_STEPS)) for k in range(FINE_STEPS + 1)]
    lengths = [n for n in dict.fromkeys(inside + fine) if 1 <= n <= max(up_to, train_length)]
    far = 2 * train_length
    while far * 2 <= up_to:
        far *= 2
        lengths.append(far)
    return sorted(set(lengths))


def run_problem(folder: RunFolder) -> str | None:
    """Why the run in ``folder`` cannot be evaluated as it is, from its files alone (no checkpoint is loaded):
    unfinished, or a damaged, special or mistyped ``metrics.json``, ``config.yaml`` or ``checkpoint.pt``; None if
    none. ``folder`` was read once (:meth:`RunFolder.read`); only the checkpoint is looked at here."""
    run = folder.path
    try:
        if folder.metrics_problem:
            return folder.metrics_problem
        run_files.check_regular(run / run_files.CHECKPOINT_FILE, "a run's checkpoint")
        if not os.path.lexists(run / run_files.CONFIG_FILE):  # a damaged checkpoint says more than the missing file
            run_dirs.read_checkpoint(run / run_files.CHECKPOINT_FILE)
    except PosencError as err:
        return str(err)
    return folder.config_problem


def distinct_runs(runs: list[Path]) -> tuple[list[Path], str | None]:
    """``runs`` with each run once: the same run reached by two paths (a symlink, a backup copy of its folder)
    has one identity (:func:`posenc.analysis.store.run_identity`) and is evaluated and pooled once. Also a note naming
    what was left out (None if nothing). Kept: a copy whose files are whole, then a path without symlinks, then
    the first in sorted order. Runs whose config cannot be read are kept: evaluating them says why they are
    skipped."""
    folders = {run: RunFolder.read(run) for run in runs}
    by_id: dict[str, list[Path]] = {}
    for run in runs:
        key = folders[run].run_id or f"unreadable:{run}"
        by_id.setdefault(key, []).append(run)
    kept, dropped = [], []
    for key, paths in by_id.items():
        if len(paths) > 1:  # a whole copy first, then one reached without a symlink
            paths = sorted(
                paths,
                key=lambda p: (run_problem(folders[p]) is not None, os.path.realpath(p) != os.path.abspath(p), str(p)),
            )
        kept.append(paths[0])
        if len(paths) > 1:
            dropped.append((key, paths))
    if not dropped:
        return runs, None
    shown = "; ".join(f"run {key} at {', '.join(map(str, paths))}: kept {paths[0]}" for key, paths in dropped[:3])
    more = f"; and {len(dropped) - 3} more" if len(dropped) > 3 else ""
    note = (
        f"the same run was reached by more than one path (a symlink or a copy of its folder), so it is evaluated "
        f"and pooled once: {shown}{more}"
    )
    return sorted(kept), note


def scalings_for(config: dict, scalings: list[RopeScaling]) -> list[RopeScaling]:
    """The RoPE scalings a run (its ``config.yaml`` mapping) is evaluated under: all of ``scalings`` for a
    rotary encoder; for any other encoder only "none", as trained (the methods rescale rotary frequencies,
    which it has none of)."""
    from posenc.functional.rope_scaling_spec import RopeScaling

    encoder = config.get("encoder") if isinstance(config.get("encoder"), dict) else {}
    name, options = encoder.get("name"), {k: v for k, v in encoder.items() if k != "name"}
    if isinstance(name, str) and name in ENCODERS and ENCODERS[name].takes_rope_scaling_with(options):
        return scalings
    return [RopeScaling(NO_SCALING)]


@flush_subnormals()  # on every thread of an evaluating process: see posenc.nn.subnormals
def extrapolate(
    runs: list[Path],
    lengths: list[int] | None,
    *,
    sequences: int | None = None,
    device: str = "auto",
    progress: bool = True,
    up_to: int = 8192,
    scalings: list[RopeScaling] | None = None,
    done: frozenset[tuple[str, int, str]] = frozenset(),
    allow_empty: bool = False,
    memory_check: bool = True,
    include_not_learned: bool = False,
    max_hours: float = DEFAULT_MAX_HOURS,
) -> tuple[Results, list[str]]:
    """Evaluate every run at every length: rows, per-sequence scores and accuracy by position.

    Args:
        runs: run directories (see :func:`posenc.running.runs.find_runs`).
        lengths: evaluation lengths; None: :func:`default_lengths` of each run, up to ``up_to``.
        sequences: sequences per length (and depth); default: the task's choice, else
            :func:`posenc.running.evaluate.default_sequences` (at least 64).
        device: ``auto``, ``cpu`` or ``cuda``.
        scalings: RoPE extension methods to evaluate rotary runs under (see :func:`parse_scalings`);
            default: none, the encoders as trained. Other runs are evaluated as trained only.
        done: (run_id, length, scaling) triples already evaluated, skipped here.
        allow_empty: return empty results, not an error, when every run was skipped.
        include_not_learned: evaluate runs whose configuration did not learn its task at every length too (by
            default only at the training length: past it there is nothing to compare); their rows still say
            ``learned`` False, and comparisons still mark them not learned.
        memory_check: refuse, before any work, an evaluation estimated to need more memory than is available
            (:func:`check_memory`).
        max_hours: refuse, before any work, an evaluation estimated to take longer (:func:`check_time`); one
            estimated to take over a minute is announced on stderr when ``progress`` is on.

    Returns:
        The new :class:`~posenc.analysis.store.Results`, and one line for each run that was skipped (unfinished,
        unreadable, ...).

    A length the encoder cannot represent (a learned table too short) gives NaN metrics and a note.
    Tasks listing ``eval_depths`` (passkey) get one row per depth. Raises :class:`PosencError` if no run
    at all could be evaluated.
    """
    from posenc.functional.rope_scaling_spec import RopeScaling

    dev = resolve_device(device)
    work = _plan(runs, lengths, up_to, scalings or [RopeScaling(NO_SCALING)], done, include_not_learned)
    if memory_check:
        check_memory(work.configs, work.wanted, work.scalings, sequences)
    check_time(work.configs, work.wanted, work.scalings, sequences, dev, max_hours, progress)
    parts, skipped = [], work.skipped
    with make_progress(progress, fields="{task.fields[current]}", lines=True) as bar:
        total = sum(len(work.wanted[run]) * len(work.scalings[run]) for run in work.runs)  # x depths once loaded
        job = bar.add_task("evaluate", total=total, current="")
        for run in work.runs:
            if work.wanted[run]:  # else everything is already evaluated
                total = _evaluate_run(
                    run,
                    work.wanted[run],
                    work.scalings[run],
                    _about(work.folders[run]),
                    dev,
                    sequences,
                    done,
                    (bar, job, total),
                    parts,
                    skipped,
                )
    if not parts and (allow_empty or not skipped):
        return Results.empty(), skipped
    if not parts:
        first = skipped[0]
        raise PosencError(first if len(skipped) == 1 else f"none of {len(skipped)} runs could be evaluated; {first}")
    return Results.concat(parts), skipped


@dataclass
class _Plan:
    """What :func:`extrapolate` evaluates, worked out before any checkpoint is loaded."""

    runs: list[Path]  # the runs that can be evaluated (finished, readable)
    folders: dict[Path, RunFolder]  # each run's files, read once
    configs: dict[Path, dict]  # each run's config.yaml mapping
    scalings: dict[Path, list[RopeScaling]]  # each run's RoPE scalings (:func:`scalings_for`)
    wanted: dict[Path, list[int]]  # each run's lengths not yet evaluated under some scaling
    skipped: list[str]  # one line per run left out, saying why


def _plan(
    runs: list[Path],
    lengths: list[int] | None,
    up_to: int,
    scalings: list[RopeScaling],
    done: frozenset[tuple[str, int, str]],
    include_not_learned: bool,
) -> _Plan:
    """The runs :func:`extrapolate` can evaluate and, for each, its scalings and the lengths still to do."""
    folders = {run: RunFolder.read(run) for run in runs}  # each run's files read once; no checkpoint loaded yet
    problems = {run: run_problem(folders[run]) for run in runs}  # unfinished or damaged: skipped, said why
    skipped = [problems[run] for run in runs if problems[run]]
    runs = [run for run in runs if not problems[run]]
    folders = {run: folders[run] for run in runs}
    configs = {run: folders[run].config for run in runs}
    plan = {run: scalings_for(configs[run], scalings) for run in runs}
    missed = set() if include_not_learned else _held_back_runs(folders.values())
    wanted = {
        run: [
            n
            for n in _lengths_for(folders[run], lengths, up_to, folders[run].identity.run_id not in missed)
            if any((folders[run].run_id, n, scaling_label(sc)) not in done for sc in plan[run])
        ]
        for run in runs
    }
    return _Plan(runs, folders, configs, plan, wanted, skipped)


def _held_back_runs(folders) -> set[str]:
    """The runs (by run id) evaluated at their training length only. Mastery belongs to a configuration: if it
    does not count as learned (:func:`posenc.analysis.mastery.learned_by_rule`: every seed learned, or at
    least ``MIN_LEARNED_SEEDS``), none of its seeds is compared past the training length, so none is evaluated
    there (the long lengths are the expensive ones); if it learned by quorum, its seeds that did not learn are
    not (:func:`posenc.analysis.mastery.held_at_training_length`). lm has no mastery: a run that did not
    converge is still compared (marked) at every length (:func:`posenc.analysis.compare.held_back`). Finished
    runs only: an unfinished one is skipped anyway."""
    finished = [f for f in folders if f.finished]
    return held_at_training_length(
        pd.DataFrame(
            {
                "config_id": [f.identity.config_id for f in finished],
                "run_id": [f.identity.run_id for f in finished],
                "learned": [f.learned for f in finished],
                "task": [f.task for f in finished],
            }
        )
    )


def _evaluate_run(
    run: Path,
    lengths: list[int],
    scalings: list,
    about: dict,
    dev,
    sequences: int | None,
    done: frozenset,
    progress: tuple,
    parts: list[Results],
    skipped: list[str],
) -> int:
    """Evaluate one run at ``lengths`` under each of ``scalings`` (and each of its task's depths), appending
    to ``parts``; a run that cannot be loaded adds a line to ``skipped``. ``progress``: the bar, its job and
    its total; returns the total, grown by the depths the run's task turned out to have."""
    bar, job, total = progress
    try:
        cfg, task, model = run_dirs.load_run(run, dev)
    except PosencError as err:
        skipped.append(str(err))
        bar.advance(job, len(lengths) * len(scalings))
        return total
    depths = list(task.eval_depths) or [None]
    total += len(lengths) * len(scalings) * (len(depths) - 1)
    bar.update(job, total=total)
    for scaling in scalings:
        label = scaling_label(scaling)
        if model.encoder.takes_rope_scaling:  # "none": the encoder as trained
            model.encoder.set_rope_scaling(None if scaling.method == NO_SCALING else scaling)
        for length in lengths:
            if (about["run_id"], length, label) in done:
                bar.advance(job, len(depths))
                continue
            for depth in depths:
                where = "" if depth is None else f" depth {depth:g}"
                shown = "" if label == NO_SCALING else f" +{label}"
                bar.update(job, current=f"{cfg.encoder.name}{shown}/{cfg.task.name} @ {length}{where}")
                parts.append(_evaluate(about, cfg, task, model, length, scaling, depth, sequences))
                bar.advance(job)
    return total


def _lengths_for(folder: RunFolder, lengths: list[int] | None, up_to: int, learned: bool) -> list[int]:
    """The lengths to evaluate a run at: ``lengths`` (default: :func:`default_lengths` up to ``up_to``);
    a run not compared past its training length (``learned`` False: its configuration did not learn its task
    in distribution, or it did by quorum and this seed did not; :func:`_held_back_runs`) only at its training
    length, where it is reported: past it there is nothing to compare."""
    train_length = folder.train_length
    task = folder.config.get("task") if isinstance(folder.config.get("task"), dict) else {}
    wanted = lengths or default_lengths(train_length, up_to, bool(task.get("variable_length")))
    if not learned:
        return [n for n in wanted if n == train_length] or [train_length]
    return wanted


def run_facts(folders: Iterable[RunFolder]) -> dict[str, dict]:
    """Run id -> the columns of its rows that its run folder decides now (``run``, where it is; ``learned``,
    ``steps_to_learn``), for every finished run of ``folders``: ``posenc compare`` refreshes its stored rows
    with them, so a run whose metrics.json changed (resumed, or a rule like lm's convergence recorded) is never
    judged on stale rows, and a run folder moved elsewhere is named where it now is (its evaluations, keyed by
    its identity, are reused)."""
    facts = {}
    for folder in folders:
        if folder.finished and folder.identity is not None:
            about = _about(folder)
            facts[about["run_id"]] = {key: about[key] for key in ("run", "learned", "steps_to_learn")}
    return facts


def _about(folder: RunFolder) -> dict:
    """The columns every row of a run shares: where it is, who it is, and whether it learned its task."""
    identity, steps = folder.identity, folder.metrics.get("steps_to_learn")
    return {
        "run": describe_run(folder.path),
        "run_id": identity.run_id,
        "config_id": identity.config_id,
        "config": identity.config,
        "learned": folder.learned,
        "steps_to_learn": math.nan if steps is None else float(steps),
    }


def scaling_note(table: pd.DataFrame, scalings: list[RopeScaling]) -> str | None:
    """A line for the user when ``scalings`` asked for RoPE extension methods that some encoders in
    ``table`` cannot take (they are evaluated as trained only); None otherwise."""
    if all(sc.method == NO_SCALING for sc in scalings) or table.empty:
        return None
    unscaled = sorted(set(table["encoder"]) - set(table.loc[table["scaling"] != NO_SCALING, "encoder"]))
    if not unscaled:
        return None
    return f"--rope-scaling applies to rotary encoders only; evaluated as trained: {', '.join(unscaled)}"


def not_learned_note(table: pd.DataFrame, lengths: list[int] | None) -> str | None:
    """A line for the user naming the runs in ``table`` evaluated at their training length only because their
    configuration did not learn its task there (mastery belongs to a configuration: a learned seed beside a
    seed that did not is held back too), or, in a configuration learned by quorum, they did not
    (:func:`posenc.analysis.mastery.held_at_training_length`, counted over ``table``'s runs), when longer
    ``lengths`` were asked for (None: the default doubling lengths). None if there are none."""
    if table.empty:
        return None
    missed = table[table["run_id"].isin(held_at_training_length(table))].drop_duplicates("run_id")
    if lengths is not None:
        missed = missed[[any(n != t for n in lengths) for t in missed["train_length"]]]
    if missed.empty:
        return None
    shown = [
        f"{r.encoder}/{r.task} seed {r.seed}{'' if r.learned else ' (not learned)'} ({r.run})"
        for r in missed.head(3).itertuples()
    ]
    more = f" and {len(missed) - 3} more" if len(missed) > 3 else ""
    return (
        "not learned at the training length by every seed of the configuration, so evaluated there only "
        f"(past it there is nothing to compare; train longer or see metrics.json): {', '.join(shown)}{more}"
    )


def _evaluate(
    about: dict, cfg, task, model, length: int, scaling, depth: float | None, sequences: int | None
) -> Results:
    """``model`` on ``task`` (at ``depth`` if given) at ``length`` under ``scaling``: one row, its
    sequences and its positions."""
    factor = scaling.factor_for(cfg.task.length, length)  # what the method gets (dynamic_ntk: 1 unless fixed)
    row = {
        **about, "encoder": cfg.encoder.name, "task": cfg.task.name,
        "train_length": cfg.task.length, "eval_length": length, "scaling": scaling_label(scaling),
        "scaling_factor": math.nan if scaling.method == NO_SCALING else float(factor),
        "depth": math.nan if depth is None else float(depth), "seed": cfg.seed,
        "loss": math.nan, "perplexity": math.nan, "token_accuracy": math.nan, "exact_match": math.nan,
        "n_sequences": 0, "seconds": 0.0, "note": "", "data": task.describe_data(), "fingerprint": "",
        "baseline": "",  # evaluated here, not copied from a baseline (posenc.analysis.baseline)
    }  # fmt: skip
    key = {"run_id": about["run_id"], "eval_length": length, "scaling": row["scaling"], "depth": row["depth"]}
    result = Results.empty()
    start = time.perf_counter()
    try:
        model.encoder.check_positions(length)
        if length < task.min_length:
            raise PositionRangeError(f"task '{task.key}' needs length >= {task.min_length}")
        subject = task if depth is None else task.at_depth(depth)
        count = sequences or subject.for_evaluation().evaluation_sequences(length, default_sequences(length))
        detail = evaluate_detailed(model, subject, length, count)
        row.update(detail.means, fingerprint=detail.fingerprint)
        n = len(detail.per_sequence["exact_match"])
        result.sequences = pd.DataFrame({**key, "sequence": range(n), **detail.per_sequence})
        result.positions = pd.DataFrame({**key, **detail.positions, "bin_width": detail.bin_width})
    except PositionRangeError as err:
        row["note"] = str(err)
    except torch.OutOfMemoryError:
        row["note"] = f"out of memory at length {length}"
    row["seconds"] = round(time.perf_counter() - start, 3)
    result.evaluations = pd.DataFrame([row], columns=COLUMNS)
    return result
