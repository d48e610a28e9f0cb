"""posenc.functional.learned_bias: T5 buckets, KERPLE (log), FIRE, randomized position sampling.

Reference numbers are either from the reference implementation (T5 buckets) or worked out by hand.
"""

import math

import pytest
import torch
from rounding import gamma, unit_roundoff

from posenc import functional as pf

# Hugging Face transformers 5.23.0, T5Attention._relative_position_bucket(relative_position=REL, ...),
# computed once in a scratch script (transformers is not a test dependency). REL is key - query (j - i).
REL = [0, -1, -2, -7, -8, -15, -16, -17, -20, -31, -32, -50, -64, -100, -127, -128, -129, -500, -1000, 1, 5]
HF_UNIDIRECTIONAL_32_128 = [0, 1, 2, 7, 8, 15, 16, 16, 17, 21, 21, 24, 26, 30, 31, 31, 31, 31, 31, 0, 0]
HF_BIDIRECTIONAL_32_128 = [0, 1, 2, 7, 8, 9, 10, 10, 10, 11, 12, 13, 14, 15, 15, 15, 15, 15, 15, 17, 21]
HF_UNIDIRECTIONAL_16_64 = [0, 1, 2, 7, 8, 10, 10, 10, 11, 13, 13, 15, 15, 15, 15, 15, 15, 15, 15, 0, 0]
# Same function, relative_position = -arange(141), unidirectional, 32 buckets, max_distance 128.
HF_UNIDIRECTIONAL_DISTANCES_0_140 = (
    list(range(16)) + [16] * 3 + [17] * 2 + [18] * 3 + [19] * 3 + [20] * 4 + [21] * 4 + [22] * 5 + [23] * 6
    + [24] * 6 + [25] * 7 + [26] * 8 + [27] * 10 + [28] * 10 + [29] * 12 + [30] * 14 + [31] * 28
)  # fmt: skip


# --- T5 ------------------------------------------------------------------------------------------------


def test_t5_buckets_match_hugging_face():
    rel = torch.tensor(REL)
    assert pf.t5_relative_bucket(rel).tolist() == HF_UNIDIRECTIONAL_32_128
    assert pf.t5_relative_bucket(rel, 32, 128, bidirectional=True).tolist() == HF_BIDIRECTIONAL_32_128
    assert pf.t5_relative_bucket(rel, num_buckets=16, max_distance=64).tolist() == HF_UNIDIRECTIONAL_16_64
    assert len(HF_UNIDIRECTIONAL_DISTANCES_0_140) == 141
    assert pf.t5_relative_bucket(-torch.arange(141)).tolist() == HF_UNIDIRECTIONAL_DISTANCES_0_140


def test_t5_buckets_keep_shape_and_are_monotone_in_distance():
    rel = -torch.arange(2000).view(40, 50)
    buckets = pf.t5_relative_bucket(rel)
    assert buckets.shape == rel.shape and buckets.dtype == torch.long
    flat = buckets.flatten()
    assert (flat[1:] >= flat[:-1]).all() and flat.min() == 0 and flat.max() == 31


def test_t5_bucket_rejects_a_max_distance_inside_the_exact_range():
    with pytest.raises(ValueError, match="max_distance"):
        pf.t5_relative_bucket(torch.arange(3), num_buckets=32, max_distance=16)


def test_t5_bias_reads_the_table_at_the_bucket_of_j_minus_i():
    table = torch.randn(32, 3, dtype=torch.float64)
    q, k = torch.arange(100, 140), torch.arange(140)
    bias = pf.t5_bias(table, q, k)
    assert bias.shape == (3, 40, 140) and bias.dtype == torch.float64
    buckets = pf.t5_relative_bucket(k[None, :] - q[:, None])
    for h in range(3):
        torch.testing.assert_close(bias[h], table[buckets, h])


def test_t5_bias_depends_only_on_i_minus_j():
    table = torch.randn(32, 2)
    q, k = torch.arange(30), torch.arange(30)
    torch.testing.assert_close(pf.t5_bias(table, q + 1000, k + 1000), pf.t5_bias(table, q, k))
    bias = pf.t5_bias(table, q, k)
    for d in range(30):  # constant along each diagonal i - j = d
        diag = torch.diagonal(bias, offset=-d, dim1=1, dim2=2)
        torch.testing.assert_close(diag, diag[:, :1].expand_as(diag))


