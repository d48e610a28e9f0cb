"""The lm task: byte windows, a held-out split disjoint from training files, corpus loading and errors."""

import hashlib
import re
import sysconfig

import numpy as np
import pytest
import torch

from posenc.errors import ConfigError, PositionRangeError
from posenc.tasks import LanguageModelling, build_task
from posenc.tasks.lm import load_corpus


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def corpus(tmp_path):
    """40 small text files with distinct, recognisable content (and one that does not match)."""
    for i in range(40):
        folder = tmp_path / ("sub" if i % 2 else "")
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:02d}.txt").write_text(f"<{i:02d}>" * 50)  # 200 bytes per file
    (tmp_path / "skip.md").write_text("not matched")
    return tmp_path


def text_of(tokens):
    return bytes((tokens - 2).tolist()).decode()


def files_seen(task):
    """Which files (by their number) a task's windows came from."""
    rows = task.sequences(200, 40, gen())[0]
    return {int(m) for row in rows for m in re.findall(r"<(\d\d)>", text_of(row))}


def test_windows_are_byte_tokens_all_scored(corpus):
    task = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt"})
    assert task.vocab_size == 258 and task.min_length == 1 and task.report_metrics[0] == "perplexity"
    tokens, answer = task.sequences(8, 15, gen())
    assert tokens.shape == answer.shape == (8, 16)
    assert not answer[:, 0].any() and answer[:, 1:].all()
    for row in tokens:
        text = text_of(row)
        assert len(text) == 16 and set(text) <= set("<>0123456789")
        start = text.index("<")
        assert text[start + 3] == ">"  # windows are contiguous bytes of the files
    batch = task.sample(8, 15, gen())
    assert batch.mask.all()  # every next-byte prediction is scored


def test_held_out_split_is_disjoint_from_training_files(corpus):
    task = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt", "eval_fraction": 0.25})
    info = task.corpus_info()
    assert info["files"] == 40 and info["bytes"] == 40 * 200
    assert 0 < info["eval_files"] < 40 and info["eval_bytes"] == 200 * info["eval_files"]
    held = {int(name[-6:-4]) for name in task.corpus.held_out}
    held_out = task.for_evaluation()
    assert held_out.split == "eval" and task.split == "train"  # a copy; training is untouched
    assert held_out.for_evaluation().split == "eval"
    seen_train, seen_eval = files_seen(task), files_seen(held_out)
    assert seen_eval and seen_eval <= held and not seen_train & held
    # a file's split depends on its path alone: a smaller cap keeps the held-out files held out
    capped = load_corpus(str(corpus), "*.txt", 4000, 0.25)
    assert set(capped.held_out) <= set(task.corpus.held_out)
    assert 0 < capped.train.numel() + capped.eval.numel() <= 4000


def test_split_is_stable_and_never_empty(corpus):
    names = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.txt"))
    digests = {n: hashlib.sha256(n.encode()).digest() for n in names}
    expected = {n for n in names if int.from_bytes(digests[n][8:16], "big") / 2**64 < 0.3}
    assert set(load_corpus(str(corpus), "*.txt", 10**6, 0.3).held_out) == expected  # no randomised hash()
    for p in list(corpus.rglob("*.txt"))[2:]:
        p.unlink()
    two = load_corpus(str(corpus), "*.txt", 10**6, 0.01)  # 1% of 2 files: still one held out, one trained
    assert len(two.held_out) == 1 and two.train.numel() == two.eval.numel() == 200
    one_file = corpus / "one"
    one_file.mkdir()
    (one_file / "a.txt").write_text("x" * 1000)
    single = load_corpus(str(one_file), "*.txt", 10**6, 0.1)  # one file: its last 10% held out
    assert (single.train.numel(), single.eval.numel()) == (900, 100)


def test_same_options_load_once(corpus):
    a = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt"})
    b = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt"})
    assert a.corpus is b.corpus


