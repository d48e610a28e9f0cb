"""Formulas of the encodings whose positions depend on the data: CoPE, FoX and PoPE.

Shapes follow the model: queries and keys ``[b, n_h, s, h_d]``, layer inputs ``[b, s, d]``, score blocks
``[b, n_h, s_q, s_k]``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc.functional._cope_autograd import CopeAttention, cope_table, future_of_reversed_keys
from posenc.functional._softmax_parts import fused_cpu_attention, merge_attention_

__all__ = [
    "cope_attention",
    "cope_band_attention",
    "cope_bias",
    "cope_positions",
    "fox_bias",
    "fox_log_lambda",
    "pope_inv_freq",
    "pope_qk",
]


def cope_positions(logits: Tensor) -> Tensor:
    """CoPE's contextual positions (Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count
    What's Important", eq. 3): ``p_ij = sum_{t=j..i} sigmoid(logit_it)``, how many gated keys lie between key
    ``j`` and query ``i``.

    Args:
        logits: attention logits ``[..., s_q, s_k]`` (scaled ``q.k``), ``-inf`` where a key is in a query's
            future (its gate is then 0), as in the paper's code, which gates the masked logits.

    Returns:
        ``[..., s_q, s_k]``, non-increasing in ``j`` for each query.
    """
    gates = torch.sigmoid(logits)
    return gates.flip(-1).cumsum(-1).flip(-1)


def cope_bias(query: Tensor, pos_emb: Tensor, positions: Tensor) -> Tensor:
    """CoPE's score term ``q_i . e(p_ij)`` (eq. 5), with ``e`` linearly interpolated between the learned
    embeddings of the integer positions around ``p_ij`` (eq. 4), positions past the last one clamped to it.

    Computed as the paper's code does: ``z_i[p] = q_i . e[p]`` for every integer ``p``, then interpolated.

    Args:
        query: ``[..., s_q, h_d]``.
        pos_emb: ``[h_d, n_pos]``, the embeddings of positions ``0 .. n_pos - 1``.
        positions: ``[..., s_q, s_k]`` from :func:`cope_positions`.

    Returns:
        ``[..., s_q, s_k]``.
    """
    p = positions.clamp(max=pos_emb.shape[-1] - 1)
    z = query @ pos_emb  # [..., s_q, n_pos]
    floor = p.floor()
    weight = p - floor
    low = z.gather(-1, floor.long())
    high = z.gather(-1, p.ceil().long())
    return low + (high - low) * weight


def cope_attention(
    q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor, dropout_p: float = 0.0, block_elements: int = 1 << 22
) -> Tensor:
    """Causal CoPE attention (Golovneva et al. 2024, eqs. 3-5 and the paper's code): ``softmax(l_ij + q_i .
    e(p_ij)) v`` with ``l`` the scaled logits ``q_i . k_j / sqrt(h_d)``, the same logits that gate the counts
    ``p_ij`` (:func:`cope_positions`, :func:`cope_bias`). Computed once for both, a block of queries at a time
    (at most 32 queries and ``block_elements`` scores: memory linear in ``s``), with the keys in reverse order so
    that the count from the query back to each key is a forward cumulative sum (no flips of the score block).
    Without autograd every step after the logits is in place; with autograd and no dropout it is one
    ``CopeAttention`` (``posenc/functional/_cope_autograd.py``), whose backward is written out (faster than
    autograd's through the same operations: see docs/performance.md, section "Measurements behind design
    choices").

    Args:
        q, k, v: ``[b, n_h, s, h_d]``; counts and scores in float32 at least (bfloat16 cannot count past 256).
        pos_emb: ``[h_d, n_pos]``, the embeddings of positions ``0 .. n_pos - 1``.
        dropout_p: attention dropout (training).
        block_elements: scores per block of queries.

    Returns:
        ``[b, n_h, s, h_d]`` in ``q``'s dtype.
    """
    with torch.autocast(q.device.type, enabled=False):  # autocast would run the logits' matmul in 16 bits
        return _cope_attention(q, k, v, pos_emb, dropout_p, block_elements)


def _cope_attention(q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor, dropout_p: float, block_elements: int) -> Tensor:
    b, h, s, d = q.shape
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    emb, last = pos_emb.to(work), pos_emb.shape[-1] - 1
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, pos_emb))
    # 32 queries at most: a block attends to the keys up to its last query, so smaller blocks skip more of the
    # future (32: the fastest of the sizes timed; see docs/performance.md, section "Measurements behind design
    # choices")
    block = max(1, min(s, 32, block_elements // max(1, b * h * s)))
    if grad and dropout_p == 0.0:  # the backward written out: about half autograd's passes over the scores
        return CopeAttention.apply(q.to(work), k.to(work), v.to(work), emb, block).to(q.dtype)
    q_scaled = q.to(work) * d**-0.5
    k_rev, v_rev = k.to(work).flip(-2), v.to(work).flip(-2)  # column c of a block ending at e: key e - 1 - c
    out = []
    for start in range(0, s, block):
        end = min(start + block, s)
        future = future_of_reversed_keys(start, end, q.device)
        z = cope_table(q[..., start:end, :].to(work), emb)  # [b, n_h, bq, n_pos + 1]
        logits = q_scaled[..., start:end, :] @ k_rev[..., s - end :, :].transpose(-1, -2)  # [b, n_h, bq, end]
        logits = logits.masked_fill_(future, float("-inf"))  # the matmul's own output: in place is safe
        if grad:
            p = torch.sigmoid(logits).cumsum(-1).clamp(max=last)  # p_ij, counted from the query back
            low = p.floor().long()
            weight = p - low
            z_low, z_high = z.gather(-1, low), z.gather(-1, low + 1)
            scores = logits + torch.lerp(z_low, z_high, weight)
            attn = torch.nn.functional.dropout(scores.softmax(-1), dropout_p)
        else:
            attn = _add_cope_bias_(logits, z, torch.sigmoid(logits).cumsum_(-1)).softmax(-1)
        out.append(attn @ v_rev[..., s - end :, :])
    return (out[0] if len(out) == 1 else torch.cat(out, dim=-2)).to(q.dtype)


def cope_band_attention(q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor, band: int, query_block: int) -> Tensor | None:
    """Causal CoPE attention (:func:`cope_attention`) as fused causal SDPA for the far keys plus
    CoPE's own computation on a band of the ``band`` nearest keys, where the counts allow it; else None.

    CoPE's count ``p_ij`` grows as key ``j`` moves back from query ``i`` and is clamped at ``n_pos - 1``
    (Golovneva et al. 2024, the paper's code), where the bias is ``q_i . e[n_pos - 1]``, a constant of the
    query. If every query's count over its ``band`` nearest keys has reached ``n_pos - 1``, the farther keys
    ``j <= i - band`` all carry that constant: queries ``band..s-1`` against keys ``0..s-1-band`` are one fused
    causal call with no bias (as :func:`posenc.nn.fused_bias.far_constant_attention`), its log-sum-exp shifted by
    the constant, merged exactly with the band's softmax. Inference, CPU, fp32 or fp64; memory linear; time fused causal
    SDPA's plus
    about ``band / (s / 2)`` of the whole computation's.

    Args:
        q, k, v: ``[b, n_h, s, h_d]``.
        pos_emb: ``[h_d, n_pos]``.
        band: nearest keys computed explicitly, ``< s``.
        query_block: queries per block of the band.

    Returns:
        ``[b, n_h, s, h_d]``, or None if some query's count over its band stays below ``n_pos - 1`` (its farther
        keys' biases differ: the caller computes the whole rows).
    """
    b, h, s, d = q.shape
    last = pos_emb.shape[-1] - 1
    q_scaled = q * d**-0.5
    out = torch.empty_like(q)
    band_lse = q.new_empty(b, h, s)
    far_bias = q[:, :, band:] @ pos_emb[:, last]  # q_i . e[n_pos - 1], [b, n_h, s - band]
    for start in range(0, s, query_block):
        end = min(start + query_block, s)
        first = max(0, start - band + 1)
        rows = torch.arange(start, end, device=q.device)
        keys_rev = k[:, :, first:end].flip(-2)  # column c: key end - 1 - c
        j = end - 1 - torch.arange(end - first, device=q.device)
        outside = (j[None, :] > rows[:, None]) | (j[None, :] <= rows[:, None] - band)  # future or far
        scores = (q_scaled[:, :, start:end] @ keys_rev.transpose(-1, -2)).masked_fill_(outside, float("-inf"))
        counts = torch.sigmoid(scores).cumsum_(-1)  # p_ij, counted from the query back
        if not bool(((counts[..., -1] >= last) | (rows < band)).all()):
            return None  # some query with far keys has not counted to n_pos - 1 within the band
        _add_cope_bias_(scores, cope_table(q[:, :, start:end], pos_emb), counts)
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        out[:, :, start:end] = scores.sub_(lse).exp_() @ v[:, :, first:end].flip(-2)
        band_lse[:, :, start:end] = lse[..., 0]
    far, far_lse = fused_cpu_attention(q[:, :, band:], k[:, :, : s - band], v[:, :, : s - band], 0.0, True)
    merge_attention_(out[:, :, band:], band_lse[:, :, band:], far, far_lse + far_bias)  # a view: in place
    return out


def _add_cope_bias_(scores: Tensor, table: Tensor, counts: Tensor) -> Tensor:
    """In place, without autograd: ``scores += q_i . e(p_ij)`` (:func:`cope_bias`) for counts ``p_ij``
    (clamped to ``n_pos - 1`` here, and overwritten) and ``table`` from :func:`cope_table`; returns ``scores``."""
    counts.clamp_(max=table.shape[-1] - 2)
    low = counts.floor().long()
    weight = counts.sub_(low)
    return scores.add_(table.gather(-1, low).lerp_(table.gather(-1, low.add_(1)), weight))


def fox_log_lambda(gate_logits: Tensor) -> Tensor:
    """FoX's cumulative log forget gates (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a
    Forget Gate", ICLR, eq. 4; reference code ``forgetting_attention``: ``cumsum(log_fgate)``):
    ``c_t = sum_{l<=t} log sigmoid(f_l)``, so that the score bias of query ``i`` and key ``j`` is
    ``c_i - c_j = sum_{l=j+1..i} log f_l`` (:func:`fox_bias`).

    Args:
        gate_logits: ``[b, s, n_h]``, ``w_f . x_t + b_f`` per head.

    Returns:
        ``[b, n_h, s]`` in float32 at least (the reference accumulates in float32).
    """
    logits = gate_logits.transpose(1, 2)  # [b, n_h, s]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.nn.functional.logsigmoid(logits).cumsum(-1)


def fox_bias(log_lambda: Tensor, start: int, stop: int) -> Tensor:
    """FoX's score bias ``c_i - c_j`` of queries ``start .. stop-1`` against keys ``0 .. stop-1``:
    ``[b, n_h, stop - start, stop]`` (entries of future keys are meaningless; attention masks them)."""
    return log_lambda[..., start:stop, None] - log_lambda[..., None, :stop]


def pope_inv_freq(head_dim: int, base: float = 10000.0) -> Tensor:
    """PoPE's frequencies, one per dimension (not per pair as RoPE's): ``theta_c = base**(-c/h_d)``,
    ``c = 0 .. h_d - 1`` (Gopalakrishnan et al. 2025; reference ``PoPE-pytorch``)."""
    return base ** -(torch.arange(head_dim, dtype=torch.float32) / head_dim)


def pope_qk(q: Tensor, k: Tensor, positions: Tensor, inv_freq: Tensor, phase: Tensor) -> tuple[Tensor, Tensor]:
    """PoPE (Gopalakrishnan et al. 2025, "Decoupling the 'What' and 'Where' With Polar Coordinate Positional
    Embeddings", arXiv 2509.10534): every dimension ``c`` of a query or key becomes a complex number whose
    magnitude is the content, ``softplus(q_c)``, and whose phase is the position, ``t theta_c`` (keys:
    ``t theta_c + delta_c``). The score ``Re(sum_c q_c conj(k_c))`` is then
    ``sum_c softplus(q_tc) softplus(k_sc) cos((t - s) theta_c - delta_c)``: relative in position, and the
    content cannot move the phase (RoPE's ``q.k`` mixes both). As the reference ``apply_pope_to_qk``
    (lucidrains' PoPE-pytorch, x-transformers), the result is real: ``(mu cos, mu sin)`` per dimension (here
    all cosine parts, then all sine parts).

    The returned queries are multiplied by ``sqrt(2)``, so that attention's ``1/sqrt(2 h_d)`` over the doubled
    dimension is the reference's ``1/sqrt(h_d)`` over the complex one.

    Args:
        q, k: ``[b, n_h, s, h_d]``.
        positions: ``[s]``.
        inv_freq: ``[h_d]`` (:func:`pope_inv_freq`).
        phase: ``[n_h, h_d]``, the learned key phase ``delta``, clamped to ``[-2 pi, 0]`` here as in the reference.

    Returns:
        ``(q, k)``, each ``[b, n_h, s, 2 h_d]``.
    """
    angle = positions.to(inv_freq.dtype)[:, None] * inv_freq  # [s, h_d]
    key_angle = angle + phase.clamp(-2 * math.pi, 0.0)[:, None, :]  # [n_h, s, h_d]
    root2 = math.sqrt(2.0)  # folded into the query's [s, h_d] tables, not applied to [b, n_h, s, 2 h_d]
    q_out = _polar_parts(q, angle.cos() * root2, angle.sin() * root2)
    k_out = _polar_parts(k, key_angle.cos(), key_angle.sin())
    return q_out.to(q.dtype), k_out.to(k.dtype)


def _polar_parts(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``[softplus(x) cos, softplus(x) sin]`` ``[..., 2 h_d]`` (cosine parts first: any order of the parts gives
    the same ``q.k``), written into one tensor: no stacked copy, which is faster (see docs/performance.md,
    section "Measurements behind design choices"). ``cos``, ``sin``: broadcastable to ``x``."""
    if torch.compiler.is_compiling():
        # Traced, the plain formula: inductor fuses softplus, both products and the concatenation into one
        # kernel and derives the backward. The eager path's result_type, new_empty and out= writes into
        # strided halves are graph breaks (16 per step at the bench's shape, 20x slower than eager on an H200).
        magnitude = torch.nn.functional.softplus(x)
        return torch.cat((magnitude * cos, magnitude * sin), dim=-1)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, cos, sin)):
        return _PolarParts.apply(x, cos, sin)
    return _polar_forward(torch.nn.functional.softplus(x), cos, sin)


def _polar_forward(magnitude: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    d = magnitude.shape[-1]
    out = magnitude.new_empty(*magnitude.shape[:-1], 2 * d, dtype=torch.result_type(magnitude, cos))
    torch.mul(magnitude, cos, out=out[..., :d])
    torch.mul(magnitude, sin, out=out[..., d:])
    return out


class _PolarParts(torch.autograd.Function):
    """:func:`_polar_parts` with its backward: with ``g = [g_c, g_s]``, ``dx = (g_c cos + g_s sin) sigmoid(x)``
    (softplus' derivative), ``dcos = g_c softplus(x)`` and ``dsin = g_s softplus(x)`` summed to their shapes."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        magnitude = torch.nn.functional.softplus(x)
        ctx.save_for_backward(x, magnitude, cos, sin)
        return _polar_forward(magnitude, cos, sin)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, magnitude, cos, sin = ctx.saved_tensors
        d = x.shape[-1]
        grad_cos, grad_sin = grad[..., :d], grad[..., d:]
        grad_x = torch.addcmul(grad_cos * cos, grad_sin, sin).mul_(torch.sigmoid(x)).to(x.dtype)
        d_cos = (grad_cos * magnitude).sum_to_size(cos.shape) if ctx.needs_input_grad[1] else None
        d_sin = (grad_sin * magnitude).sum_to_size(sin.shape) if ctx.needs_input_grad[2] else None
        return grad_x, d_cos, d_sin
