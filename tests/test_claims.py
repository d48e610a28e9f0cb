"""posenc.claims: every registered claim driven to each outcome by fake evidence, and the check's rules."""

import math

import numpy as np
import pytest

from posenc.claims import (
    CLAIMS,
    HIGHER_BETTER,
    OUTCOMES,
    Claim,
    Comparison,
    Side,
    Threshold,
    Verdict,
    check,
    claims_for,
)

N, SEEDS = 400, 3
DIFFICULTY = np.random.default_rng(0).permutation(N) / N  # shared by every side: sequence i is the same


class FakeEvidence:
    """Evidence from dicts: ``values[(task, side, factor, metric)]``, ``learned[(task, side)]``."""

    def __init__(self, values: dict | None = None, learned: dict | None = None):
        self._values, self._learned, self.asked = values or {}, learned or {}, []

    def values(self, task, side, factor, metric):
        self.asked.append(metric)
        return self._values.get((task, side, factor, metric))

    def learned(self, task, side):
        return self._learned.get((task, side))


def levels(claim: Claim) -> dict[Side, float]:
    """Each side's quality in [0, 1] consistent with the claim's comparisons: the longest chain of sides it
    is expected to beat, over the longest chain of all."""
    level = dict.fromkeys(claim.sides(), 0)
    for _ in level:
        for e in claim.expect:
            if isinstance(e, Comparison):
                level[e.better] = max(level[e.better], level[e.worse] + 1)
    top = max(level.values()) or 1
    return {side: lv / top for side, lv in level.items()}


def seeds_for(quality: float, higher: bool) -> list[np.ndarray]:
    """Per-seed values of a side of this quality: shares solve the easiest sequences, losses grow with
    difficulty; seeds differ a little."""
    if higher:
        return [(DIFFICULTY < 0.05 + 0.9 * quality + 0.01 * s).astype(float) for s in range(SEEDS)]
    return [1 + 3 * (1 - quality) + 0.5 * DIFFICULTY + 0.01 * s for s in range(SEEDS)]


def threshold_seeds(t: Threshold, claim: Claim, outcome: str) -> list[np.ndarray]:
    """Values that put the threshold's interval above, below or across its value."""
    higher = claim.metric in HIGHER_BETTER
    value = math.log(t.value) if claim.metric == "perplexity" else t.value
    if outcome == "inconclusive":  # right at the value, from one seed of 64 sequences: too few to tell
        return [np.ones(64) if higher else value + np.linspace(-0.5, 0.5, 64)]
    good = (outcome == "agrees") == higher
    if higher:
        return [np.ones(N) if good else np.full(N, 0.5) for _ in range(SEEDS)]
    return [value + (1 if good else -1) + 0.1 * DIFFICULTY for _ in range(SEEDS)]


def evidence_for(claim: Claim, outcome: str) -> FakeEvidence:
    """Evidence that should drive ``claim`` to ``outcome`` (for every outcome but "not testable" when the
    claim carries an ``untestable_reason``)."""
    higher = claim.metric in HIGHER_BETTER
    metric = "loss" if claim.metric == "perplexity" else claim.metric
    quality = levels(claim)
    if outcome == "differs":
        quality = {side: 1 - q for side, q in quality.items()}
    elif outcome == "inconclusive":  # the expected order, by a margin far inside the intervals
        quality = {side: 0.5 + 0.002 * q for side, q in quality.items()}
    values = {}
    for side, q in quality.items():
        for factor in claim.factors:
            values[claim.task, side, factor, metric] = seeds_for(q, higher)
    for t in (e for e in claim.expect if isinstance(e, Threshold)):
        for factor in claim.factors:
            values[claim.task, t.side, factor, metric] = threshold_seeds(t, claim, outcome)
    learned = {(claim.task, side): True for side in claim.sides()}
    if outcome == "not testable" and claim.in_distribution:  # not learning is its evidence: no runs instead
        del learned[claim.task, claim.sides()[0]]
    elif outcome == "not testable":
        learned[claim.task, claim.sides()[0]] = False
    return FakeEvidence(values, learned)


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("claim", CLAIMS, ids=[c.key for c in CLAIMS])
def test_every_claim_reaches_every_outcome(claim, outcome):
    verdict = check(claim, evidence_for(claim, outcome))
    assert verdict.outcome == (outcome if not claim.untestable_reason else "not testable"), verdict.details
    assert verdict.claim is claim and verdict.details
    if outcome != "not testable" and not claim.untestable_reason:  # a line per expectation per length
        assert len(verdict.details) == len(claim.expect) * len(claim.factors)


