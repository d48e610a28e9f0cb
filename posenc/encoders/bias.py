"""Fixed attention-score biases."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from posenc import functional as pf
from posenc.encoders.base import AttentionShape, PositionalEncoder, as_is


class ALiBi(PositionalEncoder):
    """Attention with Linear Biases (Press et al. 2022): score bias ``-slope_h * (i - j)``."""

    description = "linear distance penalty on attention scores (Press et al. 2022)"
    has_score_bias = True

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__(shape, train_length)
        self.register_buffer("slopes", pf.alibi_slopes(shape.n_heads), persistent=False)

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return pf.alibi_bias(self.slopes, q_positions, k_positions)  # [n_h, s_q, s_k]

    def linear_bias_slopes(self) -> Tensor:
        return self.slopes

    def distance_table(self, length: int) -> Tensor:
        return -self.slopes[:, None] * torch.arange(length, device=self.slopes.device, dtype=self.slopes.dtype)

    def score_mod(self, length: int, capture: Callable[[Tensor], Tensor] = as_is) -> Callable[..., Tensor]:
        slopes = capture(self.slopes)

        def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score - slopes[h] * (q_idx - kv_idx).to(score.dtype)

        return alibi
