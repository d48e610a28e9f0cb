"""Length extrapolation: evaluate trained runs at exact lengths and write one tidy table."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch
import yaml

from posenc import io as run_io
from posenc.encoders import ENCODERS, RotaryEncoder
from posenc.config import MAX_LENGTH
from posenc.errors import PosencError, PositionRangeError
from posenc.evaluate import default_sequences, evaluate, perplexity
from posenc.progress import make_progress
from posenc.tables import describe_run

if TYPE_CHECKING:
    from posenc.functional.rope_scaling import RopeScaling

COLUMNS = [
    "run", "encoder", "task", "train_length", "eval_length", "scaling", "scaling_factor", "depth", "seed",
    "loss", "perplexity", "token_accuracy", "exact_match", "n_sequences", "seconds", "note",
]  # fmt: skip
# One row per (run, evaluation length, RoPE scaling, depth): ``scaling`` is "none" (the encoder as trained)
# or an evaluation-time RoPE extension method (":<factor>" when the factor was fixed by the user);
# ``depth`` is NaN except for tasks evaluated at several depths (passkey).
KEY = ["run", "eval_length", "scaling", "depth"]
TABLE_STEM = "extrapolation"
NO_SCALING = "none"


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


def parse_scalings(text: str, factor: float | None = None) -> list[RopeScaling]:
    """``"none,yarn"`` -> RoPE scalings (each with ``factor``; None: it follows the evaluation length).

    Unknown methods or a non-positive factor raise a one-line :class:`PosencError` listing the known ones.
    """
    from posenc.functional.rope_scaling import ROPE_SCALING, RopeScaling

    if factor is not None and not (math.isfinite(factor) and factor > 0):
        raise PosencError(f"--rope-factor must be a positive number, got {factor}")
    methods = []
    for part in text.split(","):
        part = part.strip()
        if part not in ROPE_SCALING:
            raise PosencError(f"--rope-scaling: unknown method {part!r}; known methods: {', '.join(ROPE_SCALING)}")
        if part not in methods:
            methods.append(part)
    return [RopeScaling(m, None if m == NO_SCALING else factor) for m in methods]


def scaling_label(scaling: RopeScaling) -> str:
    """The ``scaling`` column's value: the method, plus ``:<factor>`` when the factor is fixed."""
    return scaling.method if scaling.factor is None else f"{scaling.method}:{scaling.factor:g}"


def doubling_lengths(train_length: int, up_to: int) -> list[int]:
    """``train_length * 2**k`` for k = 0, 1, ... while <= ``up_to`` (at least the training length)."""
    lengths = [train_length]
    while lengths[-1] * 2 <= up_to:
        lengths.append(lengths[-1] * 2)
    return lengths


def _train_length(config: dict) -> int:
    """The training length in a run's ``config.yaml`` mapping (see :func:`_run_config`); 64 if absent."""
    try:
        return int(config["task"]["length"])
    except (ValueError, KeyError, TypeError):
        return 64


