"""posenc.functional.absolute: the sinusoidal table against the paper's formula and hand-computed numbers."""

import math

import pytest
import torch
from formula_tolerances import DTYPES, tol

from posenc import functional as pf

# --- sinusoidal (Vaswani et al. 2017, §3.5) -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinusoidal_matches_formula_and_keeps_dtype(dtype):
    positions = torch.tensor([0.0, 1.0, 7.0], dtype=dtype)
    table = pf.sinusoidal_table(positions, dim=4)
    assert table.shape == (3, 4) and table.dtype == dtype
    # p[i, 2t] = sin(i / 10000**(2t/4)), p[i, 2t+1] = cos(...): frequencies 1 and 1/100
    expected = torch.tensor(
        [[0.0, 1.0, 0.0, 1.0],
         [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
         [math.sin(7), math.cos(7), math.sin(0.07), math.cos(0.07)]],
        dtype=dtype,
    )  # fmt: skip
    torch.testing.assert_close(table, expected, **tol(dtype))


def test_sinusoidal_integer_positions_and_odd_dim():
    table = pf.sinusoidal_table(torch.arange(5), dim=5)
    assert table.shape == (5, 5) and table.dtype == torch.float32
    torch.testing.assert_close(table[:, 4], torch.sin(torch.arange(5.0) / 10000 ** (4 / 5)))


def test_sinusoidal_rows_are_unique_over_long_range():
    table = pf.sinusoidal_table(torch.arange(8192), dim=128, base=10000.0)
    distances = torch.cdist(table[:2048], table[:2048])
    distances.fill_diagonal_(float("inf"))
    assert distances.min() > 1e-3
