"""Tasks: exact lengths, answer masks, determinism by seed, and answers that follow from the context."""

import pytest
import torch

from posenc.errors import ConfigError
from posenc.tasks import BOS, SEP, TASKS, Copy, Passkey, Retrieval, Reverse, Task, build_task
from posenc.tasks.passkey import FILLER, KEY_MARK


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("extra", [0, 1, 2, 5, 52, 501])
def test_batches_have_exact_length_and_answers(name, extra):
    task = build_task(name)
    length = task.min_length + extra
    for subject in (task, task.for_evaluation()):
        batch = subject.sample(3, length, gen())
        assert batch.inputs.shape == batch.targets.shape == batch.mask.shape == (3, length)
        assert batch.mask.dtype == torch.bool and batch.mask.any(dim=1).all()
        assert int(batch.inputs.max()) < task.vocab_size and int(batch.inputs.min()) >= 0
        assert int(batch.targets.max()) < task.vocab_size
        torch.testing.assert_close(batch.inputs[:, 1:], batch.targets[:, :-1])  # targets are shifted inputs


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_same_data_other_seed_other_data(name):
    task = build_task(name)
    a, b, c = task.sample(4, 40, gen(1)), task.sample(4, 40, gen(1)), task.sample(4, 40, gen(2))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.mask, b.mask)
    assert not torch.equal(a.inputs, c.inputs)
    for depth in task.eval_depths:
        fixed = task.at_depth(depth)
        assert torch.equal(fixed.sample(4, 40, gen(1)).inputs, fixed.sample(4, 40, gen(1)).inputs)


@pytest.mark.parametrize("name", TASKS)
def test_lengths_below_the_minimum_are_refused(name):
    task = build_task(name)
    with pytest.raises(ConfigError, match="at least"):
        task.sample(1, task.min_length - 1, gen())
    task.sample(1, task.min_length, gen())


@pytest.mark.parametrize("name", TASKS)
def test_evaluation_hooks(name):
    task = build_task(name)
    assert isinstance(task.for_evaluation(), TASKS[name])
    assert all(0.0 <= d <= 1.0 for d in task.eval_depths)
    if not task.eval_depths:
        with pytest.raises(ConfigError, match="no depth"):
            task.at_depth(0.5)


def test_copy_answers_repeat_the_symbols_after_the_separator():
    tokens, answer = Copy(n_symbols=5).sequences(2, 20, gen())
    assert tokens.shape == (2, 21)
    n = (20 - 1) // 2  # 9 symbols, 2 BOS, SEP
    assert (tokens[:, :2] == BOS).all() and (tokens[:, 2 + n] == SEP).all()
    torch.testing.assert_close(tokens[:, 2 : 2 + n], tokens[:, 3 + n :])
    assert answer.sum(dim=1).tolist() == [n, n]
    assert answer[:, 3 + n :].all()


@pytest.mark.parametrize("length, pad", [(9, 1), (10, 2)])
def test_reverse_answers_are_the_symbols_backwards(length, pad):
    tokens, answer = Reverse(n_symbols=5).sequences(3, length, gen())
    n = (length - 1) // 2
    assert tokens.shape == (3, length + 1)
    assert (tokens[:, :pad] == BOS).all() and (tokens[:, pad + n] == SEP).all()
    assert ((tokens[:, pad : pad + n] >= 2) & (tokens[:, pad : pad + n] < 7)).all()
    assert torch.equal(tokens[:, pad + n + 1 :], tokens[:, pad : pad + n].flip(1))
    assert answer.nonzero()[:, 1].unique().tolist() == list(range(pad + n + 1, length + 1))
    same = Copy(n_symbols=5).sequences(3, length, gen())[0]  # same symbols as copy from the same stream
    assert torch.equal(same[:, : pad + n + 1], tokens[:, : pad + n + 1])


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


def filler(n):
    return [FILLER[i % len(FILLER)] for i in range(n)]


