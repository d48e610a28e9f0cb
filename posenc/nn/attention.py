"""Causal attention backends: how a model attends, given an encoder. The model (posenc/nn/model.py) calls one
:class:`CausalAttention` object and never needs to know which path ran.

:func:`choose_paths` picks the paths from the encoder's capabilities and the call's :class:`Setting` alone,
and :data:`PATHS` runs each; a path that declines (returns None) hands over to the next one chosen.

| path | when | what it computes |
|---|---|---|
| ``key_bias`` | a data bias of the key alone (``KeyBias``: FoX) | fused SDPA, bias as 2 q/k dims (padded) |
| ``own_attention`` | a data bias that attends itself (``OwnAttention``: CoPE) | the encoder's own attention |
| ``data_blocked`` | any other data bias | query blocks, bias ``[b, n_h, block, keys]`` |
| ``fused_causal`` | no score bias | fused causal SDPA |
| ``linear_bias`` | fused¹; ALiBi-like slopes; exact here (else declines) | fused SDPA, bias as 2 q/k dims |
| ``far_constant`` | fused¹; constant bias from ``reach`` (T5); long² | one fused call for far keys; a band |
| ``distance_table`` | fused¹; positions ``0..s-1``; has a table (else declines) | SDPA, table view as mask |
| ``flex`` | ``kind="flex"``, or long² with no CPU backward | compiled FlexAttention |
| ``blocked`` | any other score bias; the fallback of all above | query blocks, bias ``[n_h, block, keys]`` |

¹ ``kind="auto"``, on CPU, no dropout and no gradient wanted (the fused paths have no backward).
² from ``FLEX_MIN_LENGTH`` tokens with ``kind="auto"`` and no dropout (``far_constant``: and past ``reach``).

The paths each built-in encoder takes (``>`` between fallbacks; 4 heads, trained at 512 tokens; checked
against the registry by tests/nn/test_attention.py):

| encoder | CPU training | CPU inference, 512 | CPU inference, 2048 |
|---|---|---|---|
| alibi | blocked | linear_bias > distance_table > blocked | linear_bias > distance_table > flex > blocked |
| t5 | blocked | distance_table > blocked | far_constant |
| kerple, fire | blocked | distance_table > blocked | distance_table > flex > blocked |
| cope | own_attention > data_blocked | own_attention > data_blocked | own_attention > data_blocked |
| fox | key_bias | key_bias | key_bias |
| the others | fused_causal | fused_causal | fused_causal |

On GPU a score bias takes ``flex > blocked`` from ``FLEX_MIN_LENGTH`` tokens, ``blocked`` below. xPos past its
centred range (``XPos.MAX_LOG_SCALE``: about 24,500 tokens at head width 8) has a data bias: own attention
(query windows, CPU inference) or ``data_blocked``. At inference on CPU, subnormal floats are flushed to zero
around the call (:mod:`posenc.nn.subnormals`). The fused paths are :mod:`posenc.nn.fused_bias`.

A backend owns its compiled kernels, causal block masks and the record of whether FlexAttention runs on
this machine. Models share :data:`SHARED` by default, so that evaluating many checkpoints compiles each
kernel once per process; tests make their own backend instead of patching module state.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.encoders import PositionalEncoder
from posenc.encoders.base import DataBias, KeyBias, OwnAttention, as_is
from posenc.errors import ConfigError
from posenc.nn import fused_bias
from posenc.nn.subnormals import flush_subnormals

log = logging.getLogger("posenc.nn.attention")

# Queries per block when an encoder adds a score bias: the bias for one block is [n_h, block, s_k],
# so memory stays linear in the sequence length instead of a whole [b, n_h, s, s] tensor.
BIAS_QUERY_BLOCK = 512
# From this length on, score-bias encoders use compiled FlexAttention (model.attention=auto): the bias is
# computed inside the kernel (linear memory, and far faster than query blocks at long lengths: see
# docs/performance.md, section "Measurements behind design choices"). Shorter sequences stay on query blocks,
# which need no compilation.
FLEX_MIN_LENGTH = 1024
FLEX_BLOCK = 128  # FlexAttention's default block size
# Queries per block of the near band in far_constant: each attends to block + reach keys (128: the faster of
# the sizes timed; see docs/performance.md, section "Measurements behind design choices").
FAR_BAND_BLOCK = 128
# Queries per block in distance_table (1024: the fastest of the sizes timed; see docs/performance.md, section
# "Measurements behind design choices").
TABLE_QUERY_BLOCK = 1024
# Bias entries per query block of a data-dependent bias ([b, n_h, block, s_k]): 2**22 floats, 16 MiB.
DATA_BIAS_ELEMENTS = 1 << 22
# Length-specialized FlexAttention kernels per score_mod; later lengths share a shape-generic kernel.
STATIC_FLEX_KERNELS = 6
ATTENTION_KINDS = ("auto", "flex", "blocked")


class Call(NamedTuple):
    """One call's arguments, as :meth:`CausalAttention.__call__` takes them."""

    q: Tensor
    k: Tensor
    v: Tensor
    positions: Tensor
    encoder: PositionalEncoder
    dropout_p: float
    kind: str
    data_bias: DataBias | None


