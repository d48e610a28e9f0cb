"""posenc.functional.bias: ALiBi slopes and biases against the paper and its reference code."""

import pytest
import torch

from posenc import functional as pf

# --- ALiBi (Press et al. 2022) ---------------------------------------------------------------------------


def test_alibi_slopes_8_heads_are_the_papers_sequence():
    expected = torch.tensor([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
    torch.testing.assert_close(pf.alibi_slopes(8), expected)


def test_alibi_slopes_12_heads_interleave_the_16_head_sequence():
    # 8 heads' slopes, then the odd-indexed slopes of 16 heads (2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5),
    # as in the authors' reference code for head counts that are not powers of two.
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(pf.alibi_slopes(12, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 16, 24])
def test_alibi_slopes_are_distinct_and_in_unit_interval(n):
    slopes = pf.alibi_slopes(n)
    assert slopes.shape == (n,) and len(set(slopes.tolist())) == n
    assert ((slopes > 0) & (slopes < 1)).all()


def test_alibi_bias_is_minus_slope_times_distance():
    bias = pf.alibi_bias(torch.tensor([0.5, 0.25]), torch.arange(3), torch.arange(3))
    assert bias.shape == (2, 3, 3)
    torch.testing.assert_close(bias[0].tril(), torch.tensor([[0.0, 0, 0], [-0.5, 0, 0], [-1.0, -0.5, 0]]))
    torch.testing.assert_close(bias[1, 2, 0], torch.tensor(-0.5))
