"""Softmax attention split over two sets of keys, merged exactly by their log-sum-exps: how the fused paths
(posenc.nn.fused_bias, CoPE's band, xPos's windows) attend to part of the keys with one fused call and the rest
with another. Internal: not part of posenc.functional's API."""

from __future__ import annotations

import torch
from torch import Tensor

#: PyTorch's fused CPU attention, which returns the log-sum-exp of each query's scores beside the output:
#: ``(q, k, v, dropout_p, is_causal, attn_mask=None, scale=None) -> (out, lse [b, n_h, s_q])``.
fused_cpu_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def merge_attention_(out: Tensor, lse: Tensor, other: Tensor, other_lse: Tensor) -> Tensor:
    """In place: ``out``, attention over one set of keys whose scores have log-sum-exp ``lse``, becomes the
    attention over those keys and another set (``other``, ``other_lse``): each part weighted by
    ``exp(its lse - the joint lse)``.

    Args:
        out, other: ``[..., s_q, h_d]``.
        lse, other_lse: ``[..., s_q]``.

    Returns:
        ``out``.
    """
    joint = torch.logaddexp(other_lse, lse).unsqueeze(-1)
    out.mul_((lse.unsqueeze(-1) - joint).exp_())
    return out.addcmul_(other, (other_lse.unsqueeze(-1) - joint).exp_())
