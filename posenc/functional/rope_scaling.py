"""RoPE context-extension methods: new inverse frequencies (and an attention scale) for a longer context.

Every method is a pure function with one signature, collected in :data:`ROPE_SCALING` (the same shape as
Hugging Face ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``, whose ``_compute_*_parameters``
functions are the reference the tests pin these to)::

    <method>_scaling(head_dim, base, factor, train_length, length, **method_options)
        -> (inv_freq [head_dim // 2] float64, attention_scale)

* ``head_dim``: number of rotated dimensions (even); a partial-rotary model passes its rotated dims only,
  as Hugging Face does with ``int(head_dim * partial_rotary_factor)``.
* ``base``: the RoPE base used in training.
* ``factor``: the context-extension factor ``s`` (usually ``L'/L``, or a value the user fixed).
* ``train_length``: the original context ``L`` (Hugging Face's ``original_max_position_embeddings``).
* ``length``: the evaluation length ``L'``; only ``dynamic_ntk`` reads it.

``attention_scale`` multiplies the rotated queries **and** the rotated keys (each once), so attention
logits ``q.k`` are multiplied by ``attention_scale**2``. This is exactly Hugging Face's convention:
its ``attention_factor`` multiplies both ``cos`` and ``sin`` (``modeling_llama.LlamaRotaryEmbedding``),
which scales every rotated ``q`` and ``k``. YaRN's paper states the same thing as scaling the logits by
``1/t = mscale**2`` (Peng et al. 2023, §3.4).

Frequencies are computed in float64; pair ``j`` is the RoFormer pair ``(x[2j], x[2j+1])`` with the plain
frequency ``base**(-2j/head_dim)`` (see :func:`posenc.functional.rope_inv_freq`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from posenc.functional.rotary import ntk_base, rope_inv_freq

__all__ = [
    "none_scaling",
    "linear_scaling",
    "ntk_scaling",
    "dynamic_ntk_scaling",
    "yarn_scaling",
    "llama3_scaling",
    "ROPE_SCALING",
]


def _check(method: str, head_dim: int, base: float, factor: float, train_length: int, length: int) -> None:
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"{method}: head_dim must be even and >= 2, got {head_dim}")
    if not base > 1:
        raise ValueError(f"{method}: base must be > 1, got {base}")
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"{method}: factor must be a finite number > 0, got {factor}")
    if train_length < 1:
        raise ValueError(f"{method}: train_length must be >= 1, got {train_length}")
    if length < 1:
        raise ValueError(f"{method}: length must be >= 1, got {length}")


def _plain(head_dim: int, base: float) -> Tensor:
    return rope_inv_freq(head_dim, base, dtype=torch.float64)


def none_scaling(head_dim: int, base: float, factor: float, train_length: int, length: int) -> tuple[Tensor, float]:
    """No extension: plain RoPE frequencies ``base**(-2j/head_dim)`` (RoFormer eq. 15); ``factor`` is ignored.

    Returns:
        ``(inv_freq [head_dim // 2] float64, 1.0)``.
    """
    _check("none", head_dim, base, factor, train_length, length)
    return _plain(head_dim, base), 1.0


def linear_scaling(head_dim: int, base: float, factor: float, train_length: int, length: int) -> tuple[Tensor, float]:
    """Position interpolation: every frequency divided by ``factor`` (Chen et al. 2023, "Extending Context
    Window of Large Language Models via Positional Interpolation": ``f'(x, m) = f(x, m L / L')``).

    Rotating position ``m`` with ``inv_freq / s`` is rotating position ``m / s`` with ``inv_freq``, so a
    sequence of ``s * L`` tokens is squeezed into the trained range. Reference implementation: Hugging Face
    ``_compute_linear_scaling_rope_parameters`` (kaiokendev 2023).

    Returns:
        ``(inv_freq [head_dim // 2] float64, 1.0)``.
    """
    _check("linear", head_dim, base, factor, train_length, length)
    return _plain(head_dim, base) / factor, 1.0


def ntk_scaling(head_dim: int, base: float, factor: float, train_length: int, length: int) -> tuple[Tensor, float]:
    """Static NTK-aware scaling: plain RoPE with the base ``base * factor**(d/(d-2))`` (bloc97 2023).

    Keeps the highest frequency (``j = 0``) and divides the lowest (``j = d/2 - 1``) by exactly ``factor``,
    interpolating geometrically in between (YaRN paper, Peng et al. 2023, §3.1). See
    :func:`posenc.functional.ntk_base`. Hugging Face has no static variant; its
    ``_compute_dynamic_ntk_parameters`` with ``factor = 1`` at ``seq_len = s * L`` is this method.

    Returns:
        ``(inv_freq [head_dim // 2] float64, 1.0)``; needs ``head_dim > 2``.
    """
    _check("ntk", head_dim, base, factor, train_length, length)
    if head_dim <= 2:
        raise ValueError(f"ntk: head_dim must be > 2 (the base exponent is d/(d-2)), got {head_dim}")
    return _plain(head_dim, ntk_base(base, head_dim, factor)), 1.0


def dynamic_ntk_scaling(
    head_dim: int, base: float, factor: float, train_length: int, length: int
) -> tuple[Tensor, float]:
    """Dynamic NTK scaling (emozilla 2023, "Dynamically Scaled RoPE further increases performance of long
    context LLaMA with zero fine-tuning"; YaRN paper §3.3): the NTK base chosen from the current length.

    At ``length <= train_length`` it is plain RoPE; beyond, the base is
    ``base * (factor * length / train_length - (factor - 1))**(d/(d-2))``, exactly Hugging Face
    ``_compute_dynamic_ntk_parameters`` (``max_position_embeddings`` = ``train_length``, ``seq_len`` =
    ``length``). With ``factor = 1`` that is static NTK (:func:`ntk_scaling`) at ``s = length/train_length``.

    Returns:
        ``(inv_freq [head_dim // 2] float64, 1.0)``; needs ``head_dim > 2``.
    """
    _check("dynamic_ntk", head_dim, base, factor, train_length, length)
    if head_dim <= 2:
        raise ValueError(f"dynamic_ntk: head_dim must be > 2 (the base exponent is d/(d-2)), got {head_dim}")
    if length <= train_length:
        return _plain(head_dim, base), 1.0
    scale = factor * length / train_length - (factor - 1)
    return _plain(head_dim, ntk_base(base, head_dim, scale)), 1.0


def _correction_dim(rotations: float, head_dim: int, base: float, train_length: int) -> float:
    """The (fractional) pair index whose wavelength fits ``rotations`` full turns in ``train_length`` tokens.

    Solves ``train_length / (2 pi base**(2j/d)) = rotations`` for ``j`` (YaRN paper §3.2; reference code
    ``find_correction_dim``).
    """
    return head_dim * math.log(train_length / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_scaling(
    head_dim: int,
    base: float,
    factor: float,
    train_length: int,
    length: int,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> tuple[Tensor, float]:
    """YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models",
    arXiv 2309.00071, §3.2 "NTK-by-parts" interpolation and §3.4 attention temperature).

    Pairs that make more than ``beta_fast`` turns over ``train_length`` tokens keep their frequency
    (extrapolation); pairs making fewer than ``beta_slow`` turns are divided by ``factor`` (interpolation);
    a linear ramp over the pair index blends the two in between:
    ``inv_freq_j = theta_j * (1 - ramp_j * (1 - 1/factor))``, ``ramp_j = clamp((j-low)/(high-low), 0, 1)``,
    ``low``/``high`` the correction dims of ``beta_fast``/``beta_slow`` clamped to ``[0, d-1]`` (``high``
    gets ``+0.001`` if they are equal). The attention scale is ``mscale = 0.1 ln(factor) + 1`` for
    ``factor > 1``, else 1 (§3.4: logits scaled by ``1/t = mscale**2``).

    Reference implementation: the authors' ``jquesnelle/yarn`` (``_yarn_find_correction_range``,
    ``_yarn_linear_ramp_mask``, ``_yarn_get_mscale``), as ported to Hugging Face ``_compute_yarn_parameters``.
    ``truncate=True`` (the default, as in both) floors ``low`` and ceils ``high`` to whole pair indices;
    ``truncate=False`` keeps them fractional (Hugging Face's ``truncate: false`` option, used by gpt-oss).
    Hugging Face's optional ``attention_factor``/``mscale``/``mscale_all_dim`` overrides are not offered.

    Args:
        beta_fast: turns above which a pair is left unchanged; 32 in the paper.
        beta_slow: turns below which a pair is fully interpolated; 1 in the paper.
        truncate: floor/ceil the correction range.

    Returns:
        ``(inv_freq [head_dim // 2] float64, mscale)``.
    """
    _check("yarn", head_dim, base, factor, train_length, length)
    if not beta_slow > 0:
        raise ValueError(f"yarn: beta_slow must be > 0, got {beta_slow}")
    if not beta_fast > beta_slow:
        raise ValueError(f"yarn: beta_fast must be > beta_slow, got {beta_fast} <= {beta_slow}")
    low = _correction_dim(beta_fast, head_dim, base, train_length)
    high = _correction_dim(beta_slow, head_dim, base, train_length)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # the reference code's guard against a zero-width ramp
    j = torch.arange(head_dim // 2, dtype=torch.float64)
    ramp = ((j - low) / (high - low)).clamp(0, 1)  # 0: extrapolate (keep), 1: interpolate (divide)
    # Reference: interp * ramp + extrap * (1 - ramp); this form is the same and exact at factor == 1.
    inv_freq = _plain(head_dim, base) * (1 - ramp * (1 - 1 / factor))
    mscale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, mscale


def llama3_scaling(
    head_dim: int,
    base: float,
    factor: float,
    train_length: int,
    length: int,
    *,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[Tensor, float]:
    """Llama 3.1's frequency-dependent scaling (Meta 2024, "The Llama 3 Herd of Models"; reference code
    ``meta-llama/llama-models`` ``apply_scaling``, ported to Hugging Face ``_compute_llama3_parameters``).

    With wavelengths ``w_j = 2 pi / theta_j``: pairs with ``w_j < train_length / high_freq_factor`` are
    kept, pairs with ``w_j > train_length / low_freq_factor`` are divided by ``factor``, and those in between
    are blended with ``smooth = (train_length/w_j - low_freq_factor) / (high_freq_factor - low_freq_factor)``:
    ``theta_j * ((1 - smooth) / factor + smooth)``. Meta's release uses factor 8, 1, 4, original context 8192.

    Returns:
        ``(inv_freq [head_dim // 2] float64, 1.0)``.
    """
    _check("llama3", head_dim, base, factor, train_length, length)
    if not high_freq_factor > low_freq_factor > 0:
        raise ValueError(
            f"llama3: need high_freq_factor > low_freq_factor > 0, got {high_freq_factor}, {low_freq_factor}"
        )
    inv_freq = _plain(head_dim, base)
    wavelen = 2 * math.pi / inv_freq
    smooth = (train_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    # (1 - smooth)/factor + smooth, written so that factor == 1 gives exactly 1
    smoothed = inv_freq / factor * (1 + smooth * (factor - 1))
    out = torch.where(wavelen > train_length / low_freq_factor, inv_freq / factor, smoothed)
    return torch.where(wavelen < train_length / high_freq_factor, inv_freq, out), 1.0


#: Method name -> function ``(head_dim, base, factor, train_length, length, **options) -> (inv_freq, scale)``.
ROPE_SCALING: dict[str, Callable[..., tuple[Tensor, float]]] = {
    "none": none_scaling,
    "linear": linear_scaling,
    "ntk": ntk_scaling,
    "dynamic_ntk": dynamic_ntk_scaling,
    "yarn": yarn_scaling,
    "llama3": llama3_scaling,
}
