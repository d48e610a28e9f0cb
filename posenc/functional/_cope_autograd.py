"""CoPE attention, a block of queries at a time, with its backward written out (Golovneva et al. 2024, eqs.
3-5), so that a training step makes a few passes over each block's scores where autograd makes about twice as
many (its flips for the reversed cumulative sum, the clamp's mask, the interpolation's arithmetic, a
zero-filled copy per gather and per block's slice of the keys, values and queries). Internal:
:func:`posenc.functional.cope_attention` calls it when gradients are wanted and there is no dropout; the tests
pin it to the dense float64 computation's values and gradients.

The forward of a block, for queries ``q`` ``[b, n_h, bq, h_d]`` and the keys up to its last query in reverse
order (column ``c`` is key ``end - 1 - c``, future keys masked), is::

    l = q k^T / sqrt(h_d)                        # the logits, -inf on future keys
    g = sigmoid(l);  p = min(cumsum(g), last)    # counts from the query back (eq. 3), clamped
    s = l + z[floor p] + (p - floor p) (z[floor p + 1] - z[floor p])   # z = q e: eq. 5 interpolated (eq. 4)
    a = softmax(s);  out = a v

and the backward, with ``G`` the output's gradient:
``dS = a * (G v^T - rowsum(G * out))`` (softmax's; ``rowsum(a * G v^T) = G . out``), ``dz`` the scatter of
``dS (1 - w)`` and ``dS w`` onto ``floor p`` and ``floor p + 1``, ``dp = dS (z_high - z_low)`` (0 where ``p``
was clamped), ``dg`` its reversed cumulative sum, ``dl = dS + dg g (1 - g)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


class CopeAttention(torch.autograd.Function):
    """``out [b, n_h, s, h_d]``, causal CoPE attention, ``block`` queries at a time; see the module docstring.

    Args (of ``apply``):
        q, k, v: ``[b, n_h, s, h_d]`` (queries unscaled), in the dtype to compute in.
        pos_emb: ``[h_d, n_pos]``, the embeddings of positions ``0 .. n_pos - 1``.
        block: queries per block.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor, block: int) -> Tensor:
        s = q.shape[-2]
        keys_rev, values_rev = k.flip(-2), v.flip(-2)  # column c of a block ending at e: key e - 1 - c
        blocks, outputs = [], []
        for start in range(0, s, block):
            end = min(start + block, s)
            state = _block_forward(
                q[..., start:end, :].contiguous(),
                keys_rev[..., s - end :, :],
                values_rev[..., s - end :, :],
                pos_emb,
                start,
            )
            blocks.append((start, end, state))
            outputs.append(state[-1])
        # intermediates kept on ctx (save_for_backward is for inputs and outputs), the blocks' outputs too
        ctx.blocks, ctx.keys_rev, ctx.values_rev, ctx.pos_emb = blocks, keys_rev, values_rev, pos_emb
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        keys_rev, values_rev, pos_emb = ctx.keys_rev, ctx.values_rev, ctx.pos_emb
        s = keys_rev.shape[-2]
        grad_q = grad_out.new_empty(grad_out.shape)
        grad_keys, grad_values = torch.zeros_like(keys_rev), torch.zeros_like(values_rev)
        grad_emb = torch.zeros_like(pos_emb)
        for start, end, state in ctx.blocks:
            _block_backward(
                grad_out[..., start:end, :].contiguous(),
                keys_rev[..., s - end :, :],
                values_rev[..., s - end :, :],
                pos_emb,
                state,
                grad_q[..., start:end, :],
                grad_keys[..., s - end :, :],
                grad_values[..., s - end :, :],
                grad_emb,
            )
        ctx.blocks = None  # free the blocks' intermediates now (an assignment: dynamo traces no `del ctx.x`)
        return grad_q, grad_keys.flip(-2), grad_values.flip(-2), grad_emb, None


def future_of_reversed_keys(start: int, end: int, device: torch.device) -> Tensor:
    """``[end - start, end]`` bool: True where key ``end - 1 - c`` (column ``c``, keys reversed) is in the
    future of query ``start + r`` (row ``r``)."""
    column = torch.arange(end, device=device)
    return column[None, :] < (end - 1 - torch.arange(start, end, device=device))[:, None]


