"""Absolute encodings: a position table added to the token embeddings."""

from __future__ import annotations

from torch import Tensor, nn

from posenc import functional as pf
from posenc.encoders.base import AttentionShape, PositionalEncoder
from posenc.errors import PositionRangeError


class Sinusoidal(PositionalEncoder):
    """Fixed sinusoidal absolute encoding of Vaswani et al. 2017 (§3.5).

    As in the paper (§3.4), token embeddings are multiplied by ``sqrt(d_model)`` before the table is added;
    the model does that for every encoder, so that all of them see tokens at the same scale.
    """

    description = "sinusoidal absolute table added to embeddings (Vaswani et al. 2017)"

    def __init__(self, shape: AttentionShape, train_length: int, *, base: float = 10000.0) -> None:
        super().__init__(shape, train_length)
        self.base = base

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        table = pf.sinusoidal_table(positions, self.shape.d_model, self.base).to(x.dtype)  # [s, d]
        return x + table


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
