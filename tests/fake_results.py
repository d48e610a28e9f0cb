"""Results tables built by hand (no training): what posenc.analysis.store, compare, views and report read.

``fake_run`` gives the three tables of one run evaluated at some lengths, with per-sequence values chosen by
the test, so that aggregates, intervals and reports can be checked against numbers known in advance.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from posenc.analysis.store import COLUMNS, POSITION_COLUMNS, SEQUENCE_COLUMNS, Results, run_identity


def config_of(encoder: str, task: str = "copy", seed: int = 0, train_length: int = 64, **train) -> dict:
    """A resolved run config (the parts identity reads); ``train`` overrides train.* keys."""
    return {
        "encoder": {"name": encoder}, "task": {"name": task, "length": train_length},
        "model": {"d_model": 16, "attention": "auto"},
        "train": {"steps": 300, "lr": 0.003, "compile": "auto", "log_every": 50, **train},
        "seed": seed, "device": "cpu", "progress": False, "resume": True,
    }  # fmt: skip


def fake_run(
    encoder: str,
    values: dict[int, list[float]],
    *,
    task: str = "copy",
    seed: int = 0,
    train_length: int = 64,
    learned: bool = True,
    steps_to_learn: float | None = 100.0,
    scaling: str = "none",
    depth: float = math.nan,
    note: dict[int, str] | None = None,
    data: str = "",
    run: str | None = None,
    fingerprint: str = "",
    **train,
) -> Results:
    """One run's tables: at each eval length, one sequence row per value of ``values[length]`` (exact match
    that value, token accuracy that value, loss ``1 - value``); a length with no values is a NaN row with
    ``note[length]``. ``train`` overrides train.* config keys (a different configuration). ``fingerprint``: each
    row's sequences' fingerprint is it followed by the length ("" records none)."""
    identity = run_identity(config_of(encoder, task, seed, train_length, **train))
    evaluations, sequences, positions = [], [], []
    for length, vals in values.items():
        v = np.asarray(vals, dtype=float)
        mean = float(v.mean()) if v.size else math.nan
        evaluations.append({
            "run": run or f"runs/{task}/{encoder}/seed{seed}", "run_id": identity.run_id,
            "config_id": identity.config_id, "encoder": encoder, "task": task, "train_length": train_length,
            "eval_length": length, "scaling": scaling, "scaling_factor": math.nan, "depth": depth, "seed": seed,
            "learned": learned, "steps_to_learn": math.nan if steps_to_learn is None else steps_to_learn,
            "loss": 1 - mean, "perplexity": math.exp(1 - mean), "token_accuracy": mean, "exact_match": mean,
            "n_sequences": int(v.size), "seconds": 0.1, "note": (note or {}).get(length, ""), "data": data,
            "fingerprint": f"{fingerprint}{length}" if fingerprint else "", "baseline": "",
            "config": identity.config,
        })  # fmt: skip
        key = {"run_id": identity.run_id, "eval_length": length, "scaling": scaling, "depth": depth}
        for i, x in enumerate(v):
            sequences.append({**key, "sequence": i, "exact_match": x, "token_accuracy": x, "loss": 1 - x})
        if v.size:
            positions.append({**key, "position": 0, "bin_width": length, "correct": int(v.sum()), "total": int(v.size)})
    return Results(
        pd.DataFrame(evaluations, columns=COLUMNS),
        pd.DataFrame(sequences, columns=SEQUENCE_COLUMNS),
        pd.DataFrame(positions, columns=POSITION_COLUMNS),
    )


def results_of(*runs: Results) -> Results:
    """Several runs' tables as one."""
    return Results.concat(list(runs))
