"""How a published claim about length extrapolation is stated, and the one function that checks any of them
(the claims themselves are in :mod:`posenc.analysis.literature`).

A :class:`Claim` names its source, the task and metric it is checked on, the evaluation lengths it is checked
over (:class:`Window`\\ s, multiples of the training length) and what it expects: :class:`Comparison`
(one side beats another) or :class:`Threshold` (one side reaches a value). :func:`check` asks an
:class:`Evidence` (implemented by the caller, e.g. :class:`posenc.analysis.evidence.TableEvidence`; nothing here reads
files) for per-seed per-sequence values and returns a :class:`Verdict`, one of :data:`OUTCOMES`. Every rule
below is applied by :func:`check` alone:

* **Windows.** A window is a set of evaluation lengths: ``Window(1, 2)`` is every length ``ℓ`` with
  ``L < ℓ ≤ 2L`` ("(1×, 2×]"), ``Window.at(4)`` (or the integer ``4`` in a claim) exactly ``ℓ = 4L``. Each
  side's values at the lengths of a window are pooled per seed in a fixed order — by evaluation length, then
  by sequence — so that a paired difference still pairs sequence ``i`` of length ``ℓ`` with sequence ``i``
  of length ``ℓ`` (the same sequence for every run). A comparison pools only the lengths both sides were
  evaluated at, each cut to the sequences both sides have there (the common prefix), and its line says which
  ("36–64, 8 lengths"). Every length of a window then weighs by its number of sequences (equally when every
  length has as many). Length-to-length differences widen the interval (they count as sequence spread):
  pooling is conservative.
* **Chance.** A comparison where *neither* side is above chance — the lower bound of each side's own interval
  (:func:`posenc.analysis.stats.group_estimate` over the same pooled values, at the same level) not above
  :meth:`Evidence.chance` — is *not testable* (at chance): two encoders that both fail say nothing about
  which extrapolates better. Exact match's chance is 0 (a uniform guess of a whole answer), so "above
  chance" means a lower bound above 0; token accuracy's is 1/(answer alphabet); loss has none (NaN: the rule
  never applies). Thresholds are not subject to it: a side at chance is evidence against "reaches 0.95".
* **Multiple comparisons.** A claim with ``k`` expectation×window checks (:attr:`Claim.comparisons`) puts
  every interval at level ``1 − 0.05/k`` (Bonferroni; Dunn 1961, JASA 56:52), so the chance that any of its
  "holds" or "contradicted" lines is wrong — and so that "agrees" or "differs" is wrong — is at most 5%
  (up to the intervals' own approximation). ``k`` counts every check, testable or not, fixed before the data
  is seen. Each verdict says it: "Bonferroni over 16 comparisons: 99.7% intervals".
* **Mean ranks.** A claim whose expectations are :class:`MeanRank`\\ s is about an aggregate over several
  tasks (:attr:`Claim.tasks`), as Kazemnejad et al. state theirs: on each task the claim's sides are ranked by
  the metric, and a side's mean reciprocal rank is the mean over tasks of 1/(its rank). The ranks rest on
  every pairwise interval of the sides on every task (the Bonferroni family: pairs × tasks × windows); a
  pair is ordered where its interval lies wholly on one side of 0 and one of the two is above chance, and
  free otherwise. A link's interval is the least and the greatest difference of mean reciprocal rank over
  every ranking that keeps the ordered pairs (:func:`rank_bounds`): it holds (is contradicted) when every
  such ranking puts it the expected (the other) way, so that it is wrong only when some pairwise interval
  misses. A link whose two sides are at chance on every task is not testable. The point is the ranking of
  the sides' pooled means, ties sharing their reciprocal ranks (:func:`reciprocal_ranks`).
* **Seeds.** A claim is about encoders, not about one trained model: a check whose sides have one seed each
  (:data:`MIN_SEEDS`) stays *open* whatever its interval, since the spread between seeds, the larger source of
  uncertainty here, is unknown from one seed (:func:`posenc.analysis.stats.paired_difference` then counts the
  sequences alone); a pair of a mean-rank claim is not ordered from one seed.
* **Outcome.** Each check *holds* (interval wholly on the expected side), is *contradicted* (wholly on the
  other), is *open* (neither), or is *not testable* (at chance; no length in the window evaluated for both
  sides). The claim is judged on its testable checks: **differs** if any is contradicted, **agrees** if all
  hold, **inconclusive** otherwise; **not testable** if none is testable, or if the claim says so itself
  (``untestable_reason``), or a side has no runs, did not learn the task in distribution (except for a claim
  about the training length itself: there not learning is the evidence), or was not evaluated in a window.
  A verdict lists how many checks it was judged on when some were not testable.

Perplexity is ``exp(mean loss)``, monotone in the loss, so "lower perplexity" is checked as "lower loss" on
per-sequence losses (the evidence is asked for ``"loss"``). ``"loss_change"`` is a sequence's loss at a length
minus the loss of the same text read at the training length (lm, where evaluation windows nest:
:meth:`posenc.analysis.evidence.TableEvidence.loss_change`): how much a longer context costs, so that a claim about
extrapolation is not decided by how well each model learned at ``L`` (issue 28). Lower is better; it has no
chance level.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from posenc.analysis.stats import Estimate, group_estimate, paired_difference, sequence_block
from posenc.task_facts import has_mastery_criterion

OUTCOMES = ("agrees", "differs", "inconclusive", "not testable")
HIGHER_BETTER = ("exact_match", "token_accuracy")
LOWER_BETTER = ("loss", "perplexity", "loss_change")
FAMILY_ERROR = 0.05  # the family-wise error rate a claim's Bonferroni-adjusted intervals keep to


DEFAULT_MIXER = "attention"  # posenc.nn.mixers.DEFAULT_MIXER (not imported: this module needs no torch)


def mixer_of(config: object) -> str:
    """The ``model.mixer`` of a run's configuration (the JSON of :class:`posenc.analysis.store.RunIdentity`, which
    leaves the key out at its default): attention where it says nothing."""
    try:
        model = json.loads(config).get("model") if isinstance(config, str) and config else None
    except (ValueError, AttributeError):
        model = None
    mixer = model.get("mixer") if isinstance(model, dict) else None
    return mixer if isinstance(mixer, str) else DEFAULT_MIXER


@dataclass(frozen=True)
class Side:
    """One arm of a comparison: an encoder, with a RoPE scaling method applied at evaluation ("none": as
    trained), in a model whose sequence mixer is ``mixer`` (``model.mixer``; "attention": every run recorded
    before mixers existed). ``Side("nope", mixer="base_conv")`` is Zoology's gated convolution, which takes no
    positional encoding."""

    encoder: str
    scaling: str = "none"
    mixer: str = DEFAULT_MIXER

    def label(self) -> str:
        """``"rope"``, ``"rope +yarn"``, ``"base_conv"`` (a mixer other than attention, with NoPE) or
        ``"alibi base_conv"``."""
        name = self.encoder
        if self.mixer != DEFAULT_MIXER:
            name = self.mixer if self.encoder == "nope" else f"{self.encoder} {self.mixer}"
        return name if self.scaling == "none" else f"{name} +{self.scaling}"


def _times(factor: float) -> str:
    """``2`` -> ``"2×"``, ``1.5`` -> ``"1.5×"``."""
    return f"{factor:g}×"


@dataclass(frozen=True)
class Window:
    """Evaluation lengths ``ℓ`` with ``low·L < ℓ ≤ high·L`` for training length ``L``: ``Window(1, 2)`` is
    "(1×, 2×]". ``low == high`` (:meth:`at`) is the one length ``ℓ = round(high·L)``."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high or self.high <= 0:
            raise ValueError(f"window ({self.low}×, {self.high}×] is empty or negative")

    @classmethod
    def at(cls, factor: float) -> Window:
        """Exactly ``factor`` times the training length."""
        return cls(factor, factor)

    @property
    def exact(self) -> bool:
        """One length, not a range."""
        return self.low == self.high

    def contains(self, length: int, train_length: int) -> bool:
        """Whether evaluation length ``length`` lies in the window for training length ``train_length``."""
        if self.exact:
            return length == round(self.high * train_length)
        return self.low * train_length < length <= self.high * train_length

    def label(self) -> str:
        """``"2×"`` or ``"(1×, 2×]"``."""
        return _times(self.high) if self.exact else f"({_times(self.low)}, {_times(self.high)}]"

    def where(self) -> str:
        """``"at 2×"`` or ``"in (1×, 2×]"``, for sentences."""
        return f"at {self.label()}" if self.exact else f"in {self.label()}"


