"""Learned attention-score biases: T5, KERPLE, FIRE.

Every bias function returns ``[n_h, s_q, s_k]`` for query positions ``i`` (``[s_q]``) and key positions
``j`` (``[s_k]``), in the dtype of its parameters, and is differentiable in them. Entries with ``j > i``
are left for the causal mask.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "fire_bias",
    "fire_mlp",
    "fire_mlp_on_unit_interval",
    "fire_mlp_pieces",
    "fire_mlp_piecewise",
    "fire_normalized_distance",
    "fire_psi",
    "kerple_log_bias",
    "t5_bias",
    "t5_relative_bucket",
]


def t5_relative_bucket(
    relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False
) -> Tensor:
    """Bucket index of each relative position, T5's relative attention bias (Raffel et al. 2020, §2.1).

    ``relative_position`` is ``key position - query position`` (``j - i``), the convention of the reference
    implementations (mesh-tensorflow ``_relative_position_bucket``; Hugging Face
    ``T5Attention._relative_position_bucket``, checked against the latter, whose numbers
    tests/functional/test_learned_bias_formulas.py pins).

    Unidirectional (causal, ``bidirectional=False``): ``n = max(i - j, 0)``; distances ``n < num_buckets/2``
    get one bucket each, larger ones share logarithmically wider buckets up to ``max_distance``, and
    everything at or beyond ``max_distance`` falls into the last bucket ``num_buckets - 1``. Bidirectional:
    half the buckets for each sign of ``j - i`` (``j > i`` in the upper half), each half bucketed like that
    on ``|j - i|``.

    Every operation is elementwise, so it also runs inside a FlexAttention ``score_mod``.

    Args:
        relative_position: integer tensor of any shape, ``j - i``.
        num_buckets: number of buckets, ``>= 2`` (``>= 4`` if bidirectional).
        max_distance: distance from which all positions share the last bucket, ``> num_buckets/2``.
        bidirectional: whether future keys (``j > i``) get their own buckets.

    Returns:
        ``int64`` bucket indices in ``[0, num_buckets)``, shaped like ``relative_position``.
    """
    buckets = torch.zeros_like(relative_position, dtype=torch.long)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        n = relative_position.abs()
    else:
        n = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    if max_exact < 1 or max_distance <= max_exact:
        raise ValueError(
            f"t5_relative_bucket: need num_buckets/2 >= 1 per direction and max_distance > it, "
            f"got num_buckets={num_buckets}, max_distance={max_distance}"
        )
    is_small = n < max_exact
    # Clamped at max_exact inside the log so that the unused branch stays finite (log(0) = -inf).
    scaled = torch.log(n.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, n.long(), large)


def t5_bias(
    table: Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    max_distance: int = 128,
    bidirectional: bool = False,
) -> Tensor:
    """T5 relative attention bias: ``table[bucket(j - i), h]`` (Raffel et al. 2020, §2.1).

    Args:
        table: ``[num_buckets, n_h]`` learned scalar per bucket and head.
        q_positions: ``[s_q]`` query positions ``i``.
        k_positions: ``[s_k]`` key positions ``j``.
        max_distance, bidirectional: see :func:`t5_relative_bucket`.

    Returns:
        ``[n_h, s_q, s_k]`` in ``table``'s dtype.
    """
    relative = k_positions[None, :] - q_positions[:, None]  # [s_q, s_k], j - i
    buckets = t5_relative_bucket(relative, table.shape[0], max_distance, bidirectional)
    return table[buckets].permute(2, 0, 1)  # [s_q, s_k, n_h] -> [n_h, s_q, s_k]


def kerple_log_bias(r1: Tensor, r2: Tensor, q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """KERPLE's logarithmic bias ``-r1_h * log(1 + r2_h * |i - j|)`` (Chi et al. 2022, "KERPLE").

    The logarithmic variant of the paper's conditionally positive definite kernels,
    ``k(m, n) = -r1 * log(1 + r2 * |m - n|)`` with ``r1, r2 > 0`` (the variant the paper recommends; checked
    against the authors' reference code, github.com/chijames/KERPLE, ``ParallelKerpleLog``). For positive
    parameters it is 0 at distance 0 and decreases monotonically with distance.

    Args:
        r1: ``[n_h]`` positive scale per head.
        r2: ``[n_h]`` positive distance multiplier per head.
        q_positions: ``[s_q]`` query positions ``i``.
        k_positions: ``[s_k]`` key positions ``j``.

    Returns:
        ``[n_h, s_q, s_k]`` in ``r1``'s dtype.
    """
    distance = (q_positions[:, None] - k_positions[None, :]).abs().to(r1.dtype)  # [s_q, s_k]
    return -r1[:, None, None] * torch.log1p(r2[:, None, None] * distance)


def fire_psi(x: Tensor, c: Tensor) -> Tensor:
    """FIRE's monotone transform ``psi(x) = log(|c * x| + 1)`` (Li et al. 2024, §3, FIRE equation).

    The absolute value follows the paper's reference code (its appendix), which keeps ``psi`` defined for
    any sign of the learned ``c``.

    Args:
        x: any shape, non-negative distances or positions.
        c: scalar (0-dim) learned log-transform parameter.

    Returns:
        Same shape as ``x``, in the promoted dtype of ``x`` and ``c``.
    """
    return torch.log1p((c * x).abs())


def fire_normalized_distance(
    q_positions: Tensor, k_positions: Tensor, c: Tensor, threshold: Tensor, eps: float = 1e-6
) -> Tensor:
    """FIRE's progressive interpolation ``psi(i - j) / psi(max(L, i))`` (Li et al. 2024, §3).

    ``L`` (``threshold``) keeps short prefixes from being stretched to the whole ``[0, 1]`` range: for
    queries ``i <= L`` the normaliser is the constant ``psi(L)``, beyond it ``psi(i)``, so causal entries
    (``0 <= i - j <= i``) lie in ``[0, 1]`` at any length. As in the paper's reference code, ``eps`` is
    added to the normaliser and ``|i - j|`` is used for non-causal entries.

    Args:
        q_positions: ``[s_q]`` query positions ``i``.
        k_positions: ``[s_k]`` key positions ``j``.
        c: scalar (0-dim) log-transform parameter (see :func:`fire_psi`).
        threshold: scalar (0-dim) ``L``, ``> 0``.
        eps: added to ``psi(max(L, i))``.

    Returns:
        ``[s_q, s_k]`` in ``c``'s dtype.
    """
    i = q_positions.to(c.dtype)
    distance = (i[:, None] - k_positions.to(c.dtype)[None, :]).abs()  # [s_q, s_k]
    normaliser = fire_psi(torch.maximum(i, threshold), c) + eps  # [s_q]
    return fire_psi(distance, c) / normaliser[:, None]


def fire_mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """FIRE's ``f_theta``: a one-hidden-layer ReLU MLP, scalar -> one value per head (Li et al. 2024, §3).

    ``f(x)_h = sum_k w2[h, k] * relu(w1[k, 0] * x + b1[k]) + b2[h]`` (``nn.Linear(1, hidden)``, ReLU,
    ``nn.Linear(hidden, n_h)`` in the paper's reference code).

    Args:
        x: ``[...]`` scalar inputs (normalised distances).
        w1: ``[hidden, 1]``; b1: ``[hidden]``; w2: ``[n_h, hidden]``; b2: ``[n_h]``.

    Returns:
        ``[n_h, ...]``.
    """
    hidden = torch.relu(x[..., None] * w1[:, 0] + b1)  # [..., hidden]
    out = hidden @ w2.T + b2  # [..., n_h]
    return out.movedim(-1, 0)


def fire_mlp_on_unit_interval(
    w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`fire_mlp` on ``x`` in ``[0, 1]`` (where FIRE's normalised causal distances lie) with every hidden
    unit whose kink ``-b1/w1`` is outside ``(0, 1)`` folded into one linear term: such a unit is either
    ``w1 x + b1`` or ``0`` on the whole interval. What is left: ``f(x)_h = slope_h x + intercept_h +
    sum_k w2'[h, k] relu(w1'[k] x + b1'[k])`` over the units that bend inside it (exact algebraically; sums in
    another order).

    Args:
        w1 ``[m, 1]``, b1 ``[m]``, w2 ``[n_h, m]``, b2 ``[n_h]``: see :func:`fire_mlp`.

    Returns:
        ``(w1' [m'], b1' [m'], w2' [n_h, m'], slope [n_h], intercept [n_h])``.
    """
    w, b = w1[:, 0], b1
    kink = torch.where(w != 0, -b / torch.where(w != 0, w, torch.ones_like(w)), torch.full_like(w, -1.0))
    bends = (kink > 0) & (kink < 1)
    on = ~bends & (w * 0.5 + b > 0)  # no sign change in [0, 1]: active on all of it, or on none
    slope = w2[:, on] @ w[on]
    intercept = b2 + w2[:, on] @ b[on]
    return w[bends], b[bends], w2[:, bends], slope, intercept


def fire_mlp_pieces(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`fire_mlp` as the piecewise-linear function it is: ``(breakpoints [m], slopes [m+1, n_h],
    intercepts [m+1, n_h])`` with ``f(x) = slopes[p] * x + intercepts[p]``, ``p`` the number of breakpoints
    ``< x`` (``torch.searchsorted(breakpoints, x)``).

    A ReLU MLP of a scalar is affine between the kinks ``x = -b1_k / w1_k`` of its hidden units: on each
    piece the set of active units is fixed, so ``f`` is ``sum`` over those of ``w2[:, k] (w1_k x + b1_k)``
    plus ``b2``. Evaluating it costs a search and ``2 n_h`` multiply-adds per score instead of
    ``hidden * (n_h + 2)``. Slopes and intercepts are differentiable in all parameters (the active sets are
    constants, as the ReLU's derivative is), so gradients equal :func:`fire_mlp`'s wherever it has them.

    Args:
        w1: ``[hidden, 1]``; b1: ``[hidden]``; w2: ``[n_h, hidden]``; b2: ``[n_h]``.
    """
    w = w1[:, 0]
    moving = w != 0
    breakpoints = torch.sort((-b1[moving] / w[moving]).detach()).values  # [m]
    # One point inside each piece (and past both ends) tells which units are active there.
    gaps = breakpoints[1:] - breakpoints[:-1]
    inside = torch.cat((breakpoints[:1] - 1, breakpoints[:-1] + gaps / 2, breakpoints[-1:] + 1))
    if breakpoints.numel() == 0:
        inside = torch.zeros(1, dtype=w.dtype, device=w.device)
    active = ((inside[:, None] * w.detach() + b1.detach()) > 0).to(w.dtype)  # [m+1, hidden]
    slopes = (active * w) @ w2.T  # [m+1, n_h]
    intercepts = (active * b1) @ w2.T + b2
    return breakpoints, slopes, intercepts


def fire_mlp_piecewise(x: Tensor, pieces: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """:func:`fire_mlp` at ``x`` ``[...]`` from :func:`fire_mlp_pieces`; returns ``[n_h, ...]``."""
    breakpoints, slopes, intercepts = pieces
    piece = torch.searchsorted(breakpoints, x.detach().contiguous()).flatten()  # [N] piece of each x
    shape = (slopes.shape[1], *x.shape)
    # index_select on [n_h, m+1] rows: the fastest gather here (see docs/performance.md, section "Measurements
    # behind design choices")
    return torch.addcmul(
        intercepts.T.index_select(1, piece).view(shape), slopes.T.index_select(1, piece).view(shape), x
    )


def fire_bias(
    q_positions: Tensor,
    k_positions: Tensor,
    c: Tensor,
    threshold: Tensor,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    eps: float = 1e-6,
) -> Tensor:
    """FIRE bias ``b(i, j) = f_theta(psi(i - j) / psi(max(L, i)))`` (Li et al. 2024, "Functional
    Interpolation for Relative Positions Improves Long Context Transformers", §3, FIRE equation).

    Checked against the PyTorch reference code in the paper's appendix (``FIRE`` module: ``mlp_width=32``,
    ``init_c=0.1``, ``init_L=512``, ``eps=1e-6``). The MLP is evaluated in its piecewise-linear form
    (:func:`fire_mlp_pieces`, equal to :func:`fire_mlp` up to rounding): memory is about ``s_q * s_k * (n_h +
    3)`` elements; callers chunk the queries for long sequences.

    Args:
        q_positions: ``[s_q]``; k_positions: ``[s_k]``.
        c, threshold, eps: see :func:`fire_normalized_distance`.
        w1, b1, w2, b2: MLP parameters, see :func:`fire_mlp`.

    Returns:
        ``[n_h, s_q, s_k]`` in the parameters' dtype.
    """
    x = fire_normalized_distance(q_positions, k_positions, c, threshold, eps)  # [s_q, s_k]
    if torch.compiler.is_compiling():
        # Traced, the MLP itself: the pieces select the units that bend (a shape read from the weights' values,
        # a graph break), and inductor evaluates the MLP in one fused kernel.
        return fire_mlp(x, w1, b1, w2, b2)
    return fire_mlp_piecewise(x, fire_mlp_pieces(w1, b1, w2, b2))
