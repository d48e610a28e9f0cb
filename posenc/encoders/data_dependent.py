"""Encodings whose positions depend on the data: CoPE and FoX (score biases from the layer's queries, keys or
input, :meth:`PositionalEncoder.data_bias`) and PoPE (content as magnitude, position as phase, in ``rotate``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc import functional as pf
from posenc.encoders.base import AttentionShape, DataBias, KeyBias, OwnAttention, PositionalEncoder
from posenc.errors import ConfigError


class Layerwise(PositionalEncoder):
    """An encoder with parameters of its own in every layer, as its paper has them: :meth:`for_layer` builds
    layer ``i``'s part (:meth:`make_layer`) the first time the model asks, so the model's depth need not be
    known here. A per-layer schedule that uses it in some layers builds parts for those layers only."""

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__(shape, train_length)
        self.layers = nn.ModuleDict()  # str(layer index) -> part

    def make_layer(self) -> PositionalEncoder:
        raise NotImplementedError

    def for_layer(self, index: int) -> PositionalEncoder:
        if str(index) not in self.layers:
            self.layers[str(index)] = self.make_layer()
        return self.layers[str(index)]


# CoPE at long inference lengths: at least this many nearest keys in its band, and queries per band block
# (64: the fastest of the sizes timed; see docs/performance.md, section "Measurements behind design choices").
COPE_MIN_BAND = 256
COPE_BAND_QUERY_BLOCK = 64


class CoPE(Layerwise):
    """Contextual Position Encoding (Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count
    What's Important", arXiv 2405.18719): a query counts the keys between it and key ``j`` whose gate
    ``sigmoid(q_i . k_j)`` opens, ``p_ij`` (:func:`posenc.functional.cope_positions`), and adds
    ``q_i . e(p_ij)``, an embedding interpolated between learned integer positions
    (:func:`posenc.functional.cope_bias`). As the paper's code: per layer one ``[h_d, n_pos]`` table shared
    by the heads, initialised at zero, gates from the scaled and masked logits, positions past
    ``n_pos - 1`` clamped to it.

    ``n_pos`` defaults to the training length (a query can count at most that many keys in training); the
    paper sets it per task. Attention is :func:`posenc.functional.cope_attention` (query blocks: memory linear
    in the length; the logits computed once for the gates and the scores), or at inference on CPU, where every
    query has counted to ``n_pos - 1`` within its ``4 n_pos`` nearest keys, fused attention for the keys beyond
    (:func:`posenc.functional.cope_band_attention`).
    """

    description = "contextual positions: counts of gated keys, per layer (Golovneva et al. 2024)"

    def __init__(self, shape: AttentionShape, train_length: int, *, n_pos: int | None = None) -> None:
        super().__init__(shape, train_length)
        self.n_pos = max(2, train_length) if n_pos is None else n_pos
        if self.n_pos < 2:
            raise ConfigError(f"encoder.n_pos must be >= 2, got {self.n_pos}")

    def make_layer(self) -> PositionalEncoder:
        return _CoPELayer(self.shape, self.train_length, self.n_pos)


class _CoPELayer(PositionalEncoder):
    def __init__(self, shape: AttentionShape, train_length: int, n_pos: int) -> None:
        super().__init__(shape, train_length)
        self.pos_emb = nn.Parameter(torch.zeros(shape.head_dim, n_pos))  # [h_d, n_pos], the paper's init

    def data_bias(self, x: Tensor, q: Tensor, k: Tensor) -> DataBias:
        scale = q.shape[-1] ** -0.5

        def bias(start: int, stop: int) -> Tensor:
            q_block = q[..., start:stop, :]  # [b, n_h, bq, h_d]
            logits = (q_block @ k[..., :stop, :].transpose(-1, -2)) * scale  # [b, n_h, bq, stop]
            future = torch.arange(stop, device=q.device)[None, :] > torch.arange(start, stop, device=q.device)[:, None]
            # counts in float32 at least: bfloat16 cannot count past 256, nor weigh interpolation finely
            logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
            positions = pf.cope_positions(logits.masked_fill(future, float("-inf")))
            return pf.cope_bias(q_block.to(positions.dtype), self.pos_emb.to(positions.dtype), positions)

        def attend(v: Tensor, dropout_p: float) -> Tensor:
            seq, band = q.shape[-2], self.band()
            if (
                q.device.type == "cpu"
                and q.dtype in (torch.float32, torch.float64)
                and not dropout_p
                and seq >= 2 * band
                and not (torch.is_grad_enabled() and self.pos_emb.requires_grad)
            ):
                with torch.no_grad():
                    out = pf.cope_band_attention(q, k, v, self.pos_emb, band, COPE_BAND_QUERY_BLOCK)
                if out is not None:
                    return out
            return pf.cope_attention(q, k, v, self.pos_emb, dropout_p)  # the logits once for gates and scores

        return OwnAttention(attend, bias)

    def band(self) -> int:
        """Nearest keys CoPE computes explicitly at long inference lengths (posenc.functional.cope_band_attention):
        four times ``n_pos``, room for gates that open half the time or less to count to ``n_pos - 1``."""
        return max(COPE_MIN_BAND, 4 * self.pos_emb.shape[-1])


class FoX(Layerwise):
    """Forgetting attention (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
    ICLR; reference ``zhixuan-lin/forgetting-transformer``, ``fgate_type="full"``): per layer and head a forget
    gate ``f_t = sigmoid(w_f . x_t + b_f)`` from the layer's input, and the score bias
    ``sum_{l=j+1..i} log f_l`` (:func:`posenc.functional.fox_bias`): a data-dependent, learned ALiBi. No
    other position signal (the paper's FoX uses none). ``w_f`` starts at the model's std-0.02 init and
    ``b_f`` at 0, as the reference's ``fgate_proj``, so at initialisation every step back costs ``log 2``.
    """

    description = "forget gates from the data as a score bias, per layer (Lin et al. 2025)"

    def make_layer(self) -> PositionalEncoder:
        return _FoXLayer(self.shape, self.train_length)


class _FoXLayer(PositionalEncoder):
    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__(shape, train_length)
        self.gate = nn.Linear(shape.d_model, shape.n_heads)  # w_f, b_f per head

    def data_bias(self, x: Tensor, q: Tensor, k: Tensor) -> DataBias:
        log_lambda = pf.fox_log_lambda(self.gate(x))  # [b, n_h, s]
        # c_i - c_j: the query's c_i is a constant of its softmax row, so attention needs only -c_j
        return KeyBias(-log_lambda, lambda start, stop: pf.fox_bias(log_lambda, start, stop))


class PoPE(PositionalEncoder):
    """Polar coordinate positional embedding (Gopalakrishnan et al. 2025, "Decoupling the 'What' and 'Where'
    With Polar Coordinate Positional Embeddings", arXiv 2509.10534; reference implementations lucidrains'
    ``PoPE-pytorch`` and ``x-transformers``): content sets each dimension's magnitude, position its phase
    (:func:`posenc.functional.pope_qk`), with a learned key phase ``delta`` per head and dimension, clamped to
    ``[-2 pi, 0]`` and initialised at 0. As in x-transformers, one ``delta`` serves every layer.

    Queries and keys leave :meth:`rotate` with twice the head dimension (cosine and sine parts); values keep
    theirs.
    """

    description = "content as magnitude, position as phase (Gopalakrishnan et al. 2025)"
    rotated_width = 2

    def __init__(self, shape: AttentionShape, train_length: int, *, base: float = 10000.0) -> None:
        super().__init__(shape, train_length)
        if not base > 1:
            raise ConfigError(f"encoder.base must be > 1, got {base}")
        self.base = base
        self.register_buffer("inv_freq", pf.pope_inv_freq(shape.head_dim, base), persistent=False)
        self.phase = nn.Parameter(torch.zeros(shape.n_heads, shape.head_dim))  # delta [n_h, h_d]

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        inv_freq = self.inv_freq.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
        return pf.pope_qk(q, k, positions, inv_freq, self.phase.to(inv_freq.dtype))
