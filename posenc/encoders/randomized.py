"""Randomized positional encodings (Ruoss et al. 2023): an underlying encoding read at sampled positions."""

from __future__ import annotations

import torch
from torch import Tensor

from posenc import functional as pf
from posenc.encoders.absolute import Sinusoidal
from posenc.encoders.base import MAX_LENGTH, AttentionShape, PositionalEncoder
from posenc.encoders.rotary import RoPE
from posenc.errors import ConfigError, PositionRangeError

#: The encodings a randomized encoder can be built on: option value -> class (built with its defaults).
RANDOMIZED_BASES: dict[str, type[PositionalEncoder]] = {"sinusoidal": Sinusoidal, "rope": RoPE}

# Seeds the evaluation positions at each length: fixed, so evaluation is deterministic and the same for
# every run (like posenc.running.evaluate's data stream, but independent of it).
EVAL_POSITION_SEED = 20230526


class Randomized(PositionalEncoder):
    """Randomized positional encoding of Ruoss et al. 2023 (ACL), "Randomized Positional Encodings Boost
    Length Generalization of Transformers", built on sinusoidal or rotary encodings.

    A sequence of ``n`` tokens gets the positions of a sorted random subset of ``range(max_position)``
    (without replacement) instead of ``0..n-1`` (:func:`posenc.functional.randomized_positions`), so the
    positions of a long test sequence are drawn from the same range as those seen in training. The
    underlying encoder (``base``) then uses them unchanged: ``embed`` for ``sinusoidal``, ``rotate`` for
    ``rope``.

    * **Training** (training mode with autograd on, i.e. a training step): fresh positions every forward
      pass, from torch's global generator (seeded by training, and saved in its checkpoints).
    * **Evaluation** (eval mode, or any forward without autograd): the paper samples positions at test time
      too (its code draws them from a seeded key sequence for each evaluation batch); here one sorted
      subset per length, drawn from a generator seeded by ``EVAL_POSITION_SEED`` and the length, so that a
      model's score at a length is deterministic and independent of batching and evaluation order.
      No-grad forwards in training mode count as evaluation, so only gradient steps consume randomness.

    ``max_position`` must cover the longest evaluation length: longer sequences raise
    :class:`PositionRangeError` (a NaN row with a note in extrapolation tables). The default, 8192, covers
    posenc's default evaluation lengths (512, 2048, 8192) and is 128x the default training length; the
    paper uses ``L = 2048`` for training lengths up to 40 and tests up to 500, i.e. the range is chosen to
    exceed the longest test sequence with the training length a small fraction of it.

    The model gives the encoder's hooks these positions; it offers no ``score_mod`` (which would assume
    ``0..n-1``) and no score bias.
    """

    description = "sinusoidal/RoPE at sorted random positions from a large range (Ruoss et al. 2023)"

    def __init__(
        self, shape: AttentionShape, train_length: int, *, base: str = "sinusoidal", max_position: int = 8192
    ) -> None:
        super().__init__(shape, train_length)
        if base not in RANDOMIZED_BASES:
            known = ", ".join(RANDOMIZED_BASES)
            raise ConfigError(f"randomized: encoder.base must be one of {known}; got {base!r}")
        if max_position > MAX_LENGTH:
            raise ConfigError(
                f"randomized: encoder.max_position must be at most {MAX_LENGTH} (posenc's longest sequence), "
                f"got {max_position}"
            )
        if max_position < train_length:
            raise ConfigError(
                f"randomized: encoder.max_position ({max_position}) must be >= the training length ({train_length})"
            )
        self.base = base
        self.max_position = max_position
        self.inner = RANDOMIZED_BASES[base](shape, train_length)
        # One evaluation positions tensor per (length, device): the same object every time, so a rotary
        # base reuses its rotation tables across forwards.
        self._eval_positions: dict[tuple[int, str], Tensor] = {}

    def check_positions(self, length: int) -> None:
        if length > self.max_position:
            raise PositionRangeError(
                f"randomized encoding samples positions from 0..{self.max_position - 1} "
                f"(encoder.max_position={self.max_position}); a length of {length} needs more"
            )

    def sample_positions(self, positions: Tensor) -> Tensor:
        length = positions.shape[0]
        self.check_positions(length)
        if self.training and torch.is_grad_enabled():
            return pf.randomized_positions(length, self.max_position, device=positions.device)
        return self.eval_positions(length, positions.device)

    def eval_positions(self, length: int, device: torch.device | str = "cpu") -> Tensor:
        """The fixed evaluation positions ``[length]`` for sequences of ``length`` tokens."""
        self.check_positions(length)
        key = (length, str(device))
        if key not in self._eval_positions:
            generator = torch.Generator().manual_seed(EVAL_POSITION_SEED * 1_000_003 + length)
            if len(self._eval_positions) >= 8:
                self._eval_positions.pop(next(iter(self._eval_positions)))
            self._eval_positions[key] = pf.randomized_positions(length, self.max_position, generator, device)
        return self._eval_positions[key]

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return self.inner.embed(x, positions)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return self.inner.rotate(q, k, positions)
