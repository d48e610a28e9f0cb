"""posenc.functional's xPos at any length: xpos_relative_scores and xpos_last_rotations against float64
references built from the formula itself (Sun et al. 2023, eq. 11)."""

import math

import pytest
import torch
from rounding import attention_bound, xpos_score_bound

from posenc import functional as pf
from posenc.encoders.base import MAX_LENGTH


def rotated(length: int, head_dim: int, positions: torch.Tensor, seed: int = 0, dtype=torch.float32):
    """RoPE-rotated queries and keys ``[2, length, head_dim]`` at ``positions``, in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, length, head_dim, generator=g, dtype=torch.float64) for _ in range(2))
    inv = pf.rope_inv_freq(head_dim, dtype=torch.float64)
    return pf.apply_rope(q, positions, inv).to(dtype), pf.apply_rope(k, positions, inv).to(dtype)


def relative_reference(q, k, q_pos, k_pos, gamma, scale_base):
    """float64 ``sum_j Re(q_j conj k_j) zeta_j**((m-n)/scale_base)``, the decay from the distance alone;
    entries with the key after the query are left at 0 (only causal entries are compared)."""
    q, k = q.double(), k.double()
    zeta = pf.xpos_zeta(q.shape[-1], gamma)
    distance = (q_pos.double()[:, None] - k_pos.double()[None, :]).clamp(min=0) / scale_base
    out = 0
    for j in range(q.shape[-1] // 2):
        pair = q[..., 2 * j : 2 * j + 2] @ k[..., 2 * j : 2 * j + 2].transpose(-1, -2)
        out = out + pair * torch.exp(distance * math.log(zeta[j]))
    return out


def absolute_reference(q, k, positions, gamma, scale_base):
    """float64 scores of the factorisation from absolute positions: queries times ``zeta**(m/scale_base)``,
    keys times ``zeta**(-n/scale_base)`` (finite at short lengths only)."""
    power = positions.double() / scale_base
    scale = (pf.xpos_zeta(q.shape[-1], gamma)[None, :] ** power[:, None]).repeat_interleave(2, dim=-1)
    return (q.double() * scale) @ (k.double() / scale).transpose(-1, -2)


def causal(length_q: int, length_k: int, offset: int = 0) -> torch.Tensor:
    """``[length_q, length_k]`` mask of query ``offset + i`` against key ``j <= offset + i``."""
    return torch.arange(length_k)[None, :] <= torch.arange(offset, offset + length_q)[:, None]


@pytest.mark.parametrize("scale_base", [8.0, 512.0])
def test_relative_scores_equal_the_absolute_formula_at_short_lengths(scale_base):
    """(a) Where zeta**(±n/scale_base) from absolute positions is finite (300 tokens at scale_base 8: factors
    up to e**47), the relative computation gives its scores to float32 accuracy."""
    length, d = 300, 16
    positions = torch.arange(length)
    q, k = rotated(length, d, positions)
    want = absolute_reference(q, k, positions, 0.4, scale_base)
    assert torch.isfinite(want).all()
    got = pf.xpos_relative_scores(q, k, positions, positions, 0.4, scale_base)
    assert got.dtype == torch.float32 and got.shape == (2, length, length)
    mask = causal(length, length)
    bound = xpos_score_bound(q, k, positions, positions, scale_base)  # the float64 reference: exact beside it
    assert ((got.double() - want).abs()[:, mask] <= bound[:, mask]).all()
    # and the same as the centred factorisation (apply_xpos's tables: the decay is their modulus)
    rq, rk = pf.xpos_rotations(positions, pf.rope_inv_freq(d), d, 0.4, scale_base, torch.complex128)
    decay_q, decay_k = (r.abs().repeat_interleave(2, dim=-1) for r in (rq, rk))
    centred = (q.double() * decay_q) @ (k.double() * decay_k).transpose(-1, -2)
    torch.testing.assert_close(centred[:, mask], want[:, mask])


@pytest.mark.parametrize("length", [8192, MAX_LENGTH])
def test_relative_scores_are_finite_and_exact_at_long_lengths(length):
    """(b) At 8192 tokens and posenc's longest sequence, with scale_base 16 (the headline's L = 32), every
    score is finite and equals the float64 formula of the distance; the far ones underflow to 0."""
    d, n = (8, 16) if length == 8192 else (4, 4)
    positions = torch.arange(length)
    q, k = rotated(length, d, positions)
    for start in (0, length // 2, length - n):
        rows = slice(start, start + n)
        got = pf.xpos_relative_scores(q[:, rows], k, positions[rows], positions, 0.4, 16.0)
        assert torch.isfinite(got).all()  # every entry, the unspecified future ones included
        want = relative_reference(q[:, rows], k, positions[rows], positions, 0.4, 16.0)
        mask = causal(n, length, start)
        bound = xpos_score_bound(q[:, rows], k, positions[rows], positions, 16.0)
        assert ((got.double() - want).abs()[:, mask] <= bound[:, mask]).all()
    assert got[:, :, 0].abs().max() < 1e-30  # the first key, a whole sequence away: decayed to (almost) 0


@pytest.mark.parametrize("length", [8192, MAX_LENGTH])
def test_last_rotations_are_finite_and_exact_for_the_last_query(length):
    """(b) xpos_last_rotations' tables are finite at any length, every factor at most 1, and score the last
    query exactly (what `posenc kernels` reads)."""
    d = 8
    positions = torch.arange(length)
    rq, rk = pf.xpos_last_rotations(positions, pf.rope_inv_freq(d), d, 0.4, 16.0)
    assert torch.isfinite(torch.view_as_real(rq)).all() and torch.isfinite(torch.view_as_real(rk)).all()
    assert rq.abs().max() <= 1 + 1e-6 and rk.abs().max() <= 1 + 1e-6
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, d, generator=g), torch.randn(length, d, generator=g)
    got = pf.apply_rotation(q, rq[-1:]) @ pf.apply_rotation(k, rk).T  # [1, length]
    inv = pf.rope_inv_freq(d).double()  # the tables' own (float32) frequencies: the formula at them
    rotated_q = pf.apply_rope(q.double(), positions[-1:], inv)
    rotated_k = pf.apply_rope(k.double(), positions, inv)
    want = relative_reference(rotated_q, rotated_k, positions[-1:], positions, 0.4, 16.0)
    # the query factor is 1 (no query_log_scale); the fp32 tables' rotations carry 2 roundings each side
    bound = xpos_score_bound(rotated_q, rotated_k, positions[-1:], positions, 16.0, 0.0, 4, torch.float32)
    assert ((got.double() - want).abs() <= bound).all()


@pytest.mark.parametrize("length", [300, 8192])
def test_relative_scores_are_unchanged_by_shifting_every_position(length):
    """(c) Shifting queries' and keys' positions by one constant leaves the scores as they were (the
    rotation's rounding apart): they depend on the distance only."""
    d = 8
    rows = slice(length - 64, length)
    scores = []
    for shift in (0, 1000, 500_000):
        positions = torch.arange(length) + shift
        q, k = rotated(length, d, positions)
        scores.append(pf.xpos_relative_scores(q[:, rows], k, positions[rows], positions, 0.4, 16.0))
        assert torch.isfinite(scores[-1]).all()
    mask = causal(64, length, length - 64)
    # each shift's queries and keys are the same float64 vectors rotated elsewhere and rounded to fp32 (one
    # rounding each), and each side's scores are within score_bound of the formula's
    positions = torch.arange(length)
    q, k = rotated(length, d, positions)
    bound = 2 * xpos_score_bound(q[:, rows], k, positions[rows], positions, 16.0, inputs=2)[:, mask]
    for other in scores[1:]:
        assert ((other[:, mask] - scores[0][:, mask]).abs() <= bound).all()


def test_relative_scores_take_any_positions_and_broadcast():
    """Unsorted, spread-out positions (many query windows), keys broadcast against the queries."""
    positions = torch.randperm(20_000, generator=torch.Generator().manual_seed(5))[:200].double()
    q, k = rotated(200, 8, positions, dtype=torch.float64)
    got = pf.xpos_relative_scores(q[:1], k, positions, positions, 0.4, 4.0)  # [1, ...] against [2, ...]
    assert got.shape == (2, 200, 200) and torch.isfinite(got).all()
    want = relative_reference(q[:1], k, positions, positions, 0.4, 4.0)
    mask = positions[None, :] <= positions[:, None]
    bound = xpos_score_bound(q[:1], k, positions, positions, 4.0)  # float64 both sides
    assert ((got - want).abs()[:, mask] <= bound[:, mask]).all()


@pytest.mark.parametrize(
    ("length", "n_heads", "scale_base"), [(1, 1, 4.0), (77, 3, 2.0), (300, 2, 4.0), (1000, 1, 16.0), (1000, 3, 512.0)]
)
def test_window_attention_equals_the_float64_softmax_of_the_formula(length, n_heads, scale_base):
    """Fused attention window by window (windows of about 96 positions at scale_base 4, so many windows and
    lengths that are not multiples of them; one window at scale_base 512) gives the float64 softmax of the
    distance formula's scores, scaled by 1/sqrt(h_d)."""
    d = 8
    positions = torch.arange(length)
    g = torch.Generator().manual_seed(length)
    q, k = (torch.randn(2, n_heads, length, d, generator=g, dtype=torch.float64) for _ in range(2))
    inv = pf.rope_inv_freq(d, dtype=torch.float64)
    q, k = pf.apply_rope(q, positions, inv).float(), pf.apply_rope(k, positions, inv).float()
    v = torch.randn(2, n_heads, length, d, generator=g)
    got = pf.xpos_window_attention(q, k, v, 0.4, scale_base)
    scores = relative_reference(q, k, positions, positions, 0.4, scale_base) / math.sqrt(d)
    want = scores.masked_fill(~causal(length, length), -math.inf).softmax(-1) @ v.double()
    assert got.dtype == torch.float32 and got.shape == q.shape
    # fp32 attention of scores each within score_bound / sqrt(h_d) of the formula's (tests/rounding.py)
    scores_off = xpos_score_bound(q, k, positions, positions, scale_base) / math.sqrt(d)
    assert ((got.double() - want).abs() <= attention_bound(q, k, v, bias_error=scores_off)).all()