def cope_table(query: Tensor, pos_emb: Tensor) -> Tensor:
    """``q_i . e[p]`` for every integer position ``p`` and one more, ``e[n_pos] := e[n_pos - 1]`` (a count
    clamped at ``n_pos - 1`` interpolates towards it with weight 0): ``[..., s_q, n_pos + 1]``."""
    z = query @ pos_emb
    return torch.cat((z, z[..., -1:]), dim=-1)


def _block_forward(q: Tensor, keys_rev: Tensor, values_rev: Tensor, pos_emb: Tensor, start: int) -> tuple:
    """One block's forward (queries ``start .. start + bq - 1``, keys ``end - 1 .. 0``): what its backward
    needs, its output last."""
    bq, end = q.shape[-2], keys_rev.shape[-2]
    n_pos = pos_emb.shape[-1]
    last = n_pos - 1  # counts clamp at n_pos - 1
    # A count over `end` keys is below `end` (at most `end` where fp32 gates round to 1), so positions past
    # end + 1 are never looked up: early blocks need fewer columns of z (training at 128 tokens: 40% fewer)
    used = min(n_pos, end + 2)
    # [b, n_h, bq, used], and z[n_pos] = z[n_pos - 1] where the clamped counts can reach it
    z = cope_table(q, pos_emb) if used == n_pos else q @ pos_emb[:, :used]
    logits = (q * q.shape[-1] ** -0.5) @ keys_rev.transpose(-1, -2)  # [b, n_h, bq, end]
    logits.masked_fill_(future_of_reversed_keys(start, start + bq, q.device), float("-inf"))
    gates = torch.sigmoid(logits)
    counts = gates.cumsum(-1)
    floor = counts.clamp_(max=last).floor()
    low = floor.long()
    weight = counts.sub_(floor)  # p - floor p, in the counts' storage
    z_low = z.gather(-1, low)
    # z[floor p + 1] - z[floor p] (z shifted by one column: no low + 1 to form): exactly 0 where p was clamped
    # (two equal columns of z), so p's gradient is 0 there as torch.clamp's backward makes it, with no mask
    z_step = z[..., 1:].gather(-1, low).sub_(z_low)
    attn = z_low.addcmul_(weight, z_step).add_(logits).softmax(-1)  # the scores, then softmax
    return q, used, z.shape[-1], gates, low, weight, z_step, attn, attn @ values_rev


def _block_backward(
    grad_out: Tensor,
    keys_rev: Tensor,
    values_rev: Tensor,
    pos_emb: Tensor,
    state: tuple,
    grad_q: Tensor,
    grad_keys: Tensor,
    grad_values: Tensor,
    grad_emb: Tensor,
) -> None:
    """One block's backward, written into ``grad_q`` (its rows) and added into the keys', values' and
    embeddings' gradients (views of the whole ones)."""
    q, used, width, gates, low, weight, z_step, attn, out = state
    scale = q.shape[-1] ** -0.5
    grad_values += attn.transpose(-1, -2) @ grad_out
    rowsum = (grad_out * out).sum(-1, keepdim=True)  # [b, n_h, bq, 1]
    d_scores = (grad_out @ values_rev.transpose(-1, -2)).sub_(rowsum).mul_(attn)  # softmax's backward
    # the interpolation: z[low] gets dS (1 - w), z[low + 1] gets dS w
    high_part = d_scores * weight
    d_table = torch.zeros(*low.shape[:-1], width, dtype=q.dtype, device=q.device)
    d_table.scatter_add_(-1, low, d_scores - high_part)
    d_table[..., 1:].scatter_add_(-1, low, high_part)  # z[low + 1]'s share, through the shifted view
    d_z = d_table[..., :used]  # a repeated last column got only dS w, w = 0 (counts clamped): nothing to add
    # the counts (p's gradient), then the cumulative sum's (a reversed one)
    d_counts = d_scores * z_step
    d_gates = torch.sub(d_counts.sum(-1, keepdim=True), d_counts.cumsum(-1)).add_(d_counts)  # sum, t >= j
    d_logits = torch.ops.aten.sigmoid_backward(d_gates, gates).add_(d_scores)  # d_gates g (1 - g), + dS
    # through the logits and through z = q e
    grad_q.copy_(
        torch.addmm((d_logits @ keys_rev).mul_(scale).flatten(0, -2), d_z.flatten(0, -2), pos_emb[:, :used].T).view_as(
            q
        )
    )
    grad_keys += (d_logits.transpose(-1, -2) @ q).mul_(scale)
    grad_emb[:, :used] += q.flatten(0, -2).T @ d_z.flatten(0, -2)
