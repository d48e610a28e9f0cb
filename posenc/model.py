"""One small pre-norm decoder-only transformer, with the positional encoder injected into it.

The structure follows nanoGPT (token embedding -> blocks of causal self-attention and MLP -> final norm ->
LM head tied to the embedding). Position information enters only through the encoder's hooks (see
:mod:`posenc.encoders`); nothing here depends on which encoder it is.
"""

from __future__ import annotations

import logging
import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.encoders import AttentionShape, PositionalEncoder
from posenc.errors import ConfigError

log = logging.getLogger("posenc.model")

# Queries per block when an encoder adds a score bias: the bias for one block is [n_h, block, s_k],
# so memory stays linear in the sequence length instead of a whole [b, n_h, s, s] tensor.
BIAS_QUERY_BLOCK = 512
# From this length on, score-bias encoders use compiled FlexAttention (model.attention=auto): the bias is
# computed inside the kernel (linear memory, ~2.3x fused causal SDPA at 8192 on a 2-core CPU against ~8x
# for query blocks). Shorter sequences stay on query blocks, which need no compilation.
FLEX_MIN_LENGTH = 1024
ATTENTION_KINDS = ("auto", "flex", "blocked")


@dataclass
class ModelConfig:
    vocab_size: int = 18  # set from the task's vocabulary
    d_model: int = 128  # residual stream width
    n_layers: int = 2  # transformer blocks; two suffice for induction-style copy and recall
    n_heads: int = 4  # attention heads per block; head_dim = d_model / n_heads
    d_mlp: int = 512  # hidden width of each MLP (4 x d_model, as in GPT-2)
    dropout: float = 0.0  # synthetic tasks have unlimited data, so no regularisation by default
    # How score-bias encoders (ALiBi) attend: "blocked" (query blocks + SDPA, works everywhere), "flex"
    # (compiled FlexAttention) or "auto" (flex from FLEX_MIN_LENGTH tokens if it compiles here).
    # Other encoders always use PyTorch's fused causal SDPA.
    attention: str = "auto"

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_mlp"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.attention not in ATTENTION_KINDS:
            raise ConfigError(f"model.attention must be one of {', '.join(ATTENTION_KINDS)}; got {self.attention!r}")

    @property
    def shape(self) -> AttentionShape:
        return AttentionShape(self.d_model, self.n_heads)


def causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    positions: Tensor,
    encoder: PositionalEncoder,
    dropout_p: float = 0.0,
    kind: str = "auto",
) -> Tensor:
    """Causal scaled dot-product attention, with the encoder's score bias if it has one.

    Args:
        q, k, v: ``[b, n_h, s, h_d]``.
        positions: ``[s]``, as given by ``encoder.sample_positions`` (usually ``0..s-1``).
        encoder: supplies ``score_bias`` (and maybe ``score_mod``) when ``encoder.has_score_bias``.
        dropout_p: attention dropout (query blocks only: FlexAttention has none).
        kind: ``auto``, ``flex`` or ``blocked``, see :class:`ModelConfig`.

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    if not encoder.has_score_bias:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    seq = q.shape[-2]
    # FlexAttention has no backward on CPU: a CPU training step takes the query blocks (auto) instead of
    # failing there and marking flex broken for the evaluations that follow.
    cpu_backward = q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad
    wants_flex = kind == "flex" or (kind == "auto" and seq >= FLEX_MIN_LENGTH and dropout_p == 0.0
                                    and not cpu_backward)
    score_mod = encoder.score_mod() if wants_flex else None  # its q_idx/kv_idx are the positions 0..s-1
    if score_mod is not None and kind == "flex" and _flex.broken:
        raise ConfigError(f"model.attention=flex does not run here: {_flex.broken}")
    if score_mod is not None and not _flex.broken:
        try:
            return flex_causal_attention(q, k, v, score_mod)
        except Exception as err:  # no C compiler, unsupported device or torch: query blocks work everywhere
            if kind == "flex":
                raise ConfigError(f"model.attention=flex does not run here: {_first_line(err)}") from err
            _flex.broken = _first_line(err)
            log.warning("FlexAttention does not run here (%s); using query blocks", _flex.broken)
    return blocked_causal_attention(q, k, v, positions, encoder, dropout_p)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def blocked_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, positions: Tensor, encoder: PositionalEncoder, dropout_p: float = 0.0
) -> Tensor:
    """Causal attention plus ``encoder.score_bias``, ``BIAS_QUERY_BLOCK`` queries at a time (any device).

    Each block sees only the keys up to its last query, and its bias is ``[n_h, block, keys]``: memory is
    linear in the sequence length. Shapes as in :func:`causal_attention`.
    """
    seq = q.shape[-2]
    outputs = []
    for start in range(0, seq, BIAS_QUERY_BLOCK):
        end = min(start + BIAS_QUERY_BLOCK, seq)
        q_pos, k_pos = positions[start:end], positions[:end]  # keys past `end` are all in the future
        bias = encoder.score_bias(q_pos, k_pos).to(q.dtype)  # [n_h, bq, end]
        future = torch.arange(end, device=q.device)[None, :] > torch.arange(start, end, device=q.device)[:, None]
        bias = bias.masked_fill(future, float("-inf"))  # causal by index
        outputs.append(
            F.scaled_dot_product_attention(
                q[..., start:end, :], k[..., :end, :], v[..., :end, :], attn_mask=bias, dropout_p=dropout_p
            )
        )
    return torch.cat(outputs, dim=-2)


# --- FlexAttention (torch >= 2.5): the bias is applied inside a compiled kernel, block-sparse causal. ---
FLEX_BLOCK = 128  # FlexAttention's default block size
@dataclass
class FlexState:
    """Process-wide FlexAttention state: compiled kernels per (kind, score_mod), which (score_mod, length)
    pairs have a length-specialized one, and why flex does not run here (set on the first failure)."""

    kernels: dict[tuple[str, object], Callable[..., Tensor]] = field(default_factory=dict)
    static_keys: set[tuple[object, int]] = field(default_factory=set)
    broken: str | None = None


_flex = FlexState()
_causal_masks: dict[tuple[int, str], object] = {}


def flex_causal_attention(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor]) -> Tensor:
    """Causal attention with ``score_mod`` through compiled FlexAttention (Dong et al. 2024).

    Only the blocks on or below the diagonal are computed; no ``[s, s]`` tensor exists. One sequence per
    call, so a kernel is specialized to a length only: length-specialized kernels run ~15% faster than a
    shape-generic one on CPU, and the first ``STATIC_FLEX_KERNELS`` lengths of each score_mod get one;
    later ones share a generic kernel (Dynamo recompiles a function at most 8 times, and past that would
    fall back to eager FlexAttention, which builds the whole ``[s, s]`` score matrix). Shapes as in
    :func:`causal_attention`.
    """
    seq = q.shape[-2]
    code = score_mod.__code__
    key = (code, seq)
    static = key in _flex.static_keys or sum(c is code for c, _ in _flex.static_keys) < STATIC_FLEX_KERNELS
    if static:
        _flex.static_keys.add(key)
    kernel = _kernel("static" if static else "dynamic", code)
    mask = causal_block_mask(seq, q.device)
    outputs = [kernel(q[i : i + 1], k[i : i + 1], v[i : i + 1], score_mod, mask) for i in range(q.shape[0])]
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs)


STATIC_FLEX_KERNELS = 6


def _kernel(kind: str, code: object) -> Callable[..., Tensor]:
    """The compiled FlexAttention call for (``kind``, score_mod ``code``): a frame of its own for each.

    Dynamo keeps compiled code and recompile budgets per frame. One frame shared by several score_mods
    recompiles for each, and with dynamic shapes on CPU (torch 2.13) a frame compiled for T5's score_mod and
    then recompiled for KERPLE's generates C++ that does not compile; a copy of the function (same body,
    new code object) per (kind, score_mod) avoids that and gives each its own recompile budget.
    """
    if (kind, code) not in _flex.kernels:
        body = _flex_call.__code__.replace(co_name=f"_flex_{kind}_{len(_flex.kernels)}")
        frame = types.FunctionType(body, _flex_call.__globals__, body.co_name)
        _flex.kernels[(kind, code)] = torch.compile(frame, dynamic=kind == "dynamic")
    return _flex.kernels[(kind, code)]


def _flex_call(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor], block_mask) -> Tensor:
    """The body every compiled FlexAttention frame runs (see :func:`_kernel`)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)  # type: ignore[return-value]