def test_passkey_layout_on_a_small_example():
    task = Passkey(key_length=3).at_depth(0.5)
    assert task.min_length == 8
    tokens, answer = task.sequences(2, 19, gen())  # 20 tokens: 9 fixed (BOS KEY 3 SEP 3), 11 filler
    assert tokens.shape == answer.shape == (2, 20)
    for seq, ans in zip(tokens.tolist(), answer.tolist()):
        key = seq[-3:]
        assert all(2 <= d < 12 for d in key)
        assert seq == [BOS, *filler(6), KEY_MARK, *key, *filler(5), SEP, *key]  # round(0.5 * 11) = 6 before
        assert ans == [False] * 17 + [True] * 3


def test_passkey_depth_places_the_key_where_asked():
    task = Passkey()  # key_length 5
    length = 64
    n_filler = length + 1 - 13
    for depth, before in [(0.0, 0), (0.25, 13), (0.5, 26), (0.75, 39), (1.0, n_filler)]:
        tokens, _ = task.at_depth(depth).sequences(4, length, gen())
        assert (tokens[:, 1 + before] == KEY_MARK).all()
        assert ((tokens[:, 1 : 1 + before] > KEY_MARK)).all()  # only filler before it
        assert torch.equal(tokens[:, 2 + before : 7 + before], tokens[:, -5:])  # the key, asked at the end
    at_start = task.at_depth(0.0).sequences(1, length, gen())[0][0].tolist()
    assert at_start[:2] == [BOS, KEY_MARK]  # right after the leading BOS
    at_end = task.at_depth(1.0).sequences(1, length, gen())[0][0].tolist()
    assert at_end[-12] == KEY_MARK and at_end[-6] == SEP  # key ends right before the query


def test_passkey_random_depth_varies_per_sequence_and_covers_both_ends():
    tokens, answer = Passkey(key_length=2).sequences(400, 20, gen())
    marks = (tokens == KEY_MARK).int().argmax(dim=1)
    assert ((tokens == KEY_MARK).sum(dim=1) == 1).all()
    assert set(marks.tolist()) == set(range(1, 1 + 21 - 7 + 1))  # every filler split, 0..14 tokens before
    assert torch.equal(tokens[:, -2:], tokens.gather(1, torch.stack((marks + 1, marks + 2), dim=1)))
    assert (answer.sum(dim=1) == 2).all() and answer[:, -2:].all()


def test_passkey_options_and_depths():
    assert Passkey.eval_depths == (0.0, 0.25, 0.5, 0.75, 1.0)
    task = build_task("passkey", {"key_length": 4, "depth": 0.25})
    assert (task.key_length, task.depth, task.min_length) == (4, 0.25, 10)
    assert build_task("passkey", {"depth": -1}).depth is None and Passkey(depth=None).depth is None
    fixed = task.at_depth(1)
    assert fixed.depth == 1.0 and task.depth == 0.25  # a copy; the original keeps its depth
    assert fixed.eval_depths == task.eval_depths and fixed.for_evaluation() is fixed
    for bad in (1.5, float("nan")):
        with pytest.raises(ConfigError, match="task.depth"):
            Passkey(depth=bad)
    with pytest.raises(ConfigError, match="in \\[0, 1\\]"):
        task.at_depth(-0.1)
    with pytest.raises(ConfigError, match="key_length must be >= 1"):
        build_task("passkey", {"key_length": 0})
    with pytest.raises(ConfigError, match="task.depth must be of type float"):
        build_task("passkey", {"depth": "middle"})


def test_base_task_has_no_depth():
    with pytest.raises(ConfigError, match="task 'copy' has no depth"):
        Copy().at_depth(0.5)
    assert Task.eval_depths == () and Copy().for_evaluation() is not None


def test_unknown_task_and_option_are_refused():
    with pytest.raises(ConfigError, match="known tasks: copy, retrieval, reverse, passkey, lm"):
        build_task("sort")
    with pytest.raises(ConfigError, match="no option 'n_symbol'"):
        build_task("copy", {"n_symbol": 3})
