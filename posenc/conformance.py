"""The conformance check of a positional encoder: ``posenc encoders --check KEY`` and
:func:`posenc.testing.check_encoder`.

An encoder reaches the model only through the hooks of :class:`posenc.encoders.PositionalEncoder`
(``sample_positions``, ``embed``, ``for_layer``, ``rotate``, ``score_bias``, ``data_bias``, ``check_positions``,
``project_parameters``) and the fast paths it may declare (``distance_table``, ``score_mod``,
``linear_bias_slopes``, ``far_bias``, a ``data_bias`` that is a ``KeyBias`` or an ``OwnAttention``). This
module builds an encoder as the registry does (``Class(shape, train_length, **options)``) and checks it through
those hooks alone, so that it serves plugins as it serves the built-ins; one line per property:

* **shapes**: every hook's output at five head shapes (head dims 8, 4, 2, 9 and a single head), batches 1 and 3,
  lengths 1 to 37, the first five layers' parts (``for_layer``), and the model's logits; all finite (biases on
  causal entries). A shape the encoder refuses with a :class:`ConfigError` (a rotary encoder's odd head
  dimension) is a pass, said so; refusing the main shape is not.
* **causality**: changing the tokens after ``t`` leaves every output at ``<= t`` unchanged, in float32 and
  float64, at inference (where the fast paths run) and in a training step (its own paths), up to a length far
  past training; and it moves a later output (else the check saw nothing).
* **determinism**, bitwise: two builds from one seed have the same state dict and logits; the same input twice
  gives the same logits, whatever the global random state did in between; a training forward repeats under
  one seed; a model given another's state dict gives its logits (no tensor outside the state dict).
* **fast paths**, one line for each the encoder declares: the path against its reference (``score_bias``, or
  the dense ``data_bias``), as a bias and through the attention it feeds, at the initial parameters and at
  parameters moved as by training (then ``project_parameters``), in float64; ``score_bias`` and ``data_bias`` of
  a query block against the whole's rows count as paths too (query blocks are how attention asks for them).
* **lengths**: the model runs (finite logits) at 3x the training length, at 3x + 1 and at 48x + 3, or
  ``check_positions`` refuses the length with a :class:`PosencError` that has a message (a pass); it must accept
  the training length, and a length it accepts must run.
* **training**: 60 Adam steps on a tiny task (each token the previous plus one, fresh batches) take the held-out
  loss below half of ``log VOCAB``, which a model blind to the tokens cannot reach (its best, the uniform
  guess, is ``log VOCAB``); every trainable encoder parameter gets a finite nonzero gradient.

Tolerances, from the textbook bound on accumulated rounding (:func:`rounding`; Higham 2002, §3.1): ``n``
roundings of relative size ``eps`` move a result by at most ``n eps`` times the magnitudes involved.

* Causality: the outputs at ``<= t`` are the same operations on the same numbers whatever comes later, so they
  agree exactly unless something leaks; the tolerance allows the rounding of every sum of the forward pass
  (``length + d_model + d_mlp`` terms per layer, times the layers, at the logits' magnitude) in the dtype.
* Fast paths, in float64 (``eps`` 2.2e-16): two formulas of one bias entry differ by at most
  :data:`FORMULA_STEPS` roundings each of the bias's magnitude (:func:`bias_tolerance`); attention outputs by
  :func:`attention_tolerance` (scores' rounding, doubled by softmax, times ``|v|``, plus the weighted sum's). Both
  stay below ~1e-11, while any real difference (a distance off by one, a wrong slope or sign, a float32
  shortcut: ~1e-8 and up) stands orders of magnitude above.
* Determinism: none (bitwise); training: the threshold above.
"""

from __future__ import annotations

import copy
import math
import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.encoders import ENCODERS, AttentionShape, PositionalEncoder
from posenc.encoders.base import MAX_LENGTH, KeyBias, OwnAttention
from posenc.errors import ConfigError, PosencError
from posenc.nn import fused_bias
from posenc.nn.attention import CausalAttention
from posenc.nn.model import ModelConfig, Transformer
from posenc.options import check_options

TRAIN_LENGTH = 12  # the encoders are built for this training length
VOCAB = 16
MAIN_SHAPE = AttentionShape(d_model=32, n_heads=4)  # head dim 8; every property but shapes uses it
# head dims 8, 4 and 2 (small), 9 (odd: rotary encoders refuse it), and a single head of 8
SHAPES = (MAIN_SHAPE, AttentionShape(12, 3), AttentionShape(6, 3), AttentionShape(36, 4), AttentionShape(8, 1))
HOOK_CASES = ((1, 1), (3, 7), (1, TRAIN_LENGTH), (3, 3 * TRAIN_LENGTH + 1))  # (batch, length)
HOOK_LAYERS = 5  # layer parts checked: a schedule's pattern of four, and one more
MODEL_LAYERS = 3
# Far past training (48x, plus 3: odd), where the paths that start at long lengths run (xPos' relative path
# past 48x the training length, CoPE's band from 512 tokens, T5's far keys past its reach).
LONG = 48 * TRAIN_LENGTH + 3
PAST = (3 * TRAIN_LENGTH, 3 * TRAIN_LENGTH + 1, LONG)
CAUSAL_CASES = ((3, 7), (1, TRAIN_LENGTH), (3, 3 * TRAIN_LENGTH + 1), (1, LONG))
FAST_CASES = ((3, 1), (3, 7), (1, 3 * TRAIN_LENGTH + 1), (1, LONG))
QUERY_BLOCK = 5  # the check's attention works in blocks of 5 queries: several per sequence, a partial last one
#: Roundings a formula of one bias entry may take (two formulas of one bias differ by at most this many ulps
#: of its magnitude each; every built-in's take far fewer).
FORMULA_STEPS = 256
NAME_WIDTH = len("data_bias as OwnAttention")  # the longest property name: lines align as they come
TRAIN_STEPS, TRAIN_BATCH, HELD_OUT, LEARNING_RATE = 60, 8, 32, 1e-2