# --- KERPLE --------------------------------------------------------------------------------------------


def test_kerple_log_bias_by_hand():
    r1 = torch.tensor([1.0, 0.5], dtype=torch.float64)
    r2 = torch.tensor([2.0, 0.25], dtype=torch.float64)
    bias = pf.kerple_log_bias(r1, r2, torch.tensor([3, 10]), torch.tensor([0, 3, 10]))
    assert bias.shape == (2, 2, 3) and bias.dtype == torch.float64
    # head 0: -1 * log(1 + 2 d); head 1: -0.5 * log(1 + d / 4); d = |i - j|
    expected = torch.tensor([
        [[-math.log(7), 0.0, -math.log(15)], [-math.log(21), -math.log(15), 0.0]],
        [[-0.5 * math.log(1.75), 0.0, -0.5 * math.log(2.75)],
         [-0.5 * math.log(3.5), -0.5 * math.log(2.75), 0.0]],
    ], dtype=torch.float64)  # fmt: skip
    torch.testing.assert_close(bias, expected)


def test_kerple_log_bias_depends_only_on_distance_and_does_not_increase_with_it():
    r1, r2 = torch.rand(4) * 2 + 0.01, torch.rand(4) + 0.01
    pos = torch.arange(200)
    torch.testing.assert_close(
        pf.kerple_log_bias(r1, r2, pos[150:], pos), pf.kerple_log_bias(r1, r2, pos[150:] + 7, pos + 7)
    )
    row = pf.kerple_log_bias(r1, r2, pos[-1:], pos)[:, 0].flip(-1)  # distances 0, 1, ..., 199
    assert (row[:, 0] == 0).all()
    assert (row[:, 1:] <= row[:, :-1]).all()


# --- FIRE ----------------------------------------------------------------------------------------------


def test_fire_psi_by_hand():
    c = torch.tensor(0.1, dtype=torch.float64)
    x = torch.tensor([0.0, 10.0, 90.0], dtype=torch.float64)
    expected = torch.tensor([0.0, math.log(2), math.log(10)], dtype=torch.float64)
    torch.testing.assert_close(pf.fire_psi(x, c), expected)
    torch.testing.assert_close(pf.fire_psi(x, -c), pf.fire_psi(x, c))  # |c x|, as the reference code


def test_fire_normalisation_by_hand_uses_max_of_threshold_and_query_position():
    c, threshold = torch.tensor(1.0, dtype=torch.float64), torch.tensor(4.0, dtype=torch.float64)
    q, k = torch.tensor([2, 4, 8]), torch.arange(9)
    got = pf.fire_normalized_distance(q, k, c, threshold, eps=0.0)
    assert got.shape == (3, 9) and got.dtype == torch.float64
    # query 2 < L = 4: normaliser psi(4) = log 5; query 4: log 5; query 8 > L: psi(8) = log 9
    assert got[0, 0].item() == pytest.approx(math.log(3) / math.log(5))
    assert got[1, 0].item() == pytest.approx(1.0)
    assert got[1, 3].item() == pytest.approx(math.log(2) / math.log(5))
    assert got[2, 0].item() == pytest.approx(1.0)
    assert got[2, 5].item() == pytest.approx(math.log(4) / math.log(9))
    assert (got[torch.arange(3), q] == 0).all()  # distance 0


def test_fire_normalisation_is_constant_below_the_threshold_and_bounded_at_any_length():
    c, threshold = torch.tensor(0.1), torch.tensor(64.0)
    pos = torch.arange(5000)
    norm = pf.fire_normalized_distance(pos[[10, 40, 63, 64, 1000, 4999]], pos, c, threshold)
    # the same distance d = 5 below L: psi(5) / psi(L) whatever the query
    d5 = norm[torch.arange(3), torch.tensor([5, 35, 58])]
    torch.testing.assert_close(d5, torch.full_like(d5, math.log1p(0.5) / (math.log1p(6.4) + 1e-6)))
    causal = norm[torch.tensor([[10], [40], [63], [64], [1000], [4999]]) >= pos[None, :]]
    assert causal.min() >= 0 and causal.max() <= 1
    # j = 0 from query i > L: psi(i) / (psi(i) + 1e-6), i.e. 1 less at most 1e-6 / psi(L), and a few float32
    # roundings (log1p, products, the division: 4 u)
    assert norm[5, 0].item() == pytest.approx(1.0, abs=1e-6 / math.log1p(6.4) + 4 * unit_roundoff(torch.float32))


