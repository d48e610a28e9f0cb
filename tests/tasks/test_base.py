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