@dataclass(frozen=True)
class Comparison:
    """Expectation: ``better`` beats ``worse`` on the claim's metric in each of the claim's windows."""

    better: Side
    worse: Side


@dataclass(frozen=True)
class Threshold:
    """Expectation: ``side`` is at least ``value`` (higher-better metric) or at most ``value`` (lower-better;
    for perplexity, ``value`` is a perplexity and is compared with the loss as ``log(value)``). A side that
    did not learn its task within its budget never *holds* a threshold (at best it is open)."""

    side: Side
    value: float


@dataclass(frozen=True)
class MeanRank:
    """Expectation: across the claim's tasks, ``better`` has a higher mean reciprocal rank than ``worse``
    among the claim's sides, each task ranking them by the metric (see the module docstring)."""

    better: Side
    worse: Side


MAX_RANKED = 8  # sides a rank claim may rank: its bounds run over every ordering of them (8! = 40320)


@dataclass(frozen=True)
class Reported:
    """A number the source reports for one side, on the claim's metric, in its own setting (see
    :attr:`Claim.reported_where`), so that a report can set it beside posenc's (:func:`paper_vs_posenc`)."""

    side: Side
    value: float


@dataclass(frozen=True)
class Claim:
    """One published claim.

    Attributes:
        key: short id, e.g. ``"kazemnejad2023_copy"``.
        source: citation; up to its first comma it names the work in :meth:`Verdict.markdown`.
        statement: the claim in one sentence.
        task, metric: what it is checked on; metric one of :data:`HIGHER_BETTER` or :data:`LOWER_BETTER`.
        windows: the evaluation lengths, each a :class:`Window` or an integer factor (``4`` is
            ``Window.at(4)``; stored as windows), e.g. ``(Window(1, 2), Window(2, 4))``. The first is the
            primary one, where :attr:`reported` numbers are compared.
        expect: what must hold in every window for the claim to agree.
        caveat: said with the verdict, e.g. why the task favours one side.
        untestable_reason: non-empty: the claim is never checked, the verdict is "not testable" with it.
        reported: the source's own numbers for some sides (empty: none recorded).
        reported_where: what those numbers are and where they come from (needed when ``reported`` is set).
        more_tasks: the tasks past ``task`` that a claim of :class:`MeanRank`\\ s ranks its sides on (a
            report lists the claim only where every one of :attr:`tasks` was run).
    """

    key: str
    source: str
    statement: str
    task: str
    metric: str
    windows: tuple[Window | int, ...]
    expect: tuple[Comparison | Threshold, ...]
    caveat: str = ""
    untestable_reason: str = ""
    reported: tuple[Reported, ...] = ()
    reported_where: str = ""
    more_tasks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.metric not in HIGHER_BETTER + LOWER_BETTER:
            raise ValueError(f"claim {self.key}: unknown metric {self.metric!r}")
        windows = tuple(w if isinstance(w, Window) else Window.at(w) for w in self.windows)
        if not windows or not self.expect:
            raise ValueError(f"claim {self.key}: needs at least one window and one expectation")
        if self.reported and not self.reported_where:
            raise ValueError(f"claim {self.key}: reported numbers need reported_where")
        ranked = [isinstance(e, MeanRank) for e in self.expect]
        if any(ranked) and not all(ranked):
            raise ValueError(f"claim {self.key}: mean ranks cannot be mixed with other expectations")
        if self.more_tasks and not all(ranked):
            raise ValueError(f"claim {self.key}: only a claim of mean ranks spans several tasks")
        if all(ranked) and len(self.sides()) > MAX_RANKED:
            raise ValueError(f"claim {self.key}: ranks at most {MAX_RANKED} sides, not {len(self.sides())}")
        object.__setattr__(self, "windows", windows)

    @property
    def tasks(self) -> tuple[str, ...]:
        """Every task the claim is checked on: ``task``, then :attr:`more_tasks`."""
        return (self.task, *self.more_tasks)

    @property
    def ranked(self) -> bool:
        """A claim about mean ranks across :attr:`tasks` (its expectations are :class:`MeanRank`\\ s)."""
        return isinstance(self.expect[0], MeanRank)

    @property
    def in_distribution(self) -> bool:
        """A claim about the training length itself (e.g. "attention solves MQAR"): whether a side learned
        is what it asks, so a side that did not learn is evidence, not a reason to withhold a verdict."""
        return all(w.exact and w.high == 1 for w in self.windows)

    @property
    def comparisons(self) -> int:
        """``k``, the Bonferroni family: the expectation×window checks, or for a claim of mean ranks the
        pairwise intervals its ranks rest on (pairs of sides × tasks × windows)."""
        if self.ranked:
            n = len(self.sides())
            return n * (n - 1) // 2 * len(self.tasks) * len(self.windows)
        return len(self.expect) * len(self.windows)

    @property
    def level(self) -> float:
        """The level of every interval of this claim: ``1 − 0.05/k`` (see the module docstring)."""
        return 1 - FAMILY_ERROR / self.comparisons

    def sides(self) -> tuple[Side, ...]:
        """Every side the expectations name, each once, in order of first mention."""
        named = [s for e in self.expect for s in ((e.side,) if isinstance(e, Threshold) else (e.better, e.worse))]
        return tuple(dict.fromkeys(named))


