"""Tasks: exact lengths, answer masks, determinism by seed, and answers that follow from the context."""

import pytest
import torch

from posenc.errors import ConfigError
from posenc.tasks import BOS, SEP, TASKS, Copy, Retrieval, build_task


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("length", [8, 9, 64, 513])
def test_batches_have_exact_length_and_answers(name, length):
    task = build_task(name)
    batch = task.sample(3, length, gen())
    assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (3, length)
    assert batch.mask.any(dim=1).all()
    assert int(batch.inputs.max()) < task.vocab_size and int(batch.inputs.min()) >= 0
    torch.testing.assert_close(batch.inputs[:, 1:], batch.targets[:, :-1])  # targets are shifted inputs


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_same_data_other_seed_other_data(name):
    task = build_task(name)
    a, b, c = task.sample(4, 40, gen(1)), task.sample(4, 40, gen(1)), task.sample(4, 40, gen(2))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.mask, b.mask)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("name", TASKS)
def test_lengths_below_the_minimum_are_refused(name):
    task = build_task(name)
    with pytest.raises(ConfigError, match="at least"):
        task.sample(1, task.min_length - 1, gen())
    task.sample(1, task.min_length, gen())


def test_copy_answers_repeat_the_symbols_after_the_separator():
    tokens, answer = Copy(n_symbols=5).sequences(2, 20, gen())
    assert tokens.shape == (2, 21)
    n = (20 - 1) // 2  # 9 symbols, 2 BOS, SEP
    assert (tokens[:, :2] == BOS).all() and (tokens[:, 2 + n] == SEP).all()
    torch.testing.assert_close(tokens[:, 2 : 2 + n], tokens[:, 3 + n :])
    assert answer.sum(dim=1).tolist() == [n, n]
    assert answer[:, 3 + n :].all()


def test_retrieval_answers_are_the_values_bound_to_the_queried_keys():
    task = Retrieval(n_keys=4, n_values=6)
    tokens, answer = task.sequences(5, 41, gen())
    k = 10  # (41 - 1) // 4 pairs, then 10 queries
    for seq, ans in zip(tokens, answer):
        pairs = seq[1 : 1 + 2 * k].view(k, 2)
        binding = {}
        for key, value in pairs.tolist():
            assert binding.setdefault(key, value) == value  # one dictionary per sequence
        assert seq[1 + 2 * k] == SEP
        queries = seq[2 + 2 * k :].view(k, 2)
        for key, value in queries.tolist():
            assert binding[key] == value
        assert ans.nonzero().flatten().tolist() == list(range(3 + 2 * k, 42, 2))


def test_unknown_task_and_option_are_refused():
    with pytest.raises(ConfigError, match="known tasks: copy, retrieval"):
        build_task("sort")
    with pytest.raises(ConfigError, match="no option 'n_symbol'"):
        build_task("copy", {"n_symbol": 3})
