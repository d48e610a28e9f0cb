"""Passkey retrieval: a random key hidden at a controlled depth in irrelevant filler, asked for at the end.

After Mohtashami & Jaggi 2023 (Landmark Attention), the test the position-interpolation and YaRN papers
use to show how far a context window really reaches.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor

from posenc.errors import ConfigError
from posenc.tasks.base import BOS, SEP, Task

#: Landmark Attention's filler text, "The grass is green. The sky is blue. The sun is yellow. Here we go.
#: There and back again.", one token per word or full stop; repeated (always from its start) to fill.
FILLER_TEXT = "the grass is green . the sky is blue . the sun is yellow . here we go . there and back again ."
N_DIGITS = 10  # key tokens 2..11 are the digits 0..9
KEY_MARK = 2 + N_DIGITS  # "the pass key is", right before the key
FILLER_WORDS = tuple(dict.fromkeys(FILLER_TEXT.split()))  # the filler vocabulary, first-seen order
FILLER = tuple(KEY_MARK + 1 + FILLER_WORDS.index(word) for word in FILLER_TEXT.split())  # the pattern


class Passkey(Task):
    """``BOS F..F KEY k_1..k_K F..F SEP k_1..k_K``: recall the ``K``-digit key after the query ``SEP``.

    ``F`` is the filler pattern (:data:`FILLER`), each stretch starting at the pattern's beginning; the
    ``length + 1 - (2K + 3)`` filler tokens are split so that the key marker sits after
    ``round(depth * n_filler)`` of them: depth 0 puts it right after BOS, depth 1 right before the query
    (with ``depth < 0`` the split is uniform at random per sequence, as in training). The answers are the
    ``K`` key digits after the query.
    """

    key = "passkey"
    description = "recall a random key hidden at some depth in repeated filler text"
    min_length = 12  # 2 * key_length + 2 with the default key_length; set per instance
    eval_depths = (0.0, 0.25, 0.5, 0.75, 1.0)
    vocab_size = KEY_MARK + 1 + len(FILLER_WORDS)

    def __init__(self, *, key_length: int = 5, depth: float = -1.0) -> None:
        """
        Args:
            key_length: digits in the key (the answer tokens).
            depth: relative position of the key within the filler, in [0, 1]; negative (or None): uniform
                at random per sequence.
        """
        if key_length < 1:
            raise ConfigError(f"task.key_length must be >= 1, got {key_length}")
        if depth is not None and depth > 1:  # also refuses nan via the next check
            raise ConfigError(f"task.depth must be in [0, 1], or negative for a random depth; got {depth}")
        if depth is not None and math.isnan(depth):
            raise ConfigError("task.depth must be a number, got nan")
        self.key_length = key_length
        self.answer_alphabet = N_DIGITS
        self.depth = None if depth is None or depth < 0 else float(depth)
        self.min_length = 2 * key_length + 2  # BOS KEY k.. SEP k.. with no filler: length + 1 tokens

    def at_depth(self, depth: float) -> Passkey:
        if not 0.0 <= depth <= 1.0:
            raise ConfigError(f"passkey depth must be in [0, 1], got {depth}")
        fixed = copy.copy(self)
        fixed.depth = float(depth)
        return fixed

    def filler_before(self, length: int) -> int | None:
        """Filler tokens before the key marker at ``length`` when the depth is fixed (None: random)."""
        if self.depth is None:
            return None
        n_filler = length + 1 - (2 * self.key_length + 3)
        return math.floor(self.depth * n_filler + 0.5)

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        k, total = self.key_length, length + 1
        n_filler = total - (2 * k + 3)
        digits = 2 + torch.randint(N_DIGITS, (batch_size, k), generator=generator)  # [b, K]
        fixed = self.filler_before(length)
        if fixed is None:
            before = torch.randint(n_filler + 1, (batch_size, 1), generator=generator)  # [b, 1]
        else:
            before = torch.full((batch_size, 1), fixed)
        j = torch.arange(total).expand(batch_size, total)  # [b, total] positions
        pattern = torch.tensor(FILLER)
        key_start = before + 2  # BOS, `before` filler tokens, KEY
        after_start = key_start + k  # the second filler stretch starts its pattern afresh
        tokens = torch.where(j >= after_start, pattern[(j - after_start) % len(FILLER)],
                             pattern[(j - 1) % len(FILLER)])  # fmt: skip
        in_key = (j >= key_start) & (j < after_start)
        tokens = torch.where(in_key, digits.gather(1, (j - key_start).clamp(0, k - 1)), tokens)
        tokens = torch.where(j == key_start - 1, KEY_MARK, tokens)
        tokens[:, 0] = BOS
        tokens[:, total - k - 1] = SEP
        tokens[:, total - k :] = digits
        answer = torch.zeros_like(tokens, dtype=torch.bool)
        answer[:, total - k :] = True
        return tokens, answer
