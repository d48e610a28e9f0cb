"""Positional encoders: small modules injected into the model, one registry of them.

An encoder can act on the model in three places, through the hooks of :class:`PositionalEncoder`:

* ``embed``  - on the input embeddings (absolute encodings: sinusoidal, learned);
* ``rotate`` - on queries and keys inside attention (rotary encodings: RoPE, RoPE+NTK, xPos);
* ``score_bias`` - as an additive attention-score bias (ALiBi), when ``has_score_bias`` is set; such an
  encoder may also give the same bias as a FlexAttention ``score_mod`` (``score_mod``), which the model
  uses for long sequences (linear memory, no bias tensor at all).

The base class does nothing in all three, which is exactly NoPE. The model calls the hooks and never
looks at an encoder's name. Formulas live in :mod:`posenc.functional`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from posenc import functional as F
from posenc.errors import ConfigError, PositionRangeError
from posenc.options import check_options


@dataclass(frozen=True)
class AttentionShape:
    """The model dimensions an encoder needs to know."""

    d_model: int  # width of the residual stream
    n_heads: int  # attention heads per layer

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class PositionalEncoder(nn.Module):
    """Base encoder: contributes no positional information (this *is* NoPE).

    Args:
        shape: model dimensions.
        train_length: the longest sequence the model is trained on.
    """

    description: ClassVar[str] = "no positional information"
    has_score_bias: ClassVar[bool] = False

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__()
        self.shape = shape
        self.train_length = train_length

    def check_positions(self, length: int) -> None:
        """Raise :class:`PositionRangeError` if positions ``0..length-1`` cannot be encoded."""

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Add position information to token embeddings ``x`` ``[b, s, d]``; positions ``[s]``."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Transform queries and keys ``[b, n_h, s, h_d]`` by position; positions ``[s]``."""
        return q, k

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """Additive score bias ``[n_h, s_q, s_k]`` (only called when ``has_score_bias``)."""
        raise NotImplementedError

    def score_mod(self) -> Callable[..., Tensor] | None:
        """``score_bias`` as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)``, or None if not given.

        Used for the model's positions ``0..s-1``, so ``q_idx``/``kv_idx`` are the positions themselves (no
        gather inside the kernel: ~12% faster). Must agree with ``score_bias`` (tests check it).
        """
        return None


class NoPE(PositionalEncoder):
    """No positional encoding: a causal decoder can still infer positions (Kazemnejad et al. 2023)."""


class Sinusoidal(PositionalEncoder):
    """Fixed sinusoidal absolute encoding of Vaswani et al. 2017 (§3.5).

    As in the paper (§3.4), token embeddings are multiplied by ``sqrt(d_model)`` before the table is added.
    """

    description = "sinusoidal absolute table added to embeddings (Vaswani et al. 2017)"

    def __init__(self, shape: AttentionShape, train_length: int, *, base: float = 10000.0) -> None:
        super().__init__(shape, train_length)
        self.base = base

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        table = F.sinusoidal_table(positions, self.shape.d_model, self.base).to(x.dtype)  # [s, d]
        return x * math.sqrt(self.shape.d_model) + table


class Learned(PositionalEncoder):
    """Learned absolute position table (GPT-2 style) with one row per training position.

    Positions at or beyond ``train_length`` have no row: asking for them raises
    :class:`PositionRangeError`, which evaluation reports as a row with NaN metrics.
    """

    description = "learned absolute table, one row per training position"

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__(shape, train_length)
        self.table = nn.Embedding(train_length, shape.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def check_positions(self, length: int) -> None:
        n = self.table.num_embeddings
        if length > n:
            raise PositionRangeError(
                f"learned position table has {n} positions (0..{n - 1}); "
                f"a length of {length} needs positions up to {length - 1}"
            )

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        self.check_positions(x.shape[1])
        return x + self.table(positions)  # [b, s, d] + [s, d]


class ALiBi(PositionalEncoder):
    """Attention with Linear Biases (Press et al. 2022): score bias ``-slope_h * (i - j)``."""

    description = "linear distance penalty on attention scores (Press et al. 2022)"
    has_score_bias = True

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__(shape, train_length)
        self.register_buffer("slopes", F.alibi_slopes(shape.n_heads), persistent=False)

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return F.alibi_bias(self.slopes, q_positions, k_positions)  # [n_h, s_q, s_k]

    def score_mod(self) -> Callable[..., Tensor]:
        slopes = self.slopes

        def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score - slopes[h] * (q_idx - kv_idx).to(score.dtype)

        return alibi


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


#: The registry: key -> encoder class. ``conf/encoder/<key>.yaml`` exists for every key.
ENCODERS: dict[str, type[PositionalEncoder]] = {
    "nope": NoPE,
    "sinusoidal": Sinusoidal,
    "learned": Learned,
    "alibi": ALiBi,
    "rope": RoPE,
    "rope_ntk": RoPENTK,
    "xpos": XPos,
}


def check_encoder_name(name: str) -> None:
    if name not in ENCODERS:
        raise ConfigError(f"unknown encoder '{name}'; known encoders: {', '.join(ENCODERS)}")


def build_encoder(
    name: str, shape: AttentionShape, train_length: int, options: dict[str, Any] | None = None
) -> PositionalEncoder:
    """Build encoder ``name``; unknown names, unknown options and bad values raise :class:`ConfigError`."""
    check_encoder_name(name)
    cls = ENCODERS[name]
    return cls(shape, train_length, **check_options("encoder", name, cls, options or {}))