def test_xpos_is_never_testable():
    (xpos,) = [c for c in CLAIMS if c.key == "sun2023_xpos"]
    assert {check(xpos, evidence_for(xpos, o)).outcome for o in OUTCOMES} == {"not testable"}
    assert "blockwise" in check(xpos, evidence_for(xpos, "agrees")).details[0]


@pytest.mark.parametrize("claim", [c for c in CLAIMS if not c.untestable_reason], ids=lambda c: c.key)
def test_missing_or_unlearned_side_is_not_testable(claim):
    side, factor = claim.sides()[-1], claim.factors[-1]
    metric = "loss" if claim.metric == "perplexity" else claim.metric
    evidence = evidence_for(claim, "agrees")
    del evidence._values[claim.task, side, factor, metric]
    verdict = check(claim, evidence)
    assert verdict.outcome == "not testable"
    assert verdict.details == (f"{side.label()} not evaluated at {factor}×",)
    evidence = evidence_for(claim, "agrees")
    evidence._values[claim.task, side, factor, metric] = [np.full(N, np.nan)] * SEEDS
    assert check(claim, evidence).outcome == "not testable"
    evidence = evidence_for(claim, "agrees")
    del evidence._learned[claim.task, side]
    assert check(claim, evidence).details == (f"{side.label()} has no runs on {claim.task}",)
    evidence._learned[claim.task, side] = False
    if claim.in_distribution:  # a claim about learning itself is judged on the values
        assert check(claim, evidence).outcome == "agrees"
    else:
        assert check(claim, evidence).details == (f"{side.label()} did not learn {claim.task} in distribution",)


def test_an_in_distribution_claim_counts_a_side_that_did_not_learn_against_it():
    """Zoology's "attention solves MQAR": a side that missed the mastery criterion is evidence it differs."""
    (zoology,) = [c for c in CLAIMS if c.key == "zoology2023_retrieval"]
    assert zoology.in_distribution
    evidence = evidence_for(zoology, "differs")
    for side in zoology.sides():
        evidence._learned[zoology.task, side] = False
    assert check(zoology, evidence).outcome == "differs"


# --- the check's rules on hand-made claims --------------------------------------------------------------

A, B, C = Side("a"), Side("b"), Side("b", "yarn")
A_BEATS_B = (Comparison(A, B),)


def toy(metric: str = "exact_match", expect=A_BEATS_B) -> Claim:
    """A made-up claim on copy at 2×."""
    return Claim("toy", "Someone et al. 2024, Venue", "A beats B.", "copy", metric, (2,), expect,
                 caveat="a caveat")


def evidence(metric: str, **by_label: list[np.ndarray]) -> FakeEvidence:
    """Evidence for the toy sides ``a``, ``b`` and ``c`` (= b +yarn) at 2×, every side learned."""
    sides = {"a": A, "b": B, "c": C}
    return FakeEvidence({("copy", sides[k], 2, metric): v for k, v in by_label.items()},
                        {("copy", s): True for s in sides.values()})


def test_mixed_states_decide_the_outcome():
    good, bad, even = [np.ones(N)] * 3, [np.zeros(N)] * 3, [(DIFFICULTY < 0.5).astype(float)] * 3
    claim = toy(expect=(Comparison(A, B), Comparison(A, C)))
    assert check(claim, evidence("exact_match", a=good, b=bad, c=good)).outcome == "inconclusive"  # one open
    assert check(claim, evidence("exact_match", a=even, b=bad, c=good)).outcome == "differs"  # one against
    assert check(claim, evidence("exact_match", a=good, b=bad, c=bad)).outcome == "agrees"