class Evidence(Protocol):
    """What :func:`check` needs to know about trained and evaluated runs; the caller implements it."""

    def learned(self, task: str, side: Side) -> bool | None:
        """Whether this side's runs count as learned: every seed reached the in-distribution criterion, or the
        quorum of :func:`posenc.analysis.mastery.learned_by_rule` did (its values past the training length are
        then those seeds' only); None: no runs."""

    def train_length(self, task: str, side: Side) -> int | None:
        """The side's training length ``L`` (None: no runs, or not one length)."""

    def lengths(self, task: str, side: Side, metric: str) -> Sequence[int]:
        """The evaluation lengths at which the side has values of ``metric``, ascending."""

    def at_length(self, task: str, side: Side, length: int, metric: str) -> Mapping[Hashable, np.ndarray] | None:
        """Per seed (keyed by anything that names the same seed at every length), the per-sequence values at
        evaluation length ``length`` in sequence order (sequence i identical across sides); None: not
        evaluated."""

    def chance(self, task: str, metric: str) -> float:
        """The metric's chance level on the task: 0 for exact match, 1/(answer alphabet) for token accuracy,
        NaN where there is none (loss; a task without a fixed alphabet)."""

    def same_runs(self, task: str, a: Side, b: Side) -> bool:
        """Whether both sides are the same trained runs, seed for seed (one checkpoint evaluated two ways,
        e.g. under two RoPE scaling methods), keyed alike in :meth:`at_length`: a comparison then pairs them
        by seed as well. Optional: an evidence without it is never paired by seed."""


