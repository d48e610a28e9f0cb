"""Tasks, generated on the fly at any length and deterministic from a ``torch.Generator``.

A task of length ``L`` is a batch of ``L + 1`` token sequences: the model reads the first ``L`` tokens and
predicts the next token at each position. Loss and metrics count only the *answer* tokens. Because
metrics are computed with teacher forcing, a sequence's exact match (every answer token's argmax is
right) is the same as greedy decoding's exact match.

* :mod:`posenc.tasks.synthetic` - ``copy``, ``retrieval`` (MQAR), ``reverse``;
* :mod:`posenc.tasks.passkey` - ``passkey`` retrieval at controlled depths;
* :mod:`posenc.tasks.lm` - ``lm``, byte-level language modelling on local text (perplexity vs length).
"""

from __future__ import annotations

from typing import Any

from posenc.registry import Registry
from posenc.tasks.base import BOS, SEP, Batch, Task
from posenc.tasks.lm import LanguageModelling
from posenc.tasks.passkey import Passkey
from posenc.tasks.synthetic import Copy, Retrieval, Reverse

__all__ = [
    "BOS", "SEP", "TASKS", "Batch", "Task", "build_task", "check_task_name",
    "Copy", "Retrieval", "Reverse", "Passkey", "LanguageModelling",
]  # fmt: skip

#: The registry: key -> task class. ``conf/task/<key>.yaml`` exists for every built-in key; plugins (entry
#: points ``posenc.tasks``, ``POSENC_PLUGINS``) join it when it is first read (posenc.plugins).
TASKS: Registry[Task] = Registry(
    "task",
    {
        "copy": Copy,
        "retrieval": Retrieval,
        "reverse": Reverse,
        "passkey": Passkey,
        "lm": LanguageModelling,
    },
    base=Task,
    entry_point_group="posenc.tasks",
)


check_task_name = TASKS.check


def build_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """Build task ``name``; unknown names or options raise :class:`ConfigError`."""
    return TASKS.build(name, options=options)
