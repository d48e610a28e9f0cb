"""posenc.functional.rotary: RoPE, the NTK-aware base and xPos against the papers' math and hand-computed numbers."""

import math

import pytest
import torch
from formula_tolerances import DTYPES, tol
from rounding import gamma, unit_roundoff

from posenc import functional as pf

# --- RoPE (Su et al. 2021) and NTK-aware base -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_inv_freq_formula(dtype):
    inv = pf.rope_inv_freq(8, base=10000.0, dtype=dtype)
    # a float64 pow (2 u) rounded to dtype, against decimals rounded to dtype: 4 roundings, no cancellation
    torch.testing.assert_close(inv, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=dtype), **tol(dtype, 4, 1.0))


def test_rope_inv_freq_rejects_odd_dim():
    with pytest.raises(ValueError):
        pf.rope_inv_freq(7)


def test_ntk_base_is_plain_rope_at_factor_one():
    assert pf.ntk_base(10000.0, 64, 1.0) == 10000.0


def test_ntk_base_reference_number_and_lowest_frequency_scaled_by_factor():
    assert pf.ntk_base(10000.0, 64, 4.0) == pytest.approx(10000.0 * 4.0 ** (64 / 62), rel=1e-12)
    assert pf.ntk_base(10000.0, 32, 8.0) == pytest.approx(10000.0 * 8.0 ** (32 / 30), rel=1e-12)
    plain = pf.rope_inv_freq(32, 10000.0, dtype=torch.float64)
    scaled = pf.rope_inv_freq(32, pf.ntk_base(10000.0, 32, 8.0), dtype=torch.float64)
    assert scaled[0] == plain[0]  # highest frequency untouched
    assert scaled[-1].item() == pytest.approx(plain[-1].item() / 8.0, rel=1e-12)  # lowest slowed by s