def test_errors_are_one_clear_line(tmp_path, corpus):
    with pytest.raises(ConfigError, match="folder .*nowhere does not exist"):
        build_task("lm", {"corpus": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match="no files match '\\*.rst' under"):
        build_task("lm", {"corpus": str(corpus), "pattern": "*.rst"})
    task = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt", "max_bytes": 1000})
    needle = "training split of the corpus has [0-9,]+ bytes, fewer than a window at length 5000 needs \\(5,001\\)"
    with pytest.raises(ConfigError, match=needle):
        task.sample(1, 5000, gen())
    with pytest.raises(PositionRangeError, match="held-out split .* length 900"):  # evaluation: a note row
        task.for_evaluation().sample(1, 900, gen())
    for options, message in [
        ({"eval_fraction": 0.0}, "eval_fraction must be in"),
        ({"eval_fraction": 1}, "eval_fraction must be in"),
        ({"max_bytes": 0}, "max_bytes must be >= 2"),
        ({"max_bytes": "big"}, "max_bytes must be of type int"),
    ]:
        with pytest.raises(ConfigError, match=message):
            build_task("lm", {"corpus": str(corpus), "pattern": "*.txt", **options})
    (corpus / "empty").mkdir()
    (corpus / "empty" / "e.txt").write_text("")
    with pytest.raises(ConfigError, match="are empty"):
        build_task("lm", {"corpus": str(corpus / "empty"), "pattern": "*.txt"})


def test_default_corpus_is_this_pythons_stdlib():
    task = LanguageModelling()
    info = task.corpus_info()
    assert info["root"] == str(__import__("pathlib").Path(sysconfig.get_paths()["stdlib"]).resolve())
    assert info["bytes"] <= 8_000_000 and info["files"] > 100 and info["eval_bytes"] > 100_000
    parts = {part for name in task.corpus.files for part in name.split("/")}
    assert not parts & {"site-packages", "test", "tests"}
    description = task.describe_data()
    assert description.startswith("Python 3.") and info["sha256"] in description
    window = text_of(task.for_evaluation().sample(1, 200, gen()).inputs[0])
    assert window.isprintable() or "\n" in window


def test_windows_longer_than_a_split_are_a_config_error_in_training_and_a_range_note_in_evaluation(corpus):
    task = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt"})
    train_bytes, eval_bytes = task.corpus.train.numel(), task.corpus.eval.numel()
    task.check_length(train_bytes - 1)  # the longest window that fits
    with pytest.raises(ConfigError, match="training split of the corpus has"):
        task.check_length(train_bytes)
    with pytest.raises(ConfigError, match="training split"):
        task.sample(1, train_bytes, gen())
    with pytest.raises(PositionRangeError, match="held-out split of the corpus has"):  # a NaN row, not a crash
        task.for_evaluation().sample(1, eval_bytes, gen())


def test_a_corpus_too_small_to_split_or_unreadable_is_a_config_error(tmp_path):
    (tmp_path / "one.txt").write_text("ab")
    with pytest.raises(ConfigError, match="held-out split .* is empty"):
        build_task("lm", {"corpus": str(tmp_path), "pattern": "*.txt"})
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "broken.txt").symlink_to(tmp_path / "nowhere.txt")  # matches, cannot be read
    with pytest.raises(ConfigError, match="cannot read"):
        build_task("lm", {"corpus": str(tmp_path / "locked"), "pattern": "*.txt"})


@pytest.fixture
def long_text(tmp_path):
    """One file of 20,000 random printable bytes: its last half is the held-out split."""
    rng = torch.Generator().manual_seed(5)
    text = bytes((32 + torch.randint(95, (20_000,), generator=rng)).tolist())
    (tmp_path / "long.txt").write_bytes(text)
    return tmp_path, text


def scored_bytes(task, n, length, batch_size):
    """The target bytes evaluation scores: n windows at length, batch_size windows per batch, in order."""
    out = []
    for batch in task.evaluation_batches(n, length, batch_size, gen(7)):
        assert batch.inputs.shape[1] == length
        torch.testing.assert_close(batch.inputs[:, 1:], batch.targets[:, :-1])
        out += [bytes((row[mask] - 2).tolist()) for row, mask in zip(batch.targets, batch.mask)]
    return b"".join(out)


