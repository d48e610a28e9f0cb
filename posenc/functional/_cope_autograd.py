"""CoPE attention for one block of queries with its backward written out (Golovneva et al. 2024, eqs. 3-5), so
that a training step makes a few passes over the block's scores where autograd makes about twice as many
(its flips for the reversed cumulative sum, the clamp's mask, the interpolation's arithmetic, a zero-filled
copy per gather). Internal: :func:`posenc.functional.cope_attention` calls it when gradients are wanted and
there is no dropout; the tests pin it to the dense float64 computation's values and gradients.

The forward, for queries ``q`` ``[b, n_h, bq, h_d]`` and the keys up to the block's last query in reverse order
(column ``c`` is key ``end - 1 - c``, future keys masked), is::

    l = q k^T / sqrt(h_d)                        # the logits, -inf on future keys
    g = sigmoid(l);  p = min(cumsum(g), last)    # counts from the query back (eq. 3), clamped
    s = l + z[floor p] + (p - floor p) (z[floor p + 1] - z[floor p])   # z = q e: eq. 5 interpolated (eq. 4)
    a = softmax(s);  out = a v

and the backward, with ``G`` the output's gradient:
``dS = a * (G v^T - rowsum(G * out))`` (softmax's; ``rowsum(a * G v^T) = G . out``), ``dz`` the scatter of
``dS (1 - w)`` and ``dS w`` onto ``floor p`` and ``floor p + 1``, ``dp = dS (z_high - z_low)`` (0 where ``p`` was
clamped), ``dg`` its reversed cumulative sum, ``dl = dS + dg g (1 - g)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


class CopeBlock(torch.autograd.Function):
    """``out [b, n_h, bq, h_d] = CoPE attention`` of a block of queries; see the module docstring.

    Args (of ``apply``):
        q: ``[b, n_h, bq, h_d]``, the block's queries (unscaled).
        keys_rev, values_rev: ``[b, n_h, end, h_d]``, keys and values ``end - 1 .. 0`` (reversed).
        pos_emb: ``[h_d, n_pos]``, the embeddings of positions ``0 .. n_pos - 1``.
        future: ``[bq, end]`` bool, True where a key is in the query's future.
        scale: ``h_d ** -0.5``.
    """

    @staticmethod
    def forward(ctx, q: Tensor, keys_rev: Tensor, values_rev: Tensor, pos_emb: Tensor, future: Tensor,
                scale: float) -> Tensor:
        last = pos_emb.shape[-1] - 1  # counts clamp at n_pos - 1
        z = q @ pos_emb
        z = torch.cat((z, z[..., -1:]), dim=-1)  # [b, n_h, bq, n_pos + 1]: as _cope_table, z[n_pos] = z[n_pos - 1]
        logits = (q * scale) @ keys_rev.transpose(-1, -2)  # [b, n_h, bq, end]
        logits.masked_fill_(future, float("-inf"))
        gates = torch.sigmoid(logits)
        counts = gates.cumsum(-1)
        low = counts.clamp_(max=last).floor().long()
        weight = counts.sub_(low)  # p - floor p, in the counts' storage
        z_low = z.gather(-1, low)
        # z[floor p + 1] - z[floor p]: exactly 0 where p was clamped (two equal columns of z), so p's gradient is
        # 0 there as torch.clamp's backward makes it, with no mask
        z_step = z.gather(-1, low + 1).sub_(z_low)
        attn = z_low.addcmul_(weight, z_step).add_(logits).softmax(-1)  # the scores, then softmax
        out = attn @ values_rev
        ctx.save_for_backward(q, keys_rev, values_rev, pos_emb, gates, low, weight, z_step, attn, out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, keys_rev, values_rev, pos_emb, gates, low, weight, z_step, attn, out = ctx.saved_tensors
        scale = ctx.scale
        grad_out = grad_out.contiguous()
        grad_values = attn.transpose(-1, -2) @ grad_out if ctx.needs_input_grad[2] else None
        rowsum = (grad_out * out).sum(-1, keepdim=True)  # [b, n_h, bq, 1]
        d_scores = (grad_out @ values_rev.transpose(-1, -2)).sub_(rowsum).mul_(attn)  # softmax's backward
        # the interpolation: z[low] gets dS (1 - w), z[low + 1] gets dS w
        high_part = d_scores * weight
        d_table = torch.zeros(*low.shape[:-1], pos_emb.shape[-1] + 1, dtype=q.dtype, device=q.device)
        d_table.scatter_add_(-1, low, d_scores - high_part).scatter_add_(-1, low + 1, high_part)
        d_z = d_table[..., :-1]  # the last column got only dS w with w = 0 (counts clamped): nothing to add
        # the counts (p's gradient), then the cumulative sum's (a reversed one)
        d_counts = d_scores * z_step
        d_gates = torch.sub(d_counts.sum(-1, keepdim=True), d_counts.cumsum(-1)).add_(d_counts)  # sum, t >= j
        d_logits = torch.ops.aten.sigmoid_backward(d_gates, gates).add_(d_scores)  # d_gates g (1 - g), + dS
        grad_q = torch.addmm(  # through the logits and through z = q e
            (d_logits @ keys_rev).mul_(scale).flatten(0, -2), d_z.flatten(0, -2), pos_emb.T
        ).view_as(q)
        grad_keys = (d_logits.transpose(-1, -2) @ q).mul_(scale) if ctx.needs_input_grad[1] else None
        grad_emb = q.flatten(0, -2).T @ d_z.flatten(0, -2) if ctx.needs_input_grad[3] else None
        return grad_q, grad_keys, grad_values, grad_emb, None, None
