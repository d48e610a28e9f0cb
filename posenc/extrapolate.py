"""Length extrapolation: evaluate trained runs at exact lengths and write one tidy table."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
import torch
import yaml

from posenc import io as run_io
from posenc.config import MAX_LENGTH
from posenc.errors import PosencError, PositionRangeError
from posenc.evaluate import default_sequences, evaluate
from posenc.progress import make_progress
from posenc.tables import describe_run

COLUMNS = [
    "run", "encoder", "task", "train_length", "eval_length", "seed",
    "loss", "token_accuracy", "exact_match", "n_sequences", "seconds", "note",
]  # fmt: skip
TABLE_STEM = "extrapolation"


def parse_lengths(text: str) -> list[int]:
    """``"512,2048,8192"`` -> ``[512, 2048, 8192]``; anything else raises a one-line :class:`PosencError`."""
    lengths = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise PosencError(f"--lengths: {part!r} is not a positive integer (expected e.g. 512,2048,8192)")
        value = int(part)
        if not 1 <= value <= MAX_LENGTH:
            raise PosencError(f"--lengths: {value} is out of range; lengths must be in 1..{MAX_LENGTH}")
        lengths.append(value)
    return sorted(set(lengths))


def doubling_lengths(train_length: int, up_to: int) -> list[int]:
    """``train_length * 2**k`` for k = 0, 1, ... while <= ``up_to`` (at least the training length)."""
    lengths = [train_length]
    while lengths[-1] * 2 <= up_to:
        lengths.append(lengths[-1] * 2)
    return lengths


def _train_length(run: Path) -> int:
    """The run's training length from its ``config.yaml`` (cheap: no checkpoint is read); 64 if unreadable."""
    try:
        return int(yaml.safe_load((run / run_io.CONFIG_FILE).read_text())["task"]["length"])
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return 64


def extrapolate(
    runs: list[Path],
    lengths: list[int] | None,
    *,
    sequences: int | None = None,
    device: str = "auto",
    progress: bool = True,
    up_to: int = 8192,
    done: frozenset[tuple[str, int]] = frozenset(),
    allow_empty: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """Evaluate every run at every length; one row per (run, length), columns :data:`COLUMNS`.

    Args:
        runs: run directories (see :func:`posenc.io.find_runs`).
        lengths: evaluation lengths; None: each run's training length doubled up to ``up_to``.
        sequences: sequences per length; default :func:`posenc.evaluate.default_sequences`.
        device: ``auto``, ``cpu`` or ``cuda``.
        done: (run, length) pairs already evaluated, skipped here (``run`` as in the table's column).
        allow_empty: return an empty table, not an error, when every run was skipped.

    Returns:
        The table of new rows, and one line for each run that was skipped (unfinished, unreadable, ...).

    A length the encoder cannot represent (a learned table too short) gives NaN metrics and a note.
    Raises :class:`PosencError` if no run at all could be evaluated.
    """
    from posenc.train import resolve_device

    dev = resolve_device(device)
    wanted = {run: [n for n in (lengths or doubling_lengths(_train_length(run), up_to))
                    if (describe_run(run), n) not in done] for run in runs}
    rows, skipped = [], []
    with make_progress(progress, fields="{task.fields[current]}") as bar:
        job = bar.add_task("evaluate", total=sum(map(len, wanted.values())), current="")
        for run in runs:
            if not wanted[run]:
                continue  # everything already evaluated
            try:
                if not (run / run_io.METRICS_FILE).is_file():
                    raise PosencError(f"{run} is unfinished (no {run_io.METRICS_FILE}); finish training first")
                cfg, task, model = run_io.load_run(run, dev)
            except PosencError as err:
                skipped.append(str(err))
                bar.advance(job, len(wanted[run]))
                continue
            for length in wanted[run]:
                bar.update(job, current=f"{cfg.encoder.name}/{cfg.task.name} @ {length}")
                n = sequences or default_sequences(length)
                row = {
                    "run": describe_run(run), "encoder": cfg.encoder.name, "task": cfg.task.name,
                    "train_length": cfg.task.length, "eval_length": length, "seed": cfg.seed,
                    "loss": math.nan, "token_accuracy": math.nan, "exact_match": math.nan,
                    "n_sequences": 0, "seconds": 0.0, "note": "",
                }
                start = time.perf_counter()
                try:
                    model.encoder.check_positions(length)
                    if length < task.min_length:
                        raise PositionRangeError(f"task '{task.key}' needs length >= {task.min_length}")
                    row.update(evaluate(model, task, length, n))
                except PositionRangeError as err:
                    row["note"] = str(err)
                except torch.OutOfMemoryError:
                    row["note"] = f"out of memory at length {length}"
                row["seconds"] = round(time.perf_counter() - start, 3)
                rows.append(row)
                bar.advance(job)
    if not rows and (allow_empty or not skipped):
        return pd.DataFrame([], columns=COLUMNS), skipped
    if not rows:
        first = skipped[0]
        raise PosencError(first if len(skipped) == 1 else f"none of {len(runs)} runs could be evaluated; {first}")
    return pd.DataFrame(rows, columns=COLUMNS), skipped


def merge_into(existing: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    """``existing`` rows updated by ``new`` ones, keyed by (run, eval_length); others kept, none doubled."""
    if existing is None or existing.empty:
        merged = new
    else:
        keys = set(zip(new["run"], new["eval_length"]))
        keep = [(r, n) not in keys for r, n in zip(existing["run"], existing["eval_length"])]
        merged = pd.concat([existing[keep][COLUMNS], new], ignore_index=True)
    return merged.sort_values(["task", "encoder", "seed", "run", "eval_length"], ignore_index=True)


def summary(table: pd.DataFrame, metric: str = "exact_match") -> pd.DataFrame:
    """``metric`` as (task, encoder, train length) x eval length, averaged over seeds; NaN where undefined."""
    return table.pivot_table(
        index=["task", "encoder", "train_length"], columns="eval_length", values=metric, aggfunc="mean",
        dropna=False,
    )


def summary_markdown(table: pd.DataFrame) -> str:
    """Exact match and token accuracy by evaluation length, one Markdown table each."""
    parts = []
    for metric in ("exact_match", "token_accuracy"):
        pivot = summary(table, metric).reset_index()
        pivot.columns = [str(c) for c in pivot.columns]
        parts.append(f"### {metric.replace('_', ' ')} by evaluation length\n\n"
                     + pivot.to_markdown(index=False, floatfmt=".3f"))
    return "\n\n".join(parts) + "\n"
