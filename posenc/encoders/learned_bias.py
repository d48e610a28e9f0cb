"""Learned attention-score biases: T5 buckets, KERPLE (log), FIRE.

Each is one module shared by all layers (the model injects one encoder), trained by backpropagation
through the model's bias attention. Parameters are plain ``nn.Parameter`` tensors, not ``nn.Linear`` /
``nn.Embedding`` modules, so the model's weight initialisation (which re-initialises those module types)
leaves the initialisations documented here alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc import functional as pf
from posenc.encoders.base import AttentionShape, PositionalEncoder, as_is
from posenc.errors import ConfigError


class T5Bias(PositionalEncoder):
    """T5 relative position bias (Raffel et al. 2020, §2.1): a learned scalar per (distance bucket, head).

    Causal (unidirectional) bucketing, :func:`posenc.functional.t5_relative_bucket`: ``num_buckets / 2``
    exact distances, then logarithmic buckets up to ``max_distance``; all longer distances share the last
    bucket, so any length can be encoded. The table ``[num_buckets, n_heads]`` is initialised
    ``N(0, d_model**-0.5)`` as in Hugging Face's ``T5PreTrainedModel`` (factor 1).

    ``max_distance`` defaults to ``max(num_buckets, train_length // 2)``, scaled to the training length:
    T5 trained on 512-token inputs with ``max_distance = 128``, so its last bucket is well trained by the
    many longer distances it holds. Scaled the same way, distances ``max_distance..train_length-1`` train
    the last bucket here; the paper's 128 at a 64-token training length would leave buckets 113+ untrained
    (pass ``max_distance=128`` for the paper's value).
    """

    description = "learned bias per log-bucketed distance and head (Raffel et al. 2020)"
    has_score_bias = True

    def __init__(
        self, shape: AttentionShape, train_length: int, *, num_buckets: int = 32, max_distance: int | None = None
    ) -> None:
        super().__init__(shape, train_length)
        if max_distance is None:
            max_distance = max(num_buckets, train_length // 2)
        if num_buckets < 2 or max_distance <= num_buckets // 2:
            raise ConfigError(
                f"t5 needs num_buckets >= 2 and max_distance > num_buckets / 2, got {num_buckets}, {max_distance}"
            )
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.table = nn.Parameter(torch.randn(num_buckets, shape.n_heads) * shape.d_model**-0.5)

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        return pf.t5_bias(self.table, q_positions, k_positions, self.max_distance)  # [n_h, s_q, s_k]

    def far_bias(self) -> tuple[int, Tensor]:
        return self.max_distance, self.table[self.num_buckets - 1]  # every distance >= max_distance: last bucket

    def distance_table(self, length: int) -> Tensor:
        """The bias of every causal distance ``0 .. length-1``, ``[n_h, length]``: ``score_bias(i, j)`` is
        ``distance_table[:, i - j]``."""
        distance = torch.arange(length, device=self.table.device)
        return self.table[pf.t5_relative_bucket(-distance, self.num_buckets, self.max_distance)].T

    def score_mod(self, length: int, capture: Callable[[Tensor], Tensor] = as_is) -> Callable[..., Tensor]:
        table = capture(self.distance_table(length))  # [n_h, length]

        def t5(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[h, (q_idx - kv_idx).abs()].to(score.dtype)  # abs: in range above the diagonal too

        return t5


class KerpleLog(PositionalEncoder):
    """KERPLE, logarithmic variant (Chi et al. 2022): score bias ``-r1_h * log(1 + r2_h * |i - j|)``.

    As in the authors' reference code (github.com/chijames/KERPLE, ``ParallelKerpleLog``): ``r1 ~ U(0, 2)``
    and ``r2 ~ U(0, 1)`` per head at initialisation, and both are kept positive by clamping their values
    to ``>= eps = 0.01`` (a projection: the stored parameters are clamped in place, so the optimizer
    continues from the clamped values, and gradients pass unchanged at the bound). The reference projects
    at every forward; here too in eager mode, and after every optimizer step (:meth:`project_parameters`),
    which also covers compiled training, where the in-place projection cannot run inside the graph.
    """

    description = "learned logarithmic distance penalty per head (Chi et al. 2022, KERPLE)"
    has_score_bias = True
    eps = 1e-2  # lower bound of r1 and r2, the reference code's

    def __init__(self, shape: AttentionShape, train_length: int) -> None:
        super().__init__(shape, train_length)
        self.r1 = nn.Parameter(torch.rand(shape.n_heads) * 2)
        self.r2 = nn.Parameter(torch.rand(shape.n_heads))

    def project_parameters(self) -> None:
        # `.data`: no autograd version bump; the reference code's projection. Idempotent.
        self.r1.data.clamp_(min=self.eps)
        self.r2.data.clamp_(min=self.eps)

    def positive_parameters(self) -> tuple[Tensor, Tensor]:
        """``(r1, r2)`` ``[n_h]`` each, clamped to ``>= eps`` (projected in place, outside compilation)."""
        if not torch.compiler.is_compiling():
            self.project_parameters()  # once per layer and query block: a no-op after the first
        return self.r1.clamp(min=self.eps), self.r2.clamp(min=self.eps)

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        r1, r2 = self.positive_parameters()
        return pf.kerple_log_bias(r1, r2, q_positions, k_positions)  # [n_h, s_q, s_k]

    def distance_table(self, length: int) -> Tensor:
        """``-r1_h log(1 + r2_h d)`` for every distance ``d = 0 .. length-1``, ``[n_h, length]``."""
        r1, r2 = self.positive_parameters()
        distance = torch.arange(length, device=r1.device, dtype=r1.dtype)
        return -r1[:, None] * torch.log1p(r2[:, None] * distance)

    def score_mod(self, length: int, capture: Callable[[Tensor], Tensor] = as_is) -> Callable[..., Tensor]:
        table = capture(self.distance_table(length))  # [n_h, length]

        def kerple_log(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[h, (q_idx - kv_idx).abs()].to(score.dtype)

        return kerple_log


class FIRE(PositionalEncoder):
    """FIRE (Li et al. 2024): score bias ``f_theta(psi(i - j) / psi(max(L, i)))``, ``psi(x) = log(|cx| + 1)``.

    ``f_theta`` maps the normalised distance (in ``[0, 1]`` for causal pairs) to one bias per head through
    one hidden ReLU layer of ``mlp_width`` units. Defaults and parameterisation follow the paper's reference
    code (its appendix): ``c`` learned, initialised to ``init_c = 0.1``; ``L = |s * init_threshold|`` with
    a learned multiplier ``s`` (initialised 1) and ``init_threshold`` (the code's 512; default here a quarter
    of the training length, so that progressive interpolation acts during training as it does past it: at
    a 64-token training length, 512 would normalise every query by the same ``psi(L)``); MLP initialised like
    ``nn.Linear`` (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases); ``eps = 1e-6``.

    In query blocks the MLP is evaluated at every (query, key) pair in its exact piecewise-linear form (a
    search among its ``mlp_width`` kinks and one multiply-add per head,
    :func:`posenc.functional.fire_mlp_pieces`), queries ``FIRE_CHUNK_ELEMENTS`` at a time. Its FlexAttention
    form (:meth:`score_mod`) looks ``psi(i - j)`` and ``1 / psi(max(L, i))`` up in tables of the sequence's
    length and evaluates the MLP inside the kernel, unrolled over the hidden units that bend where the
    normalised distance lies (``[0, 1]``; the others fold into one linear term,
    :func:`posenc.functional.fire_mlp_on_unit_interval`).
    """

    description = "learned MLP of log-normalised distance, progressive interpolation (Li et al. 2024)"
    has_score_bias = True
    eps = 1e-6
    FIRE_CHUNK_ELEMENTS = 1 << 24  # elements of the per-chunk temporaries (64 MiB in fp32)

    def __init__(
        self,
        shape: AttentionShape,
        train_length: int,
        *,
        mlp_width: int = 32,
        init_c: float = 0.1,
        init_threshold: float | None = None,
    ) -> None:
        super().__init__(shape, train_length)
        if init_threshold is None:
            init_threshold = max(1.0, train_length / 4)
        if mlp_width < 1 or not init_c > 0 or not init_threshold > 0:
            raise ConfigError(
                f"fire needs mlp_width >= 1, init_c > 0 and init_threshold > 0, "
                f"got {mlp_width}, {init_c}, {init_threshold}"
            )
        self.init_threshold = init_threshold
        self.c = nn.Parameter(torch.tensor(init_c))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))
        bound2 = 1 / math.sqrt(mlp_width)
        self.w1 = nn.Parameter(torch.empty(mlp_width, 1).uniform_(-1.0, 1.0))  # fan_in 1
        self.b1 = nn.Parameter(torch.empty(mlp_width).uniform_(-1.0, 1.0))
        self.w2 = nn.Parameter(torch.empty(shape.n_heads, mlp_width).uniform_(-bound2, bound2))
        self.b2 = nn.Parameter(torch.empty(shape.n_heads).uniform_(-bound2, bound2))

    @property
    def threshold(self) -> Tensor:
        """The current ``L`` (0-dim)."""
        return (self.threshold_scale * self.init_threshold).abs()

    def score_mod(self, length: int, capture: Callable[[Tensor], Tensor] = as_is) -> Callable[..., Tensor]:
        positions = torch.arange(length, device=self.c.device, dtype=self.c.dtype)
        psi = capture(pf.fire_psi(positions, self.c))  # [length]: psi(i - j) by distance
        # [length]: 1 / (psi(max(i, L)) + eps), by query i
        inv_norm = capture(1 / (pf.fire_psi(torch.maximum(positions, self.threshold), self.c) + self.eps))
        # x lies in [0, 1]: units that do not bend there fold into one linear term per head
        w1, b1, w2, slope, intercept = pf.fire_mlp_on_unit_interval(self.w1, self.b1, self.w2, self.b2)
        # The kernel unrolls its loop over the units, so each count is a kernel of its own: padded with zero
        # units to a multiple of 8, trained models share a few (`variant` names which, see CausalAttention.flex)
        width = -(-w1.shape[0] // 8) * 8
        pad = width - w1.shape[0]
        w1, b1, w2 = F.pad(w1, (0, pad)), F.pad(b1, (0, pad)), F.pad(w2, (0, pad))
        # One captured tensor per unit and parameter, each indexed once, by head: FlexAttention's compiled
        # backward takes a single index of a captured tensor that requires grad (inductor refused w1[unit]
        # per unit on the H200). Clones, not views: inductor's CPU template fails to lower captured views of
        # one storage (torch 2.13); autograd still carries their gradients to w1, b1, w2.
        columns = (w1.expand(w2.shape[0], -1), b1.expand(w2.shape[0], -1), w2)  # [n_h, width] each
        units = tuple(
            tuple(capture(column[:, u].clone(memory_format=torch.contiguous_format)) for column in columns)
            for u in range(width)
        )
        slope, intercept = capture(slope), capture(intercept)

        def fire(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            x = psi[(q_idx - kv_idx).abs()] * inv_norm[q_idx]  # fire_normalized_distance
            out = slope[h] * x + intercept[h]
            for w1_u, b1_u, w2_u in units:  # fire_mlp, unrolled: a score_mod computes one score at a time
                out = out + w2_u[h] * torch.relu(w1_u[h] * x + b1_u[h])
            return score + out.to(score.dtype)

        fire.variant = width  # type: ignore[attr-defined]
        return fire

    def score_bias(self, q_positions: Tensor, k_positions: Tensor) -> Tensor:
        params = (self.c, self.threshold, self.w1, self.b1, self.w2, self.b2)
        per_row = k_positions.numel() * (self.shape.n_heads + 3)  # x, piece index, bias per head, temporaries
        rows = max(1, self.FIRE_CHUNK_ELEMENTS // max(1, per_row))
        chunks = [
            pf.fire_bias(q_positions[start : start + rows], k_positions, *params, eps=self.eps)
            for start in range(0, q_positions.numel(), rows)
        ]
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1)  # [n_h, s_q, s_k]