@dataclass(frozen=True)
class Check:
    """One expectation in one window: ``state`` 1 holds, -1 contradicted, 0 open, None not testable.

    Attributes:
        expectation, window: what was checked where.
        state: as above.
        line: the detail line for the verdict.
        lengths: the evaluation lengths pooled (empty: none).
        estimate: the paired difference (oriented so positive = holds) or the side's value; None when
            nothing was estimated.
    """

    expectation: Comparison | Threshold | MeanRank
    window: Window
    state: int | None
    line: str
    lengths: tuple[int, ...] = ()
    estimate: Estimate | None = None


@dataclass(frozen=True)
class Verdict:
    """The outcome (one of :data:`OUTCOMES`) of checking ``claim``; a line per expectation and window.

    ``checks`` is empty when the claim was not checked at all (``details`` then says why)."""

    claim: Claim
    outcome: str
    details: tuple[str, ...]
    checks: tuple[Check, ...] = field(default=())

    @property
    def rule(self) -> str:
        """How the checks were judged: ``"Bonferroni over 16 comparisons: 99.7% intervals; judged on the 5 of
        16 testable"``; empty when nothing was checked."""
        if not self.checks:
            return ""
        k, n = self.claim.comparisons, len(self.checks)
        level = 100 * (1 - FAMILY_ERROR / k)
        if self.claim.ranked:
            text = f"Bonferroni over the {k} pairwise intervals the ranks rest on: {level:.3g}% intervals"
        else:
            text = (
                f"Bonferroni over {k} comparisons: {level:.3g}% intervals"
                if k > 1
                else f"one comparison: {level:.3g}% interval"
            )
        testable = sum(c.state is not None for c in self.checks)
        return text if testable == n else f"{text}; judged on the {testable} of {n} testable"

    def markdown(self) -> str:
        """A Markdown bullet: ``- **agrees** — <source to 1st comma> (<tasks>): <statement>. <details>. <rule>.
        <reported>. <caveat>.``"""
        caveat = self.claim.caveat.rstrip(".")
        parts = [
            self.claim.statement.rstrip("."),
            "; ".join(self.details),
            self.rule,
            _reported_text(self.claim),
            caveat[:1].upper() + caveat[1:],
        ]
        text = ". ".join(p for p in parts if p) + "."
        tasks = ", ".join(self.claim.tasks)
        return f"- **{self.outcome}** — {self.claim.source.split(',')[0]} ({tasks}): {text}"


def _reported_text(claim: Claim) -> str:
    """``"Reported (<where>): nope 0.305, t5 0.420"``; empty without reported numbers."""
    if not claim.reported:
        return ""
    values = ", ".join(f"{r.side.label()} {r.value:.3f}" for r in claim.reported)
    return f"Reported ({claim.reported_where}): {values}"


# --- intervals at a level -------------------------------------------------------------------------------


def _block(task: str | None, groups: list[np.ndarray]) -> int | None:
    """Batch-means block for ``task``'s per-sequence values (lm's consecutive windows; see
    :func:`posenc.analysis.stats.sequence_block`)."""

    return None if task is None or not groups else sequence_block(task, min(len(g) for g in groups))


def _group(values: list[np.ndarray], bounded: bool, level: float, task: str | None = None) -> Estimate:
    return group_estimate(values, bounded=bounded, level=level, block=_block(task, values))


def _paired(
    a: list[np.ndarray],
    b: list[np.ndarray],
    bounded: bool,
    level: float,
    task: str | None = None,
    same_seeds: bool = False,
) -> Estimate:
    return paired_difference(a, b, bounded=bounded, level=level, block=_block(task, a), same_seeds=same_seeds)


# --- pooling a window -------------------------------------------------------------------------------------


def _asked_metric(metric: str) -> str:
    """The metric the evidence is asked for: perplexity through loss (exp is monotone)."""
    return "loss" if metric == "perplexity" else metric


def _has_values(per_seed: Mapping[Hashable, np.ndarray] | None) -> bool:
    """Some value that is not NaN."""
    return bool(per_seed) and any(np.any(~np.isnan(np.asarray(v, dtype=float))) for v in per_seed.values())


