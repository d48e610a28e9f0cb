"""The encoder interface (hooks the model calls) and NoPE, the encoder that uses none of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

MAX_LENGTH = 1 << 20  # longest sequence posenc accepts anywhere: beyond it nothing fits in memory
#: A data-dependent score bias, per query range: ``(start, stop) -> [b, n_h, stop - start, stop]``.
DataBias = Callable[[int, int], Tensor]


@dataclass(frozen=True)
class KeyBias:
    """A data-dependent score bias ``a[b, h, i] + key[b, h, j]`` (FoX's ``c_i - c_j``): a :data:`DataBias`
    (called by query range it gives the whole bias) of which attention needs only ``key``, since softmax over
    the keys ignores a term of the query alone. The attention backend then carries it through fused attention
    as two more query/key dimensions (:func:`posenc.nn.fused_bias.key_bias_attention`).

    Args:
        key: ``[b, n_h, s]``, the part of the key.
        dense: the whole bias by query range, as a :data:`DataBias`.
    """

    key: Tensor
    dense: DataBias

    def __call__(self, start: int, stop: int) -> Tensor:
        return self.dense(start, stop)


@dataclass(frozen=True)
class OwnAttention:
    """A data-dependent score bias that computes the attention itself, because it shares its work (CoPE: the
    logits that gate its counts are the attention's logits) or has a faster form (xPos's windows). Called by
    query range it is a :data:`DataBias` (the whole bias).

    Args:
        attend: ``(v [b, n_h, s, h_d], dropout_p) -> [b, n_h, s, h_d]``, causal attention with the bias, or
            None where it does not apply (the backend then adds ``dense`` in query blocks).
        dense: the whole bias by query range, as a :data:`DataBias`.
    """

    attend: Callable[[Tensor, float], Tensor | None]
    dense: DataBias

    def __call__(self, start: int, stop: int) -> Tensor:
        return self.dense(start, stop)


def as_is(tensor: Tensor) -> Tensor:
    """The default ``capture`` of :meth:`PositionalEncoder.score_mod`: the tensor itself."""
    return tensor


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
    #: Takes a RoPE context-extension method at evaluation (``set_rope_scaling``): the rotary encoders.
    takes_rope_scaling: ClassVar[bool] = False
    #: ``rotate`` returns queries and keys this many times as wide as the head (PoPE: 2, cosine and sine).
    rotated_width: ClassVar[int] = 1

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__()
        self.shape = shape
        self.train_length = train_length

    def check_depth(self, n_layers: int) -> None:
        """Say so (a log warning) where a model of ``n_layers`` layers would not use this encoder as configured
        (a schedule whose pattern is longer than the model). Default: nothing to say."""

    @classmethod
    def takes_rope_scaling_with(cls, options: dict) -> bool:
        """Whether an encoder of this class built with ``options`` takes RoPE scaling, without building it
        (evaluation plans from configs): ``takes_rope_scaling``, unless the options decide (a schedule)."""
        return cls.takes_rope_scaling

    def for_layer(self, index: int) -> PositionalEncoder:
        """The encoder layer ``index`` attends with (its ``rotate`` and score-bias hooks); default: this one,
        shared by every layer. A per-layer schedule returns one of its parts."""
        return self

    def sample_positions(self, positions: Tensor) -> Tensor:
        """The positions ``[s]`` the other hooks see in this forward pass; default: ``positions`` (``0..s-1``).

        The model calls it once per forward pass, so every layer sees the same positions. An encoder that
        returns other positions (randomized encodings) must not offer a ``score_mod``, which assumes
        ``0..s-1``.
        """
        return positions

    def project_parameters(self) -> None:
        """Put trained parameters back into their allowed range; training calls it after every optimizer
        step (outside any compiled graph). Default: nothing to do."""

    def check_positions(self, length: int) -> None:
        """Raise :class:`PositionRangeError` if positions ``0..length-1`` cannot be encoded."""

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Add position information to token embeddings ``x`` ``[b, s, d]``; positions ``[s]``."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Transform queries and keys ``[b, n_h, s, h_d]`` by position; positions ``[s]``."""
        return q, k

    def data_bias(self, x: Tensor, q: Tensor, k: Tensor) -> DataBias | None:
        """A score bias computed from the layer's data (CoPE: gated counts of keys; FoX: forget gates), or
        None (every encoder whose bias depends on positions alone).

        Args:
            x: the layer's (normalised) input ``[b, s, d]``.
            q, k: its queries and keys after :meth:`rotate`, ``[b, n_h, s, h_d]``.

        Returns:
            A function of a query range ``(start, stop)`` giving the bias ``[b, n_h, stop - start, stop]`` of
            those queries against keys ``0 .. stop-1`` (future keys are masked by attention), so that the
            attention backend can compute it block by block in memory linear in ``s``.
        """
        return None

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        """Additive score bias ``[n_h, s_q, s_k]`` (only called when ``has_score_bias``)."""
        raise NotImplementedError

    def distance_table(self, length: int) -> Tensor | None:
        """``[n_h, length]`` with ``score_bias(i, j) = distance_table[:, i - j]`` for ``0 <= i - j < length``,
        when the bias depends on the distance alone (T5, KERPLE, ALiBi); else None (FIRE: its normaliser
        depends on ``i``). Query blocks and FlexAttention then gather the bias from it instead of computing
        it at every score, and fused SDPA takes a strided view of it as its mask at inference
        (:func:`posenc.nn.fused_bias.distance_table_attention`); it must agree with ``score_bias`` (tests check
        it)."""
        return None

    def linear_bias_slopes(self) -> Tensor | None:
        """The slopes ``[n_h]`` when ``score_bias`` is exactly ``-slope_h * (i - j)`` (ALiBi), else None.

        An attention backend may then carry the bias through fused attention instead of adding it to scores
        (:meth:`posenc.nn.attention.CausalAttention.linear_bias`); it must agree with ``score_bias``.
        """
        return None

    def far_bias(self) -> tuple[int, Tensor] | None:
        """``(reach, bias)`` when ``score_bias`` depends on ``i - j`` only and is the constant ``bias`` ``[n_h]``
        for every distance ``i - j >= reach`` (T5 beyond ``max_distance``), else None.

        An attention backend may then attend to all keys that far without any bias tensor
        (:meth:`posenc.nn.attention.CausalAttention.far_constant`); it must agree with ``score_bias``.
        """
        return None

    def score_mod(self, length: int, capture: Callable[[Tensor], Tensor] = as_is) -> Callable[..., Tensor] | None:
        """``score_bias`` as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)`` for sequences of ``length``
        tokens, or None if not given.

        Used for the model's positions ``0..s-1``, so ``q_idx``/``kv_idx`` are the positions themselves (no
        gather inside the kernel, which is faster). Must agree with ``score_bias`` on causal entries (tests
        check it); entries with ``kv_idx > q_idx`` are masked, but are still computed inside a kernel's
        diagonal blocks, so a table lookup must stay in range there. Learned biases of the distance alone (T5,
        KERPLE) look up a per-distance table of ``length`` entries computed once per call: a gather per
        score instead of transcendental functions, much the faster (both timed in docs/performance.md, section
        "Measurements behind design choices").

        Args:
            length: the sequence length the kernel runs at (tables are sized to it).
            capture: applied to every tensor the score_mod closes over (parameters, buffers, tables). The
                attention backend chooses it (:meth:`posenc.nn.attention.CausalAttention.score_mod`): whether
                captured parameters stay attached to autograd is a rule of the backend, not of the encoder.
        """
        return None


class NoPE(PositionalEncoder):
    """No positional encoding: a causal decoder can still infer positions (Kazemnejad et al. 2023)."""
