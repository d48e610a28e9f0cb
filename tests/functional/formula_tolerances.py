"""Dtypes and tolerances shared by the formula tests of tests/functional/."""

import torch


DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-12}
