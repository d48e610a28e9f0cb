"""Command-line values, parsed and checked: each bad value is one :class:`PosencError` line naming its option.

Shared by ``posenc extrapolate``, ``compare`` and ``kernels`` so that the same option means the same thing
everywhere; the commands themselves live in :mod:`posenc.cli`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from posenc.errors import PosencError

if TYPE_CHECKING:
    from posenc.functional.rope_scaling import RopeScaling

MAX_DISTANCE = 1 << 16  # longest `posenc kernels --max-distance`: the kernel is computed at every distance
DEVICES = ("auto", "cpu", "cuda")
NO_SCALING = "none"  # the RoPE scaling method "as trained": a value of --rope-scaling and of the `scaling` column


def parse_lengths(text: str) -> list[int]:
    """``"512,2048,8192"`` -> ``[512, 2048, 8192]`` (sorted, each once); anything else raises."""
    from posenc.encoders.base import MAX_LENGTH  # the longest sequence posenc accepts anywhere

    lengths = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):  # ASCII digits only: str.isdigit accepts "²"
            raise PosencError(f"--lengths: {part!r} is not a positive integer (expected e.g. 512,2048,8192)")
        value = int(part)
        if not 1 <= value <= MAX_LENGTH:
            raise PosencError(f"--lengths: {value} is out of range; lengths must be in 1..{MAX_LENGTH}")
        lengths.append(value)
    return sorted(set(lengths))


def parse_scalings(text: str, factor: float | None = None) -> list[RopeScaling]:
    """``"none,yarn"`` -> RoPE scalings (each with ``factor``; None: it follows the evaluation length).

    Unknown methods or a non-positive factor raise a one-line :class:`PosencError` listing the known ones.
    """
    from posenc.functional.rope_scaling import ROPE_SCALING, RopeScaling

    if factor is not None and not (math.isfinite(factor) and factor > 0):
        raise PosencError(f"--rope-factor must be a positive number, got {factor}")
    methods = []
    for part in text.split(","):
        part = part.strip()
        if part not in ROPE_SCALING:
            raise PosencError(f"--rope-scaling: unknown method {part!r}; known methods: {', '.join(ROPE_SCALING)}")
        if part not in methods:
            methods.append(part)
    return [RopeScaling(m, None if m == NO_SCALING else factor) for m in methods]


def parse_encoders(text: str | None) -> list[str]:
    """Registry keys from ``--encoders`` (None: all); an unknown key raises with the known ones."""
    from posenc.encoders import ENCODERS

    return ENCODERS.parse(text, "--encoders")


def check_eval_options(sequences: int | None, device: str) -> None:
    """``--sequences`` (None: the default count) and ``--device``."""
    if sequences is not None and sequences < 1:
        raise PosencError(f"--sequences must be >= 1, got {sequences}")
    if device not in DEVICES:
        raise PosencError(f"--device must be auto, cpu or cuda; got {device!r}")


def check_max_distance(max_distance: int) -> None:
    if not 1 <= max_distance <= MAX_DISTANCE:
        raise PosencError(f"--max-distance must be between 1 and {MAX_DISTANCE}, got {max_distance}")


def check_factor(factor: float) -> None:
    if not (math.isfinite(factor) and factor >= 1):
        raise PosencError(f"--factor must be a finite number >= 1, got {factor}")
