"""What attention sees as a function of relative distance, for every encoder (``posenc kernels``).

An encoder can shape attention scores in three places (see :mod:`posenc.encoders`); each gives one
*component* of its kernel, measured through the hooks only (nothing here looks at an encoder's name):

* ``rotary`` - through ``rotate``: the score ``q_m . k_n`` of an all-ones query and key after rotation,
  normalised by its value at distance 0. For an isotropic random query used as its own key this is the
  expected score up to a constant (``E[q_m . q_n] = sum_j E|q_j|^2 Re c_j(m-n)``, ``c_j`` below), so it is
  "how much a query still matches itself" at distance ``d``. For RoPE it is
  ``mean_j cos(d theta_j)``; xPos multiplies each pair by its decay ``zeta_j**(d/scale_base)``.
* ``rotary_bound`` - RoFormer's picture of RoPE's long-term decay (Su et al. 2021, §3.4.3, Fig. 2): the
  relative upper bound ``(1/(D/2)) sum_{j=1}^{D/2} |S_j|`` with ``S_j = sum_{k<j} c_k(d)`` and ``c_k(d)``
  the factor the encoder puts on pair ``k`` of ``q_m . conj(k_n)`` (``e^{i d theta_k}`` for RoPE), read from
  ``rotate`` with unit queries and keys, each divided by its modulus at distance 0 (a constant attention
  scale such as YaRN's is not a decay; xPos's decay stays). :func:`posenc.functional.roformer_bound` is the same
  for RoPE with any ``inv_freq``. Raw, as in the paper: its value at distance 0 is ``(D/2 + 1)/2`` (8.5 for ``D = 32``).
* ``bias`` - ``score_bias(q_pos, k_pos)`` per head, the additive logit (ALiBi: ``-slope_h * d``); raw.
* ``absolute`` - through ``embed``: cosine similarity of the position vectors ``embed(0)_m`` and
  ``embed(0)_{m-d}`` (what the first layer's dot products see of positions), 1 at distance 0.

Convention: as in a forward pass of ``m + 1`` tokens in evaluation mode, with ``m = max distance``: the
query is token ``m``, the keys are tokens ``m - d``, and the hooks see the positions ``sample_positions``
gives (``0..m``, or a randomized encoding's evaluation positions, so its kernel is by token distance). A
score that is not shift-invariant (a learned table, FIRE's normalisation by the query position) is thus read
at the longest distance asked for. An encoder that cannot encode ``m + 1`` positions (``check_positions``:
a learned table's rows, a randomized encoding's range) gets the longest sequence it can encode.
Components live on different scales (a similarity vs. a logit), so no "total" is formed; an encoder
contributes the components whose hooks do something.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from posenc import functional as pf
from posenc.analysis.kernel_views import UNTRAINED
from posenc.encoders import AttentionShape, PositionalEncoder, build_encoder
from posenc.errors import PosencError, PositionRangeError
from posenc.functional.rope_scaling_spec import RopeScaling
from posenc.running import arguments

#: Shape of the untrained default encoders: conf/model/small.yaml (d_model 128, 4 heads -> head_dim 32).
DEFAULT_SHAPE = AttentionShape(d_model=128, n_heads=4)
#: Training length of the untrained default encoders: conf/task/copy.yaml's task.length.
DEFAULT_TRAIN_LENGTH = 64
DENSE_UP_TO = 4096  # the table keeps every distance up to here, then POINTS_PER_OCTAVE per octave
POINTS_PER_OCTAVE = 256
COMPONENTS = ("rotary", "rotary_bound", "bias", "absolute")
COLUMNS = [
    "encoder", "source", "scaling", "scaling_factor", "train_length", "head", "distance", "component",
    "value",
]  # fmt: skip
TABLE_STEM = "kernels"


# -------------------------------------------------------------------------------------------- distances


def distance_grid(max_distance: int) -> Tensor:
    """Distances kept in the table: every one up to ``DENSE_UP_TO``, then ``POINTS_PER_OCTAVE`` per octave."""
    dense = torch.arange(min(max_distance, DENSE_UP_TO) + 1)
    if max_distance <= DENSE_UP_TO:
        return dense
    octaves = math.log2(max_distance / DENSE_UP_TO)
    sparse = torch.logspace(
        math.log2(DENSE_UP_TO),
        math.log2(max_distance),
        max(2, math.ceil(octaves * POINTS_PER_OCTAVE)),
        base=2,
        dtype=torch.float64,
    )
    return torch.unique(torch.cat((dense, sparse.round().long(), torch.tensor([max_distance]))))


# ---------------------------------------------------------------------------------- hooks -> components


def encodable_length(encoder: PositionalEncoder, length: int) -> int:
    """The longest sequence up to ``length`` whose positions the encoder can encode (``check_positions``)."""

    def fits(n: int) -> bool:
        try:
            encoder.check_positions(n)
            return True
        except PositionRangeError:
            return False

    if fits(length):
        return length
    low, high = 0, length  # fits(low) (nothing to encode), not fits(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def has_learned_parameters(encoder: PositionalEncoder) -> bool:
    """Whether the encoder has trainable parameters: its kernel at initialisation means nothing."""
    return any(True for _ in encoder.parameters())


def _pairs(x: Tensor) -> Tensor:
    """``[..., D]`` real -> ``[..., D/2]`` complex in RoFormer's layout (pair ``j`` = dims ``2j, 2j+1``)."""
    return torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))


