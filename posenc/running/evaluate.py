"""Scoring a model on a task at an exact length: loss, token accuracy and exact match on answer tokens."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.errors import PosencError
from posenc.tasks import Batch, Task

EVAL_SEED = 1234  # evaluation data is the same for every run, so encoders see identical sequences
BATCH_TOKENS = 16384  # tokens per forward pass in evaluation: bounds activation memory at any length


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when present), ``cpu`` or ``cuda`` as a device; CUDA asked for but absent raises."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise PosencError("device=cuda was asked for, but no CUDA device is available")
    return torch.device(name)


def answer_loss(logits: Tensor, batch: Batch) -> Tensor:
    """Mean cross-entropy over answer tokens. logits ``[b, s, vocab]``.

    Masked by multiplication, not boolean indexing, so that no host-device sync happens on CUDA.
    """
    per_token = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")  # [b*s]
    mask = batch.mask.flatten()
    return torch.where(mask, per_token, 0.0).sum() / mask.sum().clamp(min=1)


def perplexity(loss: float) -> float:
    """``exp(loss)`` for a mean loss in nats, capped at ``exp(700)`` (no overflow); NaN stays NaN."""
    return math.exp(min(loss, 700.0)) if not math.isnan(loss) else math.nan


@dataclass
class Scores:
    """Sums over answer tokens and sequences; combine batches by adding, then read the means."""

    loss_sum: float = 0.0
    correct_tokens: int = 0
    answer_tokens: int = 0
    exact_sequences: int = 0
    sequences: int = 0

    def add(self, logits: Tensor, batch: Batch) -> None:
        mask = batch.mask
        self.loss_sum += F.cross_entropy(logits[mask], batch.targets[mask], reduction="sum").item()
        right = (logits.argmax(-1) == batch.targets) | ~mask  # [b, s]; non-answers count as right
        self.correct_tokens += int((right & mask).sum())
        self.answer_tokens += int(mask.sum())
        self.exact_sequences += int(right.all(dim=1).sum())
        self.sequences += mask.shape[0]

    def means(self) -> dict[str, float]:
        n = max(self.answer_tokens, 1)
        return {
            "loss": self.loss_sum / n,
            "perplexity": perplexity(self.loss_sum / n),  # per answer token; lm: per byte
            "token_accuracy": self.correct_tokens / n,
            "exact_match": self.exact_sequences / max(self.sequences, 1),
            "n_sequences": self.sequences,
        }


POSITION_BINS = 64  # accuracy by answer position: at most this many bins of equal width per length


@dataclass
class Evaluation:
    """One evaluation in detail: the means, each sequence's scores and accuracy by answer position.

    ``per_sequence`` holds arrays ``[n_sequences]`` (``exact_match`` 0/1, ``token_accuracy``, ``loss`` mean
    over the sequence's answer tokens), index ``i`` being the same evaluation sequence for every run.
    ``positions`` holds ``position`` (first position of each bin, ``bin_width`` wide), ``correct`` and
    ``total`` answer tokens per bin: where in the sequence answers start to fail.
    """

    means: dict[str, float]
    per_sequence: dict[str, np.ndarray]
    positions: dict[str, np.ndarray]
    bin_width: int
    fingerprint: str = ""  # of the sequences evaluated (sequences_fingerprint): the same for every run


class _Collector:
    """Accumulates batches into an :class:`Evaluation` (one host sync per batch)."""

    def __init__(self, length: int) -> None:
        self.scores = Scores()
        self.bin_width = max(1, -(-length // POSITION_BINS))
        n_bins = -(-length // self.bin_width)
        self.correct, self.total = np.zeros(n_bins, np.int64), np.zeros(n_bins, np.int64)
        self.rows: dict[str, list[np.ndarray]] = {"exact_match": [], "token_accuracy": [], "loss": []}

    def add(self, logits: Tensor, batch: Batch) -> None:
        self.scores.add(logits, batch)
        mask = batch.mask
        nll = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")  # [b, s]
        right = (logits.argmax(-1) == batch.targets) & mask  # [b, s]
        answers = mask.sum(1).clamp(min=1)
        self.rows["exact_match"].append(((right | ~mask).all(1)).float().cpu().numpy())
        self.rows["token_accuracy"].append((right.sum(1) / answers).cpu().numpy())
        self.rows["loss"].append((torch.where(mask, nll, 0.0).sum(1) / answers).cpu().numpy())
        bins = torch.arange(mask.shape[1], device=mask.device) // self.bin_width  # [s]
        n_bins = len(self.total)
        self.correct += torch.bincount(bins, right.sum(0), n_bins).long().cpu().numpy()
        self.total += torch.bincount(bins, mask.sum(0), n_bins).long().cpu().numpy()

    def result(self) -> Evaluation:
        per_sequence = {k: np.concatenate(v) if v else np.zeros(0) for k, v in self.rows.items()}
        keep = self.total > 0
        positions = {
            "position": (np.arange(len(self.total)) * self.bin_width)[keep],
            "correct": self.correct[keep],
            "total": self.total[keep],
        }
        return Evaluation(self.scores.means(), per_sequence, positions, self.bin_width)


def eval_generator(length: int, seed: int = EVAL_SEED) -> torch.Generator:
    """The data stream for evaluation at ``length``: fixed per (seed, length), independent of training."""
    return torch.Generator().manual_seed(seed * 1_000_003 + length)


@torch.no_grad()
def evaluate_detailed(
    model: torch.nn.Module,
    task: Task,
    length: int,
    n_sequences: int,
    *,
    seed: int = EVAL_SEED,
    batch_tokens: int = BATCH_TOKENS,
) -> Evaluation:
    """Score ``model`` on ``n_sequences`` evaluation sequences of exactly ``length`` tokens, in detail.

    Sequences come from ``task.for_evaluation().evaluation_batches`` (fresh random sequences, fixed by
    ``seed`` and ``length``; ``lm``: consecutive windows of the same held-out text at every length).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    collector = _Collector(length)
    digest = hashlib.sha256()
    for batch in evaluation_batches(task, length, n_sequences, seed, batch_tokens):
        add_to_digest(digest, batch)
        batch = batch.to(device)
        collector.add(model(batch.inputs).float(), batch)
    model.train(was_training)
    return dataclasses.replace(collector.result(), fingerprint=digest.hexdigest()[:FINGERPRINT_HEX])


FINGERPRINT_HEX = 16  # 64 bits of SHA-256: two different sets of sequences share it with odds of 2**-64


def evaluation_batches(
    task: Task, length: int, n_sequences: int, seed: int = EVAL_SEED, batch_tokens: int = BATCH_TOKENS
) -> Iterator[Batch]:
    """The evaluation sequences of ``task`` at ``length``, in the batches :func:`evaluate_detailed` scores."""
    per_batch = max(1, batch_tokens // length)
    yield from task.for_evaluation().evaluation_batches(n_sequences, length, per_batch, eval_generator(length, seed))


def add_to_digest(digest, batch: Batch) -> None:
    """Feed ``batch``'s tokens, targets and answer mask into ``digest`` as little-endian int64 and uint8 bytes,
    which are the same on every machine (the sequences come from the CPU generator)."""
    for part in (batch.inputs, batch.targets):
        digest.update(part.to(torch.int64).numpy().astype("<i8").tobytes())
    digest.update(batch.mask.to(torch.uint8).numpy().tobytes())


def sequences_fingerprint(
    task: Task, length: int, n_sequences: int, seed: int = EVAL_SEED, batch_tokens: int = BATCH_TOKENS
) -> str:
    """A fingerprint of the sequences :func:`evaluate_detailed` scores at ``length``, made without a model: a
    run evaluated elsewhere (another torch version's generator, another task option) is paired with these
    sequences only if its fingerprint is the same (``posenc compare --baseline``)."""
    digest = hashlib.sha256()
    for batch in evaluation_batches(task, length, n_sequences, seed, batch_tokens):
        add_to_digest(digest, batch)
    return digest.hexdigest()[:FINGERPRINT_HEX]


def evaluate(
    model: torch.nn.Module,
    task: Task,
    length: int,
    n_sequences: int,
    *,
    seed: int = EVAL_SEED,
    batch_tokens: int = BATCH_TOKENS,
) -> dict[str, float]:
    """Score ``model`` on ``n_sequences`` fresh sequences of exactly ``length`` tokens.

    Returns ``loss`` (mean answer-token cross-entropy, nats), ``perplexity`` (``exp(loss)``),
    ``token_accuracy``, ``exact_match`` (share of sequences with every answer token right) and
    ``n_sequences``. Sequences come from ``task.for_evaluation()`` (held-out text for ``lm``).
    """
    return evaluate_detailed(model, task, length, n_sequences, seed=seed, batch_tokens=batch_tokens).means


MIN_SEQUENCES = 64  # at any length: one run's exact-match 95% Wilson half-width is then <= 0.12


def default_sequences(length: int, min_tokens: int = 32768, minimum: int = MIN_SEQUENCES) -> int:
    """How many sequences to evaluate at ``length``: about ``min_tokens`` tokens, at least ``minimum``."""
    return max(minimum, math.ceil(min_tokens / length))
