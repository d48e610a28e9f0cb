"""Positional-encoding formulas as pure functions.

This module is posenc's public formula API: the names and signatures below are a stable contract.
Every function is stateless, documents its tensor shapes, accepts float32 and float64 inputs and keeps
their dtype and device. The modules in :mod:`posenc.encoders` are thin wrappers around these.

Layout convention for rotary encodings: the RoFormer layout, where dimension pair ``j`` of a head is
``(x[..., 2j], x[..., 2j+1])`` (Su et al. 2021, eq. 15), not the "rotate_half" layout of GPT-NeoX/Llama.
"""

from __future__ import annotations

# Each module's ``__all__`` is its part of the API; the package re-exports exactly those names.
from posenc.functional import (
    absolute,
    bias,
    data_dependent,
    learned_bias,
    randomized,
    rope_scaling,
    rope_scaling_spec,
    rotary,
)
from posenc.functional.absolute import *  # noqa: F403
from posenc.functional.bias import *  # noqa: F403
from posenc.functional.data_dependent import *  # noqa: F403
from posenc.functional.learned_bias import *  # noqa: F403
from posenc.functional.randomized import *  # noqa: F403
from posenc.functional.rope_scaling import *  # noqa: F403
from posenc.functional.rope_scaling_spec import *  # noqa: F403
from posenc.functional.rotary import *  # noqa: F403

__all__ = [
    *absolute.__all__,
    *bias.__all__,
    *data_dependent.__all__,
    *learned_bias.__all__,
    *randomized.__all__,
    *rotary.__all__,
    *rope_scaling.__all__,
    *rope_scaling_spec.__all__,
]
