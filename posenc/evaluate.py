"""Scoring a model on a task at an exact length: loss, token accuracy and exact match on answer tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.tasks import Batch, Task

EVAL_SEED = 1234  # evaluation data is the same for every run, so encoders see identical sequences
BATCH_TOKENS = 16384  # tokens per forward pass in evaluation: bounds activation memory at any length


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


def eval_generator(length: int, seed: int = EVAL_SEED) -> torch.Generator:
    """The data stream for evaluation at ``length``: fixed per (seed, length), independent of training."""
    return torch.Generator().manual_seed(seed * 1_000_003 + length)


@torch.no_grad()
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
    task = task.for_evaluation()
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator = eval_generator(length, seed)
    per_batch = max(1, batch_tokens // length)
    scores = Scores()
    for start in range(0, n_sequences, per_batch):
        batch = task.sample(min(per_batch, n_sequences - start), length, generator).to(device)
        scores.add(model(batch.inputs).float(), batch)
    model.train(was_training)
    return scores.means()


def default_sequences(length: int, min_tokens: int = 32768, minimum: int = 4) -> int:
    """How many sequences to evaluate at ``length``: about ``min_tokens`` tokens, at least ``minimum``."""
    return max(minimum, math.ceil(min_tokens / length))
