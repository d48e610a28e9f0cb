"""Rotary encoders: queries and keys rotated by position (RoPE and its variants, xPos)."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from posenc import functional as pf
from posenc.encoders.base import AttentionShape, DataBias, OwnAttention, PositionalEncoder
from posenc.errors import ConfigError
from posenc.functional.rope_scaling_spec import RopeScaling


class RotaryEncoder(PositionalEncoder):
    """Shared machinery for encoders that rotate dimension pairs of q and k.

    The first ``rotary_dim`` dimensions of each head are rotated (all of them unless a subclass says
    otherwise), the rest pass through. Their frequencies are the first ``rotary_dim / 2`` of the spectrum
    ``base**(-2j/spectrum_dim)``: over the rotated dims themselves by default (GPT-NeoX's partial RoPE), or
    over the whole head with the lowest frequencies left out (p-RoPE). At evaluation,
    :meth:`set_rope_scaling` swaps in a RoPE context-extension method (:mod:`posenc.functional.rope_scaling`)
    without retraining; it rescales the whole spectrum, of which the same first frequencies are used.

    Args:
        shape: model dimensions; the head dimension must be even.
        train_length: the longest training sequence (the scaling methods' original context ``L``).
        base: RoPE frequency base, ``> 1``.
        rotary_dim: rotated dimensions per head (even, ``<= head_dim``); ``None``: the whole head.
        spectrum_dim: the dimension the frequency spectrum is defined over (even, ``>= rotary_dim``);
            ``None``: ``rotary_dim``.
    """

    key: ClassVar[str] = ""  # registry key, for messages
    takes_rope_scaling: ClassVar[bool] = True
    #: The scaling in force when none is set (``set_rope_scaling(None)``); ``None``: the trained rotations.
    default_scaling: ClassVar[RopeScaling | None] = None

    def __init__(
        self,
        shape: AttentionShape,
        train_length: int,
        base: float,
        rotary_dim: int | None = None,
        spectrum_dim: int | None = None,
    ) -> None:
        super().__init__(shape, train_length)
        if shape.head_dim % 2:
            raise ConfigError(
                f"encoder '{self._key()}' needs an even head dimension, got {shape.head_dim} "
                f"(model.d_model={shape.d_model} / model.n_heads={shape.n_heads})"
            )
        if not base > 1:
            raise ConfigError(f"encoder.base must be > 1, got {base}")
        self.base = base
        self.rotary_dim = shape.head_dim if rotary_dim is None else rotary_dim
        self.spectrum_dim = self.rotary_dim if spectrum_dim is None else spectrum_dim
        inv_freq = pf.rope_inv_freq(self.spectrum_dim, base)[: self.rotary_dim // 2]  # [rotary_dim/2]
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._scaling: RopeScaling | None = type(self).default_scaling
        # (query, key) rotation tables per positions tensor: computed once per forward, not per layer.
        # The model reuses one positions tensor per length, so repeated forwards reuse the tables too.
        self._tables: dict[tuple[int, torch.dtype], tuple[Tensor, tuple[Tensor, Tensor]]] = {}
        if self._scaling is not None:  # a default method (rope_ntk) is checked now, as a set one is: a head it
            self.set_rope_scaling(self._scaling)  # cannot serve is one ConfigError at build, not a forward's error

    @classmethod
    def _key(cls) -> str:
        """The registry key messages name: the class's ``key``, or a plugin subclass's class name."""
        return getattr(cls, "key", cls.__name__)

    # -- evaluation-time context extension -------------------------------------------------------------

    @property
    def rope_scaling(self) -> RopeScaling | None:
        """The scaling in force (``None``: the rotations as trained)."""
        return self._scaling

    def set_rope_scaling(self, scaling: RopeScaling | None) -> None:
        """Rotate under a RoPE extension method from now on; ``None`` restores the trained behaviour.

        For a sequence of ``L'`` tokens the rotated pairs use the method's inverse frequencies (a ``None``
        factor follows the length, see :meth:`RopeScaling.factor_for`, with ``L`` = ``train_length``) and
        the rotation tables are multiplied by its attention scale, so rotated ``q`` and ``k`` are each
        scaled, as Hugging Face scales ``cos``/``sin`` (logits scale by its square). xPos keeps its decay.
        Meant for evaluating a trained checkpoint; the cached tables are cleared.

        Raises:
            ConfigError: unknown method, bad factor, or a method that cannot serve this head size.
        """
        if scaling is not None:
            try:  # fail now rather than in the middle of an evaluation
                scaling.validate().resolve(self.spectrum_dim, self.base, self.train_length, self.train_length)
            except ValueError as err:
                raise ConfigError(f"encoder '{self._key()}': {err}") from err
        self._scaling = type(self).default_scaling if scaling is None else scaling
        self._tables.clear()

    def scaling_for(self, length: int) -> tuple[Tensor, float]:
        """``(inv_freq [rotary_dim/2], attention_scale)`` at ``length`` tokens, as the ``inv_freq`` buffer."""
        if self._scaling is None:
            return self.inv_freq, 1.0
        inv_freq, scale = self._scaling.resolve(self.spectrum_dim, self.base, self.train_length, length)
        inv_freq = inv_freq[: self.rotary_dim // 2]  # the frequencies this encoder rotates by
        # Rounded to the trained buffer's dtype: "none" (and NTK at L' <= L) reproduce it bit for bit.
        return inv_freq.to(dtype=self.inv_freq.dtype, device=self.inv_freq.device), scale

    # -- rotations -------------------------------------------------------------------------------------

    def rotations(self, positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The complex ``(query, key)`` factors ``[s, rotary_dim/2]`` for ``pf.apply_rotation``."""
        rotation = pf.rope_rotation(positions, inv_freq, dtype)
        return rotation, rotation

    def rotation_tables(self, positions: Tensor, length: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """:meth:`rotations` under the scaling in force; cached per ``positions`` tensor unless compiling."""
        if torch.compiler.is_compiling():  # the compiler folds the tables into its graph
            return self._scaled_rotations(positions, length, dtype)
        return self._cached_rotations(positions, length, dtype)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        rq, rk = self.rotation_tables(positions, q.shape[-2], _complex_dtype(q))
        r = self.rotary_dim
        if r == q.shape[-1]:
            return pf.apply_rotation(q, rq), pf.apply_rotation(k, rk)
        # q[..., :r] of a (possibly strided) q is still pair-aligned, so apply_rotation needs no copy.
        return (
            torch.cat((pf.apply_rotation(q[..., :r], rq), q[..., r:]), dim=-1),
            torch.cat((pf.apply_rotation(k[..., :r], rk), k[..., r:]), dim=-1),
        )

    def _scaled_rotations(self, positions: Tensor, length: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        inv_freq, scale = self.scaling_for(length)
        rq, rk = self.rotations(positions, inv_freq, dtype)
        if scale != 1.0:
            rq, rk = (rq * scale,) * 2 if rq is rk else (rq * scale, rk * scale)
        return rq, rk

    def _cached_rotations(self, positions: Tensor, length: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        key = (id(positions), dtype)
        hit = self._tables.get(key)
        if hit is not None and hit[0] is positions and hit[1][0].device == self.inv_freq.device:
            return hit[1]
        tables = self._scaled_rotations(positions, length, dtype)
        if len(self._tables) >= 8:  # a few lengths at a time (e.g. training + evaluation)
            self._tables.pop(next(iter(self._tables)))
        self._tables[key] = (positions, tables)  # holding `positions` keeps its id unique
        return tables


def _complex_dtype(x: Tensor) -> torch.dtype:
    return torch.complex128 if x.dtype == torch.float64 else torch.complex64


def partial_rotary_dim(fraction: float, head_dim: int, key: str) -> int:
    """The dimensions a head rotates when a ``fraction`` of its ``head_dim`` is rotated: ``floor(fraction *
    head_dim)``, as GPT-NeoX's ``int(head_size * rotary_pct)``; it must be even and ``>= 2`` (encoder ``key``
    names the message's encoder)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"encoder.fraction must be in (0, 1], got {fraction}")
    rotary_dim = math.floor(fraction * head_dim + 1e-9)  # 0.29 * 100 is 28.999999999999996
    if head_dim % 2 == 0 and (rotary_dim < 2 or rotary_dim % 2):
        raise ConfigError(
            f"encoder.fraction={fraction} rotates floor({fraction} * head_dim {head_dim}) = "
            f"{rotary_dim} dimensions; {key} needs an even number >= 2"
        )
    return rotary_dim


class RoPE(RotaryEncoder):
    """Rotary position embedding (Su et al. 2021, RoFormer).

    Args:
        base: frequency base, ``> 1``.
        fraction: the share of each head's dims rotated, the first ``floor(fraction * head_dim)``, with
            frequencies spanning them (:class:`RoPEPartial`'s rule, which is ``rope_partial`` with 0.25 by
            default); 1 (default): the whole head. Where a paper's RoPE rotates part of the head, as
            Kazemnejad et al. 2023's does (25%: ``conf/experiment_encoder/kazemnejad_matched_rope.yaml``),
            its comparisons keep the name ``rope`` with the fraction it used.
    """

    description = "rotary embedding of queries and keys (Su et al. 2021)"
    key = "rope"

    def __init__(
        self, shape: AttentionShape, train_length: int, *, base: float = 10000.0, fraction: float = 1.0
    ) -> None:
        rotary_dim = None if fraction == 1 else partial_rotary_dim(fraction, shape.head_dim, self._key())
        super().__init__(shape, train_length, base, rotary_dim=rotary_dim)
        self.fraction = fraction


class RoPENTK(RoPE):
    """RoPE trained as usual; at a length ``L' > L`` (training length) it uses the NTK-aware base.

    The base becomes ``base * s**(h_d/(h_d-2))`` with ``s = L'/L`` (see :func:`posenc.functional.ntk_base`),
    i.e. static NTK-aware scaling chosen per evaluation length: RoPE whose default scaling is
    ``RopeScaling("ntk")`` (factor ``max(1, L'/L)``). At ``L' <= L`` it is exactly RoPE. Another scaling
    set with :meth:`set_rope_scaling` replaces this default; ``None`` brings it back.

    It trains exactly as ``rope`` (same weights for the same seed), so experiments train ``rope`` once and
    evaluate it with ``--rope-scaling none,ntk`` instead of training this key again.
    """

    description = "RoPE evaluated with NTK-aware base rescaling past the training length (bloc97 2023)"
    key = "rope_ntk"
    default_scaling = RopeScaling("ntk")


class RoPEPartial(RotaryEncoder):
    """Rotary embedding of a fraction of each head's dimensions; the others pass through unchanged.

    GPT-NeoX's ``rotary_pct`` (Black et al. 2022, "GPT-NeoX-20B: An Open-Source Autoregressive Language
    Model", §2: rotary on the first 25% of each head's dimensions) and GPT-J's ``rotary_dim`` (64 of 256).
    The first ``rotary_dim = floor(fraction * head_dim)`` dimensions are rotated, as GPT-NeoX's
    ``int(head_size * rotary_pct)`` and Hugging Face's
    ``int(head_dim * partial_rotary_factor)``; it must be even and ``>= 2``. Their frequencies span the
    rotated dims, ``base**(-2j/rotary_dim)`` (GPT-NeoX convention), so they still range from 1 down to about
    ``1/base``. Barbero et al. 2024 ("Round and Round We Go! What makes Rotary Positional Encodings
    useful?", arXiv 2410.06205) propose p-RoPE, which instead keeps the *lowest* frequencies of the full
    spectrum out (``base**(-2j/head_dim)`` for the first pairs only, Hugging Face's "proportional" RoPE);
    with the same fraction both leave ``head_dim - rotary_dim`` position-free "semantic" channels.

    Scaling methods (:meth:`set_rope_scaling`) act on the rotated dims, with ``head_dim = rotary_dim``.
    """

    description = "RoPE on a fraction of each head's dims, the rest unrotated (GPT-NeoX 2022)"
    key = "rope_partial"

    def __init__(
        self, shape: AttentionShape, train_length: int, *, fraction: float = 0.25, base: float = 10000.0
    ) -> None:
        rotary_dim = partial_rotary_dim(fraction, shape.head_dim, self._key())
        super().__init__(shape, train_length, base, rotary_dim=rotary_dim)
        self.fraction = fraction


class PRoPE(RotaryEncoder):
    """p-RoPE (Barbero et al. 2025, "Round and Round We Go! What makes Rotary Positional Encodings useful?",
    ICLR, §6): RoPE with the lowest frequencies removed.

    The head's RoPE spectrum ``theta_j = base**(-2j/head_dim)`` is kept for its highest frequencies and the
    lowest ``removed`` fraction of them is set to zero: those pairs are not rotated and carry content only
    ("semantic" channels, robust at any distance), while the high frequencies keep positional attention
    sharp. ``removed = 1 - p`` in the paper's notation (p-RoPE keeps a fraction p); the paper's 0.75-RoPE,
    which beat RoPE on Gemma 2B, removes 0.25, the default here. ``floor(p * head_dim / 2)`` pairs are kept,
    as in Hugging Face's ``_compute_proportional_rope_parameters`` (``partial_rotary_factor = p``), whose
    frequencies the tests pin. Unlike ``rope_partial`` (GPT-NeoX), whose frequencies span ``1 .. 1/base``
    over the rotated dims only, the frequencies kept are exactly RoPE's first ones. Scaling methods rescale
    the whole spectrum (``head_dim``), of which the same pairs stay rotated.
    """

    description = "RoPE with its lowest frequencies removed (Barbero et al. 2025)"
    key = "p_rope"

    def __init__(
        self, shape: AttentionShape, train_length: int, *, removed: float = 0.25, base: float = 10000.0
    ) -> None:
        if not 0 <= removed < 1:
            raise ConfigError(f"encoder.removed must be in [0, 1), got {removed}")
        kept = math.floor((1 - removed) * shape.head_dim / 2 + 1e-9)  # pairs kept: Hugging Face's rope_angles
        if kept < 1:
            raise ConfigError(
                f"encoder.removed={removed} leaves no rotated pair of head_dim {shape.head_dim} "
                "(that is nope); remove less"
            )
        super().__init__(shape, train_length, base, rotary_dim=2 * kept, spectrum_dim=shape.head_dim)
        self.removed = removed


class XPos(RotaryEncoder):
    """Extrapolatable position embedding (Sun et al. 2023, "A Length-Extrapolatable Transformer", ACL):
    RoPE with a per-pair exponential decay, at every length posenc takes.

    The score of query ``m`` and key ``n`` is RoPE's, each pair ``j`` weighted by
    ``zeta_j**((m - n)/scale_base)``, ``zeta_j = (2j/head_dim + gamma)/(1 + gamma)`` (eq. 11). As in the
    authors' reference code (torchscale ``XPOS``: ``scale = (arange(0, d, 2) + 0.4 d)/(1.4 d)``, i.e.
    ``zeta_j`` with ``gamma = 0.4``; ``scale_base`` 512; RoPE's ``10000**(-2j/d)`` on interleaved pairs),
    queries are multiplied by ``zeta**(pos/scale_base)`` and keys by its inverse (torchscale's
    ``downscale=True`` for keys), the positions centred on the middle of the sequence (torchscale's
    ``min_pos = -(length + offset) // 2``; its incremental-decoding ``offset`` keeps that common centre for
    the last query). Centring is a common shift of ``m`` and ``n``, so the scores are exactly those of the
    relative distance; only the range of the factors depends on it.

    Over ``s`` positions those factors reach ``zeta_min**(±(s-1)/(2 scale_base))``, which leaves float32's
    range past a few thousand tokens at a small ``scale_base`` (torchscale computes them in float32 too, and
    the paper evaluates long inputs with blockwise attention). Up to ``MAX_LOG_SCALE`` this encoder rotates
    as the reference does (fused attention, unchanged numbers). Past it, ``rotate`` returns queries with
    RoPE's rotation only and keys with the decay seen from the last position
    (:func:`posenc.functional.xpos_last_rotations`: exact for the last query, all factors at most 1), and
    :meth:`data_bias` adds, block by block of queries, the difference to xPos's score computed from the
    relative distance (:func:`posenc.functional.xpos_relative_scores`), so attention sees
    ``sum_j Re(q_j conj(k_j)) zeta_j**((m-n)/scale_base)`` at any length; far pairs decay to exactly 0 in
    float32, as the decay itself does.

    ``scale_base`` defaults to half the training length: the paper trains at 1024 tokens with the reference
    code's ``scale_base = 512``, so the decay over the training window is the paper's (pass 512 for the
    paper's value).
    """

    #: Largest |log| of a centred decay factor (e**60 ~ 1e26 keeps q.k inside float32): past it, the relative
    #: path (``rotate`` + :meth:`data_bias`).
    MAX_LOG_SCALE = 60.0

    description = "RoPE with per-dimension exponential decay (Sun et al. 2023)"
    key = "xpos"

    def __init__(
        self,
        shape: AttentionShape,
        train_length: int,
        *,
        base: float = 10000.0,
        gamma: float = pf.XPOS_GAMMA,
        scale_base: float | None = None,
    ) -> None:
        super().__init__(shape, train_length, base)
        if scale_base is None:
            scale_base = max(1.0, train_length / 2)
        if not gamma > 0 or not scale_base > 0:
            raise ConfigError(f"xpos needs gamma > 0 and scale_base > 0, got {gamma}, {scale_base}")
        self.gamma = gamma
        self.scale_base = scale_base
        self._log_zeta_min = -math.log(float(pf.xpos_zeta(shape.head_dim, gamma).min()))
        # positions tensor -> its span (max - min), computed once per tensor (the model reuses one per length)
        self._spans: dict[int, tuple[Tensor, float]] = {}

    def centred_fits(self, span: float) -> bool:
        """Whether positions spanning ``span`` keep the centred factors within ``e**±MAX_LOG_SCALE``."""
        return span / 2 / self.scale_base * self._log_zeta_min <= self.MAX_LOG_SCALE

    def relative(self, positions: Tensor) -> bool:
        """Whether ``positions`` take the relative path (centred factors past ``e**MAX_LOG_SCALE``)."""
        if torch.compiler.is_compiling():  # a compiled model's positions are its 0..s-1
            return not self.centred_fits(positions.shape[0] - 1)
        hit = self._spans.get(id(positions))
        if hit is None or hit[0] is not positions:
            span = float(positions.max() - positions.min()) if positions.numel() else 0.0
            if len(self._spans) >= 8:
                self._spans.pop(next(iter(self._spans)))
            hit = self._spans[id(positions)] = (positions, span)  # holding `positions` keeps its id unique
        return not self.centred_fits(hit[1])

    def rotations(self, positions: Tensor, inv_freq: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """RoPE rotations at ``inv_freq`` (scaled, if a scaling is set) times xPos's unchanged decay: centred
        factors, or on the relative path the factors seen from the last position."""
        rotations = pf.xpos_last_rotations if self.relative(positions) else pf.xpos_rotations
        return rotations(positions, inv_freq, self.shape.head_dim, self.gamma, self.scale_base, dtype)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        if not self.relative(positions):
            return super().rotate(q, k, positions)
        return self._relative_rotate(q, k, positions)

    @torch.compiler.disable  # it carries keys in a tensor's __dict__, which torch.compile cannot trace
    def _relative_rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        # RoPE's rotation; RoPE times the decay seen from the last position
        rq, rk = self.rotation_tables(positions, q.shape[-2], _complex_dtype(q))
        q_rot, k_seen = pf.apply_rotation(q, rq), pf.apply_rotation(k, rk)
        # what data_bias needs and the attention's q . k lacks: the keys with RoPE's rotation only
        k_seen.__dict__["_xpos_relative"] = (pf.apply_rotation(k, rq), positions)
        return q_rot, k_seen

    @torch.compiler.disable  # reads what _relative_rotate carried in k's __dict__ (the GPU check found
    def data_bias(self, x: Tensor, q: Tensor, k: Tensor) -> DataBias | None:  # compile failing here on CUDA)
        """On the relative path (``k`` from :meth:`rotate` past ``MAX_LOG_SCALE``): ``(start, stop) ->``
        xPos's score of those queries minus the ``q . k`` attention computes, times attention's
        ``1/sqrt(head_dim)``; else None (fused attention on the centred factors). At inference on CPU attention
        takes the scores window by window through fused attention instead
        (:func:`posenc.functional.xpos_window_attention`).

        As :func:`posenc.functional.xpos_relative_scores` computes it (queries by windows of positions, each
        scored against its window's end), in one matmul per window: ``[q*decay, q] . [k*decay, -k_seen]``,
        the keys' side built once per window (attention asks for its query blocks in order) and reused by
        every block of queries in it.
        """
        carried = k.__dict__.get("_xpos_relative")
        if carried is None:
            return None
        keys, positions = carried  # keys with RoPE only [b, n_h, s, h_d]; positions [s]
        positions = positions.to(torch.float64)  # distances to a window's end, exactly
        head_dim, scale = q.shape[-1], 1.0 / math.sqrt(q.shape[-1])  # scaled_dot_product_attention's default
        origin = float(positions.min())
        window, width = pf.xpos_windows(positions, origin, head_dim, self.gamma, self.scale_base)
        both_keys: dict[int, Tensor] = {}  # window -> [b, n_h, 2 h_d, s]: its decayed keys and -k_seen

        def keys_for(w: int) -> Tensor:
            if w not in both_keys:
                both_keys.clear()  # one window at a time: memory of two k's
                centre = origin + (w + 1) * width
                distance = (centre - positions).clamp(min=0)
                decay = pf.xpos_decay(distance, head_dim, self.gamma, self.scale_base)
                both = torch.cat((keys * decay.to(keys.dtype), -k), dim=-1)  # [b, n_h, s, 2 h_d]
                both_keys[w] = both.transpose(-1, -2).contiguous()
            return both_keys[w]

        def bias(start: int, stop: int) -> Tensor:
            windows = window[start:stop]
            present = torch.unique(windows).tolist()
            out = None if len(present) == 1 else q.new_empty((*q.shape[:-2], stop - start, stop))
            for w in present:
                rows = torch.arange(start, stop, device=q.device)
                if out is not None:
                    rows = rows[windows == w]
                centre = origin + (w + 1) * width
                decay = pf.xpos_decay(positions[rows] - centre, head_dim, self.gamma, self.scale_base)
                mine = q.index_select(-2, rows)
                both = torch.cat((mine * (decay * scale).to(q.dtype), mine * scale), dim=-1)  # [.., r, 2 h_d]
                scored = both @ keys_for(w)[..., :stop]
                if out is None:
                    return scored
                out.index_copy_(-2, rows - start, scored)
            return out

        def attend(v: Tensor, dropout_p: float) -> Tensor | None:
            """Window by window through fused attention (inference on CPU, positions 0..s-1); else None: the
            backend adds ``bias`` in query blocks."""
            fused = (
                q.device.type == "cpu"
                and q.dtype in (torch.float32, torch.float64)
                and not dropout_p
                and not (torch.is_grad_enabled() and q.requires_grad)
                and torch.equal(positions, torch.arange(positions.numel(), dtype=positions.dtype))
            )
            return pf.xpos_window_attention(q, keys, v, self.gamma, self.scale_base) if fused else None

        return OwnAttention(attend, bias)
