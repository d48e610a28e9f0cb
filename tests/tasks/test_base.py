"""posenc.tasks.base: what the Task base class gives a task that does not override it."""

import pytest

from posenc.errors import ConfigError
from posenc.tasks import Copy, Task


def test_base_task_has_no_depth():
    with pytest.raises(ConfigError, match="task 'copy' has no depth"):
        Copy().at_depth(0.5)
    assert Task.eval_depths == ()
    task = Copy()
    assert task.for_evaluation() is task  # a synthetic task evaluates on its own (fresh) samples


# --- mixed-length batches (Kazemnejad et al. 2023's per-sequence training lengths) -----------------------

import torch  # noqa: E402

from posenc.tasks import TASKS, build_task  # noqa: E402
from posenc.tasks.base import PAD  # noqa: E402

SYNTHETIC = [k for k in TASKS if k != "lm"]  # lm reads a corpus: its own tests cover sampling


@pytest.mark.parametrize("key", SYNTHETIC)
def test_a_mixed_batch_holds_each_sequence_at_its_own_length_right_padded(key):
    task = build_task(key, {})
    lengths = torch.tensor([task.min_length + 9, task.min_length, task.min_length + 4, task.min_length + 9])
    batch = task.sample_mixed(lengths, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (4, int(lengths.max()))
    for row, n in enumerate(lengths.tolist()):
        assert not batch.mask[row, n:].any()  # padding is never scored
        assert (batch.inputs[row, n:] == PAD).all()
        assert batch.mask[row, :n].any()  # every sequence has answers inside its own length
    # a sequence of one length is what sample() makes at that length: same generator state, same draws
    alone = task.sample(2, task.min_length + 9, torch.Generator().manual_seed(0))
    again = task.sample_mixed(torch.tensor([task.min_length + 9] * 2), torch.Generator().manual_seed(0))
    assert torch.equal(alone.inputs, again.inputs) and torch.equal(alone.mask, again.mask)


def test_mixed_batch_answers_sit_where_the_length_puts_them():
    lengths = torch.tensor([9, 5])  # copy: 4 symbols and 2 symbols
    batch = build_task("copy", {}).sample_mixed(lengths, torch.Generator().manual_seed(1))
    assert batch.mask[0].nonzero().flatten().tolist() == [5, 6, 7, 8]  # predicting the 4 copied symbols
    assert batch.mask[1].nonzero().flatten().tolist() == [3, 4]
    assert torch.equal(batch.targets[0, 5:9], batch.inputs[0, 1:5])  # the copy of the 4 symbols
    assert torch.equal(batch.targets[1, 3:5], batch.inputs[1, 1:3])
