"""Scoring: loss, token accuracy and exact match against numbers computed by hand."""

import math

import pytest

import torch

from posenc.evaluate import Scores, default_sequences, eval_generator
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
    assert torch.equal(torch.randint(9, (5,), generator=eval_generator(64)),
                       torch.randint(9, (5,), generator=eval_generator(64)))
    assert default_sequences(512) == 64 and default_sequences(8192) == 4


def test_perplexity_is_exp_loss_capped_and_nan_for_nan():
    from posenc.evaluate import perplexity

    assert perplexity(0.0) == 1.0 and perplexity(math.log(5.0)) == pytest.approx(5.0)
    assert math.isfinite(perplexity(1000.0)) and perplexity(1000.0) == math.exp(700.0)
    assert math.isnan(perplexity(math.nan))  # a row with no value (a learned table too short) stays empty