@dataclass(frozen=True)
class Setting:
    """What :func:`choose_paths` needs to know of a call besides its encoder and data bias.

    Attributes:
        kind: ``model.attention``: ``auto``, ``flex`` or ``blocked``.
        length: the sequence length ``s``.
        dropout: whether attention dropout is on.
        cpu_inference: on CPU, and nothing (``q``, ``k``, ``v``, the encoder's parameters) needs a gradient.
        cpu_backward: on CPU with a gradient wanted for ``q`` (FlexAttention has no backward on CPU).
        positions_0_to_s: the positions are ``0..s-1`` (looked at for CPU inference only, where it is used).
    """

    kind: str
    length: int
    dropout: bool = False
    cpu_inference: bool = False
    cpu_backward: bool = False
    positions_0_to_s: bool = False

    @classmethod
    def of(cls, call: Call) -> Setting:
        q, positions = call.q, call.positions
        seq, cpu = q.shape[-2], q.device.type == "cpu"
        cpu_inference = cpu and not _needs_grad(q, call.k, call.v, call.encoder)
        in_order = cpu_inference and torch.equal(positions, torch.arange(seq, device=positions.device))
        return cls(
            kind=call.kind,
            length=seq,
            dropout=call.dropout_p != 0.0,
            cpu_inference=cpu_inference,
            cpu_backward=cpu and torch.is_grad_enabled() and q.requires_grad,
            positions_0_to_s=in_order,
        )


def choose_paths(
    encoder: PositionalEncoder, data_bias: DataBias | None, setting: Setting, flex_min_length: int = FLEX_MIN_LENGTH
) -> tuple[str, ...]:
    """The attention paths (keys of :data:`PATHS`) to try in order, from the encoder's capabilities and the
    call's setting alone; the module docstring's table says when each applies. Every path but the last may
    decline (return None), and the next is tried."""
    if isinstance(data_bias, KeyBias):
        return ("key_bias",)
    if isinstance(data_bias, OwnAttention):
        return ("own_attention", "data_blocked")
    if data_bias is not None:
        return ("data_blocked",)
    if not encoder.has_score_bias:
        return ("fused_causal",)
    s = setting
    fused = s.kind == "auto" and s.cpu_inference and not s.dropout  # no backward: training keeps query blocks
    paths = ["linear_bias"] if fused and encoder.linear_bias_slopes() is not None else []
    far = encoder.far_bias() if fused else None
    if far is not None and max(far[0] + 1, flex_min_length) <= s.length:
        return (*paths, "far_constant")  # shorter: the distance table is faster
    if fused and s.positions_0_to_s:
        paths.append("distance_table")
    # FlexAttention has no backward on CPU: a CPU training step takes the query blocks (auto) instead of
    # failing there and marking flex broken for the evaluations that follow.
    if s.kind == "flex" or (s.kind == "auto" and s.length >= flex_min_length and not s.dropout and not s.cpu_backward):
        paths.append("flex")
    return (*paths, "blocked")


