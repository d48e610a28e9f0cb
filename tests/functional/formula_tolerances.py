"""Dtypes and tolerances shared by the formula tests of tests/functional/."""

import torch
from rounding import gamma

DTYPES = [torch.float32, torch.float64]


def tol(dtype, roundings: int = 20, magnitude: float = 8.0):
    """``assert_close`` tolerances for a closed-form formula of O(1) inputs evaluated two ways in ``dtype``:
    each side at most ``roundings`` roundings deep, every operation of condition <= 1 (products, sums, sin,
    cos, pow of exponents <= 1), over terms at most ``magnitude`` times the result's scale (so a sum that
    cancels is covered): ``gamma(roundings) * magnitude``, relative and absolute (tests/rounding.py). With the
    defaults 9.5e-6 in float32 and 1.8e-14 in float64, whatever the machine sums in which order."""
    bound = gamma(roundings, dtype) * magnitude
    return {"atol": bound, "rtol": bound}
