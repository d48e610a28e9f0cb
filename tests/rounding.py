"""Rounding-error bounds for the numerical tests, derived from the computation (dtype, number of summed terms,
magnitudes) rather than from one machine's rounding.

Summation order is the kernel's choice and differs between CPU types (AVX2 and AVX-512 split a dot product
into different lanes) and thread counts, so every bound here is Higham's worst case over all orders
(Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1): a sum of ``n`` floating-point terms is off
by at most ``gamma(n) * sum|terms|`` with ``gamma(n) = n u / (1 - n u)`` and ``u`` the unit roundoff (half
the dtype's machine epsilon). That holds on any machine; the formula bugs these tests exist to catch (a wrong
distance, bucket, slope or sign) move the numbers by far more than it.
"""

from __future__ import annotations

import math

import torch

from posenc.functional import XPOS_QUERY_LOG_SCALE, xpos_zeta


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u``: the largest relative error of one rounding (half the machine epsilon): 2**-24 for fp32."""
    return torch.finfo(dtype).eps / 2


def gamma(n: int, dtype: torch.dtype) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative error bound of ``n`` roundings in a row, e.g. a sum
    or dot product of ``n`` terms in any order (relative to the sum of the terms' magnitudes)."""
    nu = n * unit_roundoff(dtype)
    assert nu < 1, f"{n} roundings in {dtype} can lose every digit"
    return nu / (1 - nu)


def attention_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows: torch.Tensor | None = None,
    bias_abs: torch.Tensor | float = 0.0,
    bias_error: torch.Tensor | float = 0.0,
    extra_terms: int = 0,
) -> torch.Tensor:
    """An upper bound, per query row (``[..., rows, 1]``; every row by default), on how far causal softmax
    attention computed in ``q.dtype`` from these inputs can be from the exact result, for any summation order.

    - each score ``q_i.k_j / sqrt(d) + b_ij`` is a dot product of ``d + extra_terms`` terms (``extra_terms``:
      dimensions a kernel adds, such as FoX's bias columns), scaled and added to the bias: at most
      ``gamma(d + extra_terms + 2) * (sum_t |q_it k_jt| / sqrt(d) + |b_ij|)`` off, plus ``bias_error`` (what
      the bias itself carries in from its own computation); ``bias_abs`` bounds ``|b_ij|`` (or the sum of the
      magnitudes of the bias terms a kernel adds), broadcast to ``[..., rows, s]``;
    - score errors of at most ``e`` change each softmax weight by a factor within ``exp(+-2 e)`` (its numerator
      and the normaliser), so the weighted sum of ``v`` moves by at most ``expm1(2 e) * max|v|``;
    - the softmax's exp and division (a few roundings; ``exp`` is accurate to about 1 ulp), its normaliser (a
      sum of ``s`` terms), an online softmax's rescaling between key blocks (at most ``s`` of them) and the
      output's sum of ``s`` weighted values: ``gamma(3 s + 4)`` relative to ``sum_j p_j |v_j| <= max|v|``.
    """
    dtype = q.dtype
    s, d = k.shape[-2], q.shape[-1]
    rows = torch.arange(s) if rows is None else rows
    future = torch.arange(s)[None, :] > rows[:, None]
    dots = (q[..., rows, :].double().abs() @ k.double().abs().transpose(-1, -2)) * d**-0.5
    bias_abs = torch.as_tensor(bias_abs, dtype=torch.float64)
    score_error = gamma(d + extra_terms + 2, dtype) * (dots + bias_abs) + bias_error
    score_error = score_error.masked_fill(future, 0.0).amax(-1, keepdim=True)
    v_max = v.double().abs().amax(dim=(-2, -1), keepdim=True)
    return v_max * (torch.expm1(2 * score_error) + gamma(3 * s + 4, dtype))


def xpos_score_bound(q, k, q_pos, k_pos, scale_base, query_log_scale=XPOS_QUERY_LOG_SCALE, inputs=0, dtype=None):
    """How far xPos scores computed in ``dtype`` (default ``q``'s) may be from the float64 formula, per entry
    (``query_log_scale``: the largest log of a query factor, xpos_relative_scores' by default).

    Each pair's term is its product times a query factor and a key factor, each ``exp(x log zeta)`` in
    float64 (x, the log and the product rounded: 3 u64 of the exponent, plus the exp's u64), the query's
    exponent at most query_log_scale and the key's at most that plus |log D| (D: the pair's decay); both
    factors are then rounded into ``dtype`` and multiplied (4 u), the inputs carry ``inputs`` roundings, and
    the ``h_d``-term sum adds gamma(h_d); each relative to the pair's magnitude M = 2 (|q0| + |q1|)(|k0| +
    |k1|) D, which covers a rotation's two-term sums. In float64: sum over pairs of M (3 u64 (2
    query_log_scale + |log D| + 1) + u (inputs + 4) + gamma(h_d)). Where a factor leaves the normal range
    (far keys' decay underflows, flushed to 0 or not): at most the smallest normal times e**query_log_scale."""
    dtype = dtype or q.dtype
    u, d = unit_roundoff(dtype), q.shape[-1]
    zeta = xpos_zeta(d, 0.4)
    distance = (q_pos.double()[:, None] - k_pos.double()[None, :]).clamp(min=0) / scale_base
    floor = 2 * torch.finfo(dtype).tiny * math.exp(query_log_scale)
    out = 0
    for j in range(d // 2):
        # twice (|q0| + |q1|)(|k0| + |k1|): a rotation changes |x0| + |x1| by at most a factor sqrt(2)
        q_pair, k_pair = (x[..., 2 * j : 2 * j + 2].double().abs().sum(-1) for x in (q, k))
        pair = 2 * q_pair[..., :, None] * k_pair[..., None, :]
        log_decay = distance * math.log(zeta[j])
        reach = 3 * unit_roundoff(torch.float64) * (2 * query_log_scale - log_decay + 1) + u * (inputs + 4)
        out = out + pair * (torch.exp(log_decay) * (reach + gamma(d, dtype)) + floor)
    return out


def rotation_bound(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """How far two roundings of ``apply_rotation(x, rotation)`` (``x`` real ``[..., s, 2 m]``, ``rotation``
    complex ``[s, m]``) may differ elementwise: each output is a two-term dot product of the same inputs
    (``ac - bd``, ``ad + bc``), within ``gamma_2 (|a c| + |b d|)`` of the exact value however it is rounded (in
    order, fused, vectorized), so two of them within twice that."""
    table = torch.view_as_real(rotation).abs()
    c, d = table[..., 0], table[..., 1]
    pairs = x.unflatten(-1, (-1, 2)).abs()
    a, b = pairs[..., 0], pairs[..., 1]
    return 2 * gamma(2, x.dtype) * torch.stack((a * c + b * d, a * d + b * c), dim=-1).flatten(-2)
