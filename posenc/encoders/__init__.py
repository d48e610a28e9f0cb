"""Positional encoders: small modules injected into the model, one registry of them.

An encoder can act on the model in four places, through the hooks of :class:`PositionalEncoder`
(and choose the positions all of them see, ``sample_positions``: randomized encodings):

* ``embed``  - on the input embeddings (absolute encodings: sinusoidal, learned);
* ``rotate`` - on queries and keys inside attention (rotary encodings: RoPE, RoPE+NTK, xPos, p-RoPE; PoPE,
  whose queries and keys come out twice as wide);
* ``score_bias`` - as an additive attention-score bias of positions (ALiBi, T5, KERPLE, FIRE), when
  ``has_score_bias`` is set; such an encoder may also give the same bias as a FlexAttention ``score_mod``
  and a per-distance ``distance_table``, which the attention backend uses for long sequences;
* ``data_bias`` - as a score bias computed from the layer's input, queries and keys (CoPE, FoX).

``for_layer`` gives each layer its encoder: the encoder itself, or a part of it (per-layer parameters:
CoPE, FoX; a per-layer schedule). The base class does nothing anywhere, which is exactly NoPE. The model
calls the hooks and never looks at an encoder's name. Formulas live in :mod:`posenc.functional`.
"""

from __future__ import annotations

from typing import Any

from posenc.encoders.absolute import Learned, Sinusoidal
from posenc.encoders.base import AttentionShape, NoPE, PositionalEncoder
from posenc.encoders.bias import ALiBi
from posenc.encoders.data_dependent import CoPE, FoX, PoPE
from posenc.encoders.learned_bias import FIRE, KerpleLog, T5Bias
from posenc.encoders.randomized import Randomized
from posenc.encoders.rotary import PRoPE, RoPE, RoPENTK, RoPEPartial, RotaryEncoder, XPos
from posenc.encoders.schedule import Schedule
from posenc.registry import Registry

__all__ = [
    "ENCODERS", "AttentionShape", "PositionalEncoder", "RotaryEncoder", "build_encoder", "check_encoder_name",
    "NoPE", "Sinusoidal", "Learned", "ALiBi", "RoPE", "RoPENTK", "XPos", "RoPEPartial", "PRoPE",
    "T5Bias", "KerpleLog", "FIRE", "Randomized", "Schedule", "CoPE", "FoX", "PoPE",
]  # fmt: skip

#: The registry: key -> encoder class. ``conf/encoder/<key>.yaml`` exists for every built-in key; plugins
#: (entry points ``posenc.encoders``, ``POSENC_PLUGINS``) join it when it is first read (posenc.plugins).
ENCODERS: Registry[PositionalEncoder] = Registry(
    "encoder",
    {
        "nope": NoPE,
        "sinusoidal": Sinusoidal,
        "learned": Learned,
        "alibi": ALiBi,
        "rope": RoPE,
        "rope_ntk": RoPENTK,
        "xpos": XPos,
        "rope_partial": RoPEPartial,
        "p_rope": PRoPE,
        "t5": T5Bias,
        "kerple": KerpleLog,
        "fire": FIRE,
        "randomized": Randomized,
        "cope": CoPE,
        "fox": FoX,
        "pope": PoPE,
        "schedule": Schedule,
    },
    base=PositionalEncoder,
    entry_point_group="posenc.encoders",
)


check_encoder_name = ENCODERS.check


def build_encoder(
    name: str, shape: AttentionShape, train_length: int, options: dict[str, Any] | None = None
) -> PositionalEncoder:
    """Build encoder ``name``; unknown names, unknown options and bad values raise :class:`ConfigError`."""
    return ENCODERS.build(name, shape, train_length, options=options)