# -- reports -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One property: its name, whether it holds, and the numbers."""

    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"{'pass' if self.passed else 'FAIL'}  {self.name:<{NAME_WIDTH}}  {self.detail}"


@dataclass(frozen=True)
class Report:
    """The conformance of one encoder: its outcomes, one per property, and the time the check took."""

    key: str
    origin: str
    outcomes: tuple[Outcome, ...]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    def outcome(self, name: str) -> Outcome:
        return next(o for o in self.outcomes if o.name == name)

    def lines(self) -> list[str]:
        verdict = (
            "every property holds" if self.passed else f"{len(self.failed)} of {len(self.outcomes)} properties fail"
        )
        lines = [o.line() for o in self.outcomes]
        return [heading(self.key, self.origin), *lines, f"{verdict} ({self.seconds:.1f} s)"]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass
class Worst:
    """The largest error relative to its tolerance over many comparisons, and where it was."""

    error: float = 0.0
    tolerance: float = 0.0
    ratio: float = -1.0
    where: str = ""
    count: int = 0

    def add(self, error: float, tolerance: float, where: str) -> None:
        self.count += 1
        ratio = error / tolerance if tolerance > 0 else (0.0 if error == 0 else math.inf)
        if not ratio <= self.ratio or (ratio == self.ratio == 0 and tolerance < self.tolerance):  # NaN: the worst
            self.error, self.tolerance, self.ratio, self.where = error, tolerance, ratio, where

    @property
    def holds(self) -> bool:
        return self.ratio <= 1

    def text(self, what: str = "error") -> str:
        if self.error == 0:
            return f"{what} 0 in all {self.count} compared (tolerance >= {self.tolerance:.1e})"
        sign = "<=" if self.holds else ">"
        return (
            f"worst {what} {self.error:.1e} {sign} tolerance {self.tolerance:.1e} ({self.where}; {self.count} compared)"
        )


class Broken(Exception):
    """A property found not to hold: the message says how (raised inside a check, caught by :func:`_run`)."""


# -- what is checked -----------------------------------------------------------------------------------------


@dataclass
class Subject:
    """An encoder class and its options, built as the registry builds it: ``cls(shape, train_length, **options)``
    (the options checked against its keyword-only parameters, as ``posenc train`` checks them)."""

    key: str
    cls: type
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, encoder: str | type, options: dict[str, Any]) -> Subject:
        """A registry key (unknown: :class:`ConfigError` naming the known ones) or a class."""
        if isinstance(encoder, str):
            ENCODERS.check(encoder)
            return cls(encoder, ENCODERS[encoder], options)
        if not (isinstance(encoder, type) and issubclass(encoder, PositionalEncoder)):
            raise ConfigError(f"{encoder!r} is not a subclass of posenc.encoders.PositionalEncoder")
        return cls(getattr(encoder, "key", "") or encoder.__name__, encoder, options)

    @property
    def origin(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    def build(self, shape: AttentionShape = MAIN_SHAPE) -> PositionalEncoder:
        options = check_options("encoder", self.key, self.cls, self.options)
        return self.cls(shape, TRAIN_LENGTH, **options)

    def model(
        self,
        seed: int = 0,
        shape: AttentionShape = MAIN_SHAPE,
        n_layers: int = MODEL_LAYERS,
        dtype: torch.dtype = torch.float32,
    ) -> Transformer:
        """A model with a fresh encoder, initialised from ``seed`` (as training does: ``torch.manual_seed``),
        attending through :class:`CheckAttention`; in eval mode."""
        torch.manual_seed(seed)
        cfg = ModelConfig(
            vocab_size=VOCAB, d_model=shape.d_model, n_layers=n_layers, n_heads=shape.n_heads, d_mlp=2 * shape.d_model
        )
        return Transformer(cfg, self.build(shape), CheckAttention()).to(dtype).eval()


class CheckAttention(CausalAttention):
    """posenc's attention with small query blocks (several per sequence at small sizes), without FlexAttention:
    that is posenc's kernel and causal block mask around the encoder's ``score_mod``, which the score_mod line
    runs directly (eagerly: no compiler needed); at the models' sizes query blocks are the faster (see
    docs/performance.md, section "Measurements behind design choices"). Were FlexAttention asked for, it runs
    eagerly."""

    def __init__(self) -> None:
        super().__init__(query_block=QUERY_BLOCK, flex_min_length=MAX_LENGTH)

    def flex(self, q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor]) -> Tensor:
        return eager_flex(q, k, v, score_mod, self.block_mask(q.shape[-2], q.device))


def eager_flex(q: Tensor, k: Tensor, v: Tensor, score_mod: Callable[..., Tensor], block_mask: Any) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():  # "flex_attention called without torch.compile()": meant here
        warnings.simplefilter("ignore")
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)  # type: ignore[return-value]


# -- tolerances and comparisons ------------------------------------------------------------------------------


def rounding(dtype: torch.dtype, steps: float, magnitude: float) -> float:
    """The most ``steps`` roundings in ``dtype`` can move a result whose terms have ``magnitude``: ``steps * eps
    * magnitude`` (Higham 2002, §3.1), with ``magnitude`` at least 1 (absolute error near zero)."""
    return steps * torch.finfo(dtype).eps * max(1.0, magnitude)


def largest(t: Tensor) -> float:
    """The largest finite magnitude in ``t`` (0 if none)."""
    t = t.detach()
    return float(t.abs().nan_to_num(nan=0.0, posinf=0.0).max()) if t.numel() else 0.0


def difference(got: Tensor, want: Tensor, mask: Tensor | None = None) -> float:
    """``max |got - want|`` (over ``mask``), equal infinities agreeing, a NaN or a lone infinity ``inf``;
    different shapes raise :class:`Broken`."""
    if got.shape != want.shape:
        raise Broken(f"shape {tuple(got.shape)} where the reference has {tuple(want.shape)}")
    got, want = got.detach().double(), want.detach().double()
    if mask is not None:
        got, want = got[..., mask], want[..., mask]
    gap = (got - want).abs().masked_fill(got == want, 0.0)  # inf - inf is NaN; equal infinities agree
    return float(gap.nan_to_num(nan=math.inf).max()) if gap.numel() else 0.0


