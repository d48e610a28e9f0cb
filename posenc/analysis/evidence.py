"""Evidence for the literature checks (:mod:`posenc.analysis.claims`), read from evaluation tables alone."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd

from posenc.analysis.claims import Side, mixer_of
from posenc.analysis.compare import chance_token_accuracy
from posenc.analysis.mastery import compared_rows, mastery
from posenc.analysis.store import Results
from posenc.task_facts import NESTED_EVALUATION

LOSS_CHANGE = "loss_change"  # a derived metric: loss at a length minus the loss of the same text at L (claims)


class TableEvidence:
    """:class:`posenc.analysis.claims.Evidence` over :class:`~posenc.analysis.store.Results` (with depth means, see
    :func:`posenc.analysis.compare.with_depth_means`): per-seed arrays of per-sequence values, sorted by sequence, at
    any evaluation length a side was evaluated at.

    A side is the runs of its task and encoder whose model mixes tokens with the side's mixer (``model.mixer``,
    read from the run's configuration in the ``config`` column: a configuration without the key, as every
    run recorded before mixers existed, is attention's). It is ambiguous - and so not evaluated, as far as a
    claim is concerned - when those runs are in several configurations: a claim names encoders and mixers,
    not configurations.

    A side learned by quorum (:func:`posenc.analysis.mastery.learned_by_rule`) has values past its training
    length from the seeds that learned only (:func:`posenc.analysis.mastery.compared_rows`); ``every_seed``
    (:meth:`with_every_seed`) keeps every seed's, for views of all seeds such as
    :func:`posenc.analysis.claims.ungated`.
    """

    def __init__(self, results: Results, every_seed: bool = False) -> None:
        self.every_seed = every_seed
        self.ev = results.evaluations
        configs = self.ev["config"] if "config" in self.ev else pd.Series(None, index=self.ev.index, dtype=object)
        mixers = {c: mixer_of(c) for c in configs.unique()}
        self._mixer = configs.map(mixers)  # per evaluation row, its run's model.mixer
        seq = results.sequences
        seq = seq[seq["depth"].isna()]
        groups = seq.groupby(["run_id", "eval_length", "scaling"], sort=False)
        self._seq = {
            (run_id, int(length), scaling): part.sort_values("sequence") for (run_id, length, scaling), part in groups
        }
        self._compared: dict[tuple, pd.DataFrame] = {}  # (task, encoder, mixer) -> compared_rows of its runs

    def _runs(self, task: str, side: Side) -> pd.DataFrame | None:
        rows = self.ev[(self.ev["task"] == task) & (self.ev["encoder"] == side.encoder) & (self._mixer == side.mixer)]
        if rows.empty or rows["config_id"].nunique() != 1:
            return None
        return rows

    def with_every_seed(self) -> TableEvidence:
        """The same evidence with every seed's values at every length, learned or not (see the class)."""
        if self.every_seed:
            return self
        every = copy.copy(self)  # the same tables, read once
        every.every_seed = True
        return every

    def _evaluated(self, task: str, side: Side) -> pd.DataFrame | None:
        """The side's evaluation rows without depth (passkey: the mean over depths), at its scaling: the seeds
        compared (:func:`posenc.analysis.mastery.compared_rows`), or every seed with :attr:`every_seed`."""
        rows = self._runs(task, side)
        if rows is None:
            return None
        if not self.every_seed:  # counted over every row of the configuration; once per side's runs
            key = (task, side.encoder, side.mixer)
            if key not in self._compared:
                self._compared[key] = compared_rows(rows)
            rows = self._compared[key]
        return rows[(rows["scaling"] == side.scaling) & rows["depth"].isna()]

    def learned(self, task: str, side: Side) -> bool | None:
        """Whether the side's configuration counts as learned (:func:`posenc.analysis.mastery.learned_by_rule`:
        every seed, or the quorum); None: no runs."""
        rows = self._runs(task, side)
        return None if rows is None else bool(mastery(rows)["learned"].iloc[0])

    def same_runs(self, task: str, a: Side, b: Side) -> bool:
        """Both sides are the same runs (one encoder and mixer, e.g. RoPE under two scaling methods), each
        keyed by its run id in :meth:`at_length`: seed for seed the same checkpoints."""
        runs = [self._runs(task, side) for side in (a, b)]
        return all(r is not None for r in runs) and set(runs[0]["run_id"]) == set(runs[1]["run_id"])

    def train_length(self, task: str, side: Side) -> int | None:
        rows = self._runs(task, side)
        if rows is None or rows["train_length"].nunique() != 1:
            return None
        return int(rows["train_length"].iloc[0])

    def lengths(self, task: str, side: Side, metric: str) -> tuple[int, ...]:
        if metric == LOSS_CHANGE:
            return tuple(n for n in self.lengths(task, side, "loss") if self.at_length(task, side, n, metric))
        rows = self._evaluated(task, side)
        if rows is None:
            return ()
        found = set()
        for run_id, length in zip(rows["run_id"], rows["eval_length"]):
            part = self._seq.get((run_id, int(length), side.scaling))
            if part is not None and part[metric].notna().any():
                found.add(int(length))
        return tuple(sorted(found))

    def at_length(self, task: str, side: Side, length: int, metric: str) -> dict[str, np.ndarray] | None:
        """Run id (one per seed) -> per-sequence values at evaluation length ``length``; None: not
        evaluated. ``"loss_change"`` is derived (:meth:`loss_change`)."""
        if metric == LOSS_CHANGE:
            return self.loss_change(task, side, length)
        rows = self._evaluated(task, side)
        if rows is None:
            return None
        out = {}
        for run_id in sorted(set(rows.loc[rows["eval_length"] == length, "run_id"])):
            part = self._seq.get((run_id, int(length), side.scaling))
            if part is not None and len(part):
                out[run_id] = part[metric].to_numpy(dtype=float)
        return out or None

    def loss_change(self, task: str, side: Side, length: int) -> dict[str, np.ndarray] | None:
        """Per seed, each sequence's loss at ``length = k·L`` minus the mean loss of the ``k`` sequences that
        score the same text at the training length ``L`` (the same run, as trained: every scaling method is
        the identity at ``L``): how much worse the model reads the same bytes with a longer context. Only
        for tasks whose evaluation nests (:data:`posenc.task_facts.NESTED_EVALUATION`: lm) and lengths that
        are whole multiples of ``L``; None elsewhere. 0 at ``L`` itself."""
        train = self.train_length(task, side)
        if task not in NESTED_EVALUATION or train is None or length % train:
            return None
        longer = self.at_length(task, side, length, "loss")
        base = self.at_length(task, Side(side.encoder, "none", side.mixer), train, "loss")
        if not longer or not base:
            return None
        k, out = length // train, {}
        for run_id, values in longer.items():
            short = base.get(run_id)
            if short is None or short.size < values.size * k:
                continue
            out[run_id] = values - short[: values.size * k].reshape(values.size, k).mean(axis=1)
        return out or None

    def per_seed(self, task: str, side: Side, factor: int, metric: str) -> dict[str, np.ndarray] | None:
        """Run id (one per seed, in :meth:`at_length`'s order) -> per-sequence values at ``factor`` × the
        side's training length (what the report's paired tables show); None: not evaluated."""
        train = self.train_length(task, side)
        return None if train is None else self.at_length(task, side, train * factor, metric)

    def values(self, task: str, side: Side, factor: int, metric: str) -> list[np.ndarray] | None:
        """:meth:`per_seed`'s arrays alone, seed by seed; None: not evaluated."""
        found = self.per_seed(task, side, factor, metric)
        return list(found.values()) if found else None

    def chance(self, task: str, metric: str) -> float:
        """0 for exact match (a uniform guess of a whole answer is right with negligible probability); for
        token accuracy 1/(answer alphabet) of the task's runs (:func:`posenc.analysis.compare.chance_token_accuracy`),
        the largest where runs differ; NaN for loss and where the task has no fixed alphabet."""
        if metric == "exact_match":
            return 0.0
        if metric != "token_accuracy":
            return math.nan
        configs = self.ev.loc[self.ev["task"] == task, "config"].unique() if "config" in self.ev else []
        levels = [c for c in (chance_token_accuracy(c) for c in configs) if not math.isnan(c)]
        return max(levels) if levels else math.nan
