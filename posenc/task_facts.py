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
ANSWER_ALPHABET = {"copy": ("n_symbols", 16), "reverse": ("n_symbols", 16), "retrieval": ("n_values", 32),
                   "passkey": (None, 10)}  # passkey answers are digits


def report_metrics(task: str | None) -> tuple[str, ...]:
    """The metrics tables and figures show for ``task``, the one runs are judged on first (lm: perplexity)."""
    return _REPORT_METRICS.get(task or "", SEQUENCE_METRICS)


def has_mastery_criterion(task: str | None) -> bool:
    """Whether a run of ``task`` is learned when its held-out exact match reaches a target (the mastery rule):
    every task judged on exact match first, not lm (scored by perplexity); unknown names count as such."""
    return report_metrics(task)[0] == "exact_match"
