"""Uncertainty for evaluation results: intervals that count both training seeds and evaluation sequences.

Data model. One trained run (one training seed) evaluated at one length scores N evaluation sequences; the
*same* N sequences (index i identical) are used for every run. A group is several seeds of one configuration,
given as one 1-D array of per-sequence values per seed: exact match (0/1), token accuracy (a share in [0, 1])
or loss (unbounded).

The interval posenc reports (95%, :data:`Z95`) for a group, :func:`group_estimate`:

* point estimate: the mean of the seed means (every seed weighs the same);
* variance of that mean: ``V = max(V_between, V_within)`` with ``V_between = var(seed means, ddof=1) / S``
  (seed-to-seed spread; 0 for one seed) and ``V_within = var(all values, ddof=1) / N_total`` (sequence
  spread, pooled over seeds). The larger one bounds the uncertainty from below: with few seeds the
  between-seed term is itself noisy, and with one seed it is absent, so neither term alone is trusted;
* shares (``bounded=True``): the variance becomes an effective sample size ``n_eff = p(1-p) / V``, capped at
  ``N_total`` — clustering by seed can only remove information, never add it (the design effect, Kish 1965,
  *Survey Sampling* §5.4), and a sequence counts as at most one Bernoulli trial — and ``n_eff = N_total`` when
  ``V = 0``. The interval is Wilson's score interval (Wilson 1927, JASA 22:209) at ``n_eff``: it stays inside
  [0, 1], and three seeds that all score 0 give ``[0, z²/(N_total + z²)]``, never a zero-width interval;
* unbounded values (loss): ``mean ± z·sqrt(V)``, of zero width only when every value is identical.

For two groups scored on the same sequences, :func:`paired_difference` pairs by sequence (shared difficulty
cancels) with the same ``max`` of a sequence and a seed term, and for shares a floor from the matched-pairs
adjusted-Wald variance (Agresti & Min 2005), so that two all-zero sides never give a zero-width interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a 95% interval.

    Attributes:
        mean: the point estimate (NaN: nothing to estimate from).
        low, high: the interval's bounds.
        n_seeds: seeds it rests on.
        n_sequences: evaluation sequences it rests on (for a group, the total over its seeds).
    """

    mean: float
    low: float
    high: float
    n_seeds: int
    n_sequences: int

    @property
    def half_width(self) -> float:
        """Half the interval's width, ``(high - low) / 2``."""
        return (self.high - self.low) / 2

    def format(self, digits: int = 3, signed: bool = False) -> str:
        """``"0.958 [0.931, 0.975]"``; ``signed``: ``+`` before a non-negative mean; NaN mean: ``"—"``."""
        if math.isnan(self.mean):
            return "—"
        sign = "+" if signed else ""
        return f"{self.mean:{sign}.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


NAN_ESTIMATE = Estimate(math.nan, math.nan, math.nan, 0, 0)


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion (Wilson 1927, JASA 22:209-212).

    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``; ``p = 0`` gives ``(0, z²/(n+z²))``.

    Args:
        p: observed proportion in [0, 1].
        n: sample size; need not be an integer (an effective sample size works the same way).
        z: normal quantile (default: two-sided 95%).

    Returns:
        ``(low, high)`` inside [0, 1]; ``(nan, nan)`` for ``n <= 0`` or NaN ``p``.
    """
    if not n > 0 or math.isnan(p):
        return math.nan, math.nan
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n))
    # at p = 0 (p = 1) the low (high) bound is exactly 0 (1); rounding would leave it a hair off
    low = 0.0 if p <= 0 else max(0.0, center - half)
    high = 1.0 if p >= 1 else min(1.0, center + half)
    return low, high


def exact_match_halfwidth(n: int, p: float = 0.5) -> float:
    """Wilson half-width for one run scored on ``n`` sequences at exact match ``p`` (p = 0.5: the widest).

    Used to choose ``n``: 64 sequences give a half-width of about 0.119.
    """
    low, high = wilson_interval(p, n)
    return (high - low) / 2


def _clean(values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each seed's values as a float 1-D array without NaNs; seeds left empty are dropped."""
    seeds = [np.asarray(v, dtype=float).ravel() for v in values]
    seeds = [v[~np.isnan(v)] for v in seeds]
    return [v for v in seeds if v.size]


def _check_shares(arrays: Sequence[np.ndarray]) -> None:
    """Raise ValueError when ``bounded`` values leave [0, 1] (Wilson's interval would mean nothing)."""
    for v in arrays:
        if v.size and (np.nanmin(v) < 0 or np.nanmax(v) > 1):
            raise ValueError("bounded=True needs values in [0, 1] (shares); pass bounded=False for losses")