def test_fire_mlp_by_hand():
    w1 = torch.tensor([[1.0], [-1.0]])
    b1 = torch.zeros(2)
    w2 = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
    b2 = torch.tensor([0.0, 1.0])
    out = pf.fire_mlp(torch.tensor([[0.5, -0.5]]), w1, b1, w2, b2)
    assert out.shape == (2, 1, 2)
    # x = 0.5: hidden (0.5, 0) -> (0.5, 2); x = -0.5: hidden (0, 0.5) -> (0.5, 1)
    torch.testing.assert_close(out, torch.tensor([[[0.5, 0.5]], [[2.0, 1.0]]]))


def test_fire_bias_is_the_mlp_of_the_normalised_distance():
    g = torch.Generator().manual_seed(0)
    c, threshold = torch.tensor(0.1, dtype=torch.float64), torch.tensor(16.0, dtype=torch.float64)
    w1, b1, w2, b2 = (torch.randn(*s, generator=g, dtype=torch.float64) for s in [(8, 1), (8,), (3, 8), (3,)])
    q, k = torch.arange(20, 30), torch.arange(30)
    bias = pf.fire_bias(q, k, c, threshold, w1, b1, w2, b2)
    assert bias.shape == (3, 10, 30) and bias.dtype == torch.float64
    x = pf.fire_normalized_distance(q, k, c, threshold)
    hidden = torch.relu(x[..., None] * w1[:, 0] + b1)
    torch.testing.assert_close(bias, torch.einsum("qkm,hm->hqk", hidden, w2) + b2[:, None, None])


# --- gradients -----------------------------------------------------------------------------------------


def test_every_bias_is_differentiable_in_its_parameters():
    q, k = torch.arange(40), torch.arange(40)
    table = torch.randn(32, 2, requires_grad=True)
    pf.t5_bias(table, q, k).sum().backward()
    assert (table.grad[:23] != 0).all() and (table.grad[23:] == 0).all()  # distances <= 39: buckets <= 22

    r1, r2 = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([0.5, 0.1], requires_grad=True)
    pf.kerple_log_bias(r1, r2, q, k).sum().backward()
    assert (r1.grad != 0).all() and (r2.grad != 0).all()

    params = [torch.tensor(0.1), torch.tensor(8.0), torch.randn(4, 1), torch.randn(4), torch.randn(2, 4)]
    params = [p.requires_grad_() for p in [*params, torch.randn(2)]]
    pf.fire_bias(q, k, *params).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)


def test_fire_mlp_on_the_unit_interval_is_the_mlp_with_straight_units_folded():
    torch.manual_seed(3)
    w1, b1 = torch.empty(32, 1).uniform_(-1, 1), torch.empty(32).uniform_(-1, 1)
    w1[0, 0], b1[0] = 0.0, 0.7  # a constant unit
    w1[1, 0], b1[1] = 2.0, -1.0  # kink at 0.5: bends
    w1[2, 0], b1[2] = -1.0, 1.0  # kink at 1: straight on [0, 1]
    w2, b2 = torch.randn(4, 32), torch.randn(4)
    w, b, w2_, slope, intercept = pf.fire_mlp_on_unit_interval(w1, b1, w2, b2)
    kinks = -b1 / w1[:, 0]
    assert w.numel() == int(((kinks > 0) & (kinks < 1)).sum()) < 32 and 1.0 * 2 in w.tolist()
    x = torch.linspace(0, 1, 101)
    folded = (
        slope[:, None] * x + intercept[:, None] + (w2_[:, :, None] * torch.relu(w[:, None] * x + b[:, None])).sum(1)
    )
    # both sides sum the 32 units' w2 relu(w1 x + b1) (the folded side its slope and intercept too) in float32:
    # each output at most gamma(3 * 32 + 4) of the magnitudes summed, sum_i |w2_i| (|w1_i x| + |b1_i|) + |b2|
    magnitude = w2.abs() @ (w1.abs() * x + b1.abs()[:, None]) + b2.abs()[:, None]  # [4, 101]
    assert ((folded - pf.fire_mlp(x, w1, b1, w2, b2)).abs() <= 2 * gamma(100, torch.float32) * magnitude).all()
