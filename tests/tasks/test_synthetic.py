"""The synthetic tasks of posenc.tasks.synthetic: copy, reverse and retrieval (MQAR)."""

import pytest
import torch

from posenc.errors import ConfigError
from posenc.tasks import BOS, SEP, Copy, Retrieval, Reverse, build_task


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


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


def mqar_parts(task, seq, length):
    """(BOS padding, context pairs [K, 2], query-region slots [slots, 2]) of one MQAR sequence."""
    k = task.n_pairs
    slots = (length - 2 * k) // 2
    pad = length + 1 - 2 * k - 2 * slots
    assert pad in (1, 2) and len(seq) == length + 1
    return seq[:pad], seq[pad : pad + 2 * k].view(k, 2), seq[pad + 2 * k :].view(slots, 2)


@pytest.mark.parametrize("length", [24, 41, 64, 257])
def test_retrieval_is_mqar(length):
    """Zoology's multi-query associative recall: distinct keys and values from disjoint vocabularies, each
    context key queried exactly once (random order), the answer its bound value, only values scored."""
    task = Retrieval(n_pairs=5, n_keys=8, n_values=7, n_noise=3)
    keys = set(range(2, 10))
    values = set(range(10, 17))
    noise = set(range(17, 20))
    assert task.vocab_size == 20 and task.min_length == 20
    tokens, answer = task.sequences(64, length, gen())
    assert tokens.shape == answer.shape == (64, length + 1)
    orders = set()
    for seq, ans in zip(tokens, answer):
        head, pairs, region = mqar_parts(task, seq, length)
        assert (head == BOS).all()
        context_keys, context_values = pairs[:, 0].tolist(), pairs[:, 1].tolist()
        assert set(context_keys) <= keys and set(context_values) <= values  # disjoint vocabularies
        assert len(set(context_keys)) == 5 and len(set(context_values)) == 5  # distinct per sequence
        binding = dict(zip(context_keys, context_values))
        asked, expected_answer = [], torch.zeros_like(ans)
        offset = len(seq) - 2 * len(region)
        for i, (q, a) in enumerate(region.tolist()):
            if q in keys:  # a query slot: a key of the context, then its value
                assert a == binding[q]
                asked.append(q)
                expected_answer[offset + 2 * i + 1] = True
            else:  # a noise slot: two noise tokens, neither a key nor a value
                assert q in noise and a in noise
        assert sorted(asked) == sorted(context_keys)  # every context key queried exactly once
        orders.add(tuple(context_keys.index(q) for q in asked))
        assert torch.equal(ans, expected_answer)  # only the values of the queries are scored
        assert int(ans.sum()) == 5  # n_pairs answers at every length
    assert len(orders) > 10  # queries come in random order, not the context's


def test_retrieval_batches_score_only_values_after_their_keys():
    task = Retrieval()  # the defaults: 4 pairs, 32 keys, 32 values, 16 noise tokens
    assert (task.n_pairs, task.min_length, task.vocab_size) == (4, 16, 82)
    batch = task.sample(32, 48, gen())
    assert (batch.mask.sum(dim=1) == 4).all()
    scored_targets, scored_inputs = batch.targets[batch.mask], batch.inputs[batch.mask]
    assert ((scored_targets >= 34) & (scored_targets < 66)).all()  # a value is predicted ...
    assert ((scored_inputs >= 2) & (scored_inputs < 34)).all()  # ... right after reading its key


def test_retrieval_never_shows_an_answer():
    """As in Zoology, the token after a query is noise in the input, never its value: read answers would
    let the last query be answered by elimination (a plateau at about half the values right)."""
    task = Retrieval()
    tokens, answer = task.sequences(64, 48, gen())
    batch = task.sample(64, 48, gen())
    assert torch.equal(batch.targets, tokens[:, 1:]) and torch.equal(batch.mask, answer[:, 1:])
    values = (batch.inputs >= 2 + task.n_keys) & (batch.inputs < 2 + task.n_keys + task.n_values)
    assert values.sum(dim=1).tolist() == [task.n_pairs] * 64  # the context's values, and no other
    read_after_query = batch.inputs[:, 1:][batch.mask[:, :-1]]
    assert (read_after_query >= 2 + task.n_keys + task.n_values).all()  # noise where each answer was


def test_retrieval_keeps_its_dictionary_size_at_every_length():
    task = Retrieval(n_pairs=3)
    assert task.min_length == 12
    for length in (12, 13, 50, 1000):
        tokens, answer = task.sequences(4, length, gen())
        assert (answer.sum(dim=1) == 3).all()
        assert ((tokens >= 2) & (tokens < 2 + task.n_keys)).sum(dim=1).tolist() == [6] * 4  # 3 keys, twice
    tokens, answer = task.sequences(2, 12, gen())  # at min_length every slot is a query
    for seq in tokens:
        _, pairs, region = mqar_parts(task, seq, 12)
        assert sorted(region[:, 0].tolist()) == sorted(pairs[:, 0].tolist())
    with pytest.raises(ConfigError, match="at least 12"):
        task.sample(1, 11, gen())


