"""Randomized positional encodings' position sampling (Ruoss et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["randomized_positions"]


def randomized_positions(
    length: int,
    max_position: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """A sorted random subset of ``range(max_position)`` of size ``length``, drawn without replacement.

    The position sampling of randomized positional encodings (Ruoss et al. 2023, "Randomized Positional
    Encodings Boost Length Generalization of Transformers", §3; their reference code,
    google-deepmind/randomized_positional_encodings, ``noisy_fixed_positional_encodings``: ``choice`` over
    ``arange(noise_max_length)`` with ``replace=False``, then ``sort``).

    Args:
        length: number of positions, ``0 <= length <= max_position``.
        max_position: size of the range sampled from.
        generator: torch random generator (None: torch's global one).
        device: device of the result.

    Returns:
        ``[length]`` strictly increasing ``int64`` positions in ``[0, max_position)``.
    """
    if not 0 <= length <= max_position:
        raise ValueError(f"randomized_positions: need 0 <= length <= max_position={max_position}: {length}")
    perm = torch.randperm(max_position, generator=generator)  # on CPU: the same draw on every device
    return perm[:length].sort().values.to(device)
