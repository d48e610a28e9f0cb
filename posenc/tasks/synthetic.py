"""Symbol tasks: copy, reverse and multi-query associative recall."""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.errors import ConfigError
from posenc.tasks.base import BOS, SEP, Task


class Copy(Task):
    """``BOS.. x_1..x_n SEP x_1..x_n``: repeat ``n = (L-1)//2`` random symbols after the separator.

    ``end_token=True`` appends an end-of-sequence token ``EOS`` (id ``2 + n_symbols``, its own token) after the
    answer, scored with it: ``BOS.. x_1..x_n SEP x_1..x_n EOS`` with ``n = (L-2)//2``. Exact match over the
    answer and ``EOS`` under teacher forcing is then exactly greedy decoding that must also stop (Kazemnejad
    et al. 2023 decode until the end token): greedy decoding reproduces the answer iff every answer token is
    the argmax given the right prefix (by induction its prefix is the right one), and it stops there iff
    ``EOS`` is the argmax after the last answer token - the scored positions, one for one. Without it a model
    that goes on writing symbols after the answer would be scored right.
    """

    key = "copy"
    description = "repeat a random symbol string after a separator"
    min_length = 3

    def __init__(self, *, n_symbols: int = 16, end_token: bool = False) -> None:
        if n_symbols < 2:
            raise ConfigError(f"task.n_symbols must be >= 2, got {n_symbols}")
        if not isinstance(end_token, bool):
            raise ConfigError(f"task.end_token must be true or false, got {end_token!r}")
        self.n_symbols = self.answer_alphabet = n_symbols
        self.end_token = end_token
        self.eos = 2 + n_symbols if end_token else None  # the token after the answer (None: no end token)
        self.vocab_size = 2 + n_symbols + int(end_token)
        self.min_length = 4 if end_token else 3  # BOS, one symbol, SEP, its answer (and EOS)

    def _answer(self, symbols: Tensor) -> Tensor:
        """What follows the separator, given the symbols ``[b, n]``."""
        return symbols

    def symbols_at(self, length: int) -> int:
        """How many symbols a sequence read at ``length`` positions holds: ``(L-1)//2``, with an end token
        ``(L-2)//2`` (lengths ``2n+1`` and ``2n+2``, or ``2n+2`` and ``2n+3``, hold ``n``)."""
        return (length - 1 - int(self.end_token)) // 2

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        n = self.symbols_at(length)
        tail = int(self.end_token)
        pad = length - 2 * n - tail  # leading BOS tokens, 1 or 2, so the total is length + 1
        symbols = 2 + torch.randint(self.n_symbols, (batch_size, n), generator=generator)
        head = torch.full((batch_size, pad), BOS)
        sep = torch.full((batch_size, 1), SEP)
        parts = [head, symbols, sep, self._answer(symbols)]
        if self.end_token:
            parts.append(torch.full((batch_size, 1), self.eos))
        tokens = torch.cat(parts, dim=1)  # [b, length + 1]
        answer = torch.zeros_like(tokens, dtype=torch.bool)
        answer[:, pad + n + 1 :] = True  # the answer, and the end token when there is one
        return tokens, answer


class Reverse(Copy):
    """``BOS.. x_1..x_n SEP x_n..x_1``: the symbols in reverse order after the separator (layout as copy)."""

    key = "reverse"
    description = "repeat a random symbol string backwards after a separator"

    def _answer(self, symbols: Tensor) -> Tensor:
        return symbols.flip(1)