#: Each path of :func:`choose_paths`: ``(backend, call) -> output``, or None where it declines.
PATHS: dict[str, Callable[[CausalAttention, Call], Tensor | None]] = {
    "key_bias": lambda a, c: fused_bias.key_bias_attention(c.q, c.k, c.v, c.data_bias.key, c.dropout_p),
    "own_attention": lambda a, c: c.data_bias.attend(c.v, c.dropout_p),
    "data_blocked": lambda a, c: a.data_blocked(c.q, c.k, c.v, c.data_bias, c.dropout_p),
    "fused_causal": lambda a, c: _fused_causal(c.q, c.k, c.v, c.dropout_p),
    "linear_bias": lambda a, c: a.linear_bias(c.q, c.k, c.v, c.positions, c.encoder.linear_bias_slopes()),
    "far_constant": lambda a, c: a.far_constant(c.q, c.k, c.v, c.positions, c.encoder, *c.encoder.far_bias()),
    "distance_table": lambda a, c: a.distance_table(c.q, c.k, c.v, c.encoder),
    "flex": lambda a, c: a.flex_or_none(c),
    "blocked": lambda a, c: a.blocked(c.q, c.k, c.v, c.positions, c.encoder, c.dropout_p),
}


def _causal_block(q: Tensor, k: Tensor, v: Tensor, start: int, end: int, bias: Tensor, dropout_p: float) -> Tensor:
    """Queries ``start:end`` attending to keys ``0:end`` with ``bias`` (``[..., end - start, end]``) plus the causal
    mask by index: one block of the query-block paths. Returns ``[b, n_h, end - start, h_d]``."""
    future = torch.arange(end, device=q.device)[None, :] > torch.arange(start, end, device=q.device)[:, None]
    bias = bias.masked_fill(future, float("-inf"))
    return F.scaled_dot_product_attention(
        q[..., start:end, :], k[..., :end, :], v[..., :end, :], attn_mask=bias, dropout_p=dropout_p
    )


