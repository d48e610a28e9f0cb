"""Uncertainty for evaluation results: intervals that count both training seeds and evaluation sequences.

Data model. One trained run (one training seed) evaluated at one length scores N evaluation sequences; the
*same* N sequences (index i identical) are used for every run. A group is several seeds of one configuration,
given as one 1-D array of per-sequence values per seed: exact match (0/1), token accuracy (a share in [0, 1])
or loss (unbounded).

What an interval counts. The interval for a group (:func:`group_estimate`) is for the configuration's
expected score: the mean over training seeds (a seed is a random draw of the configuration) of the mean
over evaluation sequences. It counts two sources of error, each by a variance of the reported mean:

* seeds: ``V_between = var(seed means, ddof=1) / S`` (0 for one seed). It rests on S − 1 degrees of freedom,
  so it is used with Student's t quantile (Student 1908, *Biometrika* 6:1-25), not the normal one: it
  enters as ``k·V_between`` with ``k = (t_{S-1}/z)²`` (``t_2 = 4.30`` against ``z = 1.96`` at 95%, so
  ``k = 4.81`` for three seeds). For losses the interval is then never narrower than the seeds' own
  t-interval ``mean ± t_{S-1}·sd(seed means)/sqrt(S)``;
* sequences: ``V_within = var(all values, ddof=1) / N_total``, the values pooled over seeds and treated as
  independent, with the normal ``z`` (Wilson's score interval for shares); or, with ``block=b`` for values
  that are autocorrelated in sequence order (``lm``'s windows are consecutive slices of one text), by batch
  means: ``var(means of non-overlapping blocks of b consecutive values, ddof=1) / a`` over the ``a`` full
  blocks of all seeds, with ``t_{a-1}`` (Flegal & Jones 2010, *Ann. Statist.* 38:1034; the standard
  batch-means estimator of MCMC and simulation output analysis). ``block=1`` is the independent term.

The reported variance is ``V = max(k·V_between, V_within)``. ``V_between`` estimates the whole variance of
the mean (seed effect plus each seed's sequence noise), but on S − 1 degrees of freedom; ``V_within`` the
sequence part alone, on many: the ``max`` keeps that floor when a few seeds happen to agree, and a sum
would count the sequence noise twice. The interval is ``mean ± z·sqrt(V)`` for unbounded values (loss), of
zero width only when every value is identical. For shares (``bounded=True``) ``V`` becomes an effective
sample size ``n_eff = p(1-p) / V``, capped at ``N_total`` — clustering by seed can only remove information
(the design effect, Kish 1965, *Survey Sampling* §5.4), and a sequence counts as at most one Bernoulli
trial — and ``n_eff = N_total`` when ``V = 0``; the interval is Wilson's score interval (Wilson 1927, JASA
22:209) at ``n_eff``. It stays inside [0, 1], and three seeds that all score 0 give
``[0, z²/(N_total + z²)]``, never a zero-width interval. At a small ``n_eff`` Wilson's interval is drawn
toward 1/2 and, near 1/2, is narrower than the seeds' symmetric t-interval (it takes the variance at each
candidate p, largest at 1/2); its coverage is checked by simulation (``tests/test_stats_coverage.py``).
One seed: no seed term, so its interval is the sequence interval alone.

Not counted: the evaluation sequences are themselves a sample shared by every seed, and ``V_within`` treats
the S·N values as independent; where seeds agree on which sequences are hard, the variance from the choice
of sequences is nearer ``var/N`` than ``var/(S·N)``. :func:`paired_difference` counts it (``D`` below).

For two groups scored on the same sequences, :func:`paired_difference` pairs by sequence (shared difficulty
cancels) with the same ``max`` of a sequence and a t-corrected seed term (Welch-Satterthwaite degrees of
freedom for the two sides' seed variances, Welch 1947, *Biometrika* 34:28), and for shares a floor from the
matched-pairs adjusted-Wald variance (Agresti & Min 2005), so two all-zero sides never give a zero-width
interval. Where the two groups are the same trained runs (one checkpoint per seed evaluated two ways, e.g.
under two RoPE scaling methods: ``same_seeds=True``), the seed term pairs by seed as well: the variance of
the per-seed differences over ``S`` seeds, on ``S − 1`` degrees of freedom, so that a seed effect both
sides share cancels instead of being counted twice. Every function takes ``level`` (default 0.95; e.g.
``1 - 0.05/k`` for Bonferroni over k intervals): ``z`` and every ``t`` are two-sided quantiles at that level.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal


@dataclass(frozen=True)
class Estimate:
    """A point estimate with an interval (95% unless the function was given another ``level``).

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


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), not {level}")


