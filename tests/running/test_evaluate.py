"""Scoring: loss, token accuracy and exact match against numbers computed by hand."""

import math

import numpy as np
import pytest
import torch
from rounding import gamma

from posenc.running.evaluate import MIN_SEQUENCES, Scores, default_sequences, eval_generator
from posenc.tasks import Batch


def test_scores_by_hand():
    targets = torch.tensor([[1, 2, 3], [1, 2, 3]])
    mask = torch.tensor([[False, True, True], [False, True, True]])
    logits = torch.full((2, 3, 4), -1e4)
    logits[0, torch.arange(3), torch.tensor([0, 2, 3])] = 0.0  # both answers right (position 0 unscored)
    logits[1, torch.arange(3), torch.tensor([1, 2, 0])] = 0.0  # one answer wrong
    scores = Scores()
    scores.add(logits, Batch(targets, targets, mask))
    means = scores.means()
    assert means["token_accuracy"] == 3 / 4
    assert means["exact_match"] == 1 / 2
    assert means["n_sequences"] == 2
    assert means["loss"] == 1e4 / 4  # one wrong answer costs 1e4 nats, averaged over 4 answer tokens


def test_scores_add_up_over_batches():
    a, b = Scores(), Scores()
    logits = torch.randn(4, 5, 3)
    targets = torch.randint(3, (4, 5))
    mask = torch.rand(4, 5) > 0.3
    a.add(logits, Batch(targets, targets, mask))
    b.add(logits[:2], Batch(targets[:2], targets[:2], mask[:2]))
    b.add(logits[2:], Batch(targets[2:], targets[2:], mask[2:]))
    for key, value in a.means().items():
        assert math.isclose(value, b.means()[key], rel_tol=1e-6)


def test_eval_data_is_fixed_per_length():
    assert torch.equal(
        torch.randint(9, (5,), generator=eval_generator(64)), torch.randint(9, (5,), generator=eval_generator(64))
    )
    assert default_sequences(64) == 512 and default_sequences(512) == 64
    assert default_sequences(8192) == MIN_SEQUENCES == 64  # never fewer than 64 sequences, at any length
    assert default_sequences(100_000) == 64 and default_sequences(8192, minimum=4) == 4


def test_perplexity_is_exp_loss_capped_and_nan_for_nan():
    from posenc.running.evaluate import perplexity

    assert perplexity(0.0) == 1.0 and perplexity(math.log(5.0)) == pytest.approx(5.0)
    assert math.isfinite(perplexity(1000.0)) and perplexity(1000.0) == math.exp(700.0)
    assert math.isnan(perplexity(math.nan))  # a row with no value (a learned table too short) stays empty


class Counting:
    """A task of consecutive digits mod 10 from a random start; every next digit but the first two is an answer."""

    key, min_length, vocab_size, eval_depths = "counting", 1, 10, ()

    def for_evaluation(self):
        return self

    def evaluation_batches(self, n_sequences, length, batch_size, generator):
        from posenc.tasks.base import Task

        yield from Task.evaluation_batches(self, n_sequences, length, batch_size, generator)

    def sample(self, batch_size, length, generator):
        start = torch.randint(10, (batch_size, 1), generator=generator)
        tokens = (start + torch.arange(length + 1)) % 10
        mask = torch.ones(batch_size, length, dtype=torch.bool)
        mask[:, :2] = False
        return Batch(tokens[:, :-1], tokens[:, 1:], mask)


class AlmostCounts(torch.nn.Module):
    """Predicts input + 1, except after a 3, where it says 0 (wrong): confident logits (±50)."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def forward(self, inputs):
        guess = torch.where(inputs == 3, 0, (inputs + 1) % 10)
        return torch.nn.functional.one_hot(guess, 10).float() * 100 - 50


def test_evaluate_detailed_scores_each_sequence_and_each_position_by_hand():
    from posenc.running.evaluate import POSITION_BINS, evaluate, evaluate_detailed

    task, model, n, length = Counting(), AlmostCounts(), 50, 8
    detail = evaluate_detailed(model, task, length, n, batch_tokens=3 * length)  # 3 sequences per batch
    inputs = torch.cat([b.inputs for b in task.evaluation_batches(n, length, n, eval_generator(length))])
    wrong = (inputs == 3).float()  # [n, length]
    wrong[:, :2] = 0  # not scored
    expected_accuracy = 1 - wrong.sum(dim=1) / (length - 2)
    assert np.array_equal(detail.per_sequence["exact_match"], (wrong.sum(dim=1) == 0).float().numpy())
    assert np.allclose(detail.per_sequence["token_accuracy"], expected_accuracy.numpy())
    # float32 cross-entropy of logits +-50: 100 nats per wrong token (each within u * 100), averaged over 6:
    # at most gamma(8) * 100 = 5e-5 off
    expected_loss = (100 * wrong.sum(dim=1) / (length - 2)).numpy()
    assert np.allclose(detail.per_sequence["loss"], expected_loss, atol=100 * gamma(8, torch.float32), rtol=0)
    assert 0 < detail.per_sequence["exact_match"].sum() < n  # both kinds of sequence occur
    assert detail.bin_width == 1 and list(detail.positions["position"]) == list(range(2, length))  # no answers at 0, 1
    assert list(detail.positions["total"]) == [n] * (length - 2)
    assert np.array_equal(detail.positions["correct"], (n - wrong.sum(dim=0)).long().numpy()[2:])
    means = evaluate(model, task, length, n)
    assert means == detail.means and means["n_sequences"] == n
    assert means["token_accuracy"] == pytest.approx(float(expected_accuracy.mean()))
    assert means["exact_match"] == pytest.approx(float(detail.per_sequence["exact_match"].mean()))
    wide = evaluate_detailed(model, task, 200, 4)  # bins of equal width, at most POSITION_BINS of them
    assert wide.bin_width == 4 and len(wide.positions["position"]) == 50 <= POSITION_BINS
    assert list(wide.positions["position"][:3]) == [0, 4, 8] and list(wide.positions["total"][:2]) == [8, 16]


def test_resolve_device():
    from posenc.errors import PosencError
    from posenc.running.evaluate import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(PosencError, match="device=cuda was asked for, but no CUDA device is available"):
            resolve_device("cuda")
