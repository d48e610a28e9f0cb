"""One small pre-norm decoder-only transformer, with the positional encoder injected into it.

The structure follows nanoGPT (token embedding -> blocks of causal self-attention and MLP -> final norm ->
LM head tied to the embedding). Position information enters only through the encoder's hooks (see
:mod:`posenc.encoders`); nothing here depends on which encoder it is. What mixes tokens in each block is
``model.mixer``: causal self-attention (the default) or a non-attention mixer from :mod:`posenc.nn.mixers`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.encoders import AttentionShape, PositionalEncoder
from posenc.errors import ConfigError
from posenc.nn.attention import ATTENTION_KINDS, SHARED, CausalAttention
from posenc.nn.mixers import DEFAULT_MIXER, MIXERS, BaseConv, base_conv_taps


@dataclass
class ModelConfig:
    vocab_size: int = 18  # set from the task's vocabulary
    d_model: int = 128  # residual stream width
    n_layers: int = 2  # transformer blocks; two suffice for induction-style copy and recall
    n_heads: int = 4  # attention heads per block; head_dim = d_model / n_heads
    d_mlp: int = 512  # hidden width of each MLP (4 x d_model, as in GPT-2)
    dropout: float = 0.0  # synthetic tasks have unlimited data, so no regularisation by default
    # How score-bias encoders (ALiBi, T5, KERPLE, FIRE) attend: "blocked" (query blocks + SDPA, works
    # everywhere), "flex" (compiled FlexAttention) or "auto" (flex from FLEX_MIN_LENGTH tokens if it compiles
    # here; fused SDPA for ALiBi and T5 at inference on CPU). Data-dependent biases (CoPE, FoX) always take
    # query blocks; other encoders PyTorch's fused causal SDPA.
    attention: str = "auto"
    # What mixes tokens in each block: "attention" (causal self-attention with the encoder) or "base_conv"
    # (Zoology's gated convolution, posenc/nn/mixers.py; takes encoder=nope).
    mixer: str = DEFAULT_MIXER

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_mlp"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.attention not in ATTENTION_KINDS:
            raise ConfigError(f"model.attention must be one of {', '.join(ATTENTION_KINDS)}; got {self.attention!r}")
        if self.mixer not in MIXERS:
            raise ConfigError(f"model.mixer must be one of {', '.join(MIXERS)}; got {self.mixer!r}")

    @property
    def shape(self) -> AttentionShape:
        return AttentionShape(self.d_model, self.n_heads)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, encoder: PositionalEncoder, attend: CausalAttention) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.dropout = cfg.dropout
        self.kind = cfg.attention
        self.attend = attend  # the attention backend (posenc/nn/attention.py), shared by all layers
        # Injected and shared by all layers; kept out of this module's children so that its parameters
        # (e.g. a learned table) appear once in the state dict, under the model's `encoder.`.
        self.__dict__["encoder"] = encoder

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))  # (b, nh, s, hs)
        q, k = self.encoder.rotate(q, k, positions)  # (b, nh, s, hs'): PoPE doubles hs
        p = self.dropout if self.training else 0.0
        data_bias = self.encoder.data_bias(x, q, k)  # CoPE, FoX: a bias from the data itself; else None
        y = self.attend(q, k, v, positions, self.encoder, p, self.kind, data_bias)  # (b, nh, s, hs)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.down = nn.Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.gelu(self.up(x)))


def sequence_mixer(cfg: ModelConfig, encoder: PositionalEncoder, attend: CausalAttention, layer: int) -> nn.Module:
    """Block ``layer``'s sequence mixer, ``[b, s, d]`` and positions ``[s]`` -> ``[b, s, d]``, by
    ``cfg.mixer``: causal self-attention with ``encoder``, or BaseConv (whose long filters span the
    encoder's training length)."""
    if cfg.mixer == "base_conv":
        return BaseConv(cfg.d_model, base_conv_taps(layer, cfg.n_layers, encoder.train_length))
    return CausalSelfAttention(cfg, encoder, attend)


class Block(nn.Module):
    """Pre-norm residual block: x + mixer(ln(x)), then x + mlp(ln(x)). The mixer is attention unless
    ``model.mixer`` says otherwise; it is kept as ``attn`` whatever it is, so that checkpoints keep their keys."""

    def __init__(self, cfg: ModelConfig, encoder: PositionalEncoder, attend: CausalAttention, layer: int = 0) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = sequence_mixer(cfg, encoder, attend, layer)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        x = x + self.drop(self.attn(self.ln_attn(x), positions))
        return x + self.drop(self.mlp(self.ln_mlp(x)))


class Transformer(nn.Module):
    """Decoder-only language model over token ids, position-agnostic except through ``encoder``.

    ``attend``: the attention backend; by default the process-wide one, which compiles each FlexAttention
    kernel once however many models are evaluated.
    """

    def __init__(self, cfg: ModelConfig, encoder: PositionalEncoder, attend: CausalAttention = SHARED) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.encoder = encoder
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, encoder.for_layer(i), attend, i) for i in range(cfg.n_layers))
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
