"""Synthetic tasks, generated on the fly at any length and deterministic from a ``torch.Generator``.

A task of length ``L`` is a batch of ``L + 1`` token sequences: the model reads the first ``L`` tokens and
predicts the next token at each position. Loss and metrics count only the *answer* tokens. Because
metrics are computed with teacher forcing, a sequence's exact match (every answer token's argmax is
right) is the same as greedy decoding's exact match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc.errors import ConfigError
from posenc.options import check_options

BOS, SEP = 0, 1  # special tokens shared by all tasks; data tokens start at 2


@dataclass
class Batch:
    inputs: Tensor  # [b, s] token ids the model reads
    targets: Tensor  # [b, s] next-token targets
    mask: Tensor  # [b, s] bool, True on answer tokens (the only ones scored)

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.mask.to(device))


class Task:
    """A sequence family; subclasses define the vocabulary and :meth:`sequences`."""

    key: ClassVar[str]
    description: ClassVar[str]
    min_length: ClassVar[int]  # shortest length with at least one answer token
    vocab_size: int

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Full token sequences ``[b, length + 1]`` and their answer mask ``[b, length + 1]``."""
        raise NotImplementedError

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        """A batch of ``batch_size`` sequences the model reads at exactly ``length`` positions."""
        if length < self.min_length:
            raise ConfigError(f"task '{self.key}' needs a length of at least {self.min_length}, got {length}")
        tokens, answer = self.sequences(batch_size, length, generator)
        return Batch(tokens[:, :-1], tokens[:, 1:], answer[:, 1:])


class Copy(Task):
    """``BOS.. x_1..x_n SEP x_1..x_n``: repeat ``n = (L-1)//2`` random symbols after the separator."""

    key = "copy"
    description = "repeat a random symbol string after a separator"
    min_length = 3

    def __init__(self, *, n_symbols: int = 16) -> None:
        if n_symbols < 2:
            raise ConfigError(f"task.n_symbols must be >= 2, got {n_symbols}")
        self.n_symbols = n_symbols
        self.vocab_size = 2 + n_symbols

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        n = (length - 1) // 2
        pad = length - 2 * n  # leading BOS tokens, 1 or 2, so the total is length + 1
        symbols = 2 + torch.randint(self.n_symbols, (batch_size, n), generator=generator)
        head = torch.full((batch_size, pad), BOS)
        sep = torch.full((batch_size, 1), SEP)
        tokens = torch.cat((head, symbols, sep, symbols), dim=1)  # [b, length + 1]
        answer = torch.zeros_like(tokens, dtype=torch.bool)
        answer[:, pad + n + 1 :] = True
        return tokens, answer


class Retrieval(Task):
    """Multi-query associative recall: ``k_1 v_1 .. k_K v_K SEP q_1 a_1 .. q_K a_K``.

    Each sequence draws its own random dictionary key -> value; the context lists ``K = (L-1)//4`` pairs
    (keys drawn with replacement, always bound to the same value), then ``K`` queries of keys from the
    context, each followed by its value, the answer. Any length is valid with a fixed vocabulary.
    After Zoology's MQAR (Arora et al. 2023).
    """

    key = "retrieval"
    description = "answer the values of queried keys from key-value pairs (MQAR)"
    min_length = 5

    def __init__(self, *, n_keys: int = 32, n_values: int = 32) -> None:
        if n_keys < 1 or n_values < 2:
            raise ConfigError(f"task needs n_keys >= 1 and n_values >= 2, got {n_keys}, {n_values}")
        self.n_keys, self.n_values = n_keys, n_values
        self.vocab_size = 2 + n_keys + n_values

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        k = (length - 1) // 4
        pad = length - 4 * k  # leading BOS tokens so the total is length + 1
        table = torch.randint(self.n_values, (batch_size, self.n_keys), generator=generator)  # [b, n_keys]
        keys = torch.randint(self.n_keys, (batch_size, k), generator=generator)  # [b, K]
        query_idx = torch.randint(k, (batch_size, k), generator=generator)  # [b, K]
        queries = keys.gather(1, query_idx)
        key_tok = lambda t: 2 + t  # noqa: E731
        val_tok = lambda t: 2 + self.n_keys + t  # noqa: E731
        pairs = torch.stack((key_tok(keys), val_tok(table.gather(1, keys))), dim=2).flatten(1)  # [b, 2K]
        asks = torch.stack((key_tok(queries), val_tok(table.gather(1, queries))), dim=2).flatten(1)
        head = torch.full((batch_size, pad), BOS)
        sep = torch.full((batch_size, 1), SEP)
        tokens = torch.cat((head, pairs, sep, asks), dim=1)  # [b, length + 1]
        answer = torch.zeros_like(tokens, dtype=torch.bool)
        answer[:, pad + 2 * k + 2 :: 2] = True  # the value after each query
        return tokens, answer


#: The registry: key -> task class. ``conf/task/<key>.yaml`` exists for every key.
TASKS: dict[str, type[Task]] = {"copy": Copy, "retrieval": Retrieval}


def check_task_name(name: str) -> None:
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; known tasks: {', '.join(TASKS)}")


def build_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """Build task ``name``; unknown names or options raise :class:`ConfigError`."""
    check_task_name(name)
    cls = TASKS[name]
    return cls(**check_options("task", name, cls, options or {}))
