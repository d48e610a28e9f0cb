"""Rotary encodings (RoPE, xPos), RoFormer pair layout: pair ``j`` is ``(x[..., 2j], x[..., 2j+1])``."""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from posenc.functional._softmax_parts import fused_cpu_attention, merge_attention_

# xPos's published constants (Sun et al. 2023, §3.2, and the torchscale reference code): every default
# below and the xpos encoder's read them from here.
XPOS_GAMMA = 0.4  # zeta_j = (2j/d + gamma) / (1 + gamma)
XPOS_SCALE_BASE = 512.0  # decay length scale for the paper's 1024-token training

__all__ = [
    "XPOS_GAMMA",
    "XPOS_QUERY_LOG_SCALE",
    "XPOS_SCALE_BASE",
    "apply_rope",
    "apply_rotation",
    "apply_xpos",
    "ntk_base",
    "relative_bound",
    "roformer_bound",
    "rope_angles",
    "rope_inv_freq",
    "rope_rotation",
    "xpos_decay",
    "xpos_last_rotations",
    "xpos_relative_scores",
    "xpos_rotations",
    "xpos_window_attention",
    "xpos_windows",
    "xpos_zeta",
]


def rope_inv_freq(
    head_dim: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """RoPE inverse frequencies ``theta_j = base**(-2j/head_dim)``, ``j = 0..head_dim/2-1`` (RoFormer eq. 15).

    Args:
        head_dim: per-head dimension; must be even (RoPE rotates pairs of dimensions).
        base: frequency base; 10000 in RoFormer.

    Returns:
        ``[head_dim // 2]`` inverse frequencies.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"rope_inv_freq: head_dim must be even and >= 2, got {head_dim}")
    two_j = torch.arange(0, head_dim, 2, dtype=torch.float64)
    return (base ** (-two_j / head_dim)).to(dtype=dtype, device=device)


def ntk_base(base: float, head_dim: int, factor: float) -> float:
    """NTK-aware rescaled RoPE base ``base * factor**(head_dim / (head_dim - 2))`` (bloc97, 2023).

    Stretching the base this way leaves the highest frequency (j=0) unchanged and slows the lowest one
    (j = head_dim/2 - 1) by exactly ``factor``, interpolating smoothly in between; ``factor = 1`` is plain
    RoPE. Source: "NTK-Aware Scaled RoPE allows LLaMA models to have extended (8k+) context size without
    any fine-tuning" (reddit r/LocalLLaMA, 2023), as formalised in the YaRN paper (Peng et al. 2023, §3.1).

    Args:
        base: the RoPE base the model was trained with.
        head_dim: per-head dimension, ``> 2``.
        factor: context extension factor ``s = L' / L``, ``> 0``.
    """
    if head_dim <= 2:
        raise ValueError(f"ntk_base: head_dim must be > 2, got {head_dim}")
    if not factor > 0:
        raise ValueError(f"ntk_base: factor must be > 0, got {factor}")
    return float(base) * float(factor) ** (head_dim / (head_dim - 2))


def rope_angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Rotation angles ``positions[m] * inv_freq[j]``, computed in float64 for accuracy at long lengths.

    Args:
        positions: ``[seq]``.
        inv_freq: ``[head_dim // 2]``.

    Returns:
        ``[seq, head_dim // 2]`` float64 angles on ``inv_freq``'s device.
    """
    return torch.outer(positions.to(torch.float64), inv_freq.to(torch.float64))


def rope_rotation(positions: Tensor, inv_freq: Tensor, dtype: torch.dtype = torch.complex64) -> Tensor:
    """RoPE's rotations as unit complex numbers ``exp(i * positions[m] * inv_freq[j])`` (RoFormer eq. 34).

    Rotating the pair ``(x[2j], x[2j+1])`` by an angle is multiplying the complex number
    ``x[2j] + i x[2j+1]`` by this factor; :func:`apply_rotation` does that. Encoders cache the table per
    sequence, so it is computed once, not per layer and call.

    Args:
        positions: ``[seq]``.
        inv_freq: ``[head_dim // 2]``.
        dtype: complex dtype of the table (``complex64`` for float32 inputs, ``complex128`` for float64).

    Returns:
        ``[seq, head_dim // 2]`` complex table on ``inv_freq``'s device.
    """
    angles = rope_angles(positions, inv_freq)  # [s, h_d/2] float64
    return torch.polar(torch.ones_like(angles), angles).to(dtype)


def apply_rotation(x: Tensor, rotation: Tensor) -> Tensor:
    """Multiply each dimension pair ``x[..., 2j] + i x[..., 2j+1]`` by ``rotation[m, j]`` (RoFormer layout).

    One complex multiply instead of the ``rotate_half`` formulation's four real products and a
    concatenation: faster on CPU (``scripts/bench.py``; see docs/performance.md, section "Measurements behind
    design choices"), and the same numbers.

    Args:
        x: ``[..., seq, head_dim]`` real, e.g. ``[b, n_h, s, h_d]`` (a strided view such as a slice of a
            fused qkv projection is fine).
        rotation: ``[seq, head_dim // 2]`` complex (see :func:`rope_rotation`); it may also scale pairs.

    Returns:
        Tensor of ``x``'s shape, dtype and device.
    """
    if x.shape[-1] != 2 * rotation.shape[-1]:
        raise ValueError(f"apply_rotation: head_dim {x.shape[-1]} != 2 * {rotation.shape[-1]} rotation pairs")
    compute = x if x.dtype in (torch.float32, torch.float64) else x.float()  # no complex bf16 kernels
    if torch.compiler.is_compiling():
        return _rotate_pairs_real(compute, rotation).to(x.dtype)
    if compute.stride(-1) != 1 or compute.storage_offset() % 2 or any(st % 2 for st in compute.stride()[:-1]):
        compute = compute.contiguous()  # view_as_complex needs pairs adjacent in memory
    pairs = torch.view_as_complex(compute.unflatten(-1, (-1, 2)))  # [..., s, h_d/2]
    rotation = rotation.to(pairs.dtype)
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


def _rotate_pairs_real(x: Tensor, rotation: Tensor) -> Tensor:
    """:func:`apply_rotation`'s product in real arithmetic, ``(a + ib)(c + id) = (ac - bd) + i(ad + bc)``: what
    runs under torch.compile. Inductor generates no code for complex operators (it falls back to eager kernels
    for each, slower than eager on the GPU check), and the eager path's memory-layout check
    (``storage_offset``) is a graph break. Each output is one product difference or sum, as in the complex
    multiply, so the two agree to a rounding or two."""
    rotation = torch.view_as_real(rotation.to(_complex_dtype(x)))  # [s, h_d/2, 2]: the table, not the batch
    cos, sin = rotation[..., 0], rotation[..., 1]
    pairs = x.unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def apply_rope(x: Tensor, positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Rotary position embedding of Su et al. 2021 (RoFormer, eq. 34), RoFormer pair layout.

    Rotates each pair ``(x[..., 2j], x[..., 2j+1])`` at sequence index ``m`` by the angle
    ``positions[m] * inv_freq[j]``. Rotation preserves norms, and ``<rope(q)_m, rope(k)_n>`` depends on
    the positions only through ``m - n``.

    Args:
        x: ``[..., seq, head_dim]``, e.g. ``[b, n_h, s, h_d]``; ``head_dim == 2 * len(inv_freq)``.
        positions: ``[seq]``.
        inv_freq: ``[head_dim // 2]`` (see :func:`rope_inv_freq`).

    Returns:
        Tensor of ``x``'s shape, dtype and device.
    """
    if x.shape[-1] != 2 * inv_freq.shape[-1]:
        raise ValueError(f"apply_rope: head_dim {x.shape[-1]} != 2 * len(inv_freq) = {2 * inv_freq.shape[-1]}")
    return apply_rotation(x, rope_rotation(positions, inv_freq, _complex_dtype(x)))


def _complex_dtype(x: Tensor) -> torch.dtype:
    return torch.complex128 if x.dtype == torch.float64 else torch.complex64


def xpos_zeta(head_dim: int, gamma: float = XPOS_GAMMA, *, dtype: torch.dtype = torch.float64) -> Tensor:
    """xPos per-pair decay bases ``zeta_j = (2j/head_dim + gamma) / (1 + gamma)`` (Sun et al. 2023, §3.2).

    Returns:
        ``[head_dim // 2]`` values in ``(0, 1)``.
    """
    two_j = torch.arange(0, head_dim, 2, dtype=torch.float64)
    return ((two_j / head_dim + gamma) / (1.0 + gamma)).to(dtype)


def apply_xpos(
    q: Tensor,
    k: Tensor,
    positions: Tensor,
    inv_freq: Tensor,
    gamma: float = XPOS_GAMMA,
    scale_base: float = XPOS_SCALE_BASE,
) -> tuple[Tensor, Tensor]:
    """Extrapolatable position embedding xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer", eq. 11).

    RoPE (see :func:`apply_rope`) plus a per-pair scale: pair ``j`` of the query at position ``m`` is
    multiplied by ``zeta_j**(m/scale_base)`` and of the key at ``n`` by ``zeta_j**(-n/scale_base)``, so
    each pair's contribution to ``q_m . k_n`` carries ``zeta_j**((m-n)/scale_base)``, which decays with
    distance. Positions are centred on the middle of ``positions`` before scaling (as in the authors'
    torchscale code) to keep both factors near 1; the score is unchanged by that offset. The factors still
    reach ``zeta_min**(±span/(2 scale_base))`` over a span of positions and leave float32's range once that
    exponent passes about 88 (float64's: about 709); :func:`xpos_relative_scores` gives the same scores at
    any length.

    Args:
        q: ``[..., seq, head_dim]`` queries.
        k: ``[..., seq, head_dim]`` keys.
        positions: ``[seq]``, shared by ``q`` and ``k``.
        inv_freq: ``[head_dim // 2]``.
        gamma: zeta offset; 0.4 in the paper.
        scale_base: decay length scale; 512 in the paper.

    Returns:
        ``(q, k)`` with their input shapes, dtypes and devices.
    """
    rq, rk = xpos_rotations(positions, inv_freq, q.shape[-1], gamma, scale_base, _complex_dtype(q))
    return apply_rotation(q, rq), apply_rotation(k, rk)


def xpos_rotations(
    positions: Tensor,
    inv_freq: Tensor,
    head_dim: int,
    gamma: float = XPOS_GAMMA,
    scale_base: float = XPOS_SCALE_BASE,
    dtype: torch.dtype = torch.complex64,
) -> tuple[Tensor, Tensor]:
    """xPos's query and key factors for :func:`apply_rotation` (see :func:`apply_xpos` for the formula).

    Returns:
        ``(rotation * zeta**(m/scale_base), rotation * zeta**(-n/scale_base))``, each ``[seq, head_dim // 2]``
        complex, with positions centred on the middle of ``positions``.
    """
    pos = positions.to(torch.float64)
    centre = (pos.max() + pos.min()) / 2 if pos.numel() else pos.sum()
    power = (pos - centre) / scale_base  # [s]
    zeta = xpos_zeta(head_dim, gamma).to(pos.device)  # [h_d/2]
    scale = zeta[None, :] ** power[:, None]  # [s, h_d/2]
    rotation = rope_rotation(positions, inv_freq, torch.complex128)
    return (rotation * scale).to(dtype), (rotation / scale).to(dtype)


def xpos_last_rotations(
    positions: Tensor,
    inv_freq: Tensor,
    head_dim: int,
    gamma: float = XPOS_GAMMA,
    scale_base: float = XPOS_SCALE_BASE,
    dtype: torch.dtype = torch.complex64,
) -> tuple[Tensor, Tensor]:
    """xPos's factors centred on the last position ``c = max(positions)``: the query's decay is 1 there.

    ``(rotation, rotation * zeta**((c - n)/scale_base))``: the score ``q_c . k_n`` of the query at ``c`` is
    xPos's (the query factor ``zeta**((c - c)/scale_base)`` is 1), and every key factor is at most 1, so the
    tables are finite at any length (far keys' factors underflow to 0 as the decay itself does). A query at
    ``m < c`` would need ``zeta**((m - c)/scale_base)``, which overflows far from ``c``; its scores are
    :func:`xpos_relative_scores`'s.

    Returns:
        ``(query, key)`` factors, each ``[seq, head_dim // 2]`` complex.
    """
    pos = positions.to(torch.float64)
    last = pos.max() if pos.numel() else pos.sum()
    log_zeta = xpos_zeta(head_dim, gamma).to(pos.device).log()  # [h_d/2], < 0
    decay = torch.exp(((last - pos) / scale_base)[:, None] * log_zeta[None, :])  # [s, h_d/2], in [0, 1]
    rotation = rope_rotation(positions, inv_freq, torch.complex128)
    return rotation.to(dtype), (rotation * decay).to(dtype)


#: Largest log of a query factor in :func:`xpos_relative_scores` (e**30 ~ 1e13): each query is scored against
#: the end of its window of positions (:func:`xpos_windows`), which is never more than this decay away.
XPOS_QUERY_LOG_SCALE = 30.0


def xpos_decay(
    distance: Tensor, head_dim: int, gamma: float = XPOS_GAMMA, scale_base: float = XPOS_SCALE_BASE
) -> Tensor:
    """xPos's decay ``zeta_j**(distance/scale_base)`` of each dimension pair (Sun et al. 2023, eq. 11),
    computed as ``exp(distance/scale_base * log(zeta_j))`` in float64: a large distance underflows to 0
    rather than overflowing anywhere.

    Args:
        distance: ``[...]`` distances (``m - n`` for a query at ``m`` and a key at ``n``), any real dtype.
        head_dim: per-head dimension (even).

    Returns:
        ``[..., head_dim]`` float64 on ``distance``'s device, pair ``j``'s factor on dimensions ``2j`` and
        ``2j+1`` (RoFormer layout), ready to multiply queries or keys.
    """
    log_zeta = xpos_zeta(head_dim, gamma).log().repeat_interleave(2).to(distance.device)  # [h_d], < 0
    return torch.exp((distance.to(torch.float64) / scale_base)[..., None] * log_zeta)


def xpos_windows(
    positions: Tensor, origin: float, head_dim: int, gamma: float = XPOS_GAMMA, scale_base: float = XPOS_SCALE_BASE
) -> tuple[Tensor, float]:
    """The window of each query position in :func:`xpos_relative_scores`: ``(index [s] long, width)``.

    Windows are ``width`` positions long from ``origin`` (window ``w`` covers ``[origin + w width,
    origin + (w+1) width)``), with ``width`` such that
    ``zeta_min**(-width/scale_base) = e**XPOS_QUERY_LOG_SCALE``: a query is scored against its window's end
    ``origin + (w+1) width``, at most that far away.
    """
    width = XPOS_QUERY_LOG_SCALE * scale_base / -math.log(float(xpos_zeta(head_dim, gamma).min()))
    return torch.floor((positions.to(torch.float64) - origin) / width).long(), width


def xpos_relative_scores(
    q: Tensor,
    k: Tensor,
    q_positions: Tensor,
    k_positions: Tensor,
    gamma: float = XPOS_GAMMA,
    scale_base: float = XPOS_SCALE_BASE,
) -> Tensor:
    """xPos's scores ``q_m . k_n`` from the relative distance, finite at any length (Sun et al. 2023, eq. 11).

    ``q`` and ``k`` are already RoPE-rotated (:func:`apply_rope`, or :func:`apply_rotation` with a scaled
    table); the result is ``sum_j Re(q_mj conj(k_nj)) zeta_j**((m - n)/scale_base)``, the score of
    :func:`apply_xpos`'s queries and keys. That factorisation multiplies queries by ``zeta**(m'/scale_base)``
    and keys by ``zeta**(-n'/scale_base)`` for positions ``m', n'`` centred on one point for the whole
    sequence, which leaves float32's range on long sequences. Here the common point moves instead: queries
    are taken by windows of positions (:func:`xpos_windows`, from the smallest query position), and for each
    window the centre is its end ``c``, so its queries' factors ``zeta**((m - c)/scale_base)`` stay below
    ``e**XPOS_QUERY_LOG_SCALE`` and the keys' ``zeta**((c - n)/scale_base)`` are at most 1; their product is
    ``zeta**((m - n)/scale_base)`` whatever ``c`` is. Far keys' factors underflow to 0, as the decay itself
    does (no inf, no NaN).

    Args:
        q: ``[..., s_q, head_dim]`` rotated queries.
        k: ``[..., s_k, head_dim]`` rotated keys.
        q_positions: ``[s_q]``; k_positions: ``[s_k]`` (integer or floating point).
        gamma: zeta offset; 0.4 in the paper.
        scale_base: decay length scale; 512 in the paper.

    Returns:
        ``[..., s_q, s_k]`` in ``q``'s dtype. Only entries whose key is not after its query
        (``k_position <= q_position``, what causal attention keeps) are xPos's score; the others are finite
        but unspecified (a key after its query's window has its factor capped at 1).
    """
    head_dim = q.shape[-1]
    q_pos = q_positions.to(device=q.device, dtype=torch.float64)
    k_pos = k_positions.to(device=q.device, dtype=torch.float64)
    out = q.new_empty((*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]))
    if q_pos.numel() == 0:
        return out
    origin = float(q_pos.min())
    window, width = xpos_windows(q_pos, origin, head_dim, gamma, scale_base)
    for w in torch.unique(window).tolist():
        rows = (window == w).nonzero().squeeze(1)
        centre = origin + (w + 1) * width
        q_decay = xpos_decay(q_pos[rows] - centre, head_dim, gamma, scale_base)  # in [1, e**30]
        k_decay = xpos_decay((centre - k_pos).clamp(min=0), head_dim, gamma, scale_base)  # in [0, 1]
        scaled_q, scaled_k = q.index_select(-2, rows) * q_decay.to(q.dtype), k * k_decay.to(k.dtype)
        scored = scaled_q @ scaled_k.transpose(-1, -2)
        out.index_copy_(-2, rows, scored.expand(*out.shape[:-2], len(rows), out.shape[-1]))
    return out


def xpos_window_attention(
    q: Tensor, k: Tensor, v: Tensor, gamma: float = XPOS_GAMMA, scale_base: float = XPOS_SCALE_BASE
) -> Tensor:
    """Causal attention with xPos's scores at any length (:func:`xpos_relative_scores`' windows of queries), each
    window through PyTorch's fused CPU attention: no score matrix. Positions ``0 .. s-1``; inference on CPU.

    Window ``w`` (queries ``a .. e-1``, centre ``c`` its end) scores its queries times ``zeta**((m - c)/
    scale_base)`` against the keys times ``zeta**((c - n)/scale_base)``: a plain dot product, so its queries
    attend by two fused calls, one causal against their own keys ``a .. e-1`` and one against the keys before
    them, merged exactly by their log-sum-exps (as :func:`posenc.nn.fused_bias.far_constant_attention`). Scores
    are scaled by ``1/sqrt(h_d)``, as ``scaled_dot_product_attention``'s default.

    Args:
        q, k: ``[b, n_h, s, h_d]`` RoPE-rotated (RoFormer layout); v: ``[b, n_h, s, h_d]``.
        gamma, scale_base: see :func:`xpos_decay`.

    Returns:
        ``[b, n_h, s, h_d]``.
    """
    s, head_dim = q.shape[-2], q.shape[-1]
    positions = torch.arange(s, device=q.device, dtype=torch.float64)
    window, width = xpos_windows(positions, 0.0, head_dim, gamma, scale_base)
    out = torch.empty_like(q)
    bounds = torch.searchsorted(window, torch.arange(int(window[-1]) + 2, device=q.device)).tolist()
    for w, (start, end) in enumerate(itertools.pairwise(bounds)):
        if start == end:
            continue
        centre = (w + 1) * width
        q_decay = xpos_decay(positions[start:end] - centre, head_dim, gamma, scale_base) * head_dim**-0.5
        k_decay = xpos_decay((centre - positions[:end]).clamp(min=0), head_dim, gamma, scale_base)
        scaled_q, scaled_k = q[..., start:end, :] * q_decay.to(q.dtype), k[..., :end, :] * k_decay.to(k.dtype)
        rows = slice(start, end)
        own, own_lse = fused_cpu_attention(scaled_q, scaled_k[..., rows, :], v[..., rows, :], 0.0, True, scale=1.0)
        if start > 0:
            before, before_lse = fused_cpu_attention(
                scaled_q, scaled_k[..., :start, :], v[..., :start, :], 0.0, False, scale=1.0
            )
            merge_attention_(own, own_lse, before, before_lse)
        out[..., rows, :] = own
    return out


def roformer_bound(distances: Tensor, inv_freq: Tensor) -> Tensor:
    """RoFormer's relative upper bound of RoPE's score at each relative distance (Su et al. 2021, §3.4.3).

    With pair products ``h_j = q_[2j:2j+2] . conj(k_[2j:2j+2])`` and Abel summation, RoFormer writes

        |sum_{j=0}^{D/2-1} h_j e^{i(m-n)theta_j}| = |sum_{j=0}^{D/2-1} (h_{j+1} - h_j) S_{j+1}|
                                                 <= (max_i |h_{i+1} - h_i|) sum_{j=1}^{D/2} |S_j|,
        S_j = sum_{k=0}^{j-1} e^{i(m-n)theta_k},

    and plots the relative upper bound ``(1/(D/2)) sum_{j=1}^{D/2} |S_j|`` (their Fig. 2), which decays with
    ``m - n``. At distance 0, ``S_j = j`` and the bound is ``(D/2 + 1)/2``.

    Args:
        distances: ``[n]`` relative distances ``m - n`` (integer or floating point).
        inv_freq: ``[D/2]`` inverse frequencies ``theta_j`` (any: plain, NTK, YaRN, ...).

    Returns:
        ``[n]`` float64 bound.
    """
    angles = torch.outer(distances.to(torch.float64), inv_freq.to(torch.float64))  # [n, D/2]
    return relative_bound(torch.polar(torch.ones_like(angles), angles))


def relative_bound(factors: Tensor) -> Tensor:
    """``(1/(D/2)) sum_j |S_j|``, ``S_j = sum_{k<j} factors[..., k]``: :func:`roformer_bound` for any factors.

    Args:
        factors: ``[..., D/2]`` complex factor on each pair's product ``q . conj(k)`` (``e^{i d theta_k}``).

    Returns:
        ``[...]`` real bound.
    """
    return torch.cumsum(factors, dim=-1).abs().mean(dim=-1)
