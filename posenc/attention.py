"""Causal attention backends: how a model attends, given an encoder. The model (posenc/model.py) calls one
:class:`CausalAttention` object and never needs to know which backend ran.

- Encoders without a score bias: PyTorch's fused causal ``scaled_dot_product_attention``.
- ALiBi-like biases ``-m_h (i - j)`` (``encoder.linear_bias_slopes()``) at inference on CPU: fused SDPA with
  the bias carried exactly by two more query/key dimensions (:meth:`CausalAttention.linear_bias`).
- Other encoders with a score bias (T5, KERPLE, FIRE; ALiBi when training or on GPU): *query blocks* (the bias ``[n_h, block, keys]`` one
  block of queries at a time: linear memory, any device), or compiled *FlexAttention* (Dong et al. 2024:
  the bias computed inside the kernel, block-sparse causal), chosen by length and by what runs here.

A backend owns its compiled kernels, causal block masks and the record of whether FlexAttention runs on
this machine. Models share :data:`SHARED` by default, so that evaluating many checkpoints compiles each
kernel once per process; tests make their own backend instead of patching module state.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.encoders import PositionalEncoder
from posenc.encoders.base import as_is
from posenc.errors import ConfigError

log = logging.getLogger("posenc.attention")

# Queries per block when an encoder adds a score bias: the bias for one block is [n_h, block, s_k],
# so memory stays linear in the sequence length instead of a whole [b, n_h, s, s] tensor.
BIAS_QUERY_BLOCK = 512
# From this length on, score-bias encoders use compiled FlexAttention (model.attention=auto): the bias is
# computed inside the kernel (linear memory, ~2.3x fused causal SDPA at 8192 on a 2-core CPU against ~8x
# for query blocks). Shorter sequences stay on query blocks, which need no compilation.
FLEX_MIN_LENGTH = 1024
FLEX_BLOCK = 128  # FlexAttention's default block size
# Length-specialized FlexAttention kernels per score_mod; later lengths share a shape-generic kernel.
STATIC_FLEX_KERNELS = 6
ATTENTION_KINDS = ("auto", "flex", "blocked")


class CausalAttention:
    """Causal attention for ``[b, n_h, s, h_d]`` queries, keys and values, with an encoder's score bias.

    Args:
        query_block: queries per block for the query-block backend.
        flex_min_length: shortest sequence that ``kind="auto"`` sends to FlexAttention.
        static_kernels: length-specialized FlexAttention kernels per score_mod (see :meth:`flex`).
    """

    def __init__(self, query_block: int = BIAS_QUERY_BLOCK, flex_min_length: int = FLEX_MIN_LENGTH,
                 static_kernels: int = STATIC_FLEX_KERNELS) -> None:
        self.query_block = query_block
        self.flex_min_length = flex_min_length
        self.static_kernels = static_kernels
        self.kernels: dict[tuple[str, object], Callable[..., Tensor]] = {}  # compiled, per (kind, score_mod)
        self.static_keys: set[tuple[object, int]] = set()  # (score_mod, length) with a specialized kernel
        self.masks: dict[tuple[int, str], object] = {}  # causal BlockMask per (length, device), at most 16
        self.broken: str | None = None  # why FlexAttention does not run here (set on its first failure)
        self.linear_bias_exact: bool | None = None  # whether linear_bias is exact here (checked when first needed)

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, encoder: PositionalEncoder,
                 dropout_p: float = 0.0, kind: str = "auto") -> Tensor:
        """Causal scaled dot-product attention, with ``encoder``'s score bias if it has one.

        Args:
            q, k, v: ``[b, n_h, s, h_d]``.
            positions: ``[s]``, as given by ``encoder.sample_positions`` (usually ``0..s-1``).
            encoder: supplies ``score_bias`` (and maybe ``score_mod``) when ``encoder.has_score_bias``.
            dropout_p: attention dropout (query blocks only: FlexAttention has none).
            kind: ``auto``, ``flex`` or ``blocked`` (``model.attention``).

        Returns:
            ``[b, n_h, s, h_d]``.
        """
        if not encoder.has_score_bias:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
        slopes = encoder.linear_bias_slopes()
        if (kind == "auto" and slopes is not None and q.device.type == "cpu" and dropout_p == 0.0
                and not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))):
            out = self.linear_bias(q, k, v, positions, slopes)  # inference only: training keeps query blocks
            if out is not None:
                return out
        seq = q.shape[-2]
        # FlexAttention has no backward on CPU: a CPU training step takes the query blocks (auto) instead of
        # failing there and marking flex broken for the evaluations that follow.
        cpu_backward = q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad
        wants_flex = kind == "flex" or (kind == "auto" and seq >= self.flex_min_length and dropout_p == 0.0
                                        and not cpu_backward)
        score_mod = self.score_mod(encoder, q) if wants_flex else None  # q_idx/kv_idx: the positions 0..s-1
        if score_mod is not None and kind == "flex" and self.broken:
            raise ConfigError(f"model.attention=flex does not run here: {self.broken}")
        if score_mod is not None and not self.broken:
            try:
                return self.flex(q, k, v, score_mod)
            except Exception as err:  # no C compiler, unsupported device or torch: query blocks work everywhere
                if kind == "flex":
                    raise ConfigError(f"model.attention=flex does not run here: {_first_line(err)}") from err
                self.broken = _first_line(err)
                log.warning("FlexAttention does not run here (%s); using query blocks", self.broken)
        return self.blocked(q, k, v, positions, encoder, dropout_p)

    @staticmethod
    def score_mod(encoder: PositionalEncoder, q: Tensor) -> Callable[..., Tensor] | None:
        """``encoder``'s FlexAttention ``score_mod`` for queries ``q``, its captured tensors attached to autograd
        only where that can work.

        FlexAttention has no backward on CPU, and compiling a CPU kernel whose captured tensors require grad
        fails even when nothing needs a gradient; on CPU, or with autograd off, the score_mod captures detached
        views (same values). On GPU in a training step they stay attached, so learned biases train through flex.
        """
        attached = torch.is_grad_enabled() and q.device.type != "cpu"
        return encoder.score_mod(as_is if attached else Tensor.detach)

    def blocked(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, encoder: PositionalEncoder,
                dropout_p: float = 0.0) -> Tensor:
        """Causal attention plus ``encoder.score_bias``, ``query_block`` queries at a time (any device).

        Each block sees only the keys up to its last query, and its bias is ``[n_h, block, keys]``: memory
        is linear in the sequence length. Shapes as in :meth:`__call__`.
        """
        seq = q.shape[-2]
        outputs = []
        for start in range(0, seq, self.query_block):
            end = min(start + self.query_block, seq)
            q_pos, k_pos = positions[start:end], positions[:end]  # keys past `end` are all in the future
            bias = encoder.score_bias(q_pos, k_pos).to(q.dtype)  # [n_h, bq, end]
            future = torch.arange(end, device=q.device)[None, :] > torch.arange(start, end, device=q.device)[:, None]
            bias = bias.masked_fill(future, float("-inf"))  # causal by index
            outputs.append(F.scaled_dot_product_attention(
                q[..., start:end, :], k[..., :end, :], v[..., :end, :], attn_mask=bias, dropout_p=dropout_p))
        return torch.cat(outputs, dim=-2)

    def linear_bias(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, slopes: Tensor) -> Tensor | None:
        """Causal attention with ALiBi's bias ``-m_h (i - j)`` (Press et al. 2022) inside fused SDPA; None where
        that is not exact here (then the caller takes another backend).

        The bias is a dot product of two more dimensions: ``[1, -m_h i]`` on each query and ``[m_h j, 1]`` on
        each key, put *first*. ``m_h i`` and ``m_h j`` are exact in fp32 when every slope is a power of two (ALiBi
        with up to 8 heads, or any power-of-two count up to 8: ``alibi_slopes``) and positions are integers below
        2**24; a kernel that sums a dot product in order then adds them first, and ``m_h j - m_h i`` is exact
        (Sterbenz: both are multiples of ``m_h`` below 2**24 m_h), so the scores carry the bias with no rounding
        of their own: the error is the reference's (scores ``q.k scale - m (i - j)`` in fp32), at any length.
        The summation order is the kernel's; :meth:`_exact_linear_bias` checks it once per backend with keys at
        positions near 2**20, where an inexact order would be off by ~1e-2. Queries are scaled by
        ``h_d**-0.5`` beforehand and SDPA's own scale is 1, so the two added products stay exact too.

        Args:
            q, k, v: ``[b, n_h, s, h_d]``.
            positions: ``[s]``, as given by ``encoder.sample_positions``; causality is by index.
            slopes: ``[n_h]``.

        Returns:
            ``[b, n_h, s, h_d]``, or None.
        """
        exact_slopes = bool((torch.frexp(slopes.float()).mantissa == 0.5).all())  # powers of two
        if not (exact_slopes and positions.numel() and int(positions.max()) < 2**24 and self._exact_linear_bias()):
            return None
        b, h, s, d = q.shape
        bias = slopes.to(q.dtype).view(h, 1) * positions.to(q.dtype)  # m_h i, [n_h, s]
        qx, kx, vx = (x.new_empty(b, h, s, d + 2) for x in (q, k, v))
        qx[..., 0], qx[..., 1] = 1.0, -bias  # [1, -m i]
        kx[..., 0], kx[..., 1] = bias, 1.0  # [m j, 1]
        vx[..., :2] = 0.0  # fused kernels need one head size for q, k and v
        torch.mul(q, d**-0.5, out=qx[..., 2:])
        kx[..., 2:], vx[..., 2:] = k, v
        return F.scaled_dot_product_attention(qx, kx, vx, is_causal=True, scale=1.0)[..., 2:]

    def _exact_linear_bias(self) -> bool:
        """Whether fused SDPA here sums the two leading dimensions first (see :meth:`linear_bias`); checked
        once: 64 keys at positions near 2**20 with slope 1/2, against the float64 softmax."""
        if self.linear_bias_exact is None:
            gen = torch.Generator().manual_seed(0)
            s, d = 64, 8
            pos = torch.arange(2**20 - s, 2**20, dtype=torch.float32)
            q, k, v = (torch.randn(1, 1, s, d, generator=gen) for _ in range(3))
            m = torch.tensor([0.5])
            front_q = torch.stack((torch.ones(s), -m * pos), dim=-1)[None, None]
            front_k = torch.stack((m * pos, torch.ones(s)), dim=-1)[None, None]
            got = F.scaled_dot_product_attention(
                torch.cat((front_q, q * d**-0.5), -1), torch.cat((front_k, k), -1),
                torch.cat((torch.zeros(1, 1, s, 2), v), -1), is_causal=True, scale=1.0)[..., 2:]
            i, j = torch.arange(s, dtype=torch.float64)[:, None], torch.arange(s, dtype=torch.float64)[None, :]
            scores = (q.double() @ k.double().transpose(-1, -2)) * d**-0.5 - 0.5 * (i - j)
            want = scores.masked_fill(j > i, float("-inf")).softmax(-1) @ v.double()
            self.linear_bias_exact = bool((got.double() - want).abs().max() < 1e-5)
            if not self.linear_bias_exact:
                log.info("fused SDPA does not sum the ALiBi dimensions first here; ALiBi uses query blocks")
        return self.linear_bias_exact

    def flex(self, q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor]) -> Tensor:
        """Causal attention with ``score_mod`` through compiled FlexAttention (Dong et al. 2024).

        Only the blocks on or below the diagonal are computed; no ``[s, s]`` tensor exists. One sequence per
        call, so a kernel is specialized to a length only: length-specialized kernels run ~15% faster than a
        shape-generic one on CPU, and the first ``static_kernels`` lengths of each score_mod get one; later
        ones share a generic kernel (Dynamo recompiles a function at most 8 times, and past that would fall
        back to eager FlexAttention, which builds the whole ``[s, s]`` score matrix). Shapes as in
        :meth:`__call__`.
        """
        seq = q.shape[-2]
        code = score_mod.__code__
        key = (code, seq)
        static = key in self.static_keys or sum(c is code for c, _ in self.static_keys) < self.static_kernels
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
                partial_count, partial_index, full_count, full_index, BLOCK_SIZE=FLEX_BLOCK,
                mask_mod=_causal, seq_lengths=(seq, seq),
            )
        return self.masks[key]


SHARED = CausalAttention()  # what models use unless given their own: kernels compiled once per process


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _flex_call(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor], block_mask) -> Tensor:
    """The body every compiled FlexAttention frame runs (see :meth:`CausalAttention._kernel`)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)  # type: ignore[return-value]


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx
