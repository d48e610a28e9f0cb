"""posenc.stats: Wilson's interval against hand and published numbers, group and paired estimates."""

import math

import numpy as np
import pytest

from posenc.stats import (
    Z95,
    Estimate,
    exact_match_halfwidth,
    group_estimate,
    paired_difference,
    wilson_interval,
)

Z2 = Z95**2


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
    # little spread: p(1-p)/V = 0.25/0.0001 = 2500 trials, capped at the 64 sequences there are
    near = group_estimate([np.full(32, 0.49), np.full(32, 0.51)])
    assert (near.low, near.high) == pytest.approx(wilson_interval(0.5, 64))


def test_group_drops_nans_and_empty_seeds():
    est = group_estimate([np.array([1.0, np.nan, 0.0, 1.0]), np.array([]), np.array([np.nan])])
    assert (est.n_seeds, est.n_sequences, est.mean) == (1, 3, pytest.approx(2 / 3))
    empty = group_estimate([np.array([]), np.array([np.nan, np.nan])])
    assert (empty.n_seeds, empty.n_sequences) == (0, 0)
    assert all(math.isnan(x) for x in (empty.mean, empty.low, empty.high))
    assert group_estimate([]).format() == "—"


def test_group_unbounded_loss_by_hand():
    # seed means 2 and 3: V_between = 0.5/2 = 0.25; pooled var 5.5/5 = 1.1, /6 = 0.183 -> V = 0.25
    est = group_estimate([np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])], bounded=False)
    assert est.mean == 2.5
    assert (est.low, est.high) == (pytest.approx(2.5 - Z95 * 0.5), pytest.approx(2.5 + Z95 * 0.5))
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
    # a's two seeds differ by a constant 1: D is constant (V_seq = 0), V_between = var([m, m+1])/2 = 0.25
    x = np.linspace(2.0, 3.0, 10)
    est = paired_difference([x, x + 1], [x, x], bounded=False)
    assert est.mean == pytest.approx(0.5) and est.half_width == pytest.approx(Z95 * 0.5)


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
