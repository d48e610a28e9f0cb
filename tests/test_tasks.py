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
        shifted = batch.inputs[:, 1:] == batch.targets[:, :-1]  # targets are the inputs shifted ...
        read = ~batch.mask[:, :-1] if not task.answers_read else torch.ones_like(shifted)
        assert shifted[read].all()
        assert not shifted[~read].any()  # ... except answers a task keeps unread (retrieval)


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


@pytest.mark.parametrize("options", [{"n_pairs": 0}, {"n_pairs": 5, "n_keys": 4}, {"n_pairs": 5, "n_values": 4},
                                     {"n_noise": 0}])
def test_retrieval_refuses_options_without_distinct_keys_and_values(options):
    with pytest.raises(ConfigError, match="n_keys >= n_pairs"):
        build_task("retrieval", options)


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
    assert Task.eval_depths == ()
    task = Copy()
    assert task.for_evaluation() is task  # a synthetic task evaluates on its own (fresh) samples


def test_unknown_task_and_option_are_refused():
    with pytest.raises(ConfigError, match="known tasks: copy, retrieval, reverse, passkey, lm"):
        build_task("sort")
    with pytest.raises(ConfigError, match="no option 'n_symbol'"):
        build_task("copy", {"n_symbol": 3})


@pytest.mark.parametrize("name", TASKS)
def test_evaluation_sequence_i_does_not_depend_on_how_many_sequences_are_scored(name):
    """Paired comparisons (posenc.stats.paired_difference, the report's paired table, the literature checks)
    match sequence i of one run with sequence i of another and cut runs scored on different numbers of
    sequences to their common prefix ("sequence i is the same everywhere"): that needs the first n evaluation
    sequences at a length to be the same whether n or more were scored (e.g. a run evaluated earlier with
    --sequences 64, another with the default 512, merged into one store)."""
    from posenc.evaluate import BATCH_TOKENS, eval_generator

    task = build_task(name).for_evaluation()
    subjects = [task] + [task.at_depth(d) for d in task.eval_depths[:1]]
    length = 64
    per_batch = BATCH_TOKENS // length  # what evaluate_detailed uses at this length
    for subject in subjects:
        def scored(n):
            batches = subject.evaluation_batches(n, length, per_batch, eval_generator(length))
            return torch.cat([b.inputs for b in batches])

        few, many = scored(8), scored(20)
        assert torch.equal(few, many[:8]), f"{name}: sequence i changes with the number of sequences"
