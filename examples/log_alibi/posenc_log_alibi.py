"""An example posenc plugin: ALiBi's slopes on the logarithm of the distance.

The score bias of head ``h`` is ``-scale * m_h * log(1 + (i - j))``, with ALiBi's geometric slopes ``m_h``
(Press et al. 2022, §3). It is the logarithmic kernel of KERPLE (Chi et al. 2022, eq. 8:
``-r_1 log(1 + r_2 (i - j))``) with ``r_1 = scale * m_h`` and ``r_2 = 1`` fixed instead of learned.

Use it without installing anything, as a plain file::

    POSENC_PLUGINS=examples/log_alibi/posenc_log_alibi.py posenc train encoder=log_alibi encoder.scale=2

or install this folder (``pip install ./examples/log_alibi``): its entry point ``posenc.encoders`` names the
same class, and posenc imports it only when ``log_alibi`` is used.
"""

from __future__ import annotations

import torch
from torch import Tensor

import posenc
from posenc import functional as pf
from posenc.encoders import AttentionShape, PositionalEncoder
from posenc.errors import ConfigError


@posenc.register_encoder("log_alibi")
class LogALiBi(PositionalEncoder):
    """ALiBi's slopes on log-distance: bias ``-scale * m_h * log(1 + (i - j))``.

    Args:
        shape: model dimensions (its head count sets the slopes).
        train_length: the longest training sequence (unused: the bias is defined at every distance).
        scale: multiplies every head's slope (an option: ``encoder.scale=2``).
    """

    description = "ALiBi's slopes on log(1 + distance) (KERPLE-log with fixed parameters)"
    has_score_bias = True

    def __init__(self, shape: AttentionShape, train_length: int, *, scale: float = 1.0) -> None:
        super().__init__(shape, train_length)
        if not scale > 0:
            raise ConfigError(f"encoder.scale must be > 0, got {scale}")
        self.scale = scale
        self.register_buffer("slopes", scale * pf.alibi_slopes(shape.n_heads), persistent=False)

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """``[n_h, s_q, s_k]``; future entries (``j > i``) are masked by attention, here clamped to 0."""
        distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0).to(self.slopes.dtype)
        return -self.slopes[:, None, None] * torch.log1p(distance)

    def distance_table(self, length: int) -> Tensor:
        """``[n_h, length]``: the bias by distance, which the attention backends gather at long lengths."""
        distance = torch.arange(length, device=self.slopes.device, dtype=self.slopes.dtype)
        return -self.slopes[:, None] * torch.log1p(distance)
