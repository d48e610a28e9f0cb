"""The passkey task of posenc.tasks.passkey: layout, key depth, options."""

import pytest
import torch

from posenc.errors import ConfigError
from posenc.tasks import BOS, SEP, Passkey, build_task
from posenc.tasks.passkey import FILLER, KEY_MARK


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


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
        assert (tokens[:, 1 : 1 + before] > KEY_MARK).all()  # only filler before it
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