def causal_block_mask(seq: int, device: torch.device):
    """FlexAttention's ``BlockMask`` for causal attention over ``seq`` tokens, built directly from its
    block structure (``create_block_mask`` would materialize ``[seq, seq]`` or need a compile).

    Query block ``i`` attends fully to key blocks ``0..i-1`` and partially (``q_idx >= kv_idx``) to block ``i``.
    """
    key = (seq, str(device))
    if key not in _causal_masks:
        from torch.nn.attention.flex_attention import BlockMask

        n = -(-seq // FLEX_BLOCK)
        rows = torch.arange(n, device=device, dtype=torch.int32)
        partial_count = torch.ones(1, 1, n, device=device, dtype=torch.int32)
        partial_index = rows.view(1, 1, n, 1).expand(1, 1, n, n).contiguous()  # column 0: the diagonal
        full_count = rows.view(1, 1, n).clone()  # blocks strictly below the diagonal
        full_index = rows.view(1, 1, 1, n).expand(1, 1, n, n).contiguous()  # row i: 0, 1, ..., only i used
        if len(_causal_masks) >= 16:
            _causal_masks.pop(next(iter(_causal_masks)))
        _causal_masks[key] = BlockMask.from_kv_blocks(
            partial_count, partial_index, full_count, full_index, BLOCK_SIZE=FLEX_BLOCK,
            mask_mod=_causal, seq_lengths=(seq, seq),
        )
    return _causal_masks[key]


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, encoder: PositionalEncoder) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.dropout = cfg.dropout
        self.attention = cfg.attention
        # Injected and shared by all layers; kept out of this module's children so that its parameters
        # (e.g. a learned table) appear once in the state dict, under the model's `encoder.`.
        self.__dict__["encoder"] = encoder

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))  # (b, nh, s, hs)
        q, k = self.encoder.rotate(q, k, positions)
        p = self.dropout if self.training else 0.0
        y = causal_attention(q, k, v, positions, self.encoder, p, self.attention)  # (b, nh, s, hs)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.down = nn.Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig, encoder: PositionalEncoder) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, encoder)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        x = x + self.drop(self.attn(self.ln_attn(x), positions))
        return x + self.drop(self.mlp(self.ln_mlp(x)))


class Transformer(nn.Module):
    """Decoder-only language model over token ids, position-agnostic except through ``encoder``."""

    def __init__(self, cfg: ModelConfig, encoder: PositionalEncoder) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.encoder = encoder
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, encoder) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying, as in GPT-2 / nanoGPT
        self.emb_scale = math.sqrt(cfg.d_model)
        self.apply(self._init_weights)
        # std d**-0.5: scaled by sqrt(d) the tokens have RMS 1, and the tied head's initial logits std ~1.
        nn.init.normal_(self.tok_emb.weight, mean=0.0, std=cfg.d_model**-0.5)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _positions(self, length: int, device: torch.device) -> Tensor:
        """``arange(length)``, one tensor per (length, device), so encoders can cache tables per tensor."""
        if torch.compiler.is_compiling():
            return torch.arange(length, device=device)
        cache = self.__dict__.setdefault("_position_cache", {})
        key = (length, str(device))
        if key not in cache:
            if len(cache) >= 8:
                cache.pop(next(iter(cache)))
            cache[key] = torch.arange(length, device=device)
        return cache[key]

    def forward(self, idx: Tensor) -> Tensor:
        """Token ids ``[b, s]`` -> next-token logits ``[b, s, vocab]``."""
        positions = self.encoder.sample_positions(self._positions(idx.shape[1], idx.device))  # (s,)
        # Token embeddings enter at unit scale for every encoder (Vaswani et al. 2017, §3.4: weights times
        # sqrt(d_model)), so an added table (sinusoidal: RMS 1/sqrt(2)) neither drowns nor is drowned by them.
        x = self.encoder.embed(self.tok_emb(idx) * self.emb_scale, positions)  # (b, s, d)
        for block in self.blocks:
            x = block(x, positions)
        return self.lm_head(self.ln_f(x))  # (b, s, vocab)
