"""Absolute position tables added to token embeddings."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "sinusoidal_table",
]


def _float_dtype(t: Tensor) -> torch.dtype:
    """The dtype to compute in for ``t``: its own if floating point, else float32."""
    return t.dtype if t.is_floating_point() else torch.float32


def sinusoidal_table(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Sinusoidal position table of Vaswani et al. 2017 ("Attention Is All You Need", §3.5).

    ``p[i, 2t] = sin(positions[i] / base**(2t/dim))`` and ``p[i, 2t+1] = cos(positions[i] / base**(2t/dim))``.
    For an odd ``dim`` the last column is the sine of the next frequency.

    Args:
        positions: ``[seq]`` positions (integer or floating point).
        dim: width of each row (the model dimension), ``>= 1``.
        base: wavelength base; 10000 in the paper.

    Returns:
        ``[seq, dim]`` table, in ``positions``' dtype if floating point (else float32), on its device.
    """
    if dim < 1:
        raise ValueError(f"sinusoidal_table: dim must be >= 1, got {dim}")
    dtype = _float_dtype(positions)
    # Compute angles in float64 so large positions (8192+) keep full fp32 accuracy after the cast.
    pos = positions.to(torch.float64)
    two_t = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device)  # [ceil(dim/2)]
    angles = pos[:, None] / base ** (two_t / dim)  # [seq, ceil(dim/2)]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # [seq, 2*ceil(dim/2)]
    return table[:, :dim].to(dtype)