def normal_quantile(level: float = 0.95) -> float:
    """Two-sided standard normal quantile: ``z`` with ``P(|Z| <= z) = level`` (0.95: 1.95996)."""
    _check_level(level)
    return Z95 if level == 0.95 else NormalDist().inv_cdf((1 + level) / 2)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function, modified Lentz (Press et al., *Numerical
    Recipes* 3rd ed., §6.4); converges fast for ``x < (a+1)/(a+b+2)``."""
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def _t_tail(t: float, df: float) -> float:
    """``P(|T| > t)`` for Student's t with ``df`` degrees of freedom: ``I_{df/(df+t²)}(df/2, 1/2)``."""
    a, b, x = df / 2, 0.5, df / (df + t * t)
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


@lru_cache(maxsize=4096)
def t_quantile(df: float, level: float = 0.95) -> float:
    """Two-sided Student-t quantile: ``t`` with ``P(|T_df| <= t) = level`` (df 2, 0.95: 4.303).

    Exact closed forms for ``df`` 1 (``tan(π·level/2)``) and 2 (``level·sqrt(2/(1-level²))``); otherwise
    Newton's method, kept inside ``[z, t_1]``, on the tail ``I_{df/(df+t²)}(df/2, 1/2)`` (regularized
    incomplete beta by continued fraction), started from the Cornish-Fisher expansion in ``z`` (Abramowitz
    & Stegun 26.7.5, four terms); above 1000 degrees of freedom the expansion alone. Relative error below
    1e-10 for levels up to ``1 - 1e-7`` (1e-12 against the closed forms for 3 and 4 df). Non-integer ``df``
    (Welch-Satterthwaite) work the same way.

    Raises:
        ValueError: ``df < 1`` or ``level`` outside (0, 1).
    """
    z = normal_quantile(level)
    if not df >= 1:
        raise ValueError(f"t_quantile needs df >= 1, not {df}")
    if df == 1:
        return math.tan(math.pi * level / 2)
    if df == 2:
        return level * math.sqrt(2 / (1 - level * level))
    t = (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * df**4)
    )
    if df > 1000:
        return t
    lo, hi = z, math.tan(math.pi * level / 2)
    t = min(max(t, lo), hi)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(200):
        excess = _t_tail(t, df) - (1 - level)  # decreasing in t
        lo, hi = (t, hi) if excess > 0 else (lo, t)
        density = 2 * math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))  # of |T|
        step = excess / density
        if abs(step) <= 1e-10 * t:  # Newton's error after this step is of order step²: below rounding
            return t + step
        t = t + step if lo < t + step < hi else (lo + hi) / 2
    return t


