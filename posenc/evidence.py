"""Evidence for the literature checks (:mod:`posenc.claims`), read from evaluation tables alone."""

from __future__ import annotations

import numpy as np
import pandas as pd

from posenc.claims import Side
from posenc.store import Results


class TableEvidence:
    """:class:`posenc.claims.Evidence` over :class:`~posenc.store.Results` (with depth means, see
    :func:`posenc.compare.with_depth_means`): per-seed arrays of per-sequence values, sorted by sequence.

    A side is ambiguous - and so not evaluated, as far as a claim is concerned - when its task and
    encoder were run in several configurations: a claim names encoders, not configurations.
    """

    def __init__(self, results: Results) -> None:
        self.ev = results.evaluations
        seq = results.sequences
        self.seq = seq[seq["depth"].isna()]

    def _runs(self, task: str, side: Side) -> pd.DataFrame | None:
        rows = self.ev[(self.ev["task"] == task) & (self.ev["encoder"] == side.encoder)]
        if rows.empty or rows["config_id"].nunique() != 1:
            return None
        return rows

    def learned(self, task: str, side: Side) -> bool | None:
        rows = self._runs(task, side)
        return None if rows is None else bool(rows.drop_duplicates("run_id")["learned"].astype(bool).all())

    def values(self, task: str, side: Side, factor: int, metric: str) -> list[np.ndarray] | None:
        rows = self._runs(task, side)
        if rows is None:
            return None
        rows = rows[(rows["scaling"] == side.scaling) & rows["depth"].isna()
                    & (rows["eval_length"] == rows["train_length"] * factor)]
        if rows.empty:
            return None
        out = []
        for run_id, length in zip(rows["run_id"], rows["eval_length"]):
            mine = self.seq[(self.seq["run_id"] == run_id) & (self.seq["eval_length"] == length)
                            & (self.seq["scaling"] == side.scaling)].sort_values("sequence")
            if len(mine):
                out.append(mine[metric].to_numpy(dtype=float))
        return out or None
