"""Randomized position sampling (posenc/functional/randomized.py): Ruoss et al. 2023."""

import pytest
import torch

from posenc import functional as pf


def test_randomized_positions_are_a_sorted_subset_of_the_range():
    for length, top in [(1, 1), (10, 10), (64, 8192), (500, 2048)]:
        pos = pf.randomized_positions(length, top)
        assert pos.shape == (length,) and pos.dtype == torch.long
        assert (pos[1:] > pos[:-1]).all() and pos.min() >= 0 and pos.max() < top
    torch.testing.assert_close(pf.randomized_positions(10, 10), torch.arange(10))


def test_randomized_positions_follow_the_generator():
    a = pf.randomized_positions(50, 1000, torch.Generator().manual_seed(1))
    b = pf.randomized_positions(50, 1000, torch.Generator().manual_seed(1))
    c = pf.randomized_positions(50, 1000, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(5)
    d = pf.randomized_positions(50, 1000)
    torch.manual_seed(5)
    assert torch.equal(d, pf.randomized_positions(50, 1000))


def test_randomized_positions_refuse_more_positions_than_the_range():
    with pytest.raises(ValueError, match="max_position"):
        pf.randomized_positions(11, 10)


@pytest.mark.parametrize("seed", range(5))
def test_fire_mlp_piecewise_equals_the_mlp_and_its_gradients(seed):
    """The piecewise-linear form is the same function, with the same parameter gradients."""
    g = torch.Generator().manual_seed(seed)
    w1, b1 = torch.randn(32, 1, generator=g, dtype=torch.float64), torch.randn(32, generator=g, dtype=torch.float64)
    w1[3, 0] = 0.0  # a constant unit (no kink)
    w1[5], b1[5] = w1[4], b1[4]  # two units with the same kink
    w2, b2 = torch.randn(4, 32, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)
    kinks = -b1[w1[:, 0] != 0] / w1[w1[:, 0] != 0, 0]
    x = torch.cat((torch.rand(300, generator=g, dtype=torch.float64) * 6 - 3, kinks))  # on the kinks too
    params = [p.clone().requires_grad_() for p in (w1, b1, w2, b2)]
    reference = pf.fire_mlp(x, *params)
    torch.testing.assert_close(pf.fire_mlp_piecewise(x, pf.fire_mlp_pieces(*params)), reference)
    away = (x[:, None] - kinks).abs().min(dim=1).values > 1e-6  # ReLU has no derivative on a kink
    weights = torch.randn(reference.shape, generator=g, dtype=torch.float64) * away
    expected = torch.autograd.grad((reference * weights).sum(), params)
    got = torch.autograd.grad((pf.fire_mlp_piecewise(x, pf.fire_mlp_pieces(*params)) * weights).sum(), params)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_fire_mlp_pieces_without_kinks_is_affine():
    w1, b1 = torch.zeros(3, 1), torch.tensor([1.0, -1.0, 2.0])  # constant units: relu(b1) = 1, 0, 2
    w2, b2 = torch.tensor([[1.0, 5.0, 1.0]]), torch.tensor([0.5])
    breakpoints, slopes, intercepts = pf.fire_mlp_pieces(w1, b1, w2, b2)
    assert breakpoints.numel() == 0 and slopes.tolist() == [[0.0]] and intercepts.tolist() == [[3.5]]
    torch.testing.assert_close(
        pf.fire_mlp_piecewise(torch.tensor([-7.0, 0.3]), (breakpoints, slopes, intercepts)),
        pf.fire_mlp(torch.tensor([-7.0, 0.3]), w1, b1, w2, b2),
    )
