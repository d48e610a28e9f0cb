"""Positional-encoding formulas as pure functions.

This module is posenc's public formula API: the names and signatures below are a stable contract.
Every function is stateless, documents its tensor shapes, accepts float32 and float64 inputs and keeps
their dtype and device. The modules in :mod:`posenc.encoders` are thin wrappers around these.

Layout convention for rotary encodings: the RoFormer layout, where dimension pair ``j`` of a head is
``(x[..., 2j], x[..., 2j+1])`` (Su et al. 2021, eq. 15), not the "rotate_half" layout of GPT-NeoX/Llama.
"""

from __future__ import annotations

from posenc.functional.absolute import (
    sinusoidal_table,
)
from posenc.functional.bias import (
    alibi_slopes,
    alibi_bias,
)
from posenc.functional.learned_bias import (
    t5_relative_bucket,
    t5_bias,
    kerple_log_bias,
    fire_psi,
    fire_normalized_distance,
    fire_mlp,
    fire_mlp_pieces,
    fire_mlp_piecewise,
    fire_bias,
    randomized_positions,
)
from posenc.functional.rotary import (
    rope_inv_freq,
    ntk_base,
    rope_angles,
    rope_rotation,
    apply_rotation,
    apply_rope,
    xpos_zeta,
    apply_xpos,
    xpos_rotations,
)
from posenc.functional.rope_scaling import (
    none_scaling,
    linear_scaling,
    ntk_scaling,
    dynamic_ntk_scaling,
    yarn_scaling,
    llama3_scaling,
    ROPE_SCALING,
    RopeScaling,
)

__all__ = [
    "sinusoidal_table",
    "alibi_slopes",
    "alibi_bias",
    "t5_relative_bucket",
    "t5_bias",
    "kerple_log_bias",
    "fire_psi",
    "fire_normalized_distance",
    "fire_mlp",
    "fire_mlp_pieces",
    "fire_mlp_piecewise",
    "fire_bias",
    "randomized_positions",
    "rope_inv_freq",
    "ntk_base",
    "rope_angles",
    "rope_rotation",
    "apply_rotation",
    "apply_rope",
    "xpos_zeta",
    "apply_xpos",
    "xpos_rotations",
    "none_scaling",
    "linear_scaling",
    "ntk_scaling",
    "dynamic_ntk_scaling",
    "yarn_scaling",
    "llama3_scaling",
    "ROPE_SCALING",
    "RopeScaling",
]
