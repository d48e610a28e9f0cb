"""Per-layer schedules: a different positional encoder in each layer (NoPE/RoPE interleaving)."""

from __future__ import annotations

import logging

from torch import nn

from posenc.encoders.base import AttentionShape, PositionalEncoder
from posenc.errors import ConfigError
from posenc.functional.rope_scaling_spec import RopeScaling

log = logging.getLogger("posenc.encoders")


class Schedule(PositionalEncoder):
    """A pattern of attention-level encoders, one per layer, repeated over the model's depth.

    Layer ``i`` uses ``layers[i % len(layers)]``: ``[rope, rope, rope, nope]`` is RoPE with NoPE in every
    fourth layer, as in Llama 4's iRoPE (Meta 2025, interleaved NoPE layers), SmolLM3 (Hugging Face 2025) and
    Cohere's RNoPE (Yang et al. 2025, "Rope to Nope and Back Again: A New Hybrid Attention Strategy", which
    also restricts the RoPE layers to a sliding window, not done here). Each distinct key is built once
    with its default options and shared by the layers that use it, as a single encoder is shared by all
    layers. Only encoders that act inside attention (rotating queries and keys, or biasing scores) can be
    scheduled; one that adds positions to the input embeddings or draws the positions every layer sees
    (sinusoidal, learned, randomized) acts on the whole model and is refused.

    Args:
        shape: model dimensions.
        train_length: the longest training sequence.
        layers: the pattern, registry keys (at least one).
    """

    description = "a pattern of attention-level encoders over the layers, e.g. [rope,rope,rope,nope] (iRoPE)"

    def __init__(
        self, shape: AttentionShape, train_length: int, *, layers: list = ["rope", "rope", "rope", "nope"]
    ) -> None:  # noqa: B006 (read only)
        super().__init__(shape, train_length)
        from posenc.encoders import ENCODERS  # the registry holds this class: imported when built

        if not layers or not all(isinstance(name, str) for name in layers):
            raise ConfigError(f"encoder.layers must be a non-empty list of encoder names, got {layers!r}")
        for name in layers:
            ENCODERS.check(name)
            if ENCODERS[name] is Schedule:
                raise ConfigError("encoder.layers: a schedule cannot hold another schedule")
            if not acts_inside_attention(ENCODERS[name]):
                raise ConfigError(
                    f"encoder.layers: '{name}' acts on the input embeddings or the positions of every layer, "
                    "not on one layer's attention; schedule encoders that rotate queries and keys or bias scores"
                )
        self.layers = list(layers)
        self.encoders = nn.ModuleDict(
            {name: ENCODERS.build(name, shape, train_length) for name in dict.fromkeys(layers)}
        )
        self.takes_rope_scaling = any(e.takes_rope_scaling for e in self.encoders.values())  # type: ignore[misc]

    @classmethod
    def takes_rope_scaling_with(cls, options: dict) -> bool:
        from posenc.encoders import ENCODERS
        from posenc.options import keyword_options

        layers = options.get("layers", keyword_options(cls)["layers"])
        if not isinstance(layers, list):  # a hand-edited config: its check refuses it in one line elsewhere
            return False
        return any(isinstance(n, str) and n in ENCODERS and ENCODERS[n].takes_rope_scaling_with({}) for n in layers)

    def check_depth(self, n_layers: int) -> None:
        if n_layers < len(self.layers):  # "every 4th layer NoPE" in a 3-layer model: none; say it, do not guess
            used = [self.layers[i % len(self.layers)] for i in range(n_layers)]
            log.warning(
                "encoder.layers has %d entries but model.n_layers is %d: the model's layers are %s",
                len(self.layers),
                n_layers,
                ", ".join(used),
            )

    def for_layer(self, index: int) -> PositionalEncoder:
        # the scheduled encoder's own part for this layer (itself, or a per-layer part: CoPE, FoX)
        return self.encoders[self.layers[index % len(self.layers)]].for_layer(index)

    def check_positions(self, length: int) -> None:
        for encoder in self.encoders.values():
            encoder.check_positions(length)

    def project_parameters(self) -> None:
        for encoder in self.encoders.values():
            encoder.project_parameters()

    def set_rope_scaling(self, scaling: RopeScaling | None) -> None:
        """Forwarded to the scheduled encoders that take RoPE scaling (the rotary ones)."""
        for encoder in self.encoders.values():
            if encoder.takes_rope_scaling:
                encoder.set_rope_scaling(scaling)


def acts_inside_attention(cls: type[PositionalEncoder]) -> bool:
    """Whether ``cls`` leaves the model-wide hooks alone (``embed``, ``sample_positions``): it acts through
    ``rotate`` or ``score_bias`` only, so it can serve one layer."""
    return cls.embed is PositionalEncoder.embed and cls.sample_positions is PositionalEncoder.sample_positions