def _run_config(run: Path) -> dict:
    """The run's ``config.yaml`` as a mapping; empty if unreadable (loading the run then says why)."""
    try:
        config = yaml.safe_load((run / run_io.CONFIG_FILE).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


def scalings_for(config: dict, scalings: list[RopeScaling]) -> list[RopeScaling]:
    """The RoPE scalings a run (its ``config.yaml`` mapping) is evaluated under: all of ``scalings`` for a
    rotary encoder; for any other encoder only "none", as trained (the methods rescale rotary frequencies,
    which it has none of)."""
    from posenc.functional.rope_scaling import RopeScaling

    encoder = (config.get("encoder") or {}).get("name")
    if isinstance(encoder, str) and issubclass(ENCODERS.get(encoder, object), RotaryEncoder):
        return scalings
    return [RopeScaling(NO_SCALING)]


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
) -> tuple[pd.DataFrame, list[str]]:
    """Evaluate every run at every length; one row per (run, length, scaling, depth), columns :data:`COLUMNS`.

    Args:
        runs: run directories (see :func:`posenc.io.find_runs`).
        lengths: evaluation lengths; None: each run's training length doubled up to ``up_to``.
        sequences: sequences per length (and depth); default :func:`posenc.evaluate.default_sequences`.
        device: ``auto``, ``cpu`` or ``cuda``.
        scalings: RoPE extension methods to evaluate rotary runs under (see :func:`parse_scalings`);
            default: none, the encoders as trained. Other runs are evaluated as trained only.
        done: (run, length, scaling) triples already evaluated, skipped here (``run`` as in the table).
        allow_empty: return an empty table, not an error, when every run was skipped.

    Returns:
        The table of new rows, and one line for each run that was skipped (unfinished, unreadable, ...).

    A length the encoder cannot represent (a learned table too short) gives NaN metrics and a note.
    Tasks listing ``eval_depths`` (passkey) get one row per depth. Raises :class:`PosencError` if no run
    at all could be evaluated.
    """
    from posenc.functional.rope_scaling import RopeScaling
    from posenc.train import resolve_device

    dev = resolve_device(device)
    scalings = scalings or [RopeScaling(NO_SCALING)]
    configs = {run: _run_config(run) for run in runs}  # cheap: no checkpoint is read yet
    plan = {run: scalings_for(configs[run], scalings) for run in runs}
    wanted = {run: [n for n in (lengths or doubling_lengths(_train_length(configs[run]), up_to))
                    if any((describe_run(run), n, scaling_label(sc)) not in done for sc in plan[run])]
              for run in runs}
    rows, skipped = [], []
    with make_progress(progress, fields="{task.fields[current]}") as bar:
        total = sum(len(wanted[run]) * len(plan[run]) for run in runs)  # x depths once a run is loaded
        job = bar.add_task("evaluate", total=total, current="")
        for run in runs:
            if not wanted[run]:
                continue  # everything already evaluated
            try:
                if not (run / run_io.METRICS_FILE).is_file():
                    raise PosencError(f"{run} is unfinished (no {run_io.METRICS_FILE}); finish training first")
                cfg, task, model = run_io.load_run(run, dev)
            except PosencError as err:
                skipped.append(str(err))
                bar.advance(job, len(wanted[run]) * len(plan[run]))
                continue
            mine = plan[run]
            depths = list(task.eval_depths) or [None]
            total += len(wanted[run]) * len(mine) * (len(depths) - 1)
            bar.update(job, total=total)
            for scaling in mine:
                label = scaling_label(scaling)
                if isinstance(model.encoder, RotaryEncoder):  # "none": the encoder as trained
                    model.encoder.set_rope_scaling(None if scaling.method == NO_SCALING else scaling)
                for length in wanted[run]:
                    if (describe_run(run), length, label) in done:
                        bar.advance(job, len(depths))
                        continue
                    for depth in depths:
                        where = "" if depth is None else f" depth {depth:g}"
                        shown = "" if label == NO_SCALING else f" +{label}"
                        bar.update(job, current=f"{cfg.encoder.name}{shown}/{cfg.task.name} @ {length}{where}")
                        rows.append(_evaluate_row(run, cfg, task, model, length, scaling, depth, sequences))
                        bar.advance(job)
    if not rows and (allow_empty or not skipped):
        return pd.DataFrame([], columns=COLUMNS), skipped
    if not rows:
        first = skipped[0]
        raise PosencError(first if len(skipped) == 1 else f"none of {len(runs)} runs could be evaluated; {first}")
    return pd.DataFrame(rows, columns=COLUMNS), skipped


def scaling_note(table: pd.DataFrame, scalings: list[RopeScaling]) -> str | None:
    """A line for the user when ``scalings`` asked for RoPE extension methods that some encoders in
    ``table`` cannot take (they are evaluated as trained only); None otherwise."""
    if all(sc.method == NO_SCALING for sc in scalings) or table.empty:
        return None
    unscaled = sorted(set(table["encoder"]) - set(table.loc[table["scaling"] != NO_SCALING, "encoder"]))
    if not unscaled:
        return None
    return f"--rope-scaling applies to rotary encoders only; evaluated as trained: {', '.join(unscaled)}"