def test_retrieval_queries_spread_over_the_whole_region():
    task = Retrieval(n_pairs=2)
    tokens, _ = task.sequences(400, 40, gen())
    used = set()
    for seq in tokens:
        _, _, region = mqar_parts(task, seq, 40)
        used |= {i for i, q in enumerate(region[:, 0].tolist()) if 2 <= q < 2 + task.n_keys}
    assert used == set(range(len(region)))  # uniform slots: the first and the last are both used


@pytest.mark.parametrize(
    "options", [{"n_pairs": 0}, {"n_pairs": 5, "n_keys": 4}, {"n_pairs": 5, "n_values": 4}, {"n_noise": 0}]
)
def test_retrieval_refuses_options_without_distinct_keys_and_values(options):
    with pytest.raises(ConfigError, match="n_keys >= n_pairs"):
        build_task("retrieval", options)


def test_retrieval_reading_its_answers_is_a_task_of_its_own():
    """read_answers=true is the elimination variant; an option of the configuration, so the two tasks never
    share a run identity (a checkpoint of one is never resumed as the other)."""
    from conftest import tiny_dict

    from posenc.analysis.store import run_identity

    task = build_task("retrieval", {"read_answers": True})
    batch = task.sample(16, 48, gen())
    assert task.answers_read and torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])  # values read
    hidden, read = tiny_dict("task=retrieval"), tiny_dict("task=retrieval", "task.read_answers=true")
    assert run_identity(hidden).config_id != run_identity(read).config_id


@pytest.mark.parametrize("task_class", [Copy, Reverse])
@pytest.mark.parametrize("length", [4, 5, 10, 11, 43, 44, 83, 162])
def test_end_token_closes_the_answer_and_is_scored(task_class, length):
    """task.end_token: ``BOS.. x_1..x_n SEP answer EOS`` with n = (L-2)//2 symbols, EOS a token of its own
    scored with the answer (teacher-forced exact match over answer + EOS is greedy decoding that must stop)."""
    task = task_class(n_symbols=100, end_token=True)
    assert task.vocab_size == 103 and task.eos == 102 and task.min_length == 4 and task.answer_alphabet == 100
    tokens, answer = task.sequences(64, length, gen())
    n = (length - 2) // 2
    pad = length + 1 - (2 * n + 2)
    assert task.symbols_at(length) == n and pad in (1, 2) and tokens.shape == answer.shape == (64, length + 1)
    assert (tokens[:, :pad] == BOS).all() and (tokens[:, pad + n] == SEP).all() and (tokens[:, -1] == task.eos).all()
    symbols = tokens[:, pad : pad + n]
    assert ((symbols >= 2) & (symbols < 102)).all()  # the alphabet: 100 symbols, never BOS, SEP or EOS
    expected = symbols if task_class is Copy else symbols.flip(1)
    assert torch.equal(tokens[:, pad + n + 1 : -1], expected)
    assert answer.nonzero()[:, 1].unique().tolist() == list(range(pad + n + 1, length + 1))  # answer and EOS
    assert (tokens[:, : pad + n + 1] != task.eos).all() and (tokens[:, pad + n + 1 : -1] != task.eos).all()


def test_end_token_sample_scores_the_end_token_and_the_paper_ranges():
    """A sampled batch's last target is EOS and is scored; [10, 43] holds 4..20 symbols, two lengths each, and
    44, 46, .., 82 hold 21..40 (conf/experiment/kazemnejad_matched.yaml); the alphabet is all used."""
    task = Copy(n_symbols=100, end_token=True)
    batch = task.sample(8, 43, gen())
    assert (batch.targets[:, -1] == task.eos).all() and batch.mask[:, -1].all()
    assert int(batch.mask[0].sum()) == 20 + 1
    counts = [task.symbols_at(length) for length in range(10, 44)]
    assert sorted(set(counts)) == list(range(4, 21)) and all(counts.count(n) == 2 for n in range(4, 21))
    assert [task.symbols_at(length) for length in range(44, 83, 2)] == list(range(21, 41))
    assert set(task.sequences(256, 83, gen())[0][:, 2:42].unique().tolist()) == set(range(2, 102))


def test_without_end_token_the_sequences_are_unchanged():
    """end_token defaults to false and then draws the very sequences of before (every recorded run's data)."""
    for task_class in (Copy, Reverse):
        plain, default = task_class(n_symbols=16, end_token=False), task_class(n_symbols=16)
        assert plain.vocab_size == 18 and plain.min_length == 3 and plain.eos is None
        for length in (3, 9, 32, 33):
            a, b = plain.sequences(4, length, gen(3)), default.sequences(4, length, gen(3))
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].shape == (4, length + 1)
            assert (a[0][:, -1] < 18).all() and a[1][:, -1].all()  # last token: an answer symbol, no EOS
    with pytest.raises(ConfigError, match="end_token"):
        Copy(end_token="yes")
    assert build_task("reverse", {"n_symbols": 100, "end_token": True}).vocab_size == 103