def wilson_interval(p: float, n: float, z: float | None = None, *, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a proportion (Wilson 1927, JASA 22:209-212).

    ``(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``; ``p = 0`` gives ``(0, z²/(n+z²))``.

    Args:
        p: observed proportion in [0, 1].
        n: sample size; need not be an integer (an effective sample size works the same way).
        z: normal quantile; None: :func:`normal_quantile` of ``level``.
        level: two-sided coverage when ``z`` is None (default 95%).

    Returns:
        ``(low, high)`` inside [0, 1]; ``(nan, nan)`` for ``n <= 0`` or NaN ``p``.
    """
    z = normal_quantile(level) if z is None else z
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


def batch_means_variance(series: Sequence[np.ndarray], block: int) -> tuple[float, int]:
    """Variance of the mean of autocorrelated values by non-overlapping batch means (Flegal & Jones 2010).

    Each series (one seed's per-sequence values in sequence order, shape ``(N_s,)``, no NaNs) is cut into
    ``N_s // block`` blocks of ``block`` consecutive values (a shorter tail is left out); the blocks of all
    series are pooled and ``V = var(block means, ddof=1) / a`` over the ``a`` blocks. With ``block`` well
    beyond the correlation length, block means are nearly independent and ``V`` estimates the variance of
    the mean, where ``var(values)/N`` would miss every covariance (for lag-1 autocorrelation φ of an AR(1),
    by a factor ``(1+φ)/(1-φ)``). ``block=1`` gives ``var(values, ddof=1)/N``.

    Returns:
        ``(V, a)``; ``a - 1`` is the degrees of freedom of ``V``.

    Raises:
        ValueError: ``block < 1``, or fewer than 2 full blocks.
    """
    if block < 1:
        raise ValueError(f"block must be a positive number of sequences, not {block}")
    means = [v[: v.size // block * block].reshape(-1, block).mean(axis=1) for v in series]
    means = np.concatenate(means) if means else np.empty(0)
    if means.size < 2:
        raise ValueError(f"block={block} leaves {means.size} full block(s); batch means need at least 2")
    return float(means.var(ddof=1)) / means.size, int(means.size)


def _sequence_term(series: Sequence[np.ndarray], block: int | None, level: float) -> float:
    """The sequence variance of the module docstring, already scaled by ``(t_{a-1}/z)²`` with ``block``."""
    if block is None:
        pooled = np.concatenate(series)
        return float(pooled.var(ddof=1)) / pooled.size if pooled.size > 1 else 0.0
    v, a = batch_means_variance(series, block)
    return v * (t_quantile(a - 1, level) / normal_quantile(level)) ** 2


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


def group_estimate(
    values: Sequence[np.ndarray], bounded: bool = True, *, level: float = 0.95, block: int | None = None
) -> Estimate:
    """Mean of a group of seeds with the interval posenc reports (see the module docstring).

    Args:
        values: one 1-D array of per-sequence values per seed, shape ``(N_s,)`` in sequence order; NaNs are
            dropped, and so are seeds left empty.
        bounded: the values are shares in [0, 1] (exact match, token accuracy): Wilson interval at the
            effective sample size. False (loss): normal interval ``mean ± z·sqrt(V)``.
        level: two-sided coverage, default 0.95 (Bonferroni over k intervals: ``1 - 0.05/k``).
        block: None: sequences are independent. An int: the sequence term by batch means over blocks of
            that many consecutive sequences (:func:`batch_means_variance`), for autocorrelated values
            (``lm``); about ``sqrt(N)`` is the usual choice (Flegal & Jones 2010), and it should reach well
            past the correlation length. A NaN dropped from a seed joins its neighbours in one block.

    Returns:
        :class:`Estimate` with ``n_seeds = S`` and ``n_sequences = N_total`` (summed over seeds); all NaN with
        zero counts when no value is left.

    Raises:
        ValueError: ``bounded`` values outside [0, 1]; ``level`` outside (0, 1); ``block`` leaving < 2 blocks.
    """
    z = normal_quantile(level)
    seeds = _clean(values)
    if not seeds:
        return NAN_ESTIMATE
    if bounded:
        _check_shares(seeds)
    means = np.array([v.mean() for v in seeds])
    s, n_total = len(seeds), sum(v.size for v in seeds)
    mean = float(means.mean())
    v_between = float(means.var(ddof=1)) / s * (t_quantile(s - 1, level) / z) ** 2 if s > 1 else 0.0
    v = max(v_between, _sequence_term(seeds, block, level))
    if bounded:
        if v > 0 and 0 < mean < 1:
            n_eff = min(mean * (1 - mean) / v, n_total)  # design effect: never more than N_total trials
        else:
            n_eff = n_total
        low, high = wilson_interval(mean, n_eff, z)
    else:
        half = z * math.sqrt(v)
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


def _seed_term(mats: Sequence[np.ndarray], level: float, same_seeds: bool = False) -> float:
    """``Σ_side var(seed means, ddof=1)/S`` scaled by ``(t_df/z)²``, df by Welch-Satterthwaite:
    ``(Σ v_j)² / Σ v_j²/(S_j - 1)`` over the sides with more than one seed (S − 1 when only one side has).
    ``same_seeds`` (row s of both sides is one trained run): ``var(a_s − b_s, ddof=1)/S`` with ``t_{S−1}``."""
    if same_seeds:
        d = mats[0].mean(axis=1) - mats[1].mean(axis=1)
        if d.size < 2:
            return 0.0
        return float(d.var(ddof=1)) / d.size * (t_quantile(d.size - 1, level) / normal_quantile(level)) ** 2
    parts = [(float(m.mean(axis=1).var(ddof=1)) / len(m), len(m) - 1) for m in mats if len(m) > 1]
    total = sum(v for v, _ in parts)
    if total <= 0:
        return 0.0
    df = max(total**2 / sum(v * v / dof for v, dof in parts), min(dof for _, dof in parts))  # rounding
    return total * (t_quantile(df, level) / normal_quantile(level)) ** 2


def welch_difference(a: Sequence[float], b: Sequence[float], *, level: float = 0.95) -> tuple[float, float, float]:
    """``mean(a) - mean(b)`` of two independent groups of per-seed values (one number per trained model), with
    Welch's t interval: ``± t_df sqrt(var(a)/S_a + var(b)/S_b)``, ``df`` by Welch-Satterthwaite, the seed term
    of :func:`paired_difference`. For per-seed summaries without per-sequence scores (a mean over lengths).

    Returns:
        ``(difference, low, high)``; all NaN when either side has fewer than two values.
    """
    sides = [np.asarray(side, dtype=float).ravel() for side in (a, b)]
    if min(side.size for side in sides) < 2:
        return math.nan, math.nan, math.nan
    difference = float(sides[0].mean() - sides[1].mean())
    half = normal_quantile(level) * math.sqrt(_seed_term([side[:, None] for side in sides], level))
    return difference, difference - half, difference + half


def paired_difference(
    a: Sequence[np.ndarray],
    b: Sequence[np.ndarray],
    bounded: bool = True,
    *,
    level: float = 0.95,
    block: int | None = None,
    same_seeds: bool = False,
) -> Estimate:
    """``mean(a) - mean(b)`` for two groups of seeds scored on the same sequences, paired by sequence.

    ``D_i`` = (mean over a's seeds of ``a_{s,i}``) − (mean over b's seeds of ``b_{s,i}``); its mean is the
    difference of the two groups' means. Variance ``V = max(V_seq, k·V_between)`` with
    ``V_seq = var(D, ddof=1) / N`` (shared per-sequence difficulty cancels in ``D``; with ``block``, batch
    means of ``D`` scaled by ``(t_{a-1}/z)²``) and ``V_between = var(a seed means, ddof=1)/S_a +
    var(b seed means, ddof=1)/S_b`` (a term is 0 for one seed), ``k = (t_df/z)²`` with Welch-Satterthwaite
    ``df`` (``S - 1`` when one side has one seed); with ``same_seeds``, ``V_between = var(a_s − b_s,
    ddof=1)/S`` over the per-seed mean differences and ``k = (t_{S-1}/z)²``. For shares, ``V`` is floored by
    :func:`_paired_floor`.
    Interval ``mean ± z·sqrt(V)``, clipped to [-1, 1] for shares.

    Args:
        a, b: one 1-D array per seed of shape ``(N,)``, sequence ``i`` the same sequence everywhere. Empty
            seeds are dropped. Arrays of different lengths are cut to the shortest (the common prefix:
            sequence i is the same everywhere, so the first N are shared); a sequence with a NaN in any seed
            of either side is left out.
        bounded: the values are shares in [0, 1] (see :func:`group_estimate`).
        level: two-sided coverage, default 0.95.
        block: None, or batch means of ``D`` over blocks of that many consecutive sequences (see
            :func:`group_estimate`).
        same_seeds: seed ``s`` of ``a`` and of ``b`` is one trained run (the same checkpoint evaluated two
            ways): the seed term pairs by seed. Needs as many seeds on both sides, in the same order.

    Returns:
        :class:`Estimate` with ``n_seeds = min(S_a, S_b)`` and ``n_sequences = N`` (sequences per seed);
        all NaN with zero counts when a side has no seed or no sequence is left.

    Raises:
        ValueError: as :func:`group_estimate`; ``same_seeds`` with a different number of seeds per side.
    """
    z = normal_quantile(level)
    sides = [[np.asarray(v, dtype=float).ravel() for v in side] for side in (a, b)]
    if same_seeds and len(sides[0]) != len(sides[1]):
        raise ValueError(f"same_seeds needs one array per seed on both sides, not {len(sides[0])} and {len(sides[1])}")
    if same_seeds:  # a seed empty on one side leaves both: rows stay one run each
        sides = [list(side) for side in zip(*[(x, y) for x, y in zip(*sides) if x.size and y.size])] or [[], []]
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
    v = max(_sequence_term([d], block, level), _seed_term(mats, level, same_seeds))
    if bounded:
        v = max(v, _paired_floor(d))
    half = z * math.sqrt(v)
    low, high = mean - half, mean + half
    if bounded:
        low, high = max(low, -1.0), min(high, 1.0)
    return Estimate(mean, low, high, min(len(m) for m in mats), n)


def sequence_block(task: str, sequences: int) -> int | None:
    """The block length for :func:`posenc.analysis.stats.group_estimate`'s batch means: ``lm``'s evaluation windows are
    consecutive slices of one text (lag-1 autocorrelation 0.2-0.5 measured), so their variance is estimated from
    means of about ``sqrt(n)`` consecutive windows (at least 2 blocks); other tasks draw independent sequences
    (None)."""
    if task != "lm" or sequences < 4:
        return None
    return max(1, min(round(math.sqrt(sequences)), sequences // 2))