class Retrieval(Task):
    """Multi-query associative recall (MQAR) as Zoology defines it (Arora et al. 2023, ``multiquery_ar``).

    ``BOS.. k_1 v_1 .. k_K v_K`` then a query region of two-token slots: ``K`` slots hold ``q a`` (a key of
    the context and its value, the answer), the others two noise tokens. As in Zoology: the ``K`` keys of a
    sequence are distinct, keys and values come from disjoint vocabularies, values are distinct too, each
    context key is queried exactly once and in random order, and only the values are scored. ``K`` is fixed
    (``n_pairs``), so a longer sequence holds the same dictionary with the queries spread over a longer
    region: extrapolation asks for the same recall over longer distances, not for a bigger dictionary.

    As in Zoology too, the model never reads an answer: the token after a query is noise in the input (the
    value is only the target there). Read after its query, each answer would rule its value out of the
    later queries, so the last one could be answered by elimination (a plateau at about half the values
    right, 1/4 + 1/3 + 1/2 + 1 over four pairs, that delays the recall circuit). ``read_answers=True`` is
    that variant (posenc's retrieval before it followed Zoology here).

    Differences from Zoology: query slots are uniform over the region (Zoology draws gaps from a power law
    with ``power_a = 0.01``, which puts most queries right after the context); non-query slots and the
    token after each query are noise from an alphabet of their own (Zoology draws them from the whole
    vocabulary, keys included).
    """

    key = "retrieval"
    description = "answer the values of queried keys from key-value pairs (Zoology's MQAR)"

    def __init__(
        self, *, n_pairs: int = 4, n_keys: int = 32, n_values: int = 32, n_noise: int = 16, read_answers: bool = False
    ) -> None:
        if n_pairs < 1 or n_keys < n_pairs or n_values < n_pairs or n_noise < 1:
            raise ConfigError(
                "task needs n_pairs >= 1, n_keys >= n_pairs, n_values >= n_pairs and n_noise >= 1 "
                f"(distinct keys and values per sequence); got {n_pairs}, {n_keys}, {n_values}, {n_noise}"
            )
        self.n_pairs, self.n_keys, self.n_values, self.n_noise = n_pairs, n_keys, n_values, n_noise
        self.answer_alphabet = n_values
        # True: each value is read after its query (posenc before Zoology's definition), an option of the
        # configuration so that runs of the two tasks never share an identity or resume one another
        self.answers_read = read_answers
        self.vocab_size = 2 + n_keys + n_values + n_noise
        self.min_length = 4 * n_pairs  # BOS, the pairs and a query slot per pair (the last value unread)

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        k = self.n_pairs
        slots = (length - 2 * k) // 2  # two-token slots in the query region
        pad = length + 1 - 2 * k - 2 * slots  # leading BOS tokens (1 or 2) so the total is length + 1
        draw = lambda n, m: torch.rand(batch_size, n, generator=generator).argsort(dim=1)[:, :m]  # noqa: E731
        keys = 2 + draw(self.n_keys, k)  # [b, K] distinct per sequence
        values = 2 + self.n_keys + draw(self.n_values, k)  # [b, K] distinct, disjoint from keys
        order = draw(k, k)  # [b, K] which pair each query asks for: a random order
        where = draw(slots, k)  # [b, K] the slots holding the queries, uniform without replacement
        noise = (
            2 + self.n_keys + self.n_values + torch.randint(self.n_noise, (batch_size, slots, 2), generator=generator)
        )
        asked = torch.stack((keys.gather(1, order), values.gather(1, order)), dim=2)  # [b, K, 2]
        region = noise.scatter(1, where[..., None].expand(-1, -1, 2), asked)  # [b, slots, 2]
        head = torch.full((batch_size, pad), BOS)
        pairs = torch.stack((keys, values), dim=2).flatten(1)  # [b, 2K]
        tokens = torch.cat((head, pairs, region.flatten(1)), dim=1)  # [b, length + 1]
        answer = torch.zeros(batch_size, slots, 2, dtype=torch.bool)
        answer.scatter_(1, where[..., None].expand(-1, -1, 2), torch.tensor([False, True]).expand(batch_size, k, 2))
        answer = torch.cat((torch.zeros(batch_size, pad + 2 * k, dtype=torch.bool), answer.flatten(1)), dim=1)
        return tokens, answer

    def inputs(self, tokens: Tensor, answer: Tensor, generator: torch.Generator) -> Tensor:
        """``tokens[:, :-1]`` with every answer (a value after its query) replaced by a noise token: Zoology's
        inputs hold no answer, so none can be ruled out by having been read (see the class docstring)."""
        if self.answers_read:
            return tokens[:, :-1]
        read, hidden = tokens[:, :-1].clone(), answer[:, :-1]  # [b, length] each
        noise = 2 + self.n_keys + self.n_values + torch.randint(self.n_noise, read.shape, generator=generator)
        read[hidden] = noise[hidden]
        return read