def rotary_components(encoder: PositionalEncoder, distances: Tensor, positions: Tensor) -> dict[str, Tensor]:
    """``{"rotary": [n_h, n], "rotary_bound": [n_h, n]}`` at ``distances``; ``{}`` if ``rotate`` does nothing.

    ``positions`` ``[length]`` are what the hooks see in a forward pass of ``length`` tokens (so a
    length-dependent rotation is the one used there); the query is token ``length - 1``, the keys the tokens
    ``distances`` before it.
    """
    n_h, head_dim = encoder.shape.n_heads, encoder.shape.head_dim
    if head_dim % 2:
        return {}
    length = positions.shape[0]
    m = length - 1
    keys = m - distances
    ones = torch.ones(1, n_h, length, head_dim, dtype=torch.float64)
    q, k = encoder.rotate(ones, ones.clone(), positions)
    if torch.equal(q, ones) and torch.equal(k, ones):
        return {}
    score = torch.einsum("hd,hnd->hn", q[0, :, m], k[0, :, keys])  # [n_h, n]
    at_zero = (q[0, :, m] * k[0, :, m]).sum(-1, keepdim=True)  # [n_h, 1]
    unit = torch.zeros_like(ones)
    unit[..., 0::2] = 1.0  # each pair is the complex number 1: rotate() returns its factor itself
    qu, ku = encoder.rotate(unit, unit.clone(), positions)
    factors = _pairs(qu[0, :, m])[:, None, :] * _pairs(ku[0, :, keys]).conj()  # [n_h, n, D/2]
    at_zero_pairs = (_pairs(qu[0, :, m]) * _pairs(ku[0, :, m]).conj()).abs()  # [n_h, D/2]
    factors = factors / at_zero_pairs[:, None, :]  # a constant attention scale (YaRN's) is no decay
    return {"rotary": score / at_zero, "rotary_bound": pf.relative_bound(factors)}


def bias_component(encoder: PositionalEncoder, distances: Tensor, positions: Tensor) -> Tensor | None:
    """``score_bias`` ``[n_h, n]`` for the last token and the tokens ``distances`` before it, or None."""
    if not encoder.has_score_bias:
        return None
    m = positions.shape[0] - 1
    bias = encoder.score_bias(positions[m:], positions)  # [n_h, 1, length]
    return bias[:, 0, m - distances].to(torch.float64)


def absolute_component(encoder: PositionalEncoder, distances: Tensor, positions: Tensor) -> Tensor | None:
    """Cosine similarity ``[n]`` of ``embed(0)`` rows ``m`` and ``m - d``; None if ``embed`` adds nothing."""
    zeros = torch.zeros(1, positions.shape[0], encoder.shape.d_model, dtype=torch.float64)
    table = encoder.embed(zeros, positions)[0].to(torch.float64)  # [length, d_model]
    if not table.abs().sum() > 0:
        return None
    m = positions.shape[0] - 1
    rows = table[m - distances]  # [n, d]
    return torch.nn.functional.cosine_similarity(rows, table[m][None, :], dim=-1)


@dataclass
class Kernel:
    """One encoder's kernel: a tidy table and the notes (skipped or shortened parts) for the user."""

    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def kernel(
    encoder: PositionalEncoder,
    max_distance: int,
    *,
    name: str = "",
    source: str = UNTRAINED,
    scaling: str = "none",
    factor: float = math.nan,
    components: tuple[str, ...] = COMPONENTS,
) -> Kernel:
    """The kernel of ``encoder`` (name ``name``, from ``source``) at distances ``0..max_distance``.

    Returns a :class:`Kernel` whose table has :data:`COLUMNS`: one row per (head, distance, component);
    ``head`` is empty (NA) where the component is the same for every head.
    """
    notes: list[str] = []
    label = name or type(encoder).__name__
    length = encodable_length(encoder, max_distance + 1)
    if length == 0:
        return Kernel(pd.DataFrame(columns=COLUMNS), [f"{label} ({source}): cannot encode any position"])
    if length < max_distance + 1:
        notes.append(f"{label} ({source}): encodes only {length} positions, distances up to {length - 1}")
    distances = distance_grid(length - 1)
    parts: dict[str, Tensor] = {}
    encoder = encoder.eval()
    with torch.no_grad():  # evaluation: an encoder that chooses positions gives its evaluation positions
        positions = encoder.sample_positions(torch.arange(length))
        if {"rotary", "rotary_bound"} & set(components):
            parts.update(rotary_components(encoder, distances, positions))
        if "bias" in components and (bias := bias_component(encoder, distances, positions)) is not None:
            parts["bias"] = bias
        if "absolute" in components:
            absolute = absolute_component(encoder, distances, positions)
            if absolute is not None:
                parts["absolute"] = absolute
    frames = []
    for component in components:
        values = parts.get(component)
        if values is None:
            continue
        if values.dim() == 2 and bool((values == values[:1]).all()):
            values = values[0]  # every head the same: one curve
        heads = [pd.NA] if values.dim() == 1 else list(range(values.shape[0]))
        for head, row in zip(heads, values.reshape(len(heads), -1)):
            frames.append(pd.DataFrame({
                "encoder": label, "source": source, "scaling": scaling, "scaling_factor": float(factor),
                "train_length": encoder.train_length, "head": head, "distance": distances.numpy(),
                "component": component, "value": row.double().numpy(),
            }))  # fmt: skip
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    table["head"] = table["head"].astype("Int64")
    return Kernel(table[COLUMNS], notes)