def _window_lengths(evidence: Evidence, claim: Claim, side: Side, window: Window, task: str | None = None) -> list[int]:
    """The side's evaluation lengths in ``window`` (relative to its own training length) with values, on
    ``task`` (default: the claim's)."""
    task = claim.task if task is None else task
    train = evidence.train_length(task, side)
    if train is None:
        return []
    metric = _asked_metric(claim.metric)
    return [
        n
        for n in sorted(evidence.lengths(task, side, metric))
        if window.contains(n, train) and _has_values(evidence.at_length(task, side, n, metric))
    ]


def _seeds(per_length: list[Mapping[Hashable, np.ndarray]]) -> list[Hashable]:
    """Every seed's key over the lengths, in the order :func:`_pool` pools them."""
    return list(dict.fromkeys(key for part in per_length for key in sorted(part, key=str)))


def _pool(per_length: list[Mapping[Hashable, np.ndarray]], sizes: list[int]) -> list[np.ndarray]:
    """Per seed, the values of every length in order, each length's cut (or NaN-padded) to ``sizes[i]``: a
    seed missing at a length contributes NaNs there (left out, with its pair, by :mod:`posenc.analysis.stats`)."""
    seeds = _seeds(per_length)
    pooled = []
    for seed in seeds:
        blocks = []
        for part, size in zip(per_length, sizes):
            block = np.full(size, np.nan)
            if seed in part:
                v = np.asarray(part[seed], dtype=float).ravel()[:size]
                block[: v.size] = v
            blocks.append(block)
        pooled.append(np.concatenate(blocks) if blocks else np.empty(0))
    return pooled


def _side_pool(
    evidence: Evidence, claim: Claim, side: Side, window: Window, task: str | None = None
) -> tuple[list[np.ndarray], list[int]]:
    """One side's values over its own lengths in ``window`` (every sequence of each), pooled per seed, and
    those lengths."""
    task = claim.task if task is None else task
    lengths = _window_lengths(evidence, claim, side, window, task)
    parts = [evidence.at_length(task, side, n, _asked_metric(claim.metric)) or {} for n in lengths]
    sizes = [max(np.asarray(v).size for v in part.values()) for part in parts]
    return _pool(parts, sizes), lengths


def paired_by_seed(
    evidence: Evidence,
    task: str,
    first: Side,
    second: Side,
    first_seeds: Sequence[Hashable],
    second_seeds: Sequence[Hashable],
) -> bool:
    """Whether ``first − second`` pairs by seed as well as by sequence: both sides are the same trained runs
    (:meth:`Evidence.same_runs`, optional: an evidence without it never pairs by seed) and their values come
    keyed by the same seeds in the same order (``first_seeds``, ``second_seeds``), so that row ``s`` of each
    side is one checkpoint. What the claims (:func:`check`) and the report's paired tables both ask."""
    same_runs = getattr(evidence, "same_runs", None)
    return list(first_seeds) == list(second_seeds) and bool(same_runs and same_runs(task, first, second))


@dataclass(frozen=True)
class _Pair:
    """``first − second`` over the lengths of a window both were evaluated at (``estimate`` None: none),
    at a claim's level, and whether neither side's own interval there is above chance; paired by sequence,
    and by seed too where both sides are the same runs (:meth:`Evidence.same_runs`)."""

    estimate: Estimate | None
    lengths: tuple[int, ...]
    at_chance: bool = False


def _pair(
    evidence: Evidence, claim: Claim, first: Side, second: Side, window: Window, task: str | None = None
) -> _Pair:
    """Both sides pooled over their common lengths (each cut to the sequences both have there), paired."""
    task = claim.task if task is None else task
    metric, higher, level = _asked_metric(claim.metric), claim.metric in HIGHER_BETTER, claim.level
    lengths = sorted(
        set(_window_lengths(evidence, claim, first, window, task))
        & set(_window_lengths(evidence, claim, second, window, task))
    )
    if not lengths:
        return _Pair(None, ())
    parts = [[evidence.at_length(task, s, n, metric) or {} for n in lengths] for s in (first, second)]
    sizes = [min(np.asarray(v).size for side in parts for v in side[i].values()) for i in range(len(lengths))]
    a, b = _pool(parts[0], sizes), _pool(parts[1], sizes)
    by_seed = paired_by_seed(evidence, task, first, second, _seeds(parts[0]), _seeds(parts[1]))
    chance = evidence.chance(task, metric)
    at_chance = not math.isnan(chance) and all(_group(x, higher, level, task).low <= chance for x in (a, b))
    return _Pair(_paired(a, b, higher, level, task, by_seed), tuple(lengths), at_chance)


def _span(lengths: Sequence[int]) -> str:
    """``"36–64, 8 lengths"`` or ``"128, 1 length"``."""
    if len(lengths) == 1:
        return f"{lengths[0]}, 1 length"
    return f"{lengths[0]}–{lengths[-1]}, {len(lengths)} lengths"


def _over(window: Window) -> str:
    """``"at 2×"`` or ``"over (1×, 2×]"``."""
    return window.where() if window.exact else f"over {window.label()}"