def test_ntk_base_rejects_bad_arguments():
    with pytest.raises(ValueError):
        pf.ntk_base(10000.0, 2, 2.0)
    with pytest.raises(ValueError):
        pf.ntk_base(10000.0, 64, 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_apply_rope_preserves_norms_dtype_and_shape(dtype):
    x = torch.randn(2, 3, 50, 16, dtype=dtype)
    out = pf.apply_rope(x, torch.arange(50), pf.rope_inv_freq(16, dtype=dtype))
    assert out.shape == x.shape and out.dtype == dtype
    # each norm: 16 squares summed and a sqrt (17 roundings); each rotated pair moved by a complex product and
    # its table entry (3 roundings, relative to the pair's |x0| + |x1| <= sqrt(2) |pair|)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), **tol(dtype, 2 * 17 + 3, 2.0))


def test_apply_rope_is_identity_at_position_zero():
    x = torch.randn(4, 1, 8, dtype=torch.float64)
    torch.testing.assert_close(pf.apply_rope(x, torch.zeros(1), pf.rope_inv_freq(8)), x)


def test_apply_rope_matches_explicit_rotation_matrices():
    """Build RoFormer's block-diagonal R_m (eq. 15) by hand and compare."""
    d, m = 6, 5
    inv = pf.rope_inv_freq(d, dtype=torch.float64)
    x = torch.randn(d, dtype=torch.float64)
    rotation = torch.zeros(d, d, dtype=torch.float64)
    for j in range(d // 2):
        c, s = math.cos(m * inv[j]), math.sin(m * inv[j])
        rotation[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    out = pf.apply_rope(x[None, :], torch.tensor([m]), inv)[0]
    torch.testing.assert_close(out, rotation @ x, **tol(torch.float64))  # float64 on both sides: a few roundings


def _rotation_bound(x, exact, dtype):
    """How far apply_rotation's result may be from the float64 formula ``exact`` rounded to ``dtype``: each
    output is a two-term complex product in the compute dtype (float32 for 16-bit inputs), whose table entries
    are rounded once (3 roundings, relative to the pair's |x0| + |x1|), and both results round once to dtype."""
    compute = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    pair = x.double().abs().unflatten(-1, (-1, 2)).sum(-1, keepdim=True).expand(*x.shape[:-1], -1, 2).flatten(-2)
    return gamma(3, compute) * pair * (1 + unit_roundoff(dtype)) + 2 * unit_roundoff(dtype) * exact.abs()


def _real_pair_rotation(x, positions, inv_freq):
    """The textbook real form: (x0 cos - x1 sin, x0 sin + x1 cos) per pair, in float64."""
    angles = torch.outer(positions.double(), inv_freq.double())
    x0, x1 = x.double()[..., 0::2], x.double()[..., 1::2]
    out = torch.stack((x0 * angles.cos() - x1 * angles.sin(), x0 * angles.sin() + x1 * angles.cos()), -1)
    return out.flatten(-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_apply_rotation_on_a_strided_qkv_slice_equals_the_real_formula(dtype):
    b, s, h, d = 2, 40, 3, 8
    qkv = torch.randn(b, s, 3 * h * d).to(dtype)
    for part in range(3):  # q, k, v slices of a fused projection: strided views, offsets 0, h*d, 2*h*d
        x = qkv[..., part * h * d : (part + 1) * h * d].view(b, s, h, d).transpose(1, 2)
        inv = pf.rope_inv_freq(d, dtype=torch.float64)
        table = torch.complex128 if dtype == torch.float64 else torch.complex64
        out = pf.apply_rotation(x, pf.rope_rotation(torch.arange(s), inv, table))
        assert out.dtype == dtype and out.shape == x.shape
        exact = _real_pair_rotation(x, torch.arange(s), inv)
        assert ((out.double() - exact.to(dtype).double()).abs() <= _rotation_bound(x, exact, dtype)).all()
    odd = torch.randn(2, 5, 9)[..., 1:]  # odd storage offset: copied before the complex view
    exact = _real_pair_rotation(odd, torch.arange(5), pf.rope_inv_freq(8))
    got = pf.apply_rotation(odd, pf.rope_rotation(torch.arange(5), pf.rope_inv_freq(8)))
    assert ((got.double() - exact.float().double()).abs() <= _rotation_bound(odd, exact, torch.float32)).all()


def test_apply_rotation_gradient_is_the_inverse_rotation():
    x = torch.randn(3, 10, 8, dtype=torch.float64, requires_grad=True)
    rotation = pf.rope_rotation(torch.arange(10), pf.rope_inv_freq(8), torch.complex128)
    grad = torch.randn(3, 10, 8, dtype=torch.float64)
    pf.apply_rotation(x, rotation).backward(grad)
    # float64 both ways: one complex product each (2 roundings), values O(1)
    torch.testing.assert_close(x.grad, pf.apply_rotation(grad, rotation.conj()), **tol(torch.float64, 4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_score_depends_only_on_relative_position(dtype):
    d = 32
    inv = pf.rope_inv_freq(d, dtype=dtype)
    q, k = torch.randn(d, dtype=dtype), torch.randn(d, dtype=dtype)

    def score(m, n):
        qm = pf.apply_rope(q[None], torch.tensor([m]), inv)[0]
        kn = pf.apply_rope(k[None], torch.tensor([n]), inv)[0]
        return qm @ kn

    # angles are computed in float64 (at most 8300 rad: 8300 u64 off) and rounded into the table (u of dtype):
    # each rotated component 3 roundings beside that; the 32-term dot product 32 more; both scores, over
    # sum |q_t k_t| (cancellation): 2 * (gamma(35) + 8300 u64) * sum |q_t k_t|
    bound = 2 * (gamma(35, dtype) + 8300 * unit_roundoff(torch.float64)) * float((q.abs() * k.abs()).sum())
    for m, n, shift in [(5, 2, 100), (10, 10, 3000), (0, 7, 8000), (300, 1, 4096)]:
        torch.testing.assert_close(score(m, n), score(m + shift, n + shift), atol=bound, rtol=0)


def test_rope_long_term_decay_of_the_upper_bound():
    """RoFormer §3.4.3: (1/(d/2)) * sum_i |S_i| of the partial sums decays with relative distance."""
    d = 128
    inv = pf.rope_inv_freq(d, dtype=torch.float64)
    distances = torch.tensor([1.0, 16.0, 256.0])
    angles = distances[:, None] * inv[None, :]
    partial = torch.cumsum(torch.exp(1j * angles.to(torch.complex128)), dim=1)
    bound = partial.abs().mean(dim=1)
    assert bound[0] > bound[1] > bound[2]


# --- xPos (Sun et al. 2023) ------------------------------------------------------------------------------


def test_xpos_zeta_formula():
    # float64 both ways: a sum and a division each (and the decimals' rounding): 4 roundings, no cancellation
    want = torch.tensor([0.4, 0.65, 0.9, 1.15], dtype=torch.float64) / 1.4
    torch.testing.assert_close(pf.xpos_zeta(8, gamma=0.4), want, **tol(torch.float64, 4, 1.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_xpos_score_is_rope_score_times_zeta_power(dtype):
    d, sb = 8, 512.0
    inv = pf.rope_inv_freq(d, dtype=dtype)
    positions = torch.arange(40)
    q, k = torch.randn(1, 40, d, dtype=dtype), torch.randn(1, 40, d, dtype=dtype)
    xq, xk = pf.apply_xpos(q, k, positions, inv, gamma=0.4, scale_base=sb)
    assert xq.dtype == dtype and xq.shape == q.shape
    rq, rk = pf.apply_rope(q, positions, inv), pf.apply_rope(k, positions, inv)
    zeta = pf.xpos_zeta(d, 0.4, dtype=dtype)
    m, n = 37, 4
    pair_scores = (rq[0, m] * rk[0, n]).view(d // 2, 2).sum(-1)  # each pair's contribution
    expected = (pair_scores * zeta ** ((m - n) / sb)).sum()
    # each side: rotation (3 roundings), xPos's zeta**(+-t/sb) (pow 2, its exponent 1, the product 1), the
    # 8-term sum (8): 15; over sum |q_t k_t| times zeta's largest power (<= 1.2 here), the result may cancel
    magnitude = 1.2 * float((q[0, m].abs() * k[0, n].abs()).sum())
    torch.testing.assert_close(xq[0, m] @ xk[0, n], expected, **tol(dtype, 2 * 15, magnitude))


def test_xpos_scores_decay_with_distance():
    """With rotation switched off (inv_freq = 0) and positive q, k, the score is sum_j q_j k_j zeta_j**((m-n)/sb)."""
    d = 16
    positions = torch.arange(4096)
    q = torch.ones(1, 4096, d, dtype=torch.float64)
    xq, xk = pf.apply_xpos(q, q.clone(), positions, torch.zeros(d // 2, dtype=torch.float64))
    scores = xk[0, : 4096 - 1 : 512] @ xq[0, -1]  # query at the end, keys ever closer
    assert torch.all(scores[1:] > scores[:-1])
    # float64: zeta**(+-100/512) (pow 2, exponent 1, product 1) per term, 16 terms summed, result d = 16
    torch.testing.assert_close(
        xq[0, 100] @ xk[0, 100], torch.tensor(float(d), dtype=torch.float64), **tol(torch.float64, 4 + 16, 2.0)
    )


def test_xpos_score_is_translation_invariant():
    d = 16
    inv = pf.rope_inv_freq(d, dtype=torch.float64)
    q, k = torch.randn(1, 1, d, dtype=torch.float64), torch.randn(1, 1, d, dtype=torch.float64)

    def score(m, n, length):
        positions = torch.arange(length)
        xq, _ = pf.apply_xpos(q.expand(1, length, d), k.expand(1, length, d), positions, inv)
        _, xk = pf.apply_xpos(q.expand(1, length, d), k.expand(1, length, d), positions, inv)
        return xq[0, m] @ xk[0, n]

    # float64: angles up to 110 rad (110 u off), the table, rotation and xPos scaling (7 roundings) and the
    # 16-term dot product, over sum |q_t k_t|; both sides
    magnitude = 2 * float((q.abs() * k.abs()).sum()) * (1 + 110)
    torch.testing.assert_close(score(10, 3, 20), score(110, 103, 200), **tol(torch.float64, 7 + 16, magnitude))
