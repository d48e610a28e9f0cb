"""posenc.analysis.stats: Wilson's interval against hand and published numbers, group and paired estimates."""

import math

import numpy as np
import pytest

from posenc.analysis.stats import (
    Z95,
    Estimate,
    batch_means_variance,
    exact_match_halfwidth,
    group_estimate,
    normal_quantile,
    paired_difference,
    t_quantile,
    welch_difference,
    wilson_interval,
)

Z2 = Z95**2
T1, T2 = 12.706204736174707, 4.302652729749464  # two-sided 95% Student-t quantiles, 1 and 2 df


def ones_then_zeros(n_ones: int, n: int) -> np.ndarray:
    """0/1 exact-match values: the first ``n_ones`` sequences solved."""
    return (np.arange(n) < n_ones).astype(float)


# --- Wilson ---------------------------------------------------------------------------------------------


def test_wilson_by_hand():
    # p = 0.5, n = 64: center (0.5 + z²/128)/(1 + z²/64) = 0.5; half z/(1 + z²/64)·sqrt(0.25/64 + z²/16384)
    # = 1.959964/1.060023 · sqrt(0.00390625 + 0.00023447) = 1.848982 · 0.0643484 = 0.118979
    low, high = wilson_interval(0.5, 64)
    assert (low, high) == (pytest.approx(0.381021, abs=1e-6), pytest.approx(0.618979, abs=1e-6))


@pytest.mark.parametrize(
    "successes, n, expected",  # the standard reference values of Wilson's 95% interval for n = 10
    [(0, 10, (0.0, 0.2775)), (10, 10, (0.7225, 1.0)), (5, 10, (0.2366, 0.7634))],
)
def test_wilson_published(successes, n, expected):
    low, high = wilson_interval(successes / n, n)
    assert low == pytest.approx(expected[0], abs=1e-4)
    assert high == pytest.approx(expected[1], abs=1e-4)


def test_wilson_zero_success_and_effective_n():
    assert wilson_interval(0.0, 37.5) == (0.0, pytest.approx(Z2 / (37.5 + Z2)))  # non-integer n is fine
    low, high = wilson_interval(1.0, 37.5)
    assert (low, high) == (pytest.approx(37.5 / (37.5 + Z2)), 1.0)


@pytest.mark.parametrize("p, n", [(0.5, 0), (0.5, -3), (math.nan, 10)])
def test_wilson_undefined(p, n):
    assert all(math.isnan(x) for x in wilson_interval(p, n))


def test_wilson_inside_unit_interval_and_contains_p():
    rng = np.random.default_rng(0)
    for p, n in zip(rng.uniform(0, 1, 200), rng.uniform(0.1, 500, 200)):
        low, high = wilson_interval(p, n)
        assert 0 <= low <= p <= high <= 1


def test_exact_match_halfwidth_chooses_64():
    assert 0.11 < exact_match_halfwidth(64) <= 0.12
    assert exact_match_halfwidth(64, p=0.9) < exact_match_halfwidth(64)  # p = 0.5 is the widest
    assert exact_match_halfwidth(256) < exact_match_halfwidth(64)


# --- Estimate ------------------------------------------------------------------------------------------


def test_estimate_format_and_half_width():
    est = Estimate(0.958, 0.931, 0.975, 3, 192)
    assert est.format() == "0.958 [0.931, 0.975]"
    assert est.format(2) == "0.96 [0.93, 0.97]"
    assert est.half_width == pytest.approx(0.022)
    assert Estimate(0.41, 0.3, 0.52, 1, 64).format(2, signed=True) == "+0.41 [0.30, 0.52]"
    assert Estimate(-0.1, -0.2, 0.0, 1, 64).format(1, signed=True) == "-0.1 [-0.2, 0.0]"
    assert Estimate(math.nan, math.nan, math.nan, 0, 0).format() == "—"


# --- group_estimate ------------------------------------------------------------------------------------