def test_evaluation_scores_the_same_held_out_bytes_at_every_length(long_text):
    corpus, text = long_text
    task = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt", "eval_fraction": 0.5}).for_evaluation()
    held = bytes(task.corpus.eval.tolist())
    assert held == text[10_000:]  # one file: its tail is held out
    assert task.evaluation_text() == 8192  # a multiple of 8192 that fits the 10,000 held-out bytes
    expected = held[1 : 1 + 8192]  # every held-out byte but the first is predicted, once
    for length in (16, 32, 64, 128, 256):
        n = task.evaluation_sequences(length, default=3)
        assert n * length == 8192  # the user's default does not apply: the text decides
        assert scored_bytes(task, n, length, batch_size=5) == expected
    assert scored_bytes(task, task.evaluation_sequences(64, 3), 64, batch_size=128) == expected  # batching
    n = task.evaluation_sequences(100, default=3)  # a length that does not divide the text: its prefix
    assert n == 81 and scored_bytes(task, n, 100, batch_size=9) == expected[:8100]
    # asked for more windows than the text holds: only the windows that fit
    assert scored_bytes(task, 10_000, 2000, batch_size=2) == held[1 : 1 + 4 * 2000]


def test_training_split_evaluation_batches_are_random_windows(long_text):
    corpus, text = long_text
    task = build_task("lm", {"corpus": str(corpus), "pattern": "*.txt", "eval_fraction": 0.5})
    batches = list(task.evaluation_batches(6, 32, 4, gen(3)))
    assert [b.inputs.shape[0] for b in batches] == [4, 2]
    for batch in batches:
        for row in batch.inputs:
            assert bytes((row - 2).tolist()) in text[:10_000]  # windows of the training text
    again = list(task.evaluation_batches(6, 32, 4, gen(3)))
    assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(batches, again))


def test_evaluate_detailed_scores_the_held_out_text_once_per_length(long_text):
    from conftest import tiny_config

    from posenc.running.evaluate import evaluate_detailed

    corpus, _ = long_text
    cfg = tiny_config("task=lm", f"task.corpus={corpus}", "task.pattern=*.txt", "task.eval_fraction=0.5")
    task, _, model = cfg.build()
    for length in (32, 64):
        n = task.for_evaluation().evaluation_sequences(length, default=1)
        detail = evaluate_detailed(model, task, length, n, batch_tokens=1000)
        assert detail.means["n_sequences"] == n == len(detail.per_sequence["loss"]) == 8192 // length
        assert int(detail.positions["total"].sum()) == 8192  # the same 8192 bytes at both lengths
        held_out = evaluate_detailed(model, task.for_evaluation(), length, n, batch_tokens=1000)
        assert np.array_equal(detail.per_sequence["loss"], held_out.per_sequence["loss"])  # held-out text


def test_corpus_cache_is_bounded_and_reuses_what_it_holds(corpus):
    from posenc.tasks import lm

    first = lm.load_corpus(str(corpus), "*.txt", 1000, 0.1)
    assert lm.load_corpus(str(corpus), "*.txt", 1000, 0.1) is first  # read once
    for max_bytes in range(2000, 2000 + 2 * lm.MAX_CACHED_CORPORA):
        lm.load_corpus(str(corpus), "*.txt", max_bytes, 0.1)
    assert len(lm._CORPORA) <= lm.MAX_CACHED_CORPORA
    assert lm.load_corpus(str(corpus), "*.txt", 1000, 0.1) is not first  # the oldest was let go


def test_unigram_loss_is_the_training_bytes_frequencies_on_the_evaluated_text(tmp_path):
    """The reference for "has lost the text": -mean log p(byte) over the scored held-out bytes, p the training
    split's byte frequencies (add-one over 256 bytes), recorded in the data line and read back without torch."""
    from posenc.analysis.compare import unigram_loss

    (tmp_path / "a.txt").write_bytes(b"ab" * 4500 + b"aab" * 500)  # one file: its last 10% held out
    task = build_task("lm", {"corpus": str(tmp_path), "pattern": "*.txt"})
    train = task.corpus.train.numpy()
    counts = np.bincount(train, minlength=256) + 1.0
    scored = task.corpus.eval.numpy()[1 : task.evaluation_text() + 1]
    expected = -np.log(counts[scored] / counts.sum()).mean()
    assert task.unigram_loss() == pytest.approx(expected)
    assert expected > 0.69  # more than a fair coin's: the held-out tail is 2/3 a (the training split about 1/2)
    assert task.for_evaluation().unigram_loss() == task.unigram_loss()
    assert unigram_loss(task.describe_data()) == pytest.approx(expected, abs=5e-4)  # printed to 3 decimals
    assert np.isnan(unigram_loss("Python 3.11.7 stdlib (*.py): 474 files")) and np.isnan(unigram_loss(None))