def causal_mask(s: int, device: torch.device | str = "cpu") -> Tensor:
    """``[s, s]``, True where key ``j <= i``."""
    return torch.ones(s, s, dtype=torch.bool, device=device).tril()


def dense_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """The reference: causal softmax attention with the whole bias ``[..., s, s]`` added to the scores."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    scores = scores.masked_fill(~causal_mask(q.shape[-2], q.device), float("-inf"))
    return scores.softmax(-1) @ v


def attention_tolerance(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> float:
    """Rounding of causal attention with a bias, by two routes (two roundings of every step, one each): a score
    sums ``width`` products of magnitude ``|q| |k| / sqrt(width)`` and the bias plus ``FORMULA_STEPS`` of its own;
    softmax weights move by at most twice the scores' error (in their sum), and the output, a weighted sum of
    ``s`` values, by that times ``|v|`` plus its own ``s`` roundings; log-sum-exp merges add a few."""
    width, s = q.shape[-1], q.shape[-2]
    score = rounding(torch.float64, 2 * width, largest(q) * largest(k) * width**0.5)
    score += rounding(torch.float64, 2 * FORMULA_STEPS, largest(bias) if bias is not None else 0.0)
    return 2 * score * max(1.0, largest(v)) + rounding(torch.float64, 2 * (s + 16), largest(v))


# -- running the properties ----------------------------------------------------------------------------------


def _run(name: str, check: Callable[[Subject], str], subject: Subject) -> Outcome:
    """One property: its line's text, or what broke it (a :class:`Broken`, or any exception, with where it rose
    outside torch)."""
    try:
        with torch.random.fork_rng(), _quiet():
            return Outcome(name, True, check(subject))
    except Broken as err:
        return Outcome(name, False, str(err))
    except Exception as err:  # noqa: BLE001 - the encoder's own code failing is a failed property, in one line
        return Outcome(name, False, f"raised {_first_line(err)}{_where(err)}")


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread meanwhile: the check's tensors are tiny, and handing them to threads costs more than
    the work (see docs/performance.md, section "Measurements behind design choices")."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextmanager
def _quiet() -> Iterator[None]:
    import logging

    logger = logging.getLogger("posenc")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the schedule's depth warning, flex falling back: the check says what matters
    try:
        yield
    finally:
        logger.setLevel(level)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _where(err: BaseException) -> str:
    inside = (os.path.dirname(torch.__file__), __file__)  # torch's frames and the check's own
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(inside)]
    if not frames:
        return ""
    return f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})"


def tokens(batch: int, length: int, seed: int) -> Tensor:
    return torch.randint(VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def accepts(encoder: PositionalEncoder, length: int) -> bool:
    """Whether ``check_positions`` accepts ``length`` (how it refuses is the lengths property's matter)."""
    try:
        encoder.check_positions(length)
    except Exception:  # noqa: BLE001 - any refusal is a refusal here
        return False
    return True


def refusal(encoder: PositionalEncoder, length: int) -> str | None:
    """``check_positions``' message if it refuses ``length``; None if it accepts. A refusal that is not a
    :class:`PosencError` with a message raises :class:`Broken`."""
    try:
        encoder.check_positions(length)
    except PosencError as err:
        if not str(err).strip():
            raise Broken(f"check_positions refuses length {length} with an empty message") from err
        return str(err)
    except Exception as err:
        raise Broken(
            f"check_positions({length}) raised {_first_line(err)}, not a PosencError "
            "(ConfigError or PositionRangeError) with a message"
        ) from err
    return None


def forward(model: Transformer, idx: Tensor, training: bool) -> Tensor:
    """The model's logits for ``idx``: at inference (eval mode, no autograd: the fast paths), or as in a training
    step (train mode, autograd on: the training paths), its random draws (randomized positions) made from one
    seed, so that two calls draw alike."""
    model.train(training)
    if not training:
        with torch.no_grad():
            return model(idx)
    torch.manual_seed(TRAINING_DRAWS)
    with torch.enable_grad():
        return model(idx).detach()


TRAINING_DRAWS = 20240917


# -- shapes --------------------------------------------------------------------------------------------------


def check_shapes(subject: Subject) -> str:
    """Every hook's output shape (and dtype where it keeps its input's) at :data:`SHAPES` x :data:`HOOK_CASES`
    x :data:`HOOK_LAYERS` layer parts, finite; the model's logits too. A shape refused by a ConfigError: said."""
    refused, built, outputs = [], 0, 0
    for shape in SHAPES:
        try:
            model = subject.model(shape=shape)
        except ConfigError as err:
            if shape == MAIN_SHAPE:
                raise Broken(f"refuses the main shape {_shape(shape)}: {err}") from err
            refused.append(f"head dim {shape.head_dim} ({err})")
            continue
        built += 1
        for batch, length in HOOK_CASES:
            if not accepts(model.encoder, length):
                continue  # the lengths property's matter
            where = f"{_shape(shape)}, batch {batch}, length {length}"
            with torch.no_grad():
                outputs += hook_shapes(model.encoder, shape, batch, length, where)
                expect("the model's logits", model(tokens(batch, length, length)), (batch, length, VOCAB), where)
    text = (
        f"{outputs} hook outputs as specified and finite, at {built} shapes x {len(HOOK_CASES)} (batch, "
        f"length) x {HOOK_LAYERS} layers; the model's logits too"
    )
    return text + (f"; refused with a ConfigError: {'; '.join(refused)}" if refused else "")


def _shape(shape: AttentionShape) -> str:
    return f"d_model {shape.d_model}, {shape.n_heads} heads of {shape.head_dim}"


def expect(
    name: str, t: Any, shape: tuple, where: str, dtype: torch.dtype | None = None, mask: Tensor | None = None
) -> int:
    """Raise :class:`Broken` unless ``t`` is a tensor of ``shape`` (and ``dtype``), finite (on ``mask``)."""
    if not isinstance(t, Tensor):
        raise Broken(f"{name} gives {type(t).__name__}, not a tensor ({where})")
    if tuple(t.shape) != tuple(shape):
        raise Broken(f"{name} gives shape {tuple(t.shape)}, want {tuple(shape)} ({where})")
    if dtype is not None and t.dtype != dtype:
        raise Broken(f"{name} gives {t.dtype} for {dtype} input, want {dtype} ({where})")
    values = t if mask is None else t[..., mask]
    if t.is_floating_point() and not torch.isfinite(values).all():
        raise Broken(f"{name} is not finite{' on causal entries' if mask is not None else ''} ({where})")
    return 1


def hook_shapes(encoder: PositionalEncoder, shape: AttentionShape, batch: int, length: int, where: str) -> int:
    """The model-wide hooks, then each layer part's (:func:`layer_shapes`); how many outputs were checked."""
    positions = encoder.sample_positions(torch.arange(length))
    expect("sample_positions", positions, (length,), where)
    x = torch.randn(batch, length, shape.d_model, generator=torch.Generator().manual_seed(length))
    count = 1 + expect("embed", encoder.embed(x, positions), x.shape, where, x.dtype)
    seen = set()
    for index in range(HOOK_LAYERS):
        layer = encoder.for_layer(index)
        if not isinstance(layer, PositionalEncoder):
            raise Broken(f"for_layer({index}) gives {type(layer).__name__}, not a PositionalEncoder")
        if id(layer) not in seen:  # a part shared by several layers: checked once
            seen.add(id(layer))
            count += layer_shapes(layer, x, positions, shape, f"layer {index}, {where}")
    return count


def layer_shapes(layer: PositionalEncoder, x: Tensor, positions: Tensor, shape: AttentionShape, where: str) -> int:
    """One layer part's hooks: ``rotate``, ``score_bias`` and ``data_bias`` over a query range ``lo..hi-1``
    against keys ``0..hi-1`` (``score_bias`` against all keys too), and the fast paths' tables and ``score_mod``
    (on the whole grid: it must stay in range above the diagonal too)."""
    batch, s = x.shape[:2]
    h, hd = shape.n_heads, shape.head_dim
    gen = torch.Generator().manual_seed(s + 1)
    lo = s // 3
    hi = max(lo + 1, 2 * s // 3 + 1)
    rows = causal_mask(hi)[lo:hi]  # [hi - lo, hi]
    q, k = (torch.randn(batch, h, s, hd, generator=gen) for _ in range(2))
    q2, k2 = layer.rotate(q, k, positions)
    wide = (batch, h, s, hd * layer.rotated_width)
    count = expect("rotate's queries", q2, wide, where, q.dtype)
    count += expect("rotate's keys", k2, wide, where, k.dtype)
    if layer.has_score_bias:  # keys up to the range's end (query blocks), and all keys (future ones unread)
        count += expect(
            "score_bias", layer.score_bias(positions[lo:hi], positions[:hi]), (h, hi - lo, hi), where, mask=rows
        )
        count += expect(
            "score_bias against every key",
            layer.score_bias(positions[lo:hi], positions),
            (h, hi - lo, s),
            where,
            mask=causal_mask(s)[lo:hi],
        )
    bias = layer.data_bias(x, q2, k2)
    if bias is not None:
        count += expect("data_bias by query range", bias(lo, hi), (batch, h, hi - lo, hi), where, mask=rows)
        if isinstance(bias, KeyBias):
            count += expect("KeyBias.key", bias.key, (batch, h, s), where)
    table = layer.distance_table(s)
    count += table is None or expect("distance_table", table, (h, s), where)
    slopes = layer.linear_bias_slopes()
    count += slopes is None or expect("linear_bias_slopes", slopes, (h,), where)
    far = layer.far_bias()
    if far is not None:
        if not (isinstance(far, tuple) and len(far) == 2 and isinstance(far[0], int) and far[0] >= 0):
            raise Broken(f"far_bias gives {far!r}, want (reach: int >= 0, bias [n_h]) ({where})")
        count += expect("far_bias's bias", far[1], (h,), where)
    score_mod = layer.score_mod(s)
    if score_mod is not None:
        grid = torch.arange(s)
        for head in range(h):
            got = score_mod(torch.zeros(s, s), torch.tensor(0), torch.tensor(head), grid[:, None], grid[None, :])
            count += expect(f"score_mod (head {head})", got, (s, s), where, mask=causal_mask(s))
    return count


# -- causality -----------------------------------------------------------------------------------------------


def check_causality(subject: Subject) -> str:
    """Tokens after ``t`` changed (``t`` = 0 and the middle): outputs at ``<= t`` unchanged within the rounding of
    a forward pass, in float32 and float64, at inference and in a training step (short lengths: its paths do not
    change with the length; inference's do); the change must move a later output by more than that."""
    worst, moved = Worst(), math.inf
    for dtype in (torch.float32, torch.float64):
        model = subject.model(dtype=dtype)
        for training in (False, True):
            for batch, length in CAUSAL_CASES:
                if not accepts(model.encoder, length) or (training and length == LONG):
                    continue
                for t in sorted({0, length // 2} if length < LONG else {length // 2}):
                    if t < length - 1:
                        moved = min(moved, compare_futures(model, batch, length, t, training, worst))
    if not worst.holds:
        raise Broken(f"later tokens change earlier outputs: {worst.text('change')}")
    if not moved > 1:
        raise Broken("changing later tokens moved no later output beyond rounding: the check saw nothing")
    return (
        f"later tokens change no earlier output: {worst.text('change')}; later outputs move by "
        f">= {moved:.0e}x the tolerance"
    )


def compare_futures(model: Transformer, batch: int, length: int, t: int, training: bool, worst: Worst) -> float:
    """Logits of random tokens and of the same with every token after ``t`` changed: the change of those at
    ``<= t`` into ``worst`` against the rounding of a forward pass (sums of ``length + d_model + d_mlp`` terms per
    layer, at the logits' magnitude); returns the change of the later ones in tolerances."""
    idx = tokens(batch, length, length)
    changed = idx.clone()
    changed[:, t + 1 :] = (idx[:, t + 1 :] + 1 + tokens(batch, length - t - 1, t) % (VOCAB - 1)) % VOCAB
    a, b = forward(model, idx, training), forward(model, changed, training)
    cfg = model.cfg
    tolerance = rounding(a.dtype, (length + cfg.d_model + cfg.d_mlp) * cfg.n_layers, largest(a))
    mode = "a training step" if training else "inference"
    worst.add(
        difference(a[:, : t + 1], b[:, : t + 1]),
        tolerance,
        f"{str(a.dtype)[6:]}, {mode}, length {length}, tokens after {t} changed",
    )
    return difference(a[:, t + 1 :], b[:, t + 1 :]) / tolerance


# -- determinism ---------------------------------------------------------------------------------------------


def check_determinism(subject: Subject) -> str:
    """Bitwise: two builds from one seed (same state dict, same logits); the same input twice (the global random
    state moved between); a training forward twice under one seed; a model loaded with the state dict."""
    idx = tokens(3, TRAIN_LENGTH - 3, 5)  # lengths past training: the lengths property's
    first, second = subject.model(seed=1), subject.model(seed=1)
    mine, theirs = first.state_dict(), second.state_dict()
    if list(mine) != list(theirs):
        keys = sorted(set(mine) ^ set(theirs))[:4]
        raise Broken(f"two builds from seed 1 have different state dict keys: {keys}")
    for key in mine:
        if (gap := difference(mine[key], theirs[key])) > 0:
            raise Broken(f"two builds from seed 1 differ in {key} by {gap:.1e}")
    logits = forward(first, idx, False)
    if (gap := difference(forward(second, idx, False), logits)) > 0:
        raise Broken(f"two builds from seed 1 give logits {gap:.1e} apart")
    torch.rand(97)  # the global random state moves: inference must not draw from it
    if (gap := difference(forward(first, idx, False), logits)) > 0:
        raise Broken(f"the same input twice gives logits {gap:.1e} apart (at inference)")
    if (gap := difference(forward(first, idx, True), forward(first, idx, True))) > 0:
        raise Broken(f"a training forward twice under one seed gives logits {gap:.1e} apart")
    loaded = subject.model(seed=2)
    loaded.load_state_dict(mine)
    if (gap := difference(forward(loaded, idx, False), logits)) > 0:
        raise Broken(f"a model loaded with the state dict gives logits {gap:.1e} apart (a tensor outside it?)")
    return (
        f"bitwise: two builds from one seed ({len(mine)} state dict tensors, logits), the same input twice "
        "(inference; a training forward under one seed), a model loaded with the state dict"
    )


# -- lengths -------------------------------------------------------------------------------------------------


def check_lengths(subject: Subject) -> str:
    """The training length accepted; each of :data:`PAST` run (finite logits) or refused by ``check_positions``
    with a message; a length it accepts must run, and refusing one length but accepting a longer one is odd."""
    model = subject.model()
    if (message := refusal(model.encoder, TRAIN_LENGTH)) is not None:
        raise Broken(f"check_positions refuses the training length {TRAIN_LENGTH}: {message}")
    ran, refused, said = [], [], ""
    for length in PAST:
        if (message := refusal(model.encoder, length)) is not None:
            refused.append(length)
            said = said or message
            continue
        if refused:
            raise Broken(f"check_positions refuses length {refused[-1]} but accepts {length}")
        try:
            logits = forward(model, tokens(1, length, length), False)
        except Exception as err:
            raise Broken(
                f"check_positions accepts length {length}, then the model raises {_first_line(err)}{_where(err)}"
            ) from err
        expect("the model's logits", logits, (1, length, VOCAB), f"length {length}")
        ran.append(length)
    parts = [f"runs at {', '.join(map(str, ran))} tokens (finite logits)"] if ran else []
    if refused:
        parts.append(f"check_positions refuses {', '.join(map(str, refused))} tokens: {said}")
    return f"trained at {TRAIN_LENGTH}: " + "; ".join(parts)


# -- training ------------------------------------------------------------------------------------------------


def counting(batch: int, gen: torch.Generator) -> Tensor:
    """The tiny task: sequences of ``TRAIN_LENGTH + 1`` tokens, each the previous one plus 1 (mod the vocabulary),
    from a random first token."""
    start = torch.randint(VOCAB, (batch, 1), generator=gen)
    return (start + torch.arange(TRAIN_LENGTH + 1)) % VOCAB


def next_token_loss(model: Transformer, sequences: Tensor) -> Tensor:
    logits = model(sequences[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), sequences[:, 1:].reshape(-1))


def check_training(subject: Subject) -> str:
    """Adam on fresh batches of :func:`counting`; ``project_parameters`` after each step, as training does. The
    held-out loss must fall below half of ``log VOCAB``: a model that ignores the tokens cannot (its best, the
    uniform guess, is ``log VOCAB``). Every trainable encoder parameter gets a finite nonzero gradient."""
    model = subject.model(seed=0)
    gen = torch.Generator().manual_seed(0)
    held_out = counting(HELD_OUT, gen)
    with torch.no_grad():
        before = float(next_token_loss(model.eval(), held_out))
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    for step in range(TRAIN_STEPS):
        loss = next_token_loss(model, counting(TRAIN_BATCH, gen))
        optimizer.zero_grad()
        loss.backward()
        if not math.isfinite(float(loss.detach())):
            raise Broken(f"the training loss is {float(loss.detach())} at step {step} (from {before:.2f})")
        if step == 0 and (dead := dead_parameters(model.encoder)):
            raise Broken(f"encoder parameters without a finite nonzero gradient: {', '.join(dead)}")
        optimizer.step()
        model.encoder.project_parameters()
    with torch.no_grad():
        after = float(next_token_loss(model.eval(), held_out))
    target = 0.5 * math.log(VOCAB)
    text = (
        f"held-out loss {before:.2f} -> {after:.2f} after {TRAIN_STEPS} Adam steps (must reach <= "
        f"{target:.2f}, half of log {VOCAB}: a model blind to the tokens stays >= {math.log(VOCAB):.2f})"
    )
    if not after <= target:
        raise Broken(text)
    trained = sum(p.requires_grad for p in model.encoder.parameters())
    return text + (
        f"; each of {trained} encoder parameter tensors got a finite nonzero gradient"
        if trained
        else "; no encoder parameters"
    )


def dead_parameters(encoder: PositionalEncoder) -> list[str]:
    """Trainable parameters whose gradient is missing, zero or not finite."""
    return [
        name
        for name, p in encoder.named_parameters()
        if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all() or not p.grad.abs().sum() > 0)
    ]


# -- fast paths ----------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One attention input for a layer part, in float64: rotated ``q``, ``k``, values, positions ``0..s-1``,
    the dense ``score_bias`` (if any) and the ``data_bias`` (if any)."""

    layer: PositionalEncoder
    label: str
    x: Tensor
    q: Tensor
    k: Tensor
    v: Tensor
    positions: Tensor
    bias: Tensor | None
    data: Any

    @property
    def length(self) -> int:
        return self.q.shape[-2]

    @cached_property
    def whole_data(self) -> Tensor | None:
        """The whole ``data_bias`` ``[b, n_h, s, s]``, or None."""
        return None if self.data is None else self.data(0, self.length)

    @cached_property
    def reference(self) -> Tensor:
        """The dense reference attention: ``score_bias`` and the whole ``data_bias`` added to the scores."""
        bias = self.bias
        if self.whole_data is not None:
            bias = self.whole_data if bias is None else bias + self.whole_data
        return dense_attention(self.q.detach(), self.k.detach(), self.v.detach(), bias)

    @cached_property
    def causal_biases(self) -> list[Tensor]:
        """The score bias and the whole data bias, where present, on causal entries (0 elsewhere: a bias may be
        anything above the diagonal, which attention masks)."""
        future = ~causal_mask(self.length)
        return [b.detach().masked_fill(future, 0.0) for b in (self.bias, self.whole_data) if b is not None]

    @cached_property
    def tolerance(self) -> float:
        """:func:`attention_tolerance` of this case."""
        biases = self.causal_biases
        return attention_tolerance(self.q, self.k, self.v, sum(biases) if biases else None)

    @cached_property
    def bias_tolerance(self) -> float:
        """:func:`bias_tolerance` of the score bias (or the whole data bias)."""
        return max(bias_tolerance(b) for b in self.causal_biases)


def fast_cases(subject: Subject, grad: bool = False) -> list[Case]:
    """Float64 cases for every distinct layer part of the first :data:`HOOK_LAYERS` layers, at
    :data:`FAST_CASES`, at the initial parameters and at parameters moved as by training (:func:`move_parameters`);
    with autograd on (``grad``: a training step's paths) or off."""
    torch.manual_seed(0)
    initial = subject.build()
    for index in range(HOOK_LAYERS):
        initial.for_layer(index)  # per-layer parts, built on first request: before the conversion to float64
    initial.double()
    moved = copy.deepcopy(initial)
    move_parameters(moved)
    cases = []
    for state, encoder in (("initial", initial), ("moved", moved)):
        parts: dict[int, tuple[int, PositionalEncoder]] = {}
        for index in range(HOOK_LAYERS):
            parts.setdefault(id(encoder.for_layer(index)), (index, encoder.for_layer(index)))
        classes = set()
        for index, layer in parts.values():
            for batch, length in FAST_CASES:
                if length == LONG and type(layer) in classes:
                    continue  # far past training once per class of part: its code, not its parameters, picks paths
                if accepts(encoder, length):
                    cases.append(make_case(layer, batch, length, f"layer {index}, {state} parameters", grad))
            classes.add(type(layer))
    return cases


def make_case(layer: PositionalEncoder, batch: int, length: int, label: str, grad: bool = False) -> Case:
    shape = layer.shape
    gen = torch.Generator().manual_seed(length)
    x = torch.randn(batch, length, shape.d_model, generator=gen, dtype=torch.float64)
    q, k, v = (
        torch.randn(batch, shape.n_heads, length, shape.head_dim, generator=gen, dtype=torch.float64).requires_grad_(
            grad
        )
        for _ in range(3)
    )
    positions = torch.arange(length)
    with torch.set_grad_enabled(grad):
        q2, k2 = layer.rotate(q, k, positions)
        bias = layer.score_bias(positions, positions) if layer.has_score_bias else None
        data = layer.data_bias(x, q2, k2)
    return Case(
        layer,
        f"{label}, batch {batch}, length {length}",
        x,
        q2,
        k2,
        v,
        positions,
        None if bias is None else bias.detach().double(),
        data,
    )


def move_parameters(encoder: PositionalEncoder) -> None:
    """Every parameter moved by noise of its own scale (mean magnitude, at least 0.5), then put back in its allowed
    range by ``project_parameters``: as after training, away from initialisations that hide a path (CoPE's zero
    table, PoPE's zero phase)."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in encoder.parameters():
            scale = max(float(p.abs().mean()), 0.5) if p.numel() else 0.0
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
    encoder.project_parameters()


def bias_tolerance(reference: Tensor) -> float:
    """Two formulas of one bias: at most :data:`FORMULA_STEPS` roundings each of its largest magnitude."""
    return rounding(torch.float64, 2 * FORMULA_STEPS, largest(reference))


def distances(s: int) -> Tensor:
    """``[s, s]``: ``i - j``, clamped at 0 above the diagonal."""
    grid = torch.arange(s)
    return (grid[:, None] - grid[None, :]).clamp(min=0)


def score_bias_blocks(cases: list[Case]) -> str | None:
    """``score_bias`` of queries ``start..end-1`` against keys ``0..end-1`` (as query blocks ask) is the whole's."""
    worst = Worst()
    for case in cases:
        if case.bias is None:
            continue
        s = case.length
        for start in range(0, s, QUERY_BLOCK):
            end = min(start + QUERY_BLOCK, s)
            part = case.layer.score_bias(case.positions[start:end], case.positions[:end])
            worst.add(
                difference(part, case.bias[:, start:end, :end], causal_mask(end)[start:end]),
                case.bias_tolerance,
                f"{case.label}, queries {start}..{end - 1}",
            )
    return None if not worst.count else verdict(worst, "blocks against the whole score_bias")


def verdict(worst: Worst, what: str) -> str:
    if not worst.holds:
        raise Broken(f"{what}: {worst.text()}")
    return f"{what}: {worst.text()}"


def distance_table(cases: list[Case]) -> str | None:
    """``distance_table[:, i - j]`` is ``score_bias`` on causal entries; attention through its strided view
    (fused SDPA) and the query blocks that gather from it give the dense reference's output."""
    bias_worst, out_worst = Worst(), Worst()
    for case in cases:
        table = case.layer.distance_table(case.length)
        if table is None:
            continue
        if case.bias is None:
            raise Broken(f"distance_table given without a score_bias (has_score_bias False; {case.label})")
        expect("distance_table", table, (case.layer.shape.n_heads, case.length), case.label)
        bias_worst.add(
            difference(table[:, distances(case.length)], case.bias, causal_mask(case.length)),
            case.bias_tolerance,
            case.label,
        )
        want, tol = case.reference, case.tolerance
        with torch.no_grad():
            fused = fused_bias.distance_table_attention(case.q, case.k, case.v, table.detach(), QUERY_BLOCK)
            blocked = CheckAttention().blocked(case.q, case.k, case.v, case.positions, case.layer)
        out_worst.add(difference(fused, want), tol, f"fused, {case.label}")
        out_worst.add(difference(blocked, want), tol, f"query blocks, {case.label}")
    if not bias_worst.count:
        return None
    return "; ".join((verdict(bias_worst, "table against score_bias"), verdict(out_worst, "attention")))


def score_mod(cases: list[Case]) -> str | None:
    """The ``score_mod`` on every causal entry is ``score_bias``; FlexAttention with it (eager, the backend's
    capture and block mask) gives the dense reference's output."""
    bias_worst, out_worst = Worst(), Worst()
    for case in cases:
        s, layer = case.length, case.layer
        mod = layer.score_mod(s)
        if mod is None:
            continue
        if case.bias is None:
            raise Broken(f"score_mod given without a score_bias (has_score_bias False; {case.label})")
        grid = torch.arange(s)
        for head in range(layer.shape.n_heads):
            got = mod(
                torch.zeros(s, s, dtype=torch.float64),
                torch.tensor(0),
                torch.tensor(head),
                grid[:, None],
                grid[None, :],
            )
            bias_worst.add(
                difference(got, case.bias[head], causal_mask(s)), case.bias_tolerance, f"head {head}, {case.label}"
            )
        if s < 3 * TRAIN_LENGTH:
            # eager FlexAttention traces its score_mod at every call (slow; see docs/performance.md, section
            # "Measurements behind design choices"): past training only
            continue
        with torch.no_grad():
            flex_mod = CausalAttention.score_mod(layer, case.q)
            out = eager_flex(case.q, case.k, case.v, flex_mod, CausalAttention().block_mask(s, case.q.device))
        out_worst.add(difference(out, case.reference), case.tolerance, case.label)
    if not bias_worst.count:
        return None
    return "; ".join((verdict(bias_worst, "score_mod against score_bias"), verdict(out_worst, "FlexAttention")))


def linear_bias(cases: list[Case]) -> str | None:
    """``score_bias`` is ``-slope_h (i - j)`` on causal entries; fused SDPA carrying it (two more dimensions)
    gives the dense reference's output."""
    bias_worst, out_worst = Worst(), Worst()
    for case in cases:
        slopes = case.layer.linear_bias_slopes()
        if slopes is None:
            continue
        if case.bias is None:
            raise Broken(f"linear_bias_slopes given without a score_bias ({case.label})")
        linear = -slopes.double()[:, None, None] * distances(case.length).double()
        bias_worst.add(difference(linear, case.bias, causal_mask(case.length)), case.bias_tolerance, case.label)
        with torch.no_grad():
            out = fused_bias.linear_bias_attention(case.q, case.k, case.v, case.positions, slopes.detach())
        out_worst.add(difference(out, case.reference), case.tolerance, case.label)
    if not bias_worst.count:
        return None
    return "; ".join((verdict(bias_worst, "-slope (i - j) against score_bias"), verdict(out_worst, "fused SDPA")))


def far_bias(cases: list[Case]) -> str | None:
    """``score_bias`` at every distance ``>= reach`` is the constant ``bias[h]``; attention as one fused causal
    call for those keys plus query blocks for the band gives the dense reference's output (at lengths past
    ``reach``: one is added past the longest if none is)."""
    bias_worst, out_worst, reach = Worst(), Worst(), 0
    for case in cases:
        far = case.layer.far_bias()
        if far is None or case.bias is None:
            continue
        reach, constant = far
        s = case.length
        beyond = (torch.arange(s)[:, None] - torch.arange(s)[None, :]) >= reach
        want = constant.detach().double()[:, None, None].expand(-1, s, s)
        bias_worst.add(difference(case.bias, want, beyond), case.bias_tolerance, case.label)
        if s > reach:
            with torch.no_grad():
                out = fused_bias.far_constant_attention(
                    case.q, case.k, case.v, case.layer, reach, constant.detach(), QUERY_BLOCK
                )
            out_worst.add(difference(out, case.reference), case.tolerance, case.label)
    if not bias_worst.count:
        return None
    if not out_worst.count:
        case = next(c for c in cases if c.layer.far_bias() is not None)
        return far_bias([make_case(case.layer, 1, reach + QUERY_BLOCK + 2, "past its reach")])
    return "; ".join(
        (
            verdict(bias_worst, f"score_bias from distance {reach} on against the constant"),
            verdict(out_worst, "fused far keys + near band"),
        )
    )


def data_bias_blocks(cases: list[Case]) -> str | None:
    """A ``data_bias`` by query range is the whole's rows (on causal entries); attention by query blocks with it
    gives the dense reference's output."""
    bias_worst, out_worst = Worst(), Worst()
    for case in cases:
        if case.data is None:
            continue
        s = case.length
        whole = case.whole_data
        expect(
            "data_bias(0, s)", whole, (case.q.shape[0], case.layer.shape.n_heads, s, s), case.label, mask=causal_mask(s)
        )
        for start in range(0, s, QUERY_BLOCK):
            end = min(start + QUERY_BLOCK, s)
            part = difference(case.data(start, end), whole[..., start:end, :end], causal_mask(end)[start:end])
            bias_worst.add(part, case.bias_tolerance, f"{case.label}, queries {start}..{end - 1}")
        with torch.no_grad():
            out = CheckAttention().data_blocked(case.q, case.k, case.v, case.data)
        out_worst.add(difference(out, case.reference), case.tolerance, case.label)
    if not bias_worst.count:
        return None
    return "; ".join((verdict(bias_worst, "blocks against the whole data_bias"), verdict(out_worst, "attention")))


def key_bias(cases: list[Case]) -> str | None:
    """A ``KeyBias``: fused SDPA with its key part (two more dimensions) gives the dense reference's output (the
    whole bias differs from the key part by a term of the query alone, which softmax ignores)."""
    worst = Worst()
    for case in cases:
        if isinstance(case.data, KeyBias):
            with torch.no_grad():
                out = fused_bias.key_bias_attention(case.q, case.k, case.v, case.data.key)
            worst.add(difference(out, case.reference), case.tolerance, case.label)
    return None if not worst.count else verdict(worst, "fused SDPA with the key part against the dense bias")


def own_attention(cases: list[Case], training: list[Case]) -> str | None:
    """An ``OwnAttention``: its ``attend`` (at inference, and with autograd on as in a training step) gives the
    dense reference's output, or None (then query blocks add the dense bias: the data_bias line)."""
    worst, declined = Worst(), 0
    for case, grad in [(c, False) for c in cases] + [(c, True) for c in training]:
        if not isinstance(case.data, OwnAttention):
            continue
        with torch.set_grad_enabled(grad):
            out = case.data.attend(case.v, 0.0)
        if out is None:
            declined += 1
            continue
        worst.add(
            difference(out, case.reference),
            case.tolerance,
            f"{'a training step' if grad else 'inference'}, {case.label}",
        )
    if not worst.count and not declined:
        return None
    return verdict(worst, "attend against the dense bias") + f"; {declined} calls declined (query blocks)"


FAST_PATHS: tuple[tuple[str, Callable[..., str | None]], ...] = (
    ("score_bias by query block", score_bias_blocks),
    ("distance_table", distance_table),
    ("score_mod", score_mod),
    ("linear_bias_slopes", linear_bias),
    ("far_bias", far_bias),
    ("data_bias by query block", data_bias_blocks),
    ("data_bias as KeyBias", key_bias),
)


def fast_path_outcomes(subject: Subject) -> list[Outcome]:
    """One outcome per fast path the encoder declares (``score_bias`` and ``data_bias`` by query block count),
    or one saying it declares none."""
    try:
        with torch.random.fork_rng(), _quiet():
            cases = fast_cases(subject)
    except Exception as err:  # noqa: BLE001 - the encoder's own code, said in one line
        return [Outcome("fast paths", False, f"raised {_first_line(err)}{_where(err)}")]
    outcomes = []
    for name, path in FAST_PATHS:
        outcome = _run(name, lambda _, path=path: path(cases) or "", subject)
        if outcome.detail or not outcome.passed:
            outcomes.append(outcome)
    if any(isinstance(c.data, OwnAttention) for c in cases):
        outcomes.append(
            _run("data_bias as OwnAttention", lambda s: own_attention(cases, fast_cases(s, grad=True)) or "", subject)
        )
    return outcomes or [Outcome("fast paths", True, "none declared (score_bias, data_bias, tables, score_mod)")]


PROPERTIES: tuple[tuple[str, Callable[[Subject], Any]], ...] = (
    ("shapes", check_shapes),
    ("causality", check_causality),
    ("determinism", check_determinism),
    ("fast paths", fast_path_outcomes),
    ("lengths", check_lengths),
    ("training", check_training),
)


def check(
    encoder: str | type, options: dict[str, Any] | None = None, on_outcome: Callable[[Outcome], None] | None = None
) -> Report:
    """Every property of ``encoder`` (a registry key or a :class:`PositionalEncoder` subclass) built with
    ``options``; ``on_outcome`` is called with each outcome as it comes. An unknown key, a class that is no
    encoder, options it does not take or a build that fails at the main shape raise :class:`ConfigError` before
    any check (one ``error:`` line on the command line)."""
    subject = Subject.of(encoder, dict(options or {}))
    try:
        subject.build()  # bad options: one error line, not a table of failures
    except PosencError:
        raise
    except Exception:  # noqa: BLE001, S110 - the encoder's own code failing: each property says where
        pass
    start = time.perf_counter()
    outcomes: list[Outcome] = []
    with one_thread():
        for name, prop in PROPERTIES:
            found = fast_path_outcomes(subject) if prop is fast_path_outcomes else [_run(name, prop, subject)]
            for outcome in found:
                outcomes.append(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
    return Report(subject.key, subject.origin, tuple(outcomes), time.perf_counter() - start)


def print_check(key: str) -> int:
    """``posenc encoders --check KEY``: a heading, one line per property as it is checked, a verdict; the exit
    status, 0 if every property holds, else 1. Problems before any check (an unknown key) raise
    :class:`PosencError`."""
    subject = Subject.of(key, {})
    print(heading(subject.key, subject.origin), flush=True)
    report = check(key, on_outcome=lambda outcome: print(outcome.line(), flush=True))
    print(report.lines()[-1])
    return 0 if report.passed else 1


def heading(key: str, origin: str) -> str:
    return f"encoder '{key}' ({origin}), built for training length {TRAIN_LENGTH}:"
