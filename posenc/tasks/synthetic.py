"""Symbol tasks: copy, reverse and multi-query associative recall."""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.errors import ConfigError
from posenc.tasks.base import BOS, SEP, Task


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

    def _answer(self, symbols: Tensor) -> Tensor:
        """What follows the separator, given the symbols ``[b, n]``."""
        return symbols

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        n = (length - 1) // 2
        pad = length - 2 * n  # leading BOS tokens, 1 or 2, so the total is length + 1
        symbols = 2 + torch.randint(self.n_symbols, (batch_size, n), generator=generator)
        head = torch.full((batch_size, pad), BOS)
        sep = torch.full((batch_size, 1), SEP)
        tokens = torch.cat((head, symbols, sep, self._answer(symbols)), dim=1)  # [b, length + 1]
        answer = torch.zeros_like(tokens, dtype=torch.bool)
        answer[:, pad + n + 1 :] = True
        return tokens, answer


class Reverse(Copy):
    """``BOS.. x_1..x_n SEP x_n..x_1``: the symbols in reverse order after the separator (layout as copy)."""

    key = "reverse"
    description = "repeat a random symbol string backwards after a separator"

    def _answer(self, symbols: Tensor) -> Tensor:
        return symbols.flip(1)


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