def _where(window: Window, lengths: Sequence[int]) -> str:
    """``"at 2×"`` (one length asked for) or ``"over (1×, 2×] (36–64, 8 lengths)"``."""
    return window.where() if window.exact else f"over {window.label()} ({_span(lengths)})"


# --- judging one check ------------------------------------------------------------------------------------

_STATES = {1: "holds", -1: "contradicted", 0: "open"}
MIN_SEEDS = 2  # seeds a check needs on each side to hold or be contradicted (module docstring, "Seeds")
_ONE_SEED = "open: one seed, the spread between seeds unknown"


def _words(metric: str) -> str:
    """``token_accuracy`` -> ``token accuracy``."""
    return metric.replace("_", " ")


def _judge_comparison(c: Comparison, claim: Claim, window: Window, evidence: Evidence) -> Check:
    """The difference is oriented so that positive = holds: better − worse, or worse − better in loss."""
    higher = claim.metric in HIGHER_BETTER
    first, second = (c.better, c.worse) if higher else (c.worse, c.better)
    pair, label = _pair(evidence, claim, first, second, window), f"{first.label()} − {second.label()}"
    if pair.estimate is None:
        return Check(c, window, None, f"{label} {window.where()}: no length evaluated for both (not testable)")
    est, lengths = pair.estimate, pair.lengths
    metric = _words(_asked_metric(claim.metric))
    head = f"{label} {_where(window, lengths)}: {est.format(signed=True)} {metric}"
    if pair.at_chance:
        chance = evidence.chance(claim.task, _asked_metric(claim.metric))
        return Check(
            c,
            window,
            None,
            f"{head} (not testable: at chance, neither side's interval above {chance:.3g})",
            lengths,
            est,
        )
    state = 1 if est.low > 0 else -1 if est.high < 0 else 0
    note = _STATES[state]
    if state and est.n_seeds < MIN_SEEDS:
        state, note = 0, _ONE_SEED
    return Check(c, window, state, f"{head} ({note})", lengths, est)


def _judge_threshold(t: Threshold, claim: Claim, window: Window, evidence: Evidence) -> Check:
    """A side's pooled value against ``t.value``; a side that did not learn cannot hold."""
    metric, higher = _asked_metric(claim.metric), claim.metric in HIGHER_BETTER
    value = math.log(t.value) if claim.metric == "perplexity" else t.value
    pooled, lengths = _side_pool(evidence, claim, t.side, window)
    est = _group(pooled, higher, claim.level, claim.task)
    if higher:
        state = 1 if est.low >= value else -1 if est.high < value else 0
    else:
        state = 1 if est.high <= value else -1 if est.low > value else 0
    note = _STATES[state]
    if state and est.n_seeds < MIN_SEEDS:
        state, note = 0, _ONE_SEED
    if state == 1 and evidence.learned(claim.task, t.side) is False:
        state, note = 0, "open: did not learn within its budget, so it cannot hold"
    need = f"{'≥' if higher else '≤'} {value:.3g}"
    return Check(
        t,
        window,
        state,
        f"{t.side.label()} {_where(window, lengths)}: {est.format()} {_words(metric)}, needs {need} ({note})",
        tuple(lengths),
        est,
    )


# --- mean ranks across tasks --------------------------------------------------------------------------------


def reciprocal_ranks(scores: Sequence[float], higher: bool = True) -> np.ndarray:
    """Each score's reciprocal rank: 1 for the best, ``1/n`` for the worst of ``n``; tied scores share the
    mean of the reciprocal ranks they span (two tied for first: (1 + 1/2)/2 each). Kazemnejad et al.'s
    notebook breaks ties by row order instead (pandas ``rank(method="first")``)."""
    s = np.asarray(scores, dtype=float) * (1 if higher else -1)
    order = sorted(range(s.size), key=lambda i: -s[i])
    rr, start = np.empty(s.size), 0
    while start < s.size:
        stop = start + 1
        while stop < s.size and s[order[stop]] == s[order[start]]:
            stop += 1
        rr[order[start:stop]] = np.mean(1 / np.arange(start + 1, stop + 1))
        start = stop
    return rr


@dataclass(frozen=True)
class TaskRanking:
    """What one task says about the order of a rank claim's sides (indices into :meth:`Claim.sides`).

    Attributes:
        means: each side's pooled mean over the window.
        ordered: pairs ``(i, j)`` where side i surely beats side j: their paired interval at the claim's level
            lies wholly on i's side and one of them is above chance.
        above_chance: the sides whose own interval lies above chance (every side where chance is NaN).
    """

    means: tuple[float, ...]
    ordered: frozenset[tuple[int, int]]
    above_chance: frozenset[int]


