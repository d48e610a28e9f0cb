"""posenc.analysis.stats: empirical coverage of the 95% intervals on simulated seeds and sequences with a known truth.

Each regime draws ``SIMS`` groups of ``S = 3`` seeds with ``N = 64`` sequences each from a model with a
random seed effect and a known population mean, and counts how often the interval holds that mean. With
1500 simulations a coverage of 0.95 has a standard error of 0.0056, so the 0.93 threshold is 3.5 standard
errors below it (1000 where the sequence spread dominates and the coverage is near 0.99); the streams are
seeded, so every run sees the same draws. The z = 1.96 seed term these tests
replace covered 0.83-0.87 where the seed spread dominates (Student's t with 2 df: P(|T_2| < 1.96) = 0.81).

Model. Shares: seed ``s`` solves sequence ``i`` when ``ρ·c_i + sqrt(1-ρ²)·ε_si < Φ⁻¹(p_s)``, with
``p_s = expit(logit(p0) + sd·u_s)``, ``u, c, ε`` standard normal, so ``P(solve | seed) = p_s`` and the truth
is ``E[p_s]`` (Gauss-Hermite). ``c_i`` is the sequence's difficulty: independent per seed (ρ = 0) for
groups, the sequences :func:`posenc.analysis.stats.group_estimate` counts as independent; shared by every seed of
both sides (ρ = 0.7) for paired differences. Losses: ``μ + sd·u_s + c_i + e_si`` with ``e`` a centred
exponential (skewed, as losses are).
"""

import math
from statistics import NormalDist

import numpy as np
import pytest

from posenc.analysis.stats import group_estimate, paired_difference

SIMS, S, N = 1500, 3, 64
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(60)
PROBIT = np.vectorize(NormalDist().inv_cdf)


def expit(x):
    return 1 / (1 + np.exp(-x))


def shares(rng: np.random.Generator, p0: float, sd: float, c: np.ndarray, rho: float):
    """0/1 values, shape ``(sims, S, N)``, and their population mean; ``c``: difficulty ``(sims, S|1, N)``."""
    logit = math.log(p0 / (1 - p0))
    p = expit(logit + sd * rng.standard_normal((len(c), S, 1)))
    latent = rho * c + math.sqrt(1 - rho**2) * rng.standard_normal((len(c), S, N))
    truth = float(WEIGHTS @ expit(logit + sd * NODES) / WEIGHTS.sum())
    return (latent < PROBIT(p)).astype(float), truth


def losses(rng: np.random.Generator, mu: float, sd: float, c: np.ndarray) -> tuple[np.ndarray, float]:
    """Loss values of shape ``(sims, S, N)`` and their mean ``mu``; ``c``: difficulty, ``(sims, S|1, N)``."""
    e = rng.exponential(size=(len(c), S, N)) - 1
    return mu + sd * rng.standard_normal((len(c), S, 1)) + c + e, mu


# groups: (kind, p0 or μ, seed-effect sd, on the logit scale for shares); pairs: (kind, side a, side b)
GROUPS = {
    "shares, seed spread": ("shares", 0.4, 0.6),
    "shares near 0, seed spread": ("shares", 0.1, 0.6),
    "shares, sequence spread": ("shares", 0.4, 0.05),
    "losses, seed spread": ("losses", 2.0, 0.3),
    "losses, sequence spread": ("losses", 2.0, 0.02),
}
PAIRS = {
    "paired shares, seed spread": ("shares", (0.6, 0.6), (0.4, 0.6)),
    "paired shares, sequence spread": ("shares", (0.6, 0.05), (0.4, 0.05)),
    "paired losses, seed spread": ("losses", (2.0, 0.3), (2.5, 0.3)),
    "paired losses, sequence spread": ("losses", (2.0, 0.02), (2.5, 0.02)),
}


def group_coverage(name: str, estimate=group_estimate, sims: int = SIMS, **kwargs) -> float:
    """Share of ``sims`` simulated groups of regime ``name`` whose interval holds the true mean."""
    kind, mu, sd = GROUPS[name]
    rng = np.random.default_rng(sorted(GROUPS).index(name))
    c = rng.standard_normal((sims, S, N))  # each seed its own sequences
    x, truth = shares(rng, mu, sd, c, rho=0.0) if kind == "shares" else losses(rng, mu, sd, c)
    ests = [estimate(list(g), bounded=kind == "shares", **kwargs) for g in x]
    return float(np.mean([e.low <= truth <= e.high for e in ests]))


def paired_coverage(name: str, estimate=paired_difference, sims: int = SIMS, **kwargs) -> float:
    """Share of ``sims`` simulated pairs of groups of regime ``name`` whose interval holds the true
    difference."""
    kind, side_a, side_b = PAIRS[name]
    rng = np.random.default_rng(100 + sorted(PAIRS).index(name))
    c = rng.standard_normal((sims, 1, N))  # the same sequences for every seed of both sides
    if kind == "shares":
        (a, ta), (b, tb) = shares(rng, *side_a, c, rho=0.7), shares(rng, *side_b, c, rho=0.7)
    else:
        (a, ta), (b, tb) = losses(rng, *side_a, c), losses(rng, *side_b, c)
    ests = [estimate(list(x), list(y), bounded=kind == "shares", **kwargs) for x, y in zip(a, b)]
    return float(np.mean([e.low <= ta - tb <= e.high for e in ests]))


def sims_for(name: str) -> int:
    return 1000 if "sequence spread" in name else SIMS


@pytest.mark.parametrize("name", list(GROUPS))
def test_group_coverage(name):
    assert group_coverage(name, sims=sims_for(name)) >= 0.93


@pytest.mark.parametrize("name", list(PAIRS))
def test_paired_coverage(name):
    assert paired_coverage(name, sims=sims_for(name)) >= 0.93


def test_coverage_at_a_bonferroni_level():
    # level 1 - 0.05/5 = 0.99, where t with 2 df is 9.92 (z: 2.58); a standard error of 0.003 at 1000
    assert group_coverage("losses, seed spread", sims=1000, level=0.99) >= 0.98
    assert paired_coverage("paired shares, seed spread", sims=1000, level=0.99) >= 0.98


def test_block_coverage_on_autocorrelated_sequences():
    # one seed (no seed term), 512 values of an AR(1) with lag-1 autocorrelation 0.5 around a known 0:
    # independence gives an interval sqrt(3) too narrow, batch means over blocks of 16 restore it
    rng = np.random.default_rng(7)
    n, phi, sims = 512, 0.5, 1000
    e = rng.standard_normal((sims, n))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / math.sqrt(1 - phi**2)
    for i in range(1, n):
        x[:, i] = phi * x[:, i - 1] + e[:, i]

    def cover(**kwargs):
        ests = [group_estimate([v], bounded=False, **kwargs) for v in x]
        return float(np.mean([e.low <= 0 <= e.high for e in ests]))

    assert cover() < 0.8
    assert cover(block=16) >= 0.92
