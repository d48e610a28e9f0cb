"""The task interface: token conventions, :class:`Batch` and the :class:`Task` base class."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from posenc.errors import ConfigError
from posenc.task_facts import SEQUENCE_METRICS

BOS, SEP = 0, 1  # special tokens shared by all tasks; data tokens start at 2
PAD = BOS  # fills a mixed-length batch past each sequence's end: never scored, never attended (causal mask)
EVAL_CHUNK = 64  # evaluation draws its sequences this many at a time (see Task.evaluation_batches)


@dataclass
class Batch:
    inputs: Tensor  # [b, s] token ids the model reads
    targets: Tensor  # [b, s] next-token targets
    mask: Tensor  # [b, s] bool, True on answer tokens (the only ones scored)

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.mask.to(device))

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def rows(self, start: int, stop: int) -> Batch:
        """Sequences ``start`` to ``stop - 1``."""
        return Batch(self.inputs[start:stop], self.targets[start:stop], self.mask[start:stop])

    @staticmethod
    def cat(batches: list[Batch]) -> Batch:
        """The sequences of ``batches``, in order."""
        if len(batches) == 1:
            return batches[0]
        return Batch(*(torch.cat([getattr(b, f) for b in batches]) for f in ("inputs", "targets", "mask")))


class Task:
    """A sequence family; subclasses define the vocabulary and :meth:`sequences`.

    Evaluation hooks: :meth:`for_evaluation` (the task evaluation samples from, e.g. held-out text) and,
    for tasks whose difficulty depends on where the information sits, :attr:`eval_depths` with
    :meth:`at_depth` (one evaluation row per depth).
    """

    key: ClassVar[str]
    description: ClassVar[str]
    #: Shortest length with at least one answer token; a class attribute, or set per instance where an
    #: option changes it (passkey's ``key_length``).
    min_length: int
    vocab_size: int
    #: Relative depths evaluation reports separately (see :meth:`at_depth`); empty: no depth axis.
    eval_depths: ClassVar[tuple[float, ...]] = ()
    #: How many tokens an answer token is drawn from (a uniform guess scores 1/this); None: no fixed one (lm).
    answer_alphabet: int | None = None
    #: Whether the model reads each answer token after predicting it (teacher forcing); False: the input
    #: holds another token there (:meth:`inputs`), so targets are the inputs shifted except at answers.
    answers_read: ClassVar[bool] = True
    #: The metrics tables and figures show for this task, most important first.
    report_metrics: ClassVar[tuple[str, ...]] = SEQUENCE_METRICS  # posenc.task_facts: the results side reads it there

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Full token sequences ``[b, length + 1]`` and their answer mask ``[b, length + 1]``."""
        raise NotImplementedError

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        """A batch of ``batch_size`` sequences the model reads at exactly ``length`` positions."""
        if length < self.min_length:
            raise ConfigError(f"task '{self.key}' needs a length of at least {self.min_length}, got {length}")
        tokens, answer = self.sequences(batch_size, length, generator)
        return Batch(self.inputs(tokens, answer, generator), tokens[:, 1:], answer[:, 1:])

    def sample_mixed(self, lengths: Tensor, generator: torch.Generator) -> Batch:
        """A batch whose sequence ``i`` is read at its own length ``lengths[i]`` (``[b]`` ints), right-padded
        with :data:`PAD` to the longest; ``mask`` is False on padding, so loss and scores see each sequence
        as :meth:`sample` would make it alone. Right padding keeps every sequence at positions
        ``0..lengths[i]-1`` and, under the causal mask, no real token attends to a pad.

        This is Kazemnejad et al. 2023's training distribution: each example's length drawn on its own
        (their ``U(1, L)``), several lengths per batch. Sequences of one length are drawn together, shortest
        first, so the batch is a deterministic function of ``lengths`` and ``generator``.
        """
        width = int(lengths.max())
        batch = len(lengths)
        inputs = torch.full((batch, width), PAD, dtype=torch.long)
        targets = torch.full((batch, width), PAD, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.bool)
        for length in sorted(set(lengths.tolist())):
            rows = (lengths == length).nonzero().squeeze(1)  # [n] the sequences of this length
            part = self.sample(len(rows), length, generator)
            inputs[rows, :length], targets[rows, :length], mask[rows, :length] = part.inputs, part.targets, part.mask
        return Batch(inputs, targets, mask)

    def inputs(self, tokens: Tensor, answer: Tensor, generator: torch.Generator) -> Tensor:
        """What the model reads, ``[b, length]``, of the full sequences ``tokens`` and their answer mask
        (both ``[b, length + 1]``): ``tokens[:, :-1]``, each answer token read after it is predicted
        (teacher forcing). A task whose answers must stay unseen overrides this (retrieval)."""
        return tokens[:, :-1]

    def evaluation_batches(
        self, n_sequences: int, length: int, batch_size: int, generator: torch.Generator
    ) -> Iterator[Batch]:
        """The batches evaluation scores: ``n_sequences`` sequences at ``length``, ``batch_size`` at a time.

        Default: fresh sequences from ``generator``, drawn :data:`EVAL_CHUNK` at a time whatever
        ``batch_size`` and ``n_sequences`` are, so sequence ``i`` is the same for every model and every count
        (a task that draws several tensors per batch, like retrieval, would otherwise give sequence ``i``
        other values in a batch of another size, and paired comparisons would pair different sequences).
        """
        pending: list[Batch] = []
        made = 0
        while made < n_sequences:
            chunk = self.sample(EVAL_CHUNK, length, generator)
            take = min(EVAL_CHUNK, n_sequences - made)
            pending.append(chunk.rows(0, take))
            made += take
            while pending and (sum(len(b) for b in pending) >= batch_size or made == n_sequences):
                joined = Batch.cat(pending)
                yield joined.rows(0, batch_size)
                pending = [joined.rows(batch_size, len(joined))] if len(joined) > batch_size else []

    def evaluation_sequences(self, length: int, default: int) -> int:
        """How many sequences evaluation scores at ``length`` when the user does not say: ``default``."""
        return default

    def check_length(self, length: int) -> None:
        """Raise :class:`ConfigError` if the task cannot train at ``length`` (beyond ``min_length``, which
        the config checks): e.g. ``lm`` windows longer than its training text. Default: any length."""

    def describe_data(self) -> str:
        """One line naming the data this task reads where it comes from outside posenc (``lm``'s corpus),
        for logs and reports; empty for generated tasks."""
        return ""

    def for_evaluation(self) -> Task:
        """The task evaluation samples from: ``self``, or a held-out split (``lm``) so that evaluation never
        scores training data."""
        return self

    def at_depth(self, depth: float) -> Task:
        """A copy of this task with its information fixed at relative ``depth`` (tasks listing
        :attr:`eval_depths`); others raise :class:`ConfigError`."""
        raise ConfigError(f"task '{self.key}' has no depth to fix (it lists no eval_depths)")