def _task_ranking(claim: Claim, task: str, window: Window, evidence: Evidence) -> TaskRanking:
    """The claim's sides on one task, every pair compared (see :class:`TaskRanking`)."""
    sides, higher = claim.sides(), claim.metric in HIGHER_BETTER
    chance = evidence.chance(task, _asked_metric(claim.metric))
    means, above = [], set()
    for i, side in enumerate(sides):
        est = _group(_side_pool(evidence, claim, side, window, task)[0], higher, claim.level, task)
        means.append(est.mean)
        if math.isnan(chance) or est.low > chance:
            above.add(i)
    ordered = set()
    for i, j in itertools.combinations(range(len(sides)), 2):
        pair = _pair(evidence, claim, sides[i], sides[j], window, task)
        if pair.estimate is None or not {i, j} & above or pair.estimate.n_seeds < MIN_SEEDS:
            continue
        est = pair.estimate
        low, high = (est.low, est.high) if higher else (-est.high, -est.low)  # positive: i better
        if low > 0:
            ordered.add((i, j))
        elif high < 0:
            ordered.add((j, i))
    return TaskRanking(tuple(means), frozenset(ordered), frozenset(above))


def rank_bounds(n: int, ordered: frozenset[tuple[int, int]], i: int, j: int) -> tuple[float, float]:
    """The least and the greatest of ``1/rank(i) − 1/rank(j)`` over every ordering of ``n`` sides that puts
    ``a`` above ``b`` for each ``(a, b)`` in ``ordered``. Where no ordering does (intervals that contradict
    one another: one of them missed), over every ordering: nothing is known."""
    diffs = []
    for order in itertools.permutations(range(n)):
        rank = {side: k + 1 for k, side in enumerate(order)}
        if all(rank[a] < rank[b] for a, b in ordered):
            diffs.append(1 / rank[i] - 1 / rank[j])
    if not diffs:
        return 1 / n - 1, 1 - 1 / n
    return min(diffs), max(diffs)


def _judge_mean_rank(m: MeanRank, claim: Claim, window: Window, rankings: Sequence[TaskRanking]) -> Check:
    """``better − worse`` in mean reciprocal rank over the claim's tasks: the point from the pooled means,
    the interval from :func:`rank_bounds` averaged over tasks (each task's bounds are independent)."""
    sides, higher = claim.sides(), claim.metric in HIGHER_BETTER
    i, j = sides.index(m.better), sides.index(m.worse)
    label = f"{m.better.label()} − {m.worse.label()} in mean reciprocal rank {_over(window)}"
    if not any({i, j} & r.above_chance for r in rankings):
        return Check(m, window, None, f"{label}: at chance on every task (not testable)")
    bounds = [rank_bounds(len(sides), r.ordered, i, j) for r in rankings]
    points = [reciprocal_ranks(r.means, higher) for r in rankings]
    est = Estimate(
        float(np.mean([p[i] - p[j] for p in points])),
        float(np.mean([b[0] for b in bounds])),
        float(np.mean([b[1] for b in bounds])),
        0,
        0,
    )
    state = 1 if est.low > 0 else -1 if est.high < 0 else 0
    return Check(
        m,
        window,
        state,
        f"{label}: {est.format(signed=True)} over the rankings the intervals allow ({_STATES[state]})",
        (),
        est,
    )


def _rank_checks(claim: Claim, evidence: Evidence) -> tuple[list[Check], list[str]]:
    """Every link of a claim of mean ranks in every window, and per window a line of each side's mean
    reciprocal rank (the point) before the links' lines."""
    checks, lines, higher = [], [], claim.metric in HIGHER_BETTER
    for window in claim.windows:
        rankings = [_task_ranking(claim, task, window, evidence) for task in claim.tasks]
        mrr = np.mean([reciprocal_ranks(r.means, higher) for r in rankings], axis=0)
        best_first = sorted(zip(claim.sides(), mrr), key=lambda pair: -pair[1])
        ranked = ", ".join(f"{side.label()} {v:.3f}" for side, v in best_first)
        lines.append(
            f"mean reciprocal rank {_over(window)} on {', '.join(claim.tasks)} (each task ranking "
            f"the sides' mean {_words(_asked_metric(claim.metric))}, ties shared): {ranked}"
        )
        found = [_judge_mean_rank(m, claim, window, rankings) for m in claim.expect]
        checks += found
        lines += [c.line for c in found]
    return checks, lines


# --- the check --------------------------------------------------------------------------------------------


def _problems(claim: Claim, evidence: Evidence) -> list[str]:
    """Why the claim cannot be checked: a side without runs, not learned (but for a claim about learning
    itself), or not evaluated in a window, on any of its tasks (named when there are several)."""
    problems = []
    for task in claim.tasks:
        on = f" on {task}" if len(claim.tasks) > 1 else ""
        for side in claim.sides():
            learned = evidence.learned(task, side)
            if learned is None or (not learned and not claim.in_distribution):
                problems.append(
                    f"{side.label()} has no runs on {task}" if learned is None else _not_learned(side, task)
                )
                continue
            missing = [w for w in claim.windows if not _window_lengths(evidence, claim, side, w, task)]
            if missing:
                problems.append(f"{side.label()} not evaluated {', '.join(w.where() for w in missing)}{on}")
    return problems


