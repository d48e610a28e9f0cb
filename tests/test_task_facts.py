"""The torch-free task facts: lm's convergence rule (the learned flag of a task without a mastery criterion)."""

import pytest

from posenc.task_facts import CONVERGENCE_TOLERANCE, converged, has_mastery_criterion, loss_fall


def test_loss_fall_is_the_relative_fall_over_the_last_quarter():
    checks = [[250, 3.0], [500, 2.0], [750, 1.6], [1000, 1.5]]
    assert loss_fall(checks, 1000) == pytest.approx(0.1 / 1.6)  # from step 750 (= 0.75 x 1000) to the end
    assert loss_fall(checks, 1000, share=0.5) == pytest.approx(0.5 / 2.0)  # from step 500


@pytest.mark.parametrize(
    ("final", "expected"),
    [
        (1.0 * (1 - CONVERGENCE_TOLERANCE) + 1e-9, True),  # just under the tolerance
        (1.0 * (1 - CONVERGENCE_TOLERANCE) - 1e-3, False),  # just over it
        (0.98, False),  # a fall of exactly 2%: not under it
        (1.1, True),  # the loss rose: more training would not help
    ],
)
def test_converged_at_the_tolerance(final, expected):
    assert converged([[50, 2.0], [75, 1.0], [100, final]], 100) is expected


@pytest.mark.parametrize(
    "checks",
    [
        [],  # never checked
        [[50, 2.0], [75, 1.0]],  # stopped before its budget's end: not measured
        [[90, 2.0], [100, 1.0]],  # no check in the first three quarters
    ],
)
def test_an_unmeasured_fall_is_not_converged(checks):
    assert loss_fall(checks, 100) is None and converged(checks, 100) is False


def test_only_lm_lacks_a_mastery_criterion():
    assert not has_mastery_criterion("lm")
    assert all(has_mastery_criterion(t) for t in ("copy", "reverse", "retrieval", "passkey", "unknown"))
