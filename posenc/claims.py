"""Published claims about length extrapolation, as data, and one function that checks any of them.

A :class:`Claim` names its source, the task and metric it is checked on, the evaluation lengths (multiples
of the training length) and what it expects: :class:`Comparison` (one side beats another) or
:class:`Threshold` (one side reaches a value). :func:`check` asks an :class:`Evidence` (implemented by the
caller; nothing here reads files) for per-seed per-sequence values and returns a :class:`Verdict`, one of
:data:`OUTCOMES`, with the intervals of :mod:`posenc.stats` behind every line:

* "not testable": the claim says so itself (``untestable_reason``), or a side did not learn the task in
  distribution, or was not evaluated;
* "differs": some expectation is contradicted (its interval lies wholly on the wrong side);
* "agrees": every expectation holds (its interval lies wholly on the right side);
* "inconclusive": otherwise — the intervals are too wide to tell.

Perplexity is ``exp(mean loss)``, monotone in the loss, so "lower perplexity" is checked as "lower loss"
on per-sequence losses (the evidence is asked for ``"loss"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from posenc.stats import Estimate, group_estimate, paired_difference

OUTCOMES = ("agrees", "differs", "inconclusive", "not testable")
HIGHER_BETTER = ("exact_match", "token_accuracy")
LOWER_BETTER = ("loss", "perplexity")


@dataclass(frozen=True)
class Side:
    """One arm of a comparison: an encoder, with a RoPE scaling method applied at evaluation ("none": as
    trained)."""

    encoder: str
    scaling: str = "none"

    def label(self) -> str:
        """``"rope"`` or ``"rope +yarn"``."""
        return self.encoder if self.scaling == "none" else f"{self.encoder} +{self.scaling}"


@dataclass(frozen=True)
class Comparison:
    """Expectation: ``better`` beats ``worse`` on the claim's metric at the claim's lengths."""

    better: Side
    worse: Side


@dataclass(frozen=True)
class Threshold:
    """Expectation: ``side`` is at least ``value`` (higher-better metric) or at most ``value`` (lower-better;
    for perplexity, ``value`` is a perplexity and is compared with the loss as ``log(value)``)."""

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
        factors: evaluation lengths as multiples of the training length, e.g. ``(2, 4)``.
        expect: what must hold at every factor for the claim to agree.
        caveat: said with the verdict, e.g. why the task favours one side.
        untestable_reason: non-empty: the claim is never checked, the verdict is "not testable" with it.
    """

    key: str
    source: str
    statement: str
    task: str
    metric: str
    factors: tuple[int, ...]
    expect: tuple[Comparison | Threshold, ...]
    caveat: str = ""
    untestable_reason: str = ""

    def __post_init__(self) -> None:
        if self.metric not in HIGHER_BETTER + LOWER_BETTER:
            raise ValueError(f"claim {self.key}: unknown metric {self.metric!r}")

    @property
    def in_distribution(self) -> bool:
        """A claim about the training length itself (e.g. "attention solves MQAR"): whether a side learned
        is what it asks, so a side that did not learn is evidence, not a reason to withhold a verdict."""
        return self.factors == (1,)

    def sides(self) -> tuple[Side, ...]:
        """Every side the expectations name, each once, in order of first mention."""
        named = [s for e in self.expect
                 for s in ((e.better, e.worse) if isinstance(e, Comparison) else (e.side,))]
        return tuple(dict.fromkeys(named))


class Evidence(Protocol):
    """What :func:`check` needs to know about trained and evaluated runs; the caller implements it."""

    def values(self, task: str, side: Side, factor: int, metric: str) -> list[np.ndarray] | None:
        """Per-seed per-sequence values at factor × training length (sequence i identical across sides);
        None: not evaluated."""

    def learned(self, task: str, side: Side) -> bool | None:
        """Whether every seed of this side's runs reached the in-distribution criterion (None: no runs)."""


@dataclass(frozen=True)
class Verdict:
    """The outcome (one of :data:`OUTCOMES`) of checking ``claim``; a line per expectation and length."""

    claim: Claim
    outcome: str
    details: tuple[str, ...]

    def markdown(self) -> str:
        """A Markdown bullet: ``- **agrees** — <source to 1st comma> (<task>): <statement>. <details>. <caveat>``."""
        caveat = self.claim.caveat.rstrip(".")
        parts = [self.claim.statement.rstrip("."), "; ".join(self.details), caveat[:1].upper() + caveat[1:]]
        text = ". ".join(p for p in parts if p) + "."
        return f"- **{self.outcome}** — {self.claim.source.split(',')[0]} ({self.claim.task}): {text}"


