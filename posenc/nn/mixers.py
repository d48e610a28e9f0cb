"""Sequence mixers other than attention: what a block mixes tokens with (``model.mixer``).

``attention`` (the default) is :class:`posenc.nn.model.CausalSelfAttention`, with the positional encoder injected
into it. ``base_conv`` is :class:`BaseConv`, Zoology's gated convolution: the non-attention baseline against
which Arora et al. 2023 show that attention solves multi-query associative recall at sizes where gated
convolutions do not. A convolution mixes tokens by their index, so it reads no positional encoding: a model
with ``base_conv`` takes ``encoder=nope`` (checked by :func:`posenc.running.config.run_config_from_dict`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MIXERS = ("attention", "base_conv")
DEFAULT_MIXER = "attention"
SHORT_TAPS = 3  # Zoology's short convolution (kernel_size 3)
# Filters with more taps than this are applied through the FFT (O(s log s) per channel) instead of a direct
# depthwise convolution (O(s * taps)); at or below it the direct one is as fast, and exactly causal: through
# the FFT an output is causal up to rounding (later inputs move it by ~1e-7 relative, in float32).
FFT_MIN_TAPS = 64


def base_conv_taps(layer: int, n_layers: int, train_length: int) -> int:
    """The filter length of ``base_conv`` layer ``layer`` of ``n_layers``: Zoology's MQAR configuration
    alternates a short convolution (even layers, :data:`SHORT_TAPS` taps) with a long one (odd layers, as
    many taps as the training length), ``kernel_size: [3, -1, 3, -1]`` in its figure 2 configs; a one-layer
    model gets the long one (without it no token could read further back than two tokens)."""
    return train_length if layer % 2 == 1 or n_layers == 1 else SHORT_TAPS


class BaseConv(nn.Module):
    """Zoology's BaseConv (Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language
    Models", ICLR 2024, §4 and appendix; HazyResearch/zoology ``zoology/mixers/base_conv.py``): a gated
    causal convolution,

        ``y = (u W + b_1) ⊙ (h ∗ u + b_2)``

    with ``u, y`` ``[b, s, d]``, a linear projection ``W`` ``[d, d]`` with bias ``b_1`` ``[d]``, and an
    explicit learned depthwise filter ``h`` ``[d, taps]`` with bias ``b_2`` ``[d]``, causal: ``(h ∗ u)_t =
    Σ_j h_j u_{t-j}`` over ``0 ≤ j < taps`` and ``j ≤ t``, so output ``t`` depends on inputs ``0..t`` only.

    ``taps``: :func:`base_conv_taps`, short (3) or long (the training length). A long filter is explicit, as
    in Zoology's ``LongConvolution`` (its default, figure 2's ``ImplicitLongConvolution``, computes the
    filter from an MLP of positions normalised to the training length, which has no meaning past it either):
    **past its length the filter is zero**, so at evaluation beyond the training length output ``t`` reads
    the last ``taps`` inputs ``t-taps+1..t`` only (a window, not the whole prefix); on a shorter sequence its
    first ``s`` taps are used. Differences from Zoology, all of them posenc's block around the mixer: the
    block is pre-norm with a residual connection and an MLP (Zoology's MQAR models have no MLP), so the mixer
    adds no residual of its own (Zoology's returns ``y + u``); ``h`` includes a tap at ``j = 0``, which
    covers Zoology's ``+ u`` skip inside its long convolution; the gate has no activation (Zoology's default
    ``use_act=False``). Initialisation: ``W`` as every linear layer of the model (normal, std 0.02; posenc's
    ``Transformer._init_weights``), ``b_1 = b_2 = 0``, ``h`` normal with std ``taps**-0.5`` (Zoology draws
    std 1), so that ``h ∗ u`` has about unit scale over a full window.
    """

    def __init__(self, d_model: int, taps: int) -> None:
        super().__init__()
        if taps < 1:
            raise ValueError(f"BaseConv needs at least one tap, got {taps}")
        self.gate = nn.Linear(d_model, d_model)  # u W + b_1
        self.filter = nn.Parameter(torch.randn(d_model, taps) / math.sqrt(taps))  # h: tap j weighs u_{t-j}
        self.bias = nn.Parameter(torch.zeros(d_model))  # b_2

    @property
    def taps(self) -> int:
        return self.filter.shape[1]

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """``[b, s, d]`` -> ``[b, s, d]``. ``positions`` is not read (the block passes it to every mixer): a
        convolution is by index."""
        return self.gate(x) * (causal_conv(x, self.filter) + self.bias)


def causal_conv(x: Tensor, h: Tensor) -> Tensor:
    """Depthwise causal convolution ``y_t = Σ_j h[:, j] u_{t-j}`` (``0 ≤ j ≤ t``, ``j < taps``).

    Args:
        x: ``[b, s, d]``.
        h: ``[d, taps]``; only its first ``s`` taps can reach an output.

    Returns:
        ``[b, s, d]``.
    """
    b, s, d = x.shape
    h = h[:, :s]  # taps past the sequence reach no output
    taps = h.shape[1]
    u = x.transpose(1, 2)  # (b, d, s)
    if taps <= FFT_MIN_TAPS:
        # conv1d correlates: with `taps - 1` zeros on the left and the filter reversed, output t is
        # sum_j h[:, j] * u[:, t - j]
        y = F.conv1d(F.pad(u, (taps - 1, 0)), h.flip(-1).unsqueeze(1), groups=d)  # (b, d, s)
    else:
        n = 1 << (s + taps - 1).bit_length()  # >= s + taps - 1: no circular wrap into the first s outputs
        work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32  # no 16-bit FFTs
        y = torch.fft.irfft(torch.fft.rfft(u.to(work), n=n) * torch.fft.rfft(h.to(work), n=n), n=n)[..., :s]
        y = y.to(x.dtype)
    return y.transpose(1, 2)