def test_group_single_seed_by_hand():
    # 32 of 64 solved: V_within = var(ddof=1)/64 = (0.25·64/63)/64 = 0.25/63 -> n_eff = p(1-p)/V = 63
    est = group_estimate([ones_then_zeros(32, 64)])
    assert (est.mean, est.n_seeds, est.n_sequences) == (0.5, 1, 64)
    assert (est.low, est.high) == pytest.approx(wilson_interval(0.5, 63))


def test_group_all_zero_seeds_never_zero_width():
    est = group_estimate([np.zeros(64)] * 3)
    assert (est.mean, est.low, est.n_seeds, est.n_sequences) == (0.0, 0.0, 3, 192)
    assert est.high == pytest.approx(Z2 / (192 + Z2)) and est.high > 0
    top = group_estimate([np.ones(64)] * 3)
    assert (top.low, top.high) == (pytest.approx(192 / (192 + Z2)), 1.0)


def test_group_stays_in_unit_interval():
    rng = np.random.default_rng(1)
    for _ in range(50):
        seeds = [rng.binomial(1, rng.uniform(), size=rng.integers(1, 40)).astype(float) for _ in range(3)]
        for values in (seeds, [rng.uniform(size=20)], [np.ones(5), np.zeros(5)]):
            est = group_estimate(values)
            assert 0 <= est.low <= est.mean <= est.high <= 1


def test_group_seed_disagreement_widens():
    seeds = [ones_then_zeros(k, 64) for k in (13, 32, 51)]  # seed means ≈ 0.2, 0.5, 0.8
    spread = group_estimate(seeds)
    pooled = group_estimate([np.concatenate(seeds)])  # the same values as if from one seed
    assert spread.mean == pytest.approx(pooled.mean)
    assert spread.half_width > 2 * pooled.half_width


def test_group_design_effect_cap():
    # token accuracy all 0.5: no spread at all -> n_eff = N_total
    flat = group_estimate([np.full(64, 0.5)])
    assert (flat.low, flat.high) == pytest.approx(wilson_interval(0.5, 64))
    # little spread: V = (t_1/z)²·var([0.499, 0.501])/2 = 42.03·1e-6, p(1-p)/V = 0.25/4.2e-5 ≈ 5950 trials,
    # capped at the 64 sequences there are
    near = group_estimate([np.full(32, 0.499), np.full(32, 0.501)])
    assert (near.low, near.high) == pytest.approx(wilson_interval(0.5, 64))


def test_group_drops_nans_and_empty_seeds():
    est = group_estimate([np.array([1.0, np.nan, 0.0, 1.0]), np.array([]), np.array([np.nan])])
    assert (est.n_seeds, est.n_sequences, est.mean) == (1, 3, pytest.approx(2 / 3))
    empty = group_estimate([np.array([]), np.array([np.nan, np.nan])])
    assert (empty.n_seeds, empty.n_sequences) == (0, 0)
    assert all(math.isnan(x) for x in (empty.mean, empty.low, empty.high))
    assert group_estimate([]).format() == "—"


def test_group_unbounded_loss_by_hand():
    # seed means 2 and 3: V_between = 0.5/2 = 0.25 with 1 df, so half-width t_1·0.5 = 6.35 (the seeds' own
    # t-interval); pooled var 5.5/5 = 1.1, /6 = 0.183 -> z·sqrt(0.183) = 0.84 is the smaller
    est = group_estimate([np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])], bounded=False)
    assert est.mean == 2.5
    assert (est.low, est.high) == (pytest.approx(2.5 - T1 * 0.5), pytest.approx(2.5 + T1 * 0.5))
    same = group_estimate([np.full(8, 3.7)] * 2, bounded=False)
    assert same.low == same.high == pytest.approx(3.7)


def test_group_bounded_rejects_losses():
    with pytest.raises(ValueError, match="bounded"):
        group_estimate([np.array([2.3, 1.9])])


# --- paired_difference ---------------------------------------------------------------------------------