class CausalAttention:
    """Causal attention for ``[b, n_h, s, h_d]`` queries, keys and values, with an encoder's score bias.

    Args:
        query_block: queries per block for the query-block backend.
        flex_min_length: shortest sequence that ``kind="auto"`` sends to FlexAttention.
        static_kernels: length-specialized FlexAttention kernels per score_mod (see :meth:`flex`).
    """

    def __init__(
        self,
        query_block: int = BIAS_QUERY_BLOCK,
        flex_min_length: int = FLEX_MIN_LENGTH,
        static_kernels: int = STATIC_FLEX_KERNELS,
    ) -> None:
        self.query_block = query_block
        self.flex_min_length = flex_min_length
        self.static_kernels = static_kernels
        self.kernels: dict[tuple[str, object], Callable[..., Tensor]] = {}  # compiled, per (kind, score_mod)
        self.static_keys: set[tuple[object, int]] = set()  # (score_mod, length) with a specialized kernel
        self.masks: dict[tuple[int, str], object] = {}  # causal BlockMask per (length, device), at most 16
        self.broken: str | None = None  # why FlexAttention does not run here (set on its first failure)
        self.linear_bias_exact: bool | None = None  # whether linear_bias is exact here (checked when first needed)

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        positions: Tensor,
        encoder: PositionalEncoder,
        dropout_p: float = 0.0,
        kind: str = "auto",
        data_bias: DataBias | None = None,
    ) -> Tensor:
        """Causal scaled dot-product attention, with ``encoder``'s score bias if it has one.

        Args:
            q, k, v: ``[b, n_h, s, h_d]``.
            positions: ``[s]``, as given by ``encoder.sample_positions`` (usually ``0..s-1``).
            encoder: supplies ``score_bias`` (and maybe ``score_mod``) when ``encoder.has_score_bias``.
            dropout_p: attention dropout (query blocks only: FlexAttention has none).
            kind: ``auto``, ``flex`` or ``blocked`` (``model.attention``).
            data_bias: ``encoder.data_bias(...)`` of this layer, if any: attention in query blocks with it.

        Returns:
            ``[b, n_h, s, h_d]``.

        The paths of :func:`choose_paths` are tried in order (:data:`PATHS`); the first that does not decline
        gives the output. At inference on CPU, subnormal floats are flushed to zero while it runs
        (:mod:`posenc.nn.subnormals`: a steep bias otherwise slows the fused kernels on some CPUs, with the same
        numbers).
        """
        call = Call(q, k, v, positions, encoder, dropout_p, kind, data_bias)
        setting = Setting.of(call)
        with flush_subnormals() if setting.cpu_inference else nullcontext():
            for path in choose_paths(encoder, data_bias, setting, self.flex_min_length):
                out = PATHS[path](self, call)
                if out is not None:
                    return out
        raise AssertionError("every attention path declined")  # unreachable: the last one never declines

    def flex_or_none(self, call: Call) -> Tensor | None:
        """:meth:`flex` with the encoder's score_mod; None (the caller takes query blocks) where the encoder
        has none, or FlexAttention does not run here (found on its first failure, then remembered). With
        ``kind="flex"`` not running is a :class:`~posenc.errors.ConfigError` instead."""
        q, kind = call.q, call.kind
        score_mod = self.score_mod(call.encoder, q)  # q_idx/kv_idx: the positions 0..s-1
        if score_mod is None:
            return None
        if self.broken:
            if kind == "flex":
                raise ConfigError(f"model.attention=flex does not run here: {self.broken}")
            return None
        try:
            return self.flex(q, call.k, call.v, score_mod)
        except Exception as err:  # no C compiler, unsupported device or torch: query blocks work everywhere
            if kind == "flex":
                raise ConfigError(f"model.attention=flex does not run here: {_first_line(err)}") from err
            self.broken = _first_line(err)
            log.warning("FlexAttention does not run here (%s); using query blocks", self.broken)
            return None

    @staticmethod
    def score_mod(encoder: PositionalEncoder, q: Tensor) -> Callable[..., Tensor] | None:
        """``encoder``'s FlexAttention ``score_mod`` for queries ``q``, its captured tensors attached to autograd
        only where that can work.

        FlexAttention has no backward on CPU, and compiling a CPU kernel whose captured tensors require grad
        fails even when nothing needs a gradient; on CPU, or with autograd off, the score_mod captures detached
        views (same values). On GPU in a training step they stay attached, so learned biases train through flex.
        """
        attached = torch.is_grad_enabled() and q.device.type != "cpu"
        return encoder.score_mod(q.shape[-2], as_is if attached else Tensor.detach)

    def blocked(
        self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, encoder: PositionalEncoder, dropout_p: float = 0.0
    ) -> Tensor:
        """Causal attention plus ``encoder.score_bias``, ``query_block`` queries at a time (any device).

        Each block sees only the keys up to its last query, and its bias is ``[n_h, block, keys]``: memory
        is linear in the sequence length. A bias of the distance alone is gathered from
        ``encoder.distance_table`` where ``positions`` are ``0..s-1`` (as the model gives them to bias
        encoders); other positions take ``encoder.score_bias``. Shapes as in :meth:`__call__`.
        """
        seq = q.shape[-2]
        # [n_h, seq] for a bias of the distance alone, where the positions are 0..s-1 (the model's for bias
        # encoders). Traced, the bias formula instead: asking whether the positions are 0..s-1 reads a tensor's
        # values, a graph break in every layer, and inductor fuses the formula into the block's kernel anyway.
        in_order = not torch.compiler.is_compiling() and torch.equal(
            positions, torch.arange(seq, device=positions.device)
        )
        table = encoder.distance_table(seq) if in_order else None
        outputs = []
        for start in range(0, seq, self.query_block):
            end = min(start + self.query_block, seq)
            if table is not None:  # a gather instead of the bias formula at every score
                distance = (
                    torch.arange(start, end, device=q.device)[:, None] - torch.arange(end, device=q.device)
                ).clamp(min=0)
                bias = table[:, distance].to(q.dtype)  # [n_h, bq, end]
            else:
                q_pos, k_pos = positions[start:end], positions[:end]  # keys past `end` are all in the future
                bias = encoder.score_bias(q_pos, k_pos).to(q.dtype)  # [n_h, bq, end]
            outputs.append(_causal_block(q, k, v, start, end, bias, dropout_p))
        return torch.cat(outputs, dim=-2)

    def data_blocked(self, q: Tensor, k: Tensor, v: Tensor, data_bias: DataBias, dropout_p: float = 0.0) -> Tensor:
        """Causal attention plus a data-dependent bias (:meth:`PositionalEncoder.data_bias`), a block of queries
        at a time; blocks hold at most :data:`DATA_BIAS_ELEMENTS` bias entries (the bias has a batch
        dimension, unlike a positional one), so memory is linear in the sequence length."""
        b, n_h, seq, _ = q.shape
        block = max(1, min(self.query_block, DATA_BIAS_ELEMENTS // max(1, b * n_h * seq)))
        outputs = []
        for start in range(0, seq, block):
            end = min(start + block, seq)
            bias = data_bias(start, end).to(q.dtype)  # [b, n_h, bq, end]
            outputs.append(_causal_block(q, k, v, start, end, bias, dropout_p))
        return torch.cat(outputs, dim=-2)

    def linear_bias(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, slopes: Tensor) -> Tensor | None:
        """:func:`posenc.nn.fused_bias.linear_bias_attention` where it is exact (power-of-two ``slopes``, fp32 or
        fp64, integer positions below 2**24, and this machine's fused kernel summing in order: checked once);
        else None."""
        exact = bool((torch.frexp(slopes.float()).mantissa == 0.5).all())  # powers of two
        exact = exact and q.dtype in (torch.float32, torch.float64)  # m i exact below 2**24: not in 16-bit floats
        if not (exact and positions.numel() and int(positions.max()) < 2**24 and self._exact_linear_bias()):
            return None
        return fused_bias.linear_bias_attention(q, k, v, positions, slopes)

    def _exact_linear_bias(self) -> bool:
        if self.linear_bias_exact is None:
            self.linear_bias_exact = fused_bias.sums_leading_dimensions_first()
            if not self.linear_bias_exact:
                log.info("fused SDPA does not sum the ALiBi dimensions first here; ALiBi uses query blocks")
        return self.linear_bias_exact

    def distance_table(self, q: Tensor, k: Tensor, v: Tensor, encoder: PositionalEncoder) -> Tensor | None:
        """:func:`posenc.nn.fused_bias.distance_table_attention` with ``encoder.distance_table``, for positions
        ``0..s-1``; None if the bias is not of the distance alone."""
        table = encoder.distance_table(q.shape[-2])
        if table is None:
            return None
        return fused_bias.distance_table_attention(q, k, v, table.detach(), TABLE_QUERY_BLOCK)

    def far_constant(
        self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, encoder: PositionalEncoder, reach: int, far: Tensor
    ) -> Tensor:
        """:func:`posenc.nn.fused_bias.far_constant_attention`; query blocks where positions are not ``0..s-1``."""
        if not torch.equal(positions, torch.arange(q.shape[-2], device=positions.device)):
            return self.blocked(q, k, v, positions, encoder)
        return fused_bias.far_constant_attention(q, k, v, encoder, reach, far, FAR_BAND_BLOCK)

    def flex(self, q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor]) -> Tensor:
        """Causal attention with ``score_mod`` through compiled FlexAttention (Dong et al. 2024).

        Only the blocks on or below the diagonal are computed; no ``[s, s]`` tensor exists. One sequence per
        call, so a kernel is specialized to a length only: length-specialized kernels run faster than a
        shape-generic one on CPU (see docs/performance.md, section "Measurements behind design choices"), and
        the first ``static_kernels`` lengths of each score_mod get one; later ones share a generic kernel
        (Dynamo recompiles a function at most 8 times, and past that would fall back to eager FlexAttention,
        which builds the whole ``[s, s]`` score matrix). Shapes as in :meth:`__call__`.
        """
        seq = q.shape[-2]
        # a score_mod's code, and the variant of it a kernel is specialised to (FIRE: its unrolled width)
        code = (score_mod.__code__, getattr(score_mod, "variant", None))
        key = (code, seq)
        static = key in self.static_keys or sum(c == code for c, _ in self.static_keys) < self.static_kernels
        if static:
            self.static_keys.add(key)
        kernel = self._kernel("static" if static else "dynamic", code)
        mask = self.block_mask(seq, q.device)
        outputs = [kernel(q[i : i + 1], k[i : i + 1], v[i : i + 1], score_mod, mask) for i in range(q.shape[0])]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)

    def _kernel(self, kind: str, code: object) -> Callable[..., Tensor]:
        """The compiled FlexAttention call for (``kind``, score_mod ``code``): a frame of its own for each.

        Dynamo keeps compiled code and recompile budgets per frame. One frame shared by several score_mods
        recompiles for each, and with dynamic shapes on CPU (torch 2.13) a frame compiled for T5's score_mod
        and then recompiled for KERPLE's generates C++ that does not compile; a copy of the function (same
        body, new code object) per (kind, score_mod) avoids that and gives each its own recompile budget.
        """
        if (kind, code) not in self.kernels:
            body = _flex_call.__code__.replace(co_name=f"_flex_{kind}_{len(self.kernels)}")
            frame = types.FunctionType(body, _flex_call.__globals__, body.co_name)
            self.kernels[(kind, code)] = torch.compile(frame, dynamic=kind == "dynamic")
        return self.kernels[(kind, code)]

    def block_mask(self, seq: int, device: torch.device):
        """FlexAttention's ``BlockMask`` for causal attention over ``seq`` tokens, built directly from its
        block structure (``create_block_mask`` would materialize ``[seq, seq]`` or need a compile).

        Query block ``i`` attends fully to key blocks ``0..i-1`` and partially (``q_idx >= kv_idx``) to
        block ``i``.
        """
        key = (seq, str(device))
        if key not in self.masks:
            from torch.nn.attention.flex_attention import BlockMask

            n = -(-seq // FLEX_BLOCK)
            rows = torch.arange(n, device=device, dtype=torch.int32)
            partial_count = torch.ones(1, 1, n, device=device, dtype=torch.int32)
            partial_index = rows.view(1, 1, n, 1).expand(1, 1, n, n).contiguous()  # column 0: the diagonal
            full_count = rows.view(1, 1, n).clone()  # blocks strictly below the diagonal
            full_index = rows.view(1, 1, 1, n).expand(1, 1, n, n).contiguous()  # row i: 0, 1, ..., only i used
            if len(self.masks) >= 16:
                self.masks.pop(next(iter(self.masks)))
            self.masks[key] = BlockMask.from_kv_blocks(
                partial_count,
                partial_index,
                full_count,
                full_index,
                BLOCK_SIZE=FLEX_BLOCK,
                mask_mod=_causal,
                seq_lengths=(seq, seq),
            )
        return self.masks[key]


SHARED = CausalAttention()  # what models use unless given their own: kernels compiled once per process


def _needs_grad(q: Tensor, k: Tensor, v: Tensor, encoder: PositionalEncoder) -> bool:
    """Whether this call must be differentiable: the fused inference paths have no backward."""
    tensors = (q, k, v, *encoder.parameters())
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _fused_causal(q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
    """Causal SDPA where queries and keys may be wider than values (PoPE doubles them): PyTorch's fused CPU
    kernels need one head dimension, and otherwise SDPA falls back to its math path, which holds the whole
    ``[b, n_h, s, s]`` score matrix (far slower, and out of memory at long lengths: see docs/performance.md,
    section "Measurements behind design choices"). Values padded with zeros give the same output in their
    first ``h_d`` columns.

    Args:
        q, k: ``[b, n_h, s, h_qk]``; v: ``[b, n_h, s, h_d]`` with ``h_d <= h_qk``.

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    width = v.shape[-1]
    if width == q.shape[-1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    padded = F.pad(v, (0, q.shape[-1] - width))  # (b, nh, s, h_qk)
    return F.scaled_dot_product_attention(q, k, padded, is_causal=True, dropout_p=dropout_p)[..., :width]


def _flex_call(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor], block_mask) -> Tensor:
    """The body every compiled FlexAttention frame runs (see :meth:`CausalAttention._kernel`)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)  # type: ignore[return-value]


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx
