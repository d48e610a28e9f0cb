"""Rotary encoders: queries and keys rotated by position (RoPE and its variants, xPos)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from posenc import functional as F
from posenc.encoders.base import AttentionShape, PositionalEncoder
from posenc.errors import ConfigError


class RotaryEncoder(PositionalEncoder):
    """Shared validation for encoders that rotate dimension pairs of q and k."""

    key: ClassVar[str] = ""  # registry key, for messages

    def __init__(self, shape: AttentionShape, train_length: int, base: float) -> None:
        super().__init__(shape, train_length)
        if shape.head_dim % 2:
            raise ConfigError(
                f"encoder '{type(self).key}' needs an even head dimension, got {shape.head_dim} "
                f"(model.d_model={shape.d_model} / model.n_heads={shape.n_heads})"
            )
        if not base > 1:
            raise ConfigError(f"encoder.base must be > 1, got {base}")
        self.base = base
        self.register_buffer("inv_freq", F.rope_inv_freq(shape.head_dim, base), persistent=False)
        # (query, key) rotation tables per positions tensor: computed once per forward, not per layer.
        # The model reuses one positions tensor per length, so repeated forwards reuse the tables too.
        self._tables: dict[tuple[int, torch.dtype], tuple[Tensor, tuple[Tensor, Tensor]]] = {}

    def rotations(self, positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The complex ``(query, key)`` factors ``[s, h_d/2]`` for :func:`posenc.functional.apply_rotation`."""
        rotation = F.rope_rotation(positions, inv_freq, dtype)
        return rotation, rotation

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        dtype = torch.complex128 if q.dtype == torch.float64 else torch.complex64
        if torch.compiler.is_compiling():  # the compiler folds the tables into its graph
            rq, rk = self.rotations(positions, self.inv_freq_for(q.shape[-2]), dtype)
        else:
            rq, rk = self._cached_rotations(positions, q.shape[-2], dtype)
        return F.apply_rotation(q, rq), F.apply_rotation(k, rk)

    def inv_freq_for(self, length: int) -> Tensor:
        """Inverse frequencies used for a sequence of ``length`` tokens, ``[h_d/2]``."""
        return self.inv_freq

    def _cached_rotations(self, positions: Tensor, length: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        key = (id(positions), dtype)
        hit = self._tables.get(key)
        if hit is not None and hit[0] is positions and hit[1][0].device == self.inv_freq.device:
            return hit[1]
        tables = self.rotations(positions, self.inv_freq_for(length), dtype)
        if len(self._tables) >= 8:  # a few lengths at a time (e.g. training + evaluation)
            self._tables.pop(next(iter(self._tables)))
        self._tables[key] = (positions, tables)  # holding `positions` keeps its id unique
        return tables


class RoPE(RotaryEncoder):
    """Rotary position embedding (Su et al. 2021, RoFormer)."""

    description = "rotary embedding of queries and keys (Su et al. 2021)"
    key = "rope"

    def __init__(self, shape: AttentionShape, train_length: int, *, base: float = 10000.0) -> None:
        super().__init__(shape, train_length, base)


class RoPENTK(RoPE):
    """RoPE trained as usual; at a length ``L' > L`` (training length) it uses the NTK-aware base.

    The base becomes ``base * s**(h_d/(h_d-2))`` with ``s = L'/L`` (see :func:`posenc.functional.ntk_base`),
    i.e. static NTK-aware scaling chosen per evaluation length. At ``L' <= L`` it is exactly RoPE.
    """

    description = "RoPE; past the training length, NTK-aware base rescaling (bloc97 2023)"
    key = "rope_ntk"

    def inv_freq_for(self, length: int) -> Tensor:
        """Inverse frequencies used for a sequence of ``length`` tokens, ``[h_d/2]``."""
        factor = length / self.train_length
        if factor <= 1:
            return self.inv_freq
        base = F.ntk_base(self.base, self.shape.head_dim, factor)
        return F.rope_inv_freq(self.shape.head_dim, base, device=self.inv_freq.device)


class XPos(RotaryEncoder):
    """Extrapolatable position embedding (Sun et al. 2023): RoPE with a per-pair exponential decay."""

    description = "RoPE with per-dimension exponential decay (Sun et al. 2023)"
    key = "xpos"

    def __init__(
        self,
        shape: AttentionShape,
        train_length: int,
        *,
        base: float = 10000.0,
        gamma: float = 0.4,
        scale_base: float = 512.0,
    ) -> None:
        super().__init__(shape, train_length, base)
        if not gamma > 0 or not scale_base > 0:
            raise ConfigError(f"xpos needs gamma > 0 and scale_base > 0, got {gamma}, {scale_base}")
        self.gamma = gamma
        self.scale_base = scale_base

    def rotations(self, positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        return F.xpos_rotations(positions, inv_freq, self.shape.head_dim, self.gamma, self.scale_base, dtype)
