"""Score biases carried through PyTorch's fused attention (CPU inference; FoX's also in training and on GPU):
no bias tensor over all pairs.

Four structures make a bias cheap, and the backend (:mod:`posenc.nn.attention`) asks encoders for them by
capability, never by name:

* a bias *linear in distance*, ALiBi's ``-m_h (i - j)`` (Press et al. 2022): :func:`linear_bias_attention`;
* a bias that is *a constant per head beyond a distance*, T5's past ``max_distance`` (Raffel et al. 2020):
  :func:`far_constant_attention`;
* any bias *of the distance alone* (KERPLE, Chi et al. 2022; ALiBi with other slopes): a Toeplitz matrix,
  which is a strided view of its per-distance table: :func:`distance_table_attention`.
* a data-dependent bias *of the key alone* up to a term of the query (FoX's ``c_i - c_j``, Lin et al.
  2025): two more query/key dimensions, in training too: :func:`key_bias_attention`.

CoPE's far keys through one fused call are :func:`posenc.functional.cope_band_attention` (a formula module: the
encoders cannot import this one, which imports them).

All give the float64 reference's numbers to fp32 accuracy (tests/nn/test_attention.py,
tests/nn/test_fused_bias.py). Shapes ``[b, n_h, s, h_d]``; causality by index.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.encoders import PositionalEncoder
from posenc.functional._softmax_parts import fused_cpu_attention, merge_attention_


def linear_bias_attention(q: Tensor, k: Tensor, v: Tensor, positions: Tensor, slopes: Tensor) -> Tensor:
    """Causal attention with ALiBi's bias ``-m_h (i - j)`` inside fused SDPA, exact where it is offered.

    The bias is the dot product of two more dimensions: ``[1, -m_h i]`` on each query and ``[m_h j, 1]`` on
    each key, put *first*. ``m_h i`` and ``m_h j`` are exact in fp32 when every slope is a power of two
    (ALiBi's slopes for up to 8 heads: :func:`posenc.functional.alibi_slopes`) and positions are integers
    below 2**24; a kernel that sums a dot product in order then adds them first, and ``m_h j - m_h i`` is
    exact (both are multiples of ``m_h`` below 2**24 m_h), so the scores carry the bias with no rounding of
    their own: the error is the reference's (scores ``q.k scale - m (i - j)`` in fp32) at any length. Queries
    are scaled by ``h_d**-0.5`` beforehand and SDPA's own scale is 1, so the two added products stay exact.
    Whether the kernel sums in order is :func:`sums_leading_dimensions_first`; the caller checks both.

    Args:
        q, k, v: ``[b, n_h, s, h_d]``.
        positions: ``[s]`` integer-valued.
        slopes: ``[n_h]`` powers of two.

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    b, h, s, d = q.shape
    bias = slopes.to(q.dtype).view(h, 1) * positions.to(q.dtype)  # m_h i, [n_h, s]
    qx, kx, vx = (x.new_empty(b, h, s, d + 2) for x in (q, k, v))
    qx[..., 0], qx[..., 1] = 1.0, -bias  # [1, -m i]
    kx[..., 0], kx[..., 1] = bias, 1.0  # [m j, 1]
    vx[..., :2] = 0.0  # fused kernels need one head size for q, k and v
    torch.mul(q, d**-0.5, out=qx[..., 2:])
    kx[..., 2:], vx[..., 2:] = k, v
    return F.scaled_dot_product_attention(qx, kx, vx, is_causal=True, scale=1.0)[..., 2:]


def sums_leading_dimensions_first() -> bool:
    """Whether fused SDPA here adds the two leading dimensions of :func:`linear_bias_attention` first: 64 keys
    at positions near 2**20 with slope 1/2 (``m j ~ 2**19``, where a different order would be off by ~1e-2),
    against the float64 softmax."""
    gen = torch.Generator().manual_seed(0)
    s, d = 64, 8
    positions = torch.arange(2**20 - s, 2**20)
    q, k, v = (torch.randn(1, 1, s, d, generator=gen) for _ in range(3))
    got = linear_bias_attention(q, k, v, positions, torch.tensor([0.5]))
    i, j = torch.arange(s, dtype=torch.float64)[:, None], torch.arange(s, dtype=torch.float64)[None, :]
    scores = (q.double() @ k.double().transpose(-1, -2)) * d**-0.5 - 0.5 * (i - j)
    want = scores.masked_fill(j > i, float("-inf")).softmax(-1) @ v.double()
    return bool((got.double() - want).abs().max() < 1e-5)


def distance_table_attention(q: Tensor, k: Tensor, v: Tensor, table: Tensor, query_block: int) -> Tensor:
    """Causal attention with a bias of the distance alone, ``table[h, i - j]``, through fused SDPA with a
    *view* of the table as its mask: no bias entry is computed or stored per score; positions ``0..s-1``.

    A Toeplitz matrix ``B[i, j] = t[i - j]`` runs backwards along its rows, and a strided view cannot step
    backwards. With the table reversed, ``u[x] = t[s - 1 - x]``, it is ``B[i, j] = u[s - 1 - i + j]``, and with
    the queries in reverse order too (row ``r`` of a block ending at ``e`` is query ``e - 1 - r``) it is
    ``u[s - e + r + j]``: the mask of a block is ``w.as_strided(stride=(1, 1))`` over ``w = u + [-inf] *
    (query_block - 1)``, whose ``-inf`` entries are exactly the future keys. Reversing queries only permutes
    the output rows, and the keys keep their order (far to near: the kernel's running sums add small terms
    before large ones, as in the reference; reversing the keys instead measured ~5x the reference's error),
    so the result is the reference's to fp32 accuracy. The fused CPU kernel reads the mask through its
    strides, without a dense copy (peak memory in docs/performance.md, section "Measurements behind design
    choices"). Each block of ``query_block`` queries attends to the keys up to its last query, so the masked
    upper triangle costs about ``query_block / (2 s)`` more work than causal SDPA.

    Args:
        q, k, v: ``[b, n_h, s, h_d]``.
        table: ``[n_h, s]``, the bias at distance ``0..s-1`` (``encoder.distance_table(s)``).
        query_block: queries per block.

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    s = q.shape[-2]
    h = table.shape[0]
    q_rev = q.flip(-2)  # query i at row s - 1 - i: a block's queries e-1, e-2, ..., start
    future = table.new_full((h, query_block - 1), float("-inf"))
    w = torch.cat((table.flip(-1), future), dim=1).to(q.dtype)  # [n_h, s + query_block - 1], contiguous
    out_rev = torch.empty_like(q)
    for start in range(0, s, query_block):
        end = min(start + query_block, s)
        rows = slice(s - end, s - start)
        mask = w.as_strided((1, h, end - start, end), (0, w.stride(0), 1, 1), s - end)  # [1, n_h, bq, end]
        out_rev[:, :, rows] = F.scaled_dot_product_attention(
            q_rev[:, :, rows], k[:, :, :end], v[:, :, :end], attn_mask=mask
        )
    return out_rev.flip(-2)


def far_constant_attention(
    q: Tensor, k: Tensor, v: Tensor, encoder: PositionalEncoder, reach: int, far: Tensor, query_block: int
) -> Tensor:
    """Causal attention with a score bias that is the constant ``far[h]`` from distance ``reach`` on (T5
    beyond ``max_distance``), through the fused CPU kernel; positions ``0..s-1``.

    The keys at distance ``>= reach`` from query ``i`` are ``j <= i - reach``: queries ``reach..s-1`` against
    keys ``0..s-1-reach`` form a *square causal* pattern, one fused causal call with no bias at all, whose
    log-sum-exp is shifted by ``far[h]``. The keys closer than ``reach`` are a band, attended in blocks of
    ``query_block`` queries with the encoder's ``score_bias`` as a ``[n_h, block, block + reach]`` mask,
    computed once for all whole blocks (within ``reach`` the bias depends on ``i - j`` only: part of the
    ``far_bias`` contract). The two partial softmaxes merge exactly through their log-sum-exps (the CPU
    kernel ``_scaled_dot_product_flash_attention_for_cpu`` returns them). Memory is linear; time is fused
    causal SDPA's plus the band.

    Args:
        q, k, v: ``[b, n_h, s, h_d]`` on CPU, ``s > reach``.
        encoder: its ``score_bias`` is used within ``reach``.
        reach: distance from which the bias is ``far``.
        far: ``[n_h]``.
        query_block: queries per block of the band.

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    b, h, s, _ = q.shape
    positions = torch.arange(s, device=q.device)
    out = torch.empty_like(q)
    near_lse = q.new_empty(b, h, s)
    steady = None  # the mask of a whole block past the first `reach` keys: the same for each such block
    for start in range(0, s, query_block):  # the band: 0 <= i - j < reach
        end = min(start + query_block, s)
        first = max(0, start - reach + 1)
        repeats = first > 0 and end - start == query_block
        if repeats and steady is not None:
            mask = steady
        else:
            bias = encoder.score_bias(positions[start:end], positions[first:end]).to(q.dtype)  # [n_h, bq, keys]
            distance = positions[start:end, None] - positions[None, first:end]
            mask = bias.masked_fill((distance < 0) | (distance >= reach), float("-inf")).unsqueeze(0)
            steady = mask if repeats else steady
        out[:, :, start:end], near_lse[:, :, start:end] = fused_cpu_attention(
            q[:, :, start:end], k[:, :, first:end], v[:, :, first:end], 0.0, False, attn_mask=mask
        )
    # The rest: query i >= reach, keys j <= i - reach, all with bias far[h].
    rest, rest_lse = fused_cpu_attention(q[:, :, reach:], k[:, :, : s - reach], v[:, :, : s - reach], 0.0, True)
    rest_lse = rest_lse + far.detach().to(q.dtype).view(1, h, 1)
    merge_attention_(out[:, :, reach:], near_lse[:, :, reach:], rest, rest_lse)  # a view: written in place
    return out


# Fused head widths are padded to a multiple of this: CUDA's memory-efficient SDPA kernel takes only widths
# divisible by 4 (fp32, sm80+) or 8 (16-bit); SDPA otherwise falls back to its math kernel, which builds the
# [b, n_h, s, s] scores (the GPU check's FoX forward: 41 GiB at 32768 tokens, 256 GiB asked for at 131072).
FUSED_WIDTH_MULTIPLE = 8


def key_bias_attention(q: Tensor, k: Tensor, v: Tensor, key_bias: Tensor, dropout_p: float = 0.0) -> Tensor:
    """Causal attention with a score bias of the key alone, ``q_i.k_j / sqrt(h_d) + key_bias[j]``, inside fused
    SDPA, differentiable: FoX's ``c_i - c_j`` (Lin et al. 2025), whose ``c_i`` softmax ignores. Any positions.

    As :func:`linear_bias_attention`, two more dimensions put first: ``[1, -key_bias[i]]`` on each query and
    ``[key_bias[j], 1]`` on each key (queries scaled by ``h_d**-0.5`` beforehand, SDPA's scale 1). The
    query's term is a constant of its softmax row, and it keeps the scores as fine as the reference's: a kernel
    that sums a dot product in order forms ``key_bias[j] - key_bias[i]`` first, small for the keys that matter
    even where ``key_bias`` is large (FoX's cumulative log gates reach ``-s log 2`` at initialisation), and
    rounds it once. (Carried by one dimension, ``key_bias[j]`` alone, the scores would round at the scale of
    ``|key_bias|``: measured about twice the reference's error at 1300 tokens.) Zero dimensions after them pad
    the width to a multiple of :data:`FUSED_WIDTH_MULTIPLE` (they add exact zeros to every score), so that
    CUDA runs its memory-efficient kernel rather than the math one: memory is linear on every device. Time is
    fused causal SDPA's at head width ``h_d + 2`` (timed in docs/performance.md, section "Measurements behind
    design choices"), rounded up to that multiple.

    Args:
        q, k, v: ``[b, n_h, s, h_d]``; 16-bit inputs are attended in fp32 (a 16-bit bias column would round
            the bias: bfloat16 has 8 significant bits), the result cast back.
        key_bias: ``[b, n_h, s]``.
        dropout_p: attention dropout (training).

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    with torch.autocast(q.device.type, enabled=False):  # autocast would run SDPA, and the bias, in 16 bits
        return _key_bias_attention(q, k, v, key_bias, dropout_p)


def _key_bias_attention(q: Tensor, k: Tensor, v: Tensor, key_bias: Tensor, dropout_p: float) -> Tensor:
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    bias = key_bias.to(work).unsqueeze(-1)  # (b, nh, s, 1)
    one = torch.ones_like(bias)
    h_d = q.shape[-1]
    pad = -(h_d + 2) % FUSED_WIDTH_MULTIPLE
    zeros = bias.new_zeros(*bias.shape[:-1], pad)  # after q.k's terms: an in-order sum adds them last, exactly
    qx = torch.cat((one, -bias, q.to(work) * h_d**-0.5, zeros), dim=-1)  # (b, nh, s, hs + 2 + pad)
    kx = torch.cat((bias, one, k.to(work), zeros), dim=-1)
    vx = F.pad(v.to(work), (2, pad))  # fused kernels need one head size for q, k and v
    out = F.scaled_dot_product_attention(qx, kx, vx, is_causal=True, scale=1.0, dropout_p=dropout_p)
    return out[..., 2 : 2 + h_d].to(q.dtype)