def _evaluate_row(run, cfg, task, model, length: int, scaling, depth: float | None, sequences: int | None) -> dict:
    """One table row: ``model`` on ``task`` (at ``depth`` if given) at ``length`` under ``scaling``."""
    factor = scaling.factor_for(cfg.task.length, length)  # what the method gets (dynamic_ntk: 1 unless fixed)
    row = {
        "run": describe_run(run), "encoder": cfg.encoder.name, "task": cfg.task.name,
        "train_length": cfg.task.length, "eval_length": length, "scaling": scaling_label(scaling),
        "scaling_factor": math.nan if scaling.method == NO_SCALING else float(factor),
        "depth": math.nan if depth is None else float(depth), "seed": cfg.seed,
        "loss": math.nan, "perplexity": math.nan, "token_accuracy": math.nan, "exact_match": math.nan,
        "n_sequences": 0, "seconds": 0.0, "note": "",
    }  # fmt: skip
    start = time.perf_counter()
    try:
        model.encoder.check_positions(length)
        if length < task.min_length:
            raise PositionRangeError(f"task '{task.key}' needs length >= {task.min_length}")
        subject = task if depth is None else task.at_depth(depth)
        row.update(evaluate(model, subject, length, sequences or default_sequences(length)))
    except PositionRangeError as err:
        row["note"] = str(err)
    except torch.OutOfMemoryError:
        row["note"] = f"out of memory at length {length}"
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row


def upgrade(table: pd.DataFrame) -> pd.DataFrame:
    """A table written by an older posenc with the columns it lacks (no scaling, no depth) filled in."""
    defaults = {"scaling": NO_SCALING, "scaling_factor": math.nan, "depth": math.nan}
    missing = {c: v for c, v in defaults.items() if c not in table.columns}
    if "perplexity" not in table.columns:
        missing["perplexity"] = table["loss"].map(perplexity)
    return table.assign(**missing)[COLUMNS] if missing else table[COLUMNS]


def row_keys(table: pd.DataFrame) -> list[tuple]:
    """The rows' :data:`KEY` tuples (a missing depth as -1, so that keys compare equal)."""
    return list(zip(table["run"], table["eval_length"], table["scaling"], table["depth"].fillna(-1.0)))


def merge_into(existing: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    """``existing`` rows updated by ``new`` ones, keyed by :data:`KEY`; others kept, none doubled."""
    if existing is None or existing.empty:
        merged = new
    else:
        existing = upgrade(existing)
        keys = set(row_keys(new))
        keep = [key not in keys for key in row_keys(existing)]
        merged = pd.concat([existing[keep], new], ignore_index=True) if len(new) else existing[keep]
    return merged.sort_values(["task", "encoder", "seed", "run", "scaling", "depth", "eval_length"],
                              ignore_index=True)


def labels(table: pd.DataFrame) -> pd.Series:
    """What a row is about, for tables and legends: the encoder, ``+scaling`` and ``@depth`` where set."""
    def label(encoder: str, scaling: str, depth: float) -> str:
        text = encoder if scaling == NO_SCALING else f"{encoder} +{scaling}"
        return text if math.isnan(depth) else f"{text} @depth {depth:g}"

    return pd.Series([label(*row) for row in zip(table["encoder"], table["scaling"], table["depth"])],
                     index=table.index, dtype=object)


def summary(table: pd.DataFrame, metric: str = "exact_match") -> pd.DataFrame:
    """``metric`` as (task, encoder label, train length) x eval length, averaged over seeds; NaN where undefined.

    The encoder label carries the RoPE scaling and the depth where a row has them (see :func:`labels`).
    """
    return table.assign(encoder=labels(table)).pivot_table(
        index=["task", "encoder", "train_length"], columns="eval_length", values=metric, aggfunc="mean",
        dropna=False,
    )


def summary_markdown(table: pd.DataFrame) -> str:
    """Exact match, token accuracy and perplexity by evaluation length, one Markdown table each."""
    parts = []
    for metric in ("exact_match", "token_accuracy", "perplexity"):
        pivot = summary(table, metric).reset_index()
        pivot.columns = [str(c) for c in pivot.columns]
        parts.append(f"### {metric.replace('_', ' ')} by evaluation length\n\n"
                     + pivot.to_markdown(index=False, floatfmt=".3f"))
    return "\n\n".join(parts) + "\n"