# ----------------------------------------------------------------------------------------- RoPE scaling


def scaled(encoder: PositionalEncoder, scaling: RopeScaling) -> PositionalEncoder | None:
    """A copy of ``encoder`` under RoPE ``scaling``; None if it takes no RoPE scaling.

    A bad method, factor or option for this encoder raises :class:`~posenc.errors.ConfigError` (from the
    encoder).
    """
    if not encoder.takes_rope_scaling:
        return None
    encoder = copy.deepcopy(encoder)
    encoder.set_rope_scaling(scaling)
    return encoder


# ------------------------------------------------------------------------------------------ whole table


def encoder_kernels(
    encoder: PositionalEncoder,
    name: str,
    source: str,
    max_distance: int,
    scalings: list[RopeScaling],
    factor: float,
) -> Kernel:
    """``encoder``'s kernel plus, for each RoPE scaling other than ``none`` (at ``factor``), its scaled rotary
    curves."""
    result = kernel(encoder, max_distance, name=name, source=source)
    tables = [result.table]
    rotates = result.table["component"].isin(["rotary", "rotary_bound"]).any()
    for scaling in scalings:
        at = dataclasses.replace(scaling, factor=factor)
        variant = scaled(encoder, at) if scaling.method != arguments.NO_SCALING and rotates else None
        if variant is not None:
            rotary = kernel(
                variant,
                max_distance,
                name=name,
                source=source,
                scaling=scaling.label(),
                factor=factor,
                components=("rotary", "rotary_bound"),
            )
            tables.append(rotary.table)
    table = pd.concat(tables, ignore_index=True) if len(tables) > 1 else result.table
    return Kernel(table, result.notes)


def _why_no_kernel(encoder: PositionalEncoder) -> str:
    """Why an encoder's hooks give no kernel of distance alone (for the note)."""
    layers = {id(part): part for part in (encoder.for_layer(i) for i in range(4))}.values()
    if any(type(part).data_bias is not PositionalEncoder.data_bias for part in layers):
        return "its bias depends on the data (queries, keys, the layer's input), not on distance alone"
    if any(part is not encoder for part in layers):
        return "a per-layer pattern: its encoders' own kernels are the ones to draw (--encoders)"
    return "no positional signal in any hook"


def kernel_table(
    names: list[str],
    runs: list[Path],
    max_distance: int,
    scalings: list[RopeScaling],
    factor: float,
) -> Kernel:
    """Kernels of the untrained default encoders ``names`` and of the trained ``runs`` (their own encoder)."""
    from posenc.analysis.tables import describe_run
    from posenc.running.runs import load_run

    arguments.check_max_distance(max_distance)
    arguments.check_factor(factor)
    loaded = [(load_run(run), describe_run(run)) for run in runs]  # a bad run fails before any work
    trained = {cfg.encoder.name for (cfg, _, _), _ in loaded}
    tables: list[pd.DataFrame] = []
    notes: list[str] = []
    sources = [(name, build_encoder(name, DEFAULT_SHAPE, DEFAULT_TRAIN_LENGTH), UNTRAINED) for name in names]
    sources += [(cfg.encoder.name, model.encoder, source) for (cfg, _, model), source in loaded]
    for name, encoder, source in sources:
        if source == UNTRAINED and has_learned_parameters(encoder):
            if name not in trained:
                notes.append(f"{name}: learned parameters, needs a trained run (--runs)")
            continue
        result = encoder_kernels(encoder, name, source, max_distance, scalings, factor)
        if result.table.empty:
            where = "" if source == UNTRAINED else f" ({source})"
            notes.append(f"{name}{where}: {_why_no_kernel(encoder)}, nothing to plot")
        tables.append(result.table)
        notes += result.notes
    tables = [t for t in tables if not t.empty]
    if not tables:
        raise PosencError("no kernel to draw: every encoder asked for was skipped (" + "; ".join(notes) + ")")
    table = pd.concat(tables, ignore_index=True)
    table["head"] = table["head"].astype("Int64")
    return Kernel(table, notes)