def _asked_metric(metric: str) -> str:
    """The metric the evidence is asked for: perplexity through loss (exp is monotone)."""
    return "loss" if metric == "perplexity" else metric


def _missing(values: list[np.ndarray] | None) -> bool:
    """No values at all: not evaluated, or every value NaN."""
    return values is None or all(np.all(np.isnan(np.asarray(v, dtype=float))) for v in values)


def _judge_comparison(c: Comparison, claim: Claim, factor: int, evidence: Evidence) -> tuple[int, str]:
    """(+1 holds / -1 contradicted / 0 open, detail line); the difference is oriented so positive = holds."""
    metric, higher = _asked_metric(claim.metric), claim.metric in HIGHER_BETTER
    first, second = (c.better, c.worse) if higher else (c.worse, c.better)
    est = paired_difference(evidence.values(claim.task, first, factor, metric),
                            evidence.values(claim.task, second, factor, metric), bounded=higher)
    state = 1 if est.low > 0 else -1 if est.high < 0 else 0
    return state, (f"{first.label()} − {second.label()} at {factor}×: {est.format(signed=True)} "
                   f"{_words(metric)} ({_STATES[state]})")


def _judge_threshold(t: Threshold, claim: Claim, factor: int, evidence: Evidence) -> tuple[int, str]:
    """(+1 holds / -1 contradicted / 0 open, detail line) for one threshold at one length."""
    metric, higher = _asked_metric(claim.metric), claim.metric in HIGHER_BETTER
    value = math.log(t.value) if claim.metric == "perplexity" else t.value
    est: Estimate = group_estimate(evidence.values(claim.task, t.side, factor, metric), bounded=higher)
    if higher:
        state = 1 if est.low >= value else -1 if est.high < value else 0
    else:
        state = 1 if est.high <= value else -1 if est.low > value else 0
    need = f"{'≥' if higher else '≤'} {value:.3g}"
    return state, (f"{t.side.label()} at {factor}×: {est.format()} {_words(metric)}, needs {need} "
                   f"({_STATES[state]})")


_STATES = {1: "holds", -1: "contradicted", 0: "open"}


def _words(metric: str) -> str:
    """``token_accuracy`` -> ``token accuracy``."""
    return metric.replace("_", " ")


def check(claim: Claim, evidence: Evidence) -> Verdict:
    """Check one claim against the evidence; see the module docstring for the four outcomes.

    Comparisons use :func:`posenc.stats.paired_difference` and thresholds :func:`posenc.stats.group_estimate`,
    bounded for exact match and token accuracy, unbounded for loss.
    """
    if claim.untestable_reason:
        return Verdict(claim, "not testable", (claim.untestable_reason,))
    metric, problems = _asked_metric(claim.metric), []
    for side in claim.sides():
        learned = evidence.learned(claim.task, side)
        if learned is None or (not learned and not claim.in_distribution):
            problems.append(f"{side.label()} has no runs on {claim.task}" if learned is None
                            else f"{side.label()} did not learn {claim.task} in distribution")
            continue
        missing = [f for f in claim.factors if _missing(evidence.values(claim.task, side, f, metric))]
        if missing:
            problems.append(f"{side.label()} not evaluated at {', '.join(f'{f}×' for f in missing)}")
    if problems:
        return Verdict(claim, "not testable", tuple(problems))
    states, details = [], []
    for expectation in claim.expect:
        judge = _judge_comparison if isinstance(expectation, Comparison) else _judge_threshold
        for factor in claim.factors:
            state, line = judge(expectation, claim, factor, evidence)
            states.append(state)
            details.append(line)
    outcome = "differs" if -1 in states else "agrees" if all(s == 1 for s in states) else "inconclusive"
    return Verdict(claim, outcome, tuple(details))


def _beats(*pairs: tuple[Side, Side]) -> tuple[Comparison, ...]:
    """``(better, worse)`` pairs as comparisons."""
    return tuple(Comparison(better, worse) for better, worse in pairs)


NOPE, ROPE, T5, SIN, ALIBI = Side("nope"), Side("rope"), Side("t5"), Side("sinusoidal"), Side("alibi")
RANDOMIZED, XPOS = Side("randomized"), Side("xpos")
LINEAR, NTK, YARN = Side("rope", "linear"), Side("rope", "ntk"), Side("rope", "yarn")