def shared_difficulty(n: int = 200, seeds: int = 3, seed: int = 0) -> tuple[list, list]:
    """Exact match of two groups on sequences of shared difficulty: a solves the easiest ~70%, b ~40%."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(size=n)
    a = [(difficulty < 0.7 + rng.normal(0, 0.02)).astype(float) for _ in range(seeds)]
    b = [(difficulty < 0.4 + rng.normal(0, 0.02)).astype(float) for _ in range(seeds)]
    return a, b


def test_paired_identical_sides():
    a, _ = shared_difficulty()
    est = paired_difference(a, a)
    assert est.mean == 0 and est.low < 0 < est.high
    assert (est.n_seeds, est.n_sequences) == (3, 200)


def test_paired_all_zero_sides_floor_by_hand():
    # Wald+2 floor: discordant counts 0, each + 0.5 over n + 2 = 66 -> variance (1/66)/66, sd 1/66
    est = paired_difference([np.zeros(64)] * 3, [np.zeros(64)] * 3)
    assert (est.low, est.high) == (pytest.approx(-Z95 / 66), pytest.approx(Z95 / 66))


def test_paired_clear_difference_excludes_zero():
    est = paired_difference([np.ones(64)] * 3, [np.zeros(64)] * 3)
    assert est.mean == 1 and 0 < est.low and est.high == 1.0  # clipped to [-1, 1]
    a, b = shared_difficulty()
    est = paired_difference(a, b)
    assert est.low > 0 and est.mean == pytest.approx(np.mean(a) - np.mean(b))
    flipped = paired_difference(b, a)
    assert flipped.high < 0 and flipped.mean == pytest.approx(-est.mean)


@pytest.mark.parametrize("bounded", [True, False])
def test_pairing_narrows_against_shuffled_order(bounded):
    a, b = shared_difficulty()
    order = np.random.default_rng(5).permutation(200)  # breaks the pairing, keeps every seed's mean
    paired = paired_difference(a, b, bounded=bounded)
    shuffled = paired_difference(a, [v[order] for v in b], bounded=bounded)
    assert paired.mean == pytest.approx(shuffled.mean)
    assert paired.half_width < 0.8 * shuffled.half_width


def test_paired_unbounded_by_hand():
    # D = [1, 0, 1, -1]: mean 0.25, var(ddof=1) = 2.75/3, V_seq = 2.75/12
    est = paired_difference([np.array([1.0, 2.0, 3.0, 4.0])], [np.array([0.0, 2.0, 2.0, 5.0])], bounded=False)
    assert est.mean == 0.25 and est.half_width == pytest.approx(Z95 * math.sqrt(2.75 / 12))


def test_paired_seed_term():
    # a's two seeds differ by a constant 1: D is constant (V_seq = 0), V_between = var([m, m+1])/2 = 0.25,
    # 1 df (b has one seed): half-width t_1·0.5
    x = np.linspace(2.0, 3.0, 10)
    est = paired_difference([x, x + 1], [x, x], bounded=False)
    assert est.mean == pytest.approx(0.5) and est.half_width == pytest.approx(T1 * 0.5)


def test_paired_by_seed_when_both_sides_are_the_same_runs():
    # seed effects 0, 1, 2 shared by both sides cancel in a_s − b_s = 1, 1, 1.5: var 1/12, over 3 seeds, on
    # t_2; unpaired, each side's seed variance (1 and 1.0833) counts instead
    x = np.linspace(2.0, 3.0, 10)
    a, b = [x + s for s in (0, 1, 2)], [x + s - d for s, d in zip((0, 1, 2), (1, 1, 1.5))]
    est = paired_difference(a, b, bounded=False, same_seeds=True)
    assert est.mean == pytest.approx(7 / 6) and est.half_width == pytest.approx(T2 * math.sqrt(1 / 12 / 3))
    assert est.low > 0 > paired_difference(a, b, bounded=False).low  # unpaired (Welch, 4 df), 0 is inside
    assert paired_difference(a, b[::-1], bounded=False, same_seeds=True).half_width > est.half_width  # order
    with pytest.raises(ValueError, match="same_seeds needs one array per seed on both sides, not 3 and 2"):
        paired_difference(a, b[:2], bounded=False, same_seeds=True)
    # a seed empty on one side leaves the pair: the rest stay paired run for run
    gap = paired_difference([*a, x], [*b, np.empty(0)], bounded=False, same_seeds=True)
    assert gap == est


def test_paired_loss_values_unclipped():
    a = [np.array([2.1, 3.5, 2.8, 4.0]) + s for s in (0.0, 0.1)]
    b = [np.array([1.1, 2.4, 1.9, 3.1])]
    est = paired_difference(a, b, bounded=False)
    # D = (1.0, 1.1, 0.9, 0.9) + 0.05 (a's seed mean): mean 1.025, interval not clipped at 1
    assert est.mean == pytest.approx(1.025) and est.low > 0 and est.high > 1
    with pytest.raises(ValueError, match="bounded"):
        paired_difference(a, b)


def test_paired_truncates_to_common_prefix_and_drops_nans():
    a, b = shared_difficulty(n=64)
    short = [v[:60] for v in b]
    assert paired_difference(a, short) == paired_difference([v[:60] for v in a], short)
    assert paired_difference(a, short).n_sequences == 60
    holed = [v.copy() for v in a]
    holed[1][7] = np.nan
    keep = np.arange(64) != 7
    assert paired_difference(holed, b) == paired_difference([v[keep] for v in a], [v[keep] for v in b])
    assert paired_difference(a[:1], b).n_seeds == 1
    assert math.isnan(paired_difference([np.array([])], b).mean)


# --- quantiles ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "df, level, expected",  # published two-sided Student-t quantiles (tables print the first 3-4 digits)
    [
        (1, 0.95, 12.7062047362),
        (2, 0.95, 4.3026527297),
        (3, 0.95, 3.1824463053),
        (4, 0.95, 2.7764451052),
        (5, 0.95, 2.5705818356),
        (10, 0.95, 2.2281388520),
        (30, 0.95, 2.0422724563),
        (100, 0.95, 1.9839715185),
        (1, 0.99, 63.6567411629),
        (2, 0.99, 9.9248432009),
        (3, 0.99, 5.8409093097),
        (30, 0.99, 2.7499956536),
    ],
)
def test_t_quantile_published(df, level, expected):
    assert t_quantile(df, level) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99, 1 - 0.05 / 40, 0.9999])
def test_t_quantile_closed_forms(level):
    # 4 df has a closed-form quantile (Hill 1970): α = 4p(1-p) at the one-sided p,
    # t = 2·sqrt(cos(acos(√α)/3)/√α - 1)
    alpha = 4 * ((1 + level) / 2) * (1 - (1 + level) / 2)
    exact = 2 * math.sqrt(math.cos(math.acos(math.sqrt(alpha)) / 3) / math.sqrt(alpha) - 1)
    assert t_quantile(4, level) == pytest.approx(exact, rel=1e-12)
    # 3 df has a closed-form CDF: P(|T| <= t) = (2/π)·(atan(t/√3) + √3·t/(3 + t²))
    t = t_quantile(3, level)
    covered = 2 / math.pi * (math.atan(t / math.sqrt(3)) + math.sqrt(3) * t / (3 + t * t))
    assert covered == pytest.approx(level, abs=1e-13)


def test_t_quantile_shape():
    assert t_quantile(1) == pytest.approx(T1, rel=1e-14) and t_quantile(2) == pytest.approx(T2, rel=1e-14)
    ladder = [t_quantile(df) for df in (1, 1.5, 2, 2.5, 3, 7, 50, 1e3, 1e5, 1e7)]
    assert all(x > y for x, y in zip(ladder, ladder[1:])) and ladder[-1] > Z95  # falls to z with df
    assert t_quantile(1e7) == pytest.approx(Z95, rel=1e-6)
    assert t_quantile(1000.5) == pytest.approx(t_quantile(1000), rel=1e-6)  # the expansion takes over
    for bad in (0.5, 0, math.nan):
        with pytest.raises(ValueError, match="df"):
            t_quantile(bad)
    for bad in (0, 1, 95):
        with pytest.raises(ValueError, match="level"):
            t_quantile(3, bad)


def test_normal_quantile_levels():
    assert normal_quantile() == Z95
    assert normal_quantile(0.99) == pytest.approx(2.5758293035489, abs=1e-12)
    assert normal_quantile(1 - 0.05 / 20) == pytest.approx(3.0233414397, abs=1e-9)  # Bonferroni, 20 claims
    assert wilson_interval(0.3, 50, level=0.99) == wilson_interval(0.3, 50, normal_quantile(0.99))
    assert wilson_interval(0.3, 50, Z95) == wilson_interval(0.3, 50)


# --- t-corrected seed term, level -----------------------------------------------------------------------


def test_group_three_seeds_loss_by_hand():
    # seed means 2, 3, 4: V_between = 1/3, 2 df -> half-width t_2·sqrt(1/3) = 2.484 (the seeds' own
    # t-interval); pooled: 9 values of variance 12/8 -> z·sqrt(1.5/9) = 0.80 is the smaller
    seeds = [np.array([1.0, 2.0, 3.0]) + k for k in range(3)]
    est = group_estimate(seeds, bounded=False)
    assert est.mean == 3 and est.half_width == pytest.approx(T2 * math.sqrt(1 / 3))
    # at level 0.99: t_2 = 9.925
    at_99 = group_estimate(seeds, bounded=False, level=0.99)
    assert at_99.half_width == pytest.approx(9.9248432009 / math.sqrt(3))


def test_group_shares_three_seeds_by_hand():
    # seed means 0.35, 0.56, 0.25 on 64 sequences: V_between = var/3 = 0.008344, times (t_2/z)² = 4.819
    seeds = [ones_then_zeros(k, 64) for k in (round(0.35 * 64), round(0.56 * 64), 16)]
    means = np.array([v.mean() for v in seeds])
    v = means.var(ddof=1) / 3 * (T2 / Z95) ** 2
    p = means.mean()
    est = group_estimate(seeds)
    assert (est.low, est.high) == pytest.approx(wilson_interval(p, p * (1 - p) / v))


def test_losses_never_narrower_than_the_seeds_t_interval():
    rng = np.random.default_rng(3)
    for _ in range(100):
        s = int(rng.integers(2, 6))
        sizes = rng.integers(2, 80, size=s)
        seeds = [rng.normal(rng.normal(0, rng.uniform(0, 1)), 1, size=int(k)) for k in sizes]
        means = np.array([v.mean() for v in seeds])
        for level in (0.95, 0.999):
            t_half = t_quantile(s - 1, level) * means.std(ddof=1) / math.sqrt(s)
            assert group_estimate(seeds, bounded=False, level=level).half_width >= t_half * (1 - 1e-12)


def test_level_widens_and_one_seed_has_no_seed_term():
    one = [ones_then_zeros(32, 64)]
    assert group_estimate(one, level=0.99) == Estimate(0.5, *wilson_interval(0.5, 63, level=0.99), 1, 64)
    seeds = [ones_then_zeros(k, 64) for k in (20, 32, 40)]
    widths = [group_estimate(seeds, level=lv).half_width for lv in (0.9, 0.95, 0.99, 1 - 0.05 / 20)]
    assert all(x < y for x, y in zip(widths, widths[1:]))
    a, b = shared_difficulty()
    widths = [paired_difference(a, b, level=lv).half_width for lv in (0.9, 0.95, 0.99)]
    assert all(x < y for x, y in zip(widths, widths[1:]))
    with pytest.raises(ValueError, match="level"):
        group_estimate(seeds, level=95)


def test_paired_welch_satterthwaite_by_hand():
    # seeds shift every value by a constant, so D is constant per side combination (V_seq = 0)
    x = np.linspace(0.0, 1.0, 20)
    a = [x + c for c in (0.0, 1.0, 2.0)]  # seed means' variance 1, /3
    b = [x + c for c in (0.0, 0.5, 1.0)]  # 0.25, /3
    va, vb = 1 / 3, 0.25 / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)  # ≈ 2.88, between 2 and 4
    est = paired_difference(a, b, bounded=False)
    assert 2 < df < 4 and est.half_width == pytest.approx(t_quantile(df) * math.sqrt(va + vb))
    equal = paired_difference(a, [x + c for c in (0.0, 1.0, 2.0)], bounded=False)  # equal sides: 4 df
    assert equal.half_width == pytest.approx(t_quantile(4) * math.sqrt(2 / 3))
    single = paired_difference(a, [x], bounded=False)  # b has one seed: a's 2 df
    assert single.half_width == pytest.approx(T2 * math.sqrt(va))


# --- batch means for autocorrelated sequences ------------------------------------------------------------


def ar1(rng: np.random.Generator, phi: float, shape: tuple[int, int]) -> np.ndarray:
    """Stationary AR(1) series with unit innovations along the last axis, shape ``shape``."""
    e = rng.standard_normal(shape)
    x = np.empty(shape)
    x[..., 0] = e[..., 0] / math.sqrt(1 - phi**2)
    for i in range(1, shape[-1]):
        x[..., i] = phi * x[..., i - 1] + e[..., i]
    return x


def test_batch_means_ar1_variance_of_the_mean():
    phi, n, reps = 0.4, 1024, 1000
    x = ar1(np.random.default_rng(0), phi, (reps, n))
    k = np.arange(1, n)
    true = (1 + 2 * np.sum((1 - k / n) * phi**k)) / (1 - phi**2) / n  # exact variance of an AR(1) mean
    assert x.mean(axis=1).var() == pytest.approx(true, rel=0.1)  # the simulation agrees
    naive = np.mean([v.var(ddof=1) / n for v in x])
    batch = np.mean([batch_means_variance([v], 32)[0] for v in x])
    assert naive / true < 0.5  # (1-φ)/(1+φ) = 0.43: independence misses the covariances
    assert 0.85 < batch / true < 1.05
    assert batch_means_variance([v for v in x[:3]], 32)[1] == 96  # blocks pooled over seeds


def test_batch_means_edges():
    v = np.arange(10.0)
    assert batch_means_variance([v], 1) == (pytest.approx(v.var(ddof=1) / 10), 10)
    # blocks of 4: means 1.5 and 5.5, the tail 8, 9 left out
    assert batch_means_variance([v], 4) == (pytest.approx(np.var([1.5, 5.5], ddof=1) / 2), 2)
    for block in (0, 6):
        with pytest.raises(ValueError, match="block"):
            batch_means_variance([v], block)


def test_group_and_paired_block_by_hand():
    x = ar1(np.random.default_rng(1), 0.5, (1, 256))[0]
    v, a = batch_means_variance([x], 16)
    est = group_estimate([x], bounded=False, block=16)
    assert a == 16 and est.half_width == pytest.approx(t_quantile(15) * math.sqrt(v))
    assert est.half_width > group_estimate([x], bounded=False).half_width
    paired = paired_difference([x + 1], [np.zeros(256)], bounded=False, block=16)
    assert paired.mean == pytest.approx(x.mean() + 1) and paired.half_width == pytest.approx(est.half_width)
    with pytest.raises(ValueError, match="block"):
        group_estimate([x[:20]], bounded=False, block=16)


def test_welch_difference_is_welchs_t_interval_on_per_seed_values():
    """Equal spreads and seeds: Welch-Satterthwaite df = 2(S-1) = 4, half width t_4 sqrt(2 var/S); fewer than two
    values on a side leaves nothing to estimate."""
    a, b = [0.1, 0.2, 0.3], [0.0, 0.1, 0.2]
    difference, low, high = welch_difference(a, b)
    half = t_quantile(4) * math.sqrt(2 * 0.01 / 3)
    assert difference == pytest.approx(0.1) and (low, high) == pytest.approx((0.1 - half, 0.1 + half))
    assert t_quantile(4) == pytest.approx(2.776445105197793)  # the table's value: df is 4, not 2 or infinity
    assert all(math.isnan(v) for v in welch_difference([0.5], b))
    assert welch_difference([0.2, 0.2], [0.1, 0.1]) == pytest.approx((0.1, 0.1, 0.1))