def test_lower_is_better_is_oriented_worse_minus_better():
    # A's loss is 1 lower than B's: "b − a" is +1 and the comparison holds; perplexity asks for loss
    low, high = [1 + DIFFICULTY] * 3, [2 + DIFFICULTY] * 3
    ev = evidence("loss", a=low, b=high)
    verdict = check(toy("perplexity"), ev)
    assert verdict.outcome == "agrees" and set(ev.asked) == {"loss"}
    line = verdict.details[0]
    assert line.startswith("b − a at 2×: +1.000 [") and line.endswith("loss (holds)")
    assert check(toy("loss"), evidence("loss", a=high, b=low)).outcome == "differs"


def test_thresholds_both_directions():
    hi = toy(expect=(Threshold(A, 0.9),))
    assert check(hi, evidence("exact_match", a=[np.ones(N)] * 3)).outcome == "agrees"
    assert check(hi, evidence("exact_match", a=[np.full(N, 0.5)] * 3)).outcome == "differs"
    lo = toy("perplexity", expect=(Threshold(A, math.e**2),))  # perplexity e² is loss 2
    assert check(lo, evidence("loss", a=[np.full(N, 1.5)] * 3)).outcome == "agrees"
    assert check(lo, evidence("loss", a=[np.full(N, 2.5)] * 3)).outcome == "differs"
    line = check(lo, evidence("loss", a=[2 + np.linspace(-1, 1, 64)])).details[0]
    assert line.startswith("a at 2×: 2.000 [") and line.endswith("loss, needs ≤ 2 (open)")


def test_detail_lines_and_markdown():
    (kazemnejad,) = claims_for({"copy"})[:1]
    verdict = check(kazemnejad, evidence_for(kazemnejad, "agrees"))
    assert verdict.details[0].startswith("nope − rope at 2×: +")
    assert verdict.details[0].endswith("token accuracy (holds)")
    bullet = verdict.markdown()
    assert bullet.startswith("- **agrees** — Kazemnejad et al. 2023 (copy): NoPE and T5")
    assert "; rope" not in bullet and "; nope − sinusoidal at 2×: +" in bullet
    assert bullet.endswith(". Learned has no positions past its table, so it cannot be compared past 1× and "
                           "is left out.") and "\n" not in bullet
    plain = Verdict(toy(), "differs", ("x",)).markdown()
    assert plain == "- **differs** — Someone et al. 2024 (copy): A beats B. x. A caveat."


def test_untestable_reason_wins():
    claim = Claim("u", "S 2020, V", "s", "copy", "exact_match", (2,), (Comparison(A, B),),
                  untestable_reason="why")
    verdict = check(claim, evidence("exact_match", a=[np.ones(N)], b=[np.zeros(N)]))
    assert (verdict.outcome, verdict.details) == ("not testable", ("why",))


def test_registry():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    for key in ("kazemnejad2023_copy", "kazemnejad2023_reverse", "press2022_lm", "ruoss2023_copy",
                "ruoss2023_reverse", "zoology2023_retrieval", "peng2023_lm", "peng2023_passkey",
                "peng2023_copy", "sun2023_xpos"):
        assert key in keys
    assert all(c.expect and c.factors and c.source and c.statement for c in CLAIMS)
    assert {c.task for c in claims_for({"copy"})} == {"copy"} and claims_for(set()) == []
    lm = ["press2022_lm", "peng2023_lm", "peng2023_passkey", "sun2023_xpos"]
    assert [c.key for c in claims_for({"lm", "passkey"})] == lm
    with pytest.raises(ValueError, match="metric"):
        toy("bleu")


def test_side_label():
    assert Side("rope").label() == "rope" and Side("rope", "yarn").label() == "rope +yarn"