def _kazemnejad(task: str) -> Claim:
    """Kazemnejad et al. 2023 on one of their synthetic tasks."""
    return Claim(
        key=f"kazemnejad2023_{task}",
        source='Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in '
               'Transformers", NeurIPS',
        statement="NoPE and T5's relative bias generalize best beyond the training length, while RoPE and "
                  "the absolute encodings (sinusoidal, learned) fail",
        task=task, metric="token_accuracy", factors=(2,),
        expect=_beats((NOPE, ROPE), (NOPE, SIN), (T5, ROPE), (T5, SIN)),
        caveat="learned has no positions past its table, so it cannot be compared past 1× and is left out")


def _ruoss(task: str) -> Claim:
    """Ruoss et al. 2023 on one of their synthetic tasks."""
    return Claim(
        key=f"ruoss2023_{task}",
        source='Ruoss et al. 2023, "Randomized Positional Encodings Boost Length Generalization of '
               'Transformers", ACL',
        statement="Randomized positions raise accuracy beyond the training length over their base encoding",
        task=task, metric="token_accuracy", factors=(2, 4), expect=_beats((RANDOMIZED, SIN)),
        caveat="needs randomized runs whose base encoding is sinusoidal (posenc's default)")


def _peng(task: str, metric: str, factors: tuple[int, ...], caveat: str = "") -> Claim:
    """Peng et al. 2023's ordering of RoPE extensions without fine-tuning, on one task."""
    strict = "only the strict part is tested (NTK and YaRN each beat linear); YaRN ≤ NTK cannot be shown"
    return Claim(
        key=f"peng2023_{task}",
        source='Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models" '
               "(ICLR 2024), results without fine-tuning",
        statement="Without fine-tuning, YaRN extends RoPE at least as well as NTK-aware scaling, and both "
                  "beat linear interpolation (YaRN ≤ NTK < linear in error)",
        task=task, metric=metric, factors=factors, expect=_beats((NTK, LINEAR), (YARN, LINEAR)),
        caveat="; ".join(c for c in (strict, caveat) if c))


CLAIMS: tuple[Claim, ...] = (
    _kazemnejad("copy"),
    _kazemnejad("reverse"),
    Claim(
        key="press2022_lm",
        source='Press et al. 2022, "Train Short, Test Long: Attention with Linear Biases Enables Input '
               'Length Extrapolation", ICLR, Fig. 1',
        statement="ALiBi's perplexity stays flat far past the training length while sinusoidal's blows up; "
                  "the ordering is ALiBi ≥ T5 > RoPE > sinusoidal",
        task="lm", metric="perplexity", factors=(4,),
        expect=_beats((ALIBI, ROPE), (T5, ROPE), (ROPE, SIN), (ALIBI, SIN)),
        caveat="ALiBi ≥ T5 is not strict and is not tested"),
    _ruoss("copy"),
    _ruoss("reverse"),
    Claim(
        key="zoology2023_retrieval",
        source='Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language Models", '
               "ICLR 2024",
        statement="Attention solves multi-query associative recall (MQAR) in distribution",
        task="retrieval", metric="exact_match", factors=(1,),
        # "Solves": at least 0.95 exact match at the training length, with its interval. Not posenc's mastery
        # criterion (0.99 on held-out checks, where training stops): a run stopped at its first check over 0.99
        # scores about that much, so an interval could never lie above 0.99 and the claim could never agree.
        expect=(Threshold(ROPE, 0.95), Threshold(ALIBI, 0.95)),
        caveat="checked at posenc's training budget (conf/experiment/headline_retrieval.yaml: 2 layers, at most "
               "8000 steps), where Zoology trains 64 epochs of 100k sequences with an lr sweep"),
    _peng("lm", "perplexity", (4,)),
    _peng("passkey", "exact_match", (2, 4)),
    _peng("copy", "token_accuracy", (2,),
          caveat="copy is structurally biased toward linear interpolation: positions squeezed into the "
                 "trained range keep every relative offset the copy head needs ordered"),
    Claim(
        key="sun2023_xpos",
        source='Sun et al. 2023, "A Length-Extrapolatable Transformer", ACL',
        statement="xPos extrapolates better than RoPE",
        task="lm", metric="perplexity", factors=(4,), expect=_beats((XPOS, ROPE)),
        untestable_reason="the paper pairs xPos with blockwise causal attention, which posenc does not "
                          "offer, so the two are not comparable here"),
)


def claims_for(tasks: set[str]) -> list[Claim]:
    """The claims in :data:`CLAIMS` whose task is in ``tasks``, in registry order."""
    return [c for c in CLAIMS if c.task in tasks]
