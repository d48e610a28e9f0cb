"""Fixed additive attention-score biases."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "alibi_slopes",
    "alibi_bias",
]


def alibi_slopes(
    num_heads: int, *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> Tensor:
    """Per-head ALiBi slopes of Press et al. 2022 ("Train Short, Test Long", §3 and their reference code).

    For ``n`` a power of two the slopes are the geometric sequence ``2**(-8/n * (i+1))`` for
    ``i = 0..n-1`` (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, with ``c`` the largest power of two
    below ``n``, the slopes are those of ``c`` heads followed by every other slope of ``2c`` heads
    (the odd-indexed ones, ``2**(-8/(2c) * (2i+1))``) until ``n`` slopes are collected.

    Args:
        num_heads: number of attention heads, ``>= 1``.

    Returns:
        ``[num_heads]`` slopes.
    """
    if num_heads < 1:
        raise ValueError(f"alibi_slopes: num_heads must be >= 1, got {num_heads}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 / n * (i + 1)) for i in range(n)]

    c = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_two(c) + power_of_two(2 * c)[0::2][: num_heads - c]
    return torch.tensor(slopes, dtype=dtype, device=device)


def alibi_bias(slopes: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """ALiBi's additive attention-score bias ``-slope_h * (i - j)`` (Press et al. 2022, eq. in §3).

    Defined for causal attention (``j <= i``); entries with ``j > i`` are left for the causal mask.

    Args:
        slopes: ``[n_h]`` per-head slopes (see :func:`alibi_slopes`).
        q_positions: ``[s_q]`` query positions ``i``.
        k_positions: ``[s_k]`` key positions ``j``.

    Returns:
        ``[n_h, s_q, s_k]`` bias in ``slopes``' dtype.
    """
    distance = (q_positions[:, None] - k_positions[None, :]).to(slopes.dtype)  # [s_q, s_k]
    return -slopes[:, None, None] * distance