def group_estimate(values: Sequence[np.ndarray], bounded: bool = True) -> Estimate:
    """Mean of a group of seeds with the interval posenc reports (see the module docstring).

    Args:
        values: one 1-D array of per-sequence values per seed, shape ``(N_s,)``; NaNs are dropped, and so
            are seeds left empty.
        bounded: the values are shares in [0, 1] (exact match, token accuracy): Wilson interval at the
            effective sample size. False (loss): normal interval ``mean ± z·sqrt(V)``.

    Returns:
        :class:`Estimate` with ``n_seeds = S`` and ``n_sequences = N_total`` (summed over seeds); all NaN with
        zero counts when no value is left.
    """
    seeds = _clean(values)
    if not seeds:
        return NAN_ESTIMATE
    if bounded:
        _check_shares(seeds)
    means = np.array([v.mean() for v in seeds])
    pooled = np.concatenate(seeds)
    s, n_total = len(seeds), pooled.size
    mean = float(means.mean())
    v_between = float(means.var(ddof=1)) / s if s > 1 else 0.0
    v_within = float(pooled.var(ddof=1)) / n_total if n_total > 1 else 0.0
    v = max(v_between, v_within)
    if bounded:
        if v > 0 and 0 < mean < 1:
            n_eff = min(mean * (1 - mean) / v, n_total)  # design effect: never more than N_total trials
        else:
            n_eff = n_total
        low, high = wilson_interval(mean, n_eff)
    else:
        half = Z95 * math.sqrt(v)
        low, high = mean - half, mean + half
    return Estimate(mean, low, high, s, n_total)


def _paired_floor(d: np.ndarray) -> float:
    """Adjusted-Wald variance of a paired difference of shares ("Wald+2", Agresti & Min 2005, Stat. Med.
    24:729), used as a floor so that no paired difference of shares gets a zero-width interval.

    For 0/1 pairs, ``b = Σ max(d, 0)`` and ``c = Σ max(-d, 0)`` are the two discordant counts; every cell of
    the 2×2 table gets 0.5 added (``n`` grows by 2): ``p̃_b = (b + 0.5)/(n + 2)``, variance
    ``(p̃_b + p̃_c - (p̃_b - p̃_c)²)/(n + 2)``. For shares in between it is the variance of Bernoulli pairs
    coupled as tightly as their means allow. It is the matched-pairs counterpart of Agresti & Caffo's (2000)
    floor for two independent samples; that one is about ``pa(1-pa)/N + pb(1-pb)/N``, which bounds the
    variance of unpaired shares from above, so it would win the ``max`` whenever sequences share difficulty
    and undo the pairing.

    Args:
        d: per-sequence differences in [-1, 1], shape ``(N,)``.
    """
    n = d.size
    pb = (np.clip(d, 0, None).sum() + 0.5) / (n + 2)
    pc = (np.clip(-d, 0, None).sum() + 0.5) / (n + 2)
    return float((pb + pc - (pb - pc) ** 2) / (n + 2))


def paired_difference(a: Sequence[np.ndarray], b: Sequence[np.ndarray], bounded: bool = True) -> Estimate:
    """``mean(a) - mean(b)`` for two groups of seeds scored on the same sequences, paired by sequence.

    ``D_i`` = (mean over a's seeds of ``a_{s,i}``) − (mean over b's seeds of ``b_{s,i}``); its mean is the
    difference of the two groups' means. Variance ``V = max(V_seq, V_between)`` with
    ``V_seq = var(D, ddof=1) / N`` (shared per-sequence difficulty cancels in ``D``) and
    ``V_between = var(a seed means, ddof=1)/S_a + var(b seed means, ddof=1)/S_b`` (a term is 0 for one seed).
    For shares, ``V`` is floored by :func:`_paired_floor`. Interval ``mean ± z·sqrt(V)``, clipped to [-1, 1]
    for shares.

    Args:
        a, b: one 1-D array per seed of shape ``(N,)``, sequence ``i`` the same sequence everywhere. Empty
            seeds are dropped. Arrays of different lengths are cut to the shortest (the common prefix:
            sequence i is the same everywhere, so the first N are shared); a sequence with a NaN in any seed
            of either side is left out.
        bounded: the values are shares in [0, 1] (see :func:`group_estimate`).

    Returns:
        :class:`Estimate` with ``n_seeds = min(S_a, S_b)`` and ``n_sequences = N`` (sequences per seed);
        all NaN with zero counts when a side has no seed or no sequence is left.
    """
    sides = [[np.asarray(v, dtype=float).ravel() for v in side] for side in (a, b)]
    sides = [[v for v in side if v.size] for side in sides]
    if not all(sides):
        return NAN_ESTIMATE
    n = min(v.size for side in sides for v in side)
    mats = [np.stack([v[:n] for v in side]) for side in sides]  # (S, N) per side
    keep = np.all(~np.isnan(mats[0]), axis=0) & np.all(~np.isnan(mats[1]), axis=0)
    mats = [m[:, keep] for m in mats]
    n = int(keep.sum())
    if n == 0:
        return NAN_ESTIMATE
    if bounded:
        _check_shares(mats)
    d = mats[0].mean(axis=0) - mats[1].mean(axis=0)
    mean = float(d.mean())
    v_seq = float(d.var(ddof=1)) / n if n > 1 else 0.0
    v_between = sum(float(m.mean(axis=1).var(ddof=1)) / len(m) for m in mats if len(m) > 1)
    v = max(v_seq, v_between)
    if bounded:
        v = max(v, _paired_floor(d))
    half = Z95 * math.sqrt(v)
    low, high = mean - half, mean + half
    if bounded:
        low, high = max(low, -1.0), min(high, 1.0)
    return Estimate(mean, low, high, min(len(m) for m in mats), n)
