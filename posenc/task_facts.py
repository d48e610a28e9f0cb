"""What the results side knows about tasks, without torch: the metrics each task reports (the first is what a
run is judged on, so it decides whether the task has a mastery criterion) and the option that sizes its answer
alphabet. The task classes (:mod:`posenc.tasks`) take their ``report_metrics`` from here; their alphabets are
set by their own constructors and held equal to :data:`ANSWER_ALPHABET` by tests/test_compare.py.
"""

from __future__ import annotations

SEQUENCE_METRICS = ("exact_match", "token_accuracy", "loss")  # tasks with one right answer per sequence
LM_METRICS = ("perplexity", "token_accuracy", "loss")  # language modelling: every next byte scored
_REPORT_METRICS = {"lm": LM_METRICS}

# The option naming each task's answer alphabet, and its size when the option is not in the config.
ANSWER_ALPHABET = {
    "copy": ("n_symbols", 16),
    "reverse": ("n_symbols", 16),
    "retrieval": ("n_values", 32),
    "passkey": (None, 10),
}  # passkey answers are digits


#: Tasks whose evaluation sequences nest: sequence ``i`` at length ``k * L`` scores the same text as sequences
#: ``k*i .. k*i + k - 1`` at length ``L`` (lm: consecutive windows of one held-out text, tasks/lm.py), so a
#: sequence's change of loss from the training length is paired on the same bytes (claims' "loss_change").
NESTED_EVALUATION = frozenset({"lm"})


def report_metrics(task: str | None) -> tuple[str, ...]:
    """The metrics tables and figures show for ``task``, the one runs are judged on first (lm: perplexity)."""
    return _REPORT_METRICS.get(task or "", SEQUENCE_METRICS)


def has_mastery_criterion(task: str | None) -> bool:
    """Whether a run of ``task`` is learned when its held-out exact match reaches a target (the mastery rule):
    every task judged on exact match first, not lm (scored by perplexity); unknown names count as such."""
    return report_metrics(task)[0] == "exact_match"


# Convergence, the learned rule of tasks without a mastery criterion (lm): every ``train.check_every`` steps the
# held-out loss at the training length is recorded; a run converged when that loss fell by less than
# CONVERGENCE_TOLERANCE (relative) over the last CONVERGENCE_SHARE of its budget - another quarter of the
# training it had would have bought under 2%. Stated before the lm runs were trained (issue 28).
CONVERGENCE_SHARE = 0.25
CONVERGENCE_TOLERANCE = 0.02


def loss_fall(checks: list[list[float]], budget: int, share: float = CONVERGENCE_SHARE) -> float | None:
    """The relative fall of the held-out loss over the last ``share`` of a ``budget``-step run: ``(l_a - l_b) /
    l_a`` with ``l_b`` the last check's loss and ``l_a`` the loss at the last check at or before step
    ``(1 - share) * budget``. ``checks`` is ``[[step, held-out loss], ...]`` in step order; None when the run has
    no check that early, or its last check is not at the budget's end (it did not finish)."""
    if not checks or checks[-1][0] < budget:
        return None
    early = [loss for step, loss in checks if step <= (1 - share) * budget]
    if not early or early[-1] <= 0:
        return None
    return (early[-1] - checks[-1][1]) / early[-1]


def converged(checks: list[list[float]], budget: int) -> bool:
    """Whether the held-out loss fell by less than :data:`CONVERGENCE_TOLERANCE` over the last
    :data:`CONVERGENCE_SHARE` of the budget (:func:`loss_fall`); False when that cannot be measured."""
    fall = loss_fall(checks, budget)
    return fall is not None and fall < CONVERGENCE_TOLERANCE
