"""Tasks: exact lengths, answer masks, determinism by seed, and answers that follow from the context."""

import pytest
import torch

from posenc.errors import ConfigError
from posenc.tasks import TASKS, build_task


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


def test_unknown_task_and_option_are_refused():
    with pytest.raises(ConfigError, match="known tasks: copy, retrieval, reverse, passkey, lm"):
        build_task("sort")
    with pytest.raises(ConfigError, match="no option 'n_symbol'"):
        build_task("copy", {"n_symbol": 3})


@pytest.mark.parametrize("name", TASKS)
def test_evaluation_sequence_i_does_not_depend_on_how_many_sequences_are_scored(name):
    """Paired comparisons (posenc.analysis.stats.paired_difference, the report's paired table, the literature checks)
    match sequence i of one run with sequence i of another and cut runs scored on different numbers of
    sequences to their common prefix ("sequence i is the same everywhere"): that needs the first n evaluation
    sequences at a length to be the same whether n or more were scored (e.g. a run evaluated earlier with
    --sequences 64, another with the default 512, merged into one store)."""
    from posenc.running.evaluate import BATCH_TOKENS, eval_generator

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