def check(claim: Claim, evidence: Evidence) -> Verdict:
    """Check one claim against the evidence; see the module docstring for the rules and the four outcomes.

    Comparisons use :func:`posenc.analysis.stats.paired_difference` and thresholds
    :func:`posenc.analysis.stats.group_estimate`,
    bounded for exact match and token accuracy, unbounded for loss, at the claim's Bonferroni level; mean
    ranks rest on the paired differences of every pair of sides on every task (:func:`rank_bounds`).
    """
    if claim.untestable_reason:
        return Verdict(claim, "not testable", (claim.untestable_reason,))
    problems = _problems(claim, evidence)
    if problems:
        return Verdict(claim, "not testable", tuple(problems))
    if claim.ranked:
        checks, details = _rank_checks(claim, evidence)
    else:
        checks = []
        for expectation in claim.expect:
            judge = _judge_comparison if isinstance(expectation, Comparison) else _judge_threshold
            checks += [judge(expectation, claim, window, evidence) for window in claim.windows]
        details = [c.line for c in checks]
    states = [c.state for c in checks if c.state is not None]
    outcome = (
        "not testable"
        if not states
        else "differs"
        if -1 in states
        else "agrees"
        if all(s == 1 for s in states)
        else "inconclusive"
    )
    return Verdict(claim, outcome, tuple(details), tuple(checks))


class _Converged:
    """``evidence`` with every side that has runs counted as learned (converged), and every seed's values
    (an evidence's ``with_every_seed``, where it has one: a side learned by quorum is otherwise compared on
    its learned seeds only): see :func:`ungated`."""

    def __init__(self, evidence: Evidence) -> None:
        every_seed = getattr(evidence, "with_every_seed", None)
        self._evidence = every_seed() if every_seed else evidence

    def __getattr__(self, name: str):
        return getattr(self._evidence, name)

    def learned(self, task: str, side: Side) -> bool | None:
        return None if self._evidence.learned(task, side) is None else True


def _not_learned(side: Side, task: str) -> str:
    """Why a side that did not learn ``task`` makes a claim not testable (lm: learned means converged)."""
    if has_mastery_criterion(task):
        return f"{side.label()} did not learn {task} in distribution"
    return (
        f"{side.label()} did not converge on {task} (a seed's held-out loss still fell by 2% or more over the "
        "last quarter of its budget)"
    )


def ungated(verdict: Verdict, evidence: Evidence, *, mastery: bool = False) -> Verdict | None:
    """For an lm claim that is not testable only because sides did not converge (task_facts.converged): the
    same check with those sides counted as converged, on every seed - how much the convergence gate decides,
    shown beside the verdict and never in its place. None for every other verdict.

    ``mastery``: also for a claim on a task with a mastery criterion that is not testable only because sides
    did not learn it in distribution (held-out exact match short of ``train.target_exact_match``): the check
    with those sides counted as learned, on every seed (issue 39: Ruoss et al. on reverse, whose randomized
    runs stop at 0.90-0.96). The evidence must hold those runs' evaluations past L (``posenc compare
    --include-not-learned``), else the lifted check finds them not evaluated. Off by default: reports show
    the lifted line for lm only; scripts/ungated_claims.py writes it for a folder's mastery claims."""
    tasks = verdict.claim.tasks  # a claim of mean ranks is gated on each of its tasks
    gated_by_mastery = any(has_mastery_criterion(task) for task in tasks)
    gates = [
        f"did not learn {task} in distribution" if has_mastery_criterion(task) else f"did not converge on {task}"
        for task in tasks
    ]
    if (
        verdict.outcome != "not testable"
        or verdict.checks
        or (gated_by_mastery and not mastery)
        or not verdict.details
        or not all(any(gate in line for gate in gates) for line in verdict.details)
    ):
        return None
    return check(verdict.claim, _Converged(evidence))


def paper_vs_posenc(
    claim: Claim, evidence: Evidence, level: float = 0.95, others: Sequence[Side] = ()
) -> list[tuple[Reported, Estimate, tuple[int, ...]]]:
    """For each of the claim's :attr:`~Claim.reported` numbers: posenc's value for that side over the claim's
    primary window (its own lengths there, pooled as :func:`check` pools them; an all-NaN estimate where it
    was not evaluated), at ``level`` (default 95%: a description, not a test), and the lengths pooled. Then
    the same for each of ``others`` the paper did not run (its :class:`Reported` value NaN), so that a reader
    sees every encoder of the comparison on the paper's quantity."""
    higher = claim.metric in HIGHER_BETTER
    named = {r.side for r in claim.reported}
    extra = tuple(Reported(side, math.nan) for side in others if side not in named)
    rows = []
    for reported in (*claim.reported, *extra):
        pooled, lengths = _side_pool(evidence, claim, reported.side, claim.windows[0])
        rows.append((reported, _group(pooled, higher, level), tuple(lengths)))
    return rows
