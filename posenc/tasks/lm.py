"""Byte-level language modelling on a local text corpus: perplexity against length, as in ALiBi's
(Press et al. 2022) extrapolation measurement.

**The default corpus is Python's own standard library** (``*.py`` under ``sysconfig.get_paths()["stdlib"]``,
without ``site-packages``, ``dist-packages`` and test folders): real, structured text that every machine
running posenc already has, with long-range structure (indentation, names defined far above). Its content
depends on the Python version, so **numbers are comparable only between runs on the same stdlib**:
:meth:`LanguageModelling.describe_data` names the text used (file count, bytes, sha256 prefix).
``task.corpus=FOLDER`` (with ``task.pattern``) uses any folder of text files instead.

Files are taken in a fixed pseudo-random order (sha256 of the relative path) until ``max_bytes``, so a cap
samples the whole library rather than its alphabetical start. A file is held out for evaluation by its path
alone (another, independent part of the same hash below ``eval_fraction``); if that holds out none or all
of the loaded files, the one with the lowest (highest) hash moves. A one-file corpus holds out its last
``eval_fraction`` of bytes. Each split is its files' bytes concatenated; a window may span two files.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import os
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from posenc.errors import ConfigError, PositionRangeError
from posenc.files import special_file
from posenc.task_facts import LM_METRICS
from posenc.tasks.base import Batch, Task

#: Folders skipped in the stdlib default (installed packages and the test suites).
STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


@dataclass(frozen=True)
class Corpus:
    """A loaded corpus: its two splits as byte tensors and what they were made of."""

    root: str
    pattern: str
    files: tuple[str, ...]  # relative paths, in load order
    held_out: tuple[str, ...]  # the evaluation split's files (a one-file corpus: that file, its tail)
    train: Tensor  # uint8 [n_train]
    eval: Tensor  # uint8 [n_eval]
    sha256: str  # of both splits' bytes
    stdlib: bool

    def info(self) -> dict[str, Any]:
        return {
            "corpus": f"Python {platform.python_version()} stdlib" if self.stdlib else self.root,
            "root": self.root, "pattern": self.pattern, "files": len(self.files),
            "bytes": int(self.train.numel() + self.eval.numel()), "eval_files": len(self.held_out),
            "train_bytes": int(self.train.numel()), "eval_bytes": int(self.eval.numel()),
            "sha256": self.sha256,
        }  # fmt: skip


_CORPORA: dict[tuple[str, str, int, float], Corpus] = {}  # loaded once per process
MAX_CACHED_CORPORA = 4  # corpora kept in memory per process (each up to max_bytes)


def _hash_parts(relative: str) -> tuple[int, float]:
    """(load-order key, split value in [0, 1)) from two independent halves of sha256(relative path)."""
    digest = hashlib.sha256(relative.encode()).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big") / 2**64


def _list_files(root: Path, pattern: str, skip: frozenset[str]) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip)
        rel = Path(folder).relative_to(root)
        found += [(rel / name).as_posix() for name in names if fnmatch.fnmatch(name, pattern)]
    return sorted(found)


def load_corpus(corpus: str, pattern: str, max_bytes: int, eval_fraction: float) -> Corpus:
    """The corpus these options describe, read once per process (see the module docstring)."""
    stdlib = corpus == ""
    root = Path(sysconfig.get_paths()["stdlib"] if stdlib else corpus).expanduser().resolve()
    cache_key = (str(root), pattern, max_bytes, eval_fraction)
    if cache_key in _CORPORA:
        return _CORPORA[cache_key]
    if not root.is_dir():
        raise ConfigError(f"task.corpus: folder {root} does not exist")
    names = _list_files(root, pattern, STDLIB_SKIP if stdlib else frozenset({"__pycache__"}))
    if not names:
        raise ConfigError(f"task.corpus: no files match '{pattern}' under {root}")
    chunks: list[tuple[str, bytes]] = []
    total = 0
    for name in sorted(names, key=lambda n: _hash_parts(n)[0]):
        if total >= max_bytes:
            break
        kind = special_file(root / name)  # a FIFO would block the read forever
        if kind is not None:
            raise ConfigError(f"task.corpus: {root / name} is {kind}, not a file; move it away or narrow task.pattern")
        try:
            data = (root / name).read_bytes()[: max_bytes - total]
        except OSError as err:
            raise ConfigError(f"task.corpus: cannot read {root / name}: {err.strerror or err}") from err
        if data:
            chunks.append((name, data))
            total += len(data)
    if total == 0:
        raise ConfigError(f"task.corpus: the {len(names)} files matching '{pattern}' under {root} are empty")
    if len(chunks) == 1:
        name, data = chunks[0]
        cut = round(len(data) * (1 - eval_fraction))
        train_bytes, eval_bytes, held = data[:cut], data[cut:], (name,)
    else:
        split = {name: _hash_parts(name)[1] for name, _ in chunks}
        held_set = {name for name in split if split[name] < eval_fraction}
        if not held_set:
            held_set = {min(split, key=split.__getitem__)}
        elif len(held_set) == len(split):
            held_set.remove(max(split, key=split.__getitem__))
        train_bytes = b"".join(data for name, data in chunks if name not in held_set)
        eval_bytes = b"".join(data for name, data in chunks if name in held_set)
        held = tuple(name for name, _ in chunks if name in held_set)
    for split, part in (("training", train_bytes), ("held-out", eval_bytes)):
        if not part:
            raise ConfigError(
                f"task.corpus: the {split} split of {root} ({pattern}, {total:,} bytes read) is empty; "
                "use more text, a larger task.max_bytes or another task.eval_fraction"
            )
    digest = hashlib.sha256(train_bytes + b"\0posenc-eval\0" + eval_bytes).hexdigest()
    loaded = Corpus(
        root=str(root), pattern=pattern, files=tuple(name for name, _ in chunks), held_out=held,
        train=torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8),
        eval=torch.frombuffer(bytearray(eval_bytes), dtype=torch.uint8),
        sha256=digest[:12], stdlib=stdlib,
    )  # fmt: skip
    if len(_CORPORA) >= MAX_CACHED_CORPORA:  # bounded: a long-lived process may read many corpora
        _CORPORA.pop(next(iter(_CORPORA)))
    _CORPORA[cache_key] = loaded
    return loaded


class LanguageModelling(Task):
    """Next-byte prediction on windows of ``length + 1`` bytes (token = 2 + byte); every prediction scores.

    Windows start uniformly at random in the split (training: the training files; :meth:`for_evaluation`:
    the held-out files). See the module docstring for the corpus.
    """

    key = "lm"
    description = "byte-level language modelling on local text (default: Python's stdlib sources)"
    min_length = 1
    vocab_size = 2 + 256
    report_metrics = LM_METRICS

    def __init__(
        self,
        *,
        corpus: str = "",
        pattern: str = "*.py",
        max_bytes: int = 8_000_000,
        eval_fraction: float = 0.1,
    ) -> None:
        """
        Args:
            corpus: a folder of text files; empty: Python's standard library.
            pattern: file-name pattern (fnmatch) of the files to read, in all subfolders.
            max_bytes: at most this many bytes are read (both splits together).
            eval_fraction: share of files held out for evaluation, in (0, 1).
        """
        if max_bytes < 2:
            raise ConfigError(f"task.max_bytes must be >= 2, got {max_bytes}")
        if not 0 < eval_fraction < 1:
            raise ConfigError(f"task.eval_fraction must be in (0, 1), got {eval_fraction}")
        if not pattern:
            raise ConfigError("task.pattern must not be empty (e.g. '*.py' or '*.txt')")
        self.corpus = load_corpus(corpus, pattern, max_bytes, eval_fraction)
        self.split = "train"

    def for_evaluation(self) -> LanguageModelling:
        """This task on the held-out files."""
        held = copy.copy(self)
        held.split = "eval"
        return held

    def corpus_info(self) -> dict[str, Any]:
        """What text this task reads: corpus, root, pattern, files, bytes, split sizes and a sha256 prefix."""
        return self.corpus.info()

    def describe_data(self) -> str:
        """One line for reports, e.g. ``Python 3.11.7 stdlib (*.py): 506 files, 8,000,000 bytes ..., unigram
        loss 3.198 nats/byte (...)``: the text read, and :meth:`unigram_loss`, which the results side reads
        back from the tables (:func:`posenc.analysis.compare.unigram_loss`) without torch."""
        i = self.corpus_info()
        return (
            f"{i['corpus']} ({i['pattern']}): {i['files']} files, {i['bytes']:,} bytes "
            f"({i['eval_files']} files, {i['eval_bytes']:,} bytes held out), sha256 {i['sha256']}; "
            f"unigram loss {self.unigram_loss():.3f} nats/byte (the training split's byte frequencies, no "
            "context, on the evaluated text)"
        )

    def unigram_loss(self) -> float:
        """The loss, in nats per byte, of a model that reads no context, on the text every evaluation length
        scores (:meth:`evaluation_text` bytes of the held-out split from its second byte on): each byte
        predicted by the training split's byte frequencies (add-one smoothed over the 256 bytes, so a byte
        the training split lacks is not infinitely surprising). The reference for "has lost the text": a
        model above it reads the text worse than one that ignores the context. Computed once per task."""
        if getattr(self, "_unigram", None) is None:
            counts = torch.bincount(self.corpus.train.long(), minlength=256).double() + 1.0
            log_p = torch.log(counts / counts.sum())
            scored = self.corpus.eval[1 : self.evaluation_text() + 1].long()
            self._unigram = float(-log_p[scored].mean())
        return self._unigram

    #: Bytes of held-out text scored at every evaluation length (Press et al. 2022 score the same
    #: validation text at every length, in non-overlapping windows): 2**19, or what the split holds.
    EVAL_TEXT_BYTES = 1 << 19

    def evaluation_text(self) -> int:
        """Scored bytes of the evaluation text: a multiple of 8192 (so of every power-of-two length)."""
        held = self.corpus.eval.numel() - 1
        return min(self.EVAL_TEXT_BYTES, held // 8192 * 8192 or held)

    def evaluation_sequences(self, length: int, default: int) -> int:
        """Windows of the evaluation text at ``length``: its first ``n * length`` scored bytes, the same
        text at every length (all of it where ``length`` divides it)."""
        return max(1, self.evaluation_text() // length)

    def evaluation_batches(self, n_sequences, length, batch_size, generator):
        """Held-out split: consecutive windows of ``length + 1`` bytes at offsets ``i * length``; window ``i``
        scores bytes ``i*length + 1 .. (i+1)*length`` of the held-out text, so ``n`` windows at length
        ``L`` score the same bytes as ``2n`` windows at ``L/2``. Training split: random windows."""
        if self.split == "train":
            yield from super().evaluation_batches(n_sequences, length, batch_size, generator)
            return
        data = self.corpus.eval
        n_sequences = min(n_sequences, (data.numel() - 1) // length)
        if n_sequences < 1:
            raise PositionRangeError(self._too_short("held-out", length))
        for first in range(0, n_sequences, batch_size):
            starts = torch.arange(first, min(first + batch_size, n_sequences))[:, None] * length
            tokens = 2 + data[starts + torch.arange(length + 1)].long()  # [b, length + 1]
            answer = torch.ones_like(tokens, dtype=torch.bool)
            answer[:, 0] = False
            yield Batch(tokens[:, :-1], tokens[:, 1:], answer[:, 1:])

    def check_length(self, length: int) -> None:
        """Training windows of ``length + 1`` bytes must fit in the training split."""
        if self.corpus.train.numel() < length + 1:
            raise ConfigError(self._too_short("training", length))

    def _too_short(self, split: str, length: int) -> str:
        data = self.corpus.train if split == "training" else self.corpus.eval
        return (
            f"task 'lm': the {split} split of the corpus has {data.numel():,} bytes, fewer than a window "
            f"at length {length} needs ({length + 1:,}); use a larger corpus or task.max_bytes"
        )

    def sequences(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        data = self.corpus.train if self.split == "train" else self.corpus.eval
        window = length + 1
        if data.numel() < window:  # evaluation: a row with a note for this length; training: an error
            if self.split == "train":
                raise ConfigError(self._too_short("training", length))
            raise PositionRangeError(self._too_short("held-out", length))
        starts = torch.randint(data.numel() - window + 1, (batch_size, 1), generator=generator)
        tokens = 2 + data[starts + torch.arange(window)].long()  # [b, length + 1]
        answer = torch.ones_like(tokens, dtype=torch.bool)
        answer[:, 0] = False  # nothing predicts the first byte
        return tokens, answer
