"""Bad input, table-driven: each case gives one `error:` line, a non-zero exit, no traceback, and leaves
every existing file byte-for-byte as it was."""

import os
import signal
from pathlib import Path

import pytest
from conftest import TINY
from typer.testing import CliRunner

from posenc.cli.app import app
from posenc.files import CHECKPOINT_FILE, CONFIG_FILE, LOG_FILE, METRICS_FILE

runner = CliRunner()

# (case id, posenc arguments; {run} is a finished tiny run, {out} a folder with tables, {tmp} the test dir)
CASES = [
    ("unknown encoder", ["train", "encoder=bogus"]),
    ("unknown encoder in a sweep", ["train", "-m", "encoder=rope,bogus"]),
    ("unknown task", ["train", "task=sorting"]),
    ("unknown model preset", ["train", "model=huge"]),
    ("unknown train preset", ["train", "train=fast"]),
    ("unknown top-level key", ["train", "+colour=blue"]),
    ("unknown model option", ["train", "model.width=3"]),
    ("unknown train option", ["train", "train.epochs=3"]),
    ("unknown encoder option", ["train", "encoder=alibi", "+encoder.base=2.0"]),
    ("unknown task option", ["train", "+task.n_colours=3"]),
    ("wrong type: steps", ["train", "train.steps=many"]),
    ("wrong type: lr", ["train", "train.lr=fast"]),
    ("wrong type: variable_length", ["train", "task.variable_length=sometimes"]),
    ("wrong type: encoder base", ["train", "encoder.base=big"]),
    ("zero length", ["train", "task.length=0"]),
    ("negative length", ["train", "task.length=-64"]),
    ("huge length", ["train", "task.length=100000000"]),
    ("odd head dim for rope", ["train", "encoder=rope", "model.d_model=18"]),
    ("odd head dim for xpos", ["train", "encoder=xpos", "model.d_model=18"]),
    ("heads do not divide d_model", ["train", "model.n_heads=3"]),
    ("zero heads", ["train", "model.n_heads=0"]),
    ("negative seed", ["train", "seed=-1"]),
    ("unknown device", ["train", "device=tpu"]),
    ("unknown attention kind", ["train", "model.attention=fast"]),
    ("multirun and --cfg together", ["train", "-m", "encoder=rope,alibi", "--cfg", "job"]),
    ("bad compile switch", ["train", "train.compile=sometimes"]),
    ("compile switch given as a number", ["train", "train.compile=1"]),
    ("unknown precision", ["train", "train.precision=fp8"]),
    ("checkpoint from a different encoder", ["train", "encoder=alibi", "hydra.run.dir={run}"]),
    ("resume from nowhere", ["train", "resume={tmp}/nowhere"]),
    ("malformed lengths", ["extrapolate", "--runs", "{run}", "--lengths", "512;2048", "--out", "{out}"]),
    ("zero length to extrapolate", ["extrapolate", "--runs", "{run}", "--lengths", "0,64", "--out", "{out}"]),
    ("negative length to extrapolate", ["extrapolate", "--runs", "{run}", "--lengths=-8", "--out", "{out}"]),
    ("huge length to extrapolate", ["extrapolate", "--runs", "{run}", "--lengths", "9" * 12, "--out", "{out}"]),
    ("missing run directory", ["extrapolate", "--runs", "{tmp}/missing", "--out", "{out}"]),
    ("empty runs folder", ["extrapolate", "--runs", "{tmp}/empty", "--out", "{out}"]),
    ("unreadable checkpoint", ["extrapolate", "--runs", "{tmp}/garbage", "--out", "{out}"]),
    ("unfinished run", ["extrapolate", "--runs", "{tmp}/unfinished", "--out", "{out}"]),
    ("zero sequences", ["extrapolate", "--runs", "{run}", "--sequences", "0", "--out", "{out}"]),
    ("output is a file", ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "{run}/" + METRICS_FILE]),
    ("damaged existing table", ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/damaged"]),
    ("read-only output folder", ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/readonly"]),
    ("unwritable output folder", ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "/proc/posenc"]),
    ("runs of a missing folder", ["runs", "--runs", "{tmp}/missing"]),
    ("unknown rope scaling", ["extrapolate", "--runs", "{run}", "--rope-scaling", "none,magic", "--out", "{out}"]),
    (
        "unknown rope scaling option",
        ["extrapolate", "--runs", "{run}", "--rope-scaling", "yarn:beta=3", "--out", "{out}"],
    ),
    (
        "rope scaling option out of range",
        ["extrapolate", "--runs", "{run}", "--rope-scaling", "yarn:beta_fast=1,beta_slow=2", "--out", "{out}"],
    ),
    (
        "rope scaling option given twice",
        [
            "compare",
            "--runs",
            "{run}",
            "--rope-scaling",
            "llama3:low_freq_factor=1,low_freq_factor=2",
            "--out",
            "{out}",
        ],
    ),
    ("unknown logger", ["train", "logger=bogus"]),
    ("bad wandb mode", ["train", "logger=wandb", "logger.mode=bogus"]),
    ("unknown logger option", ["train", "logger=tensorboard", "+logger.colour=1"]),
    ("schedule of an embedding encoder", ["train", "encoder=schedule", "encoder.layers=[rope,learned]"]),
    ("schedule of an unknown encoder", ["train", "encoder=schedule", "encoder.layers=[rope,bogus]"]),
    ("empty schedule", ["train", "encoder=schedule", "encoder.layers=[]"]),
    ("p_rope removing everything", ["train", "encoder=p_rope", "encoder.removed=1.0"]),
    ("cope with one position", ["train", "encoder=cope", "encoder.n_pos=1"]),
    (
        "zero rope factor",
        ["extrapolate", "--runs", "{run}", "--rope-scaling", "yarn", "--rope-factor", "0", "--out", "{out}"],
    ),
    ("unknown rope scaling to compare", ["compare", "--runs", "{run}", "--rope-scaling", "ntk2", "--out", "{out}"]),
    (
        "compare choosing by a key no run has",
        ["compare", "--runs", "{run}", "--choose", "train.nosuch", "--out", "{out}"],
    ),
    ("unknown encoder option: gamma", ["train", "encoder=rope", "+encoder.gamma=0.5"]),
    ("rope fraction it cannot rotate", ["train", "encoder=rope", "encoder.fraction=0.05"]),
    ("rope_partial fraction out of range", ["train", "encoder=rope_partial", "encoder.fraction=1.5"]),
    ("passkey depth out of range", ["train", "task=passkey", "task.depth=2.0"]),
    ("lm corpus folder missing", ["train", "task=lm", "task.corpus={tmp}/no-corpus"]),
    ("lm corpus too small to split", ["train", "task=lm", "task.corpus={tmp}/tiny-corpus", "task.pattern=*.txt"]),
    (
        "lm window longer than the training text",
        ["train", "task=lm", "task.corpus={tmp}/small-corpus", "task.pattern=*.txt", "task.length=4096"],
    ),
    ("superscript digit in lengths", ["extrapolate", "--runs", "{run}", "--lengths", "16,6²", "--out", "{out}"]),
    ("superscript digit in lengths to compare", ["compare", "--runs", "{run}", "--lengths", "²", "--out", "{out}"]),
    ("retrieval shorter than its pairs", ["train", "task=retrieval", "task.n_pairs=5"]),  # needs 20 > 16 tokens
    ("retrieval with fewer keys than pairs", ["train", "task=retrieval", "task.n_pairs=3", "task.n_keys=2"]),
    ("negative check interval", ["train", "train.check_every=-1"]),
    ("mastery target above 1", ["train", "train.target_exact_match=1.5"]),
    ("report of a folder without a comparison", ["report", "{out}"]),
    ("report of a missing folder", ["report", "{tmp}/missing"]),
    ("compare into a foreign table", ["compare", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/foreign"]),
    # non-finite and out-of-range numbers, refused before any work
    ("lr not a number", ["train", "train.lr=nan"]),
    ("infinite lr", ["train", "train.lr=inf"]),
    ("negative lr", ["train", "train.lr=-0.001"]),
    ("weight decay not a number", ["train", "train.weight_decay=nan"]),
    ("negative weight decay", ["train", "train.weight_decay=-0.1"]),
    ("grad clip not a number", ["train", "train.grad_clip=nan"]),
    ("negative warmup", ["train", "train.warmup_steps=-5"]),
    ("zero steps", ["train", "train.steps=0"]),
    ("zero batch", ["train", "train.batch_size=0"]),
    ("final lr ratio above 1", ["train", "train.final_lr_ratio=2"]),
    ("zero check sequences", ["train", "train.check_sequences=0"]),
    ("rope base of 1", ["train", "encoder=rope", "encoder.base=1.0"]),
    ("rope base not a number", ["train", "encoder=rope", "encoder.base=nan"]),
    ("xpos gamma negative", ["train", "encoder=xpos", "encoder.gamma=-0.4"]),
    ("xpos gamma infinite", ["train", "encoder=xpos", "encoder.gamma=inf"]),
    ("seed beyond 64 bits", ["train", "seed=" + str(2**64)]),
    # sizes that cannot fit
    ("MLP too wide to allocate", ["train", "model.d_mlp=1000000000"]),
    ("too many layers", ["train", "model.n_layers=100000"]),
    ("alphabet too large", ["train", "task.n_symbols=1000000000"]),
    ("randomized position range too large", ["train", "encoder=randomized", "encoder.max_position=10000000000"]),
    # write locations that cannot be written, found before training
    ("run dir is a file", ["train", "hydra.run.dir={run}/" + METRICS_FILE]),
    ("run dir name too long", ["train", "hydra.run.dir={tmp}/" + "r" * 300]),
    ("results root unwritable", ["train", "paths.results=/proc/posenc"]),
    ("unknown launcher", ["train", "-m", "hydra/launcher=rocket", "seed=0,1"]),
    ("output name too long", ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/" + "o" * 300]),
    # malformed run folders
    ("checkpoint whose encoder is a string", ["extrapolate", "--runs", "{tmp}/stringy", "--out", "{out}"]),
    ("compare of a malformed checkpoint", ["compare", "--runs", "{tmp}/badckpt", "--out", "{tmp}/c"]),
    ("checkpoint whose config is not a mapping", ["extrapolate", "--runs", "{tmp}/badckpt", "--out", "{out}"]),
    ("kernels of a malformed checkpoint", ["kernels", "--runs", "{tmp}/badckpt", "--out", "{tmp}/k"]),
    ("kernels of an unknown encoder", ["kernels", "--encoders", "rope,bogus", "--out", "{tmp}/k"]),
    (
        "extrapolate into a foreign table",
        ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/foreign"],
    ),
    ("compare up to zero", ["compare", "--runs", "{run}", "--up-to", "0", "--out", "{tmp}/c"]),
    ("negative sequences", ["extrapolate", "--runs", "{run}", "--sequences", "-4", "--out", "{out}"]),
    ("resume into a half-truncated checkpoint", ["train", "hydra.run.dir={tmp}/truncated"]),
    # issue 27: run files checked before they are trusted; options that cannot mean anything
    ("compare choosing by seed", ["compare", "--runs", "{run}", "--choose", "seed", "--out", "{tmp}/c"]),
    ("compare choosing by the device", ["compare", "--runs", "{run}", "--choose", "device", "--out", "{tmp}/c"]),
    (
        "rope factor without a scaling method",
        ["extrapolate", "--runs", "{run}", "--rope-factor", "4", "--out", "{out}"],
    ),
    (
        "rope factor with scaling none",
        ["compare", "--runs", "{run}", "--rope-scaling", "none", "--rope-factor", "2", "--out", "{tmp}/c"],
    ),
    ("empty metrics.json", ["extrapolate", "--runs", "{tmp}/metrics-empty", "--lengths", "16", "--out", "{out}"]),
    (
        "truncated metrics.json",
        ["extrapolate", "--runs", "{tmp}/metrics-truncated", "--lengths", "16", "--out", "{out}"],
    ),
    (
        "metrics.json not an object",
        ["extrapolate", "--runs", "{tmp}/metrics-list", "--lengths", "16", "--out", "{out}"],
    ),
    ("mistyped metrics.json", ["compare", "--runs", "{tmp}/metrics-mistyped", "--lengths", "16", "--out", "{tmp}/c"]),
    (
        "choosing among runs with a damaged metrics.json",
        ["compare", "--runs", "{tmp}/metrics-empty", "--choose", "train.lr", "--out", "{tmp}/c"],
    ),
    ("damaged config.yaml", ["extrapolate", "--runs", "{tmp}/config-damaged", "--lengths", "16", "--out", "{out}"]),
    ("report of tables whose sequence rows were deleted", ["report", "{tmp}/rows-deleted"]),
    (
        "compare into tables whose sequence rows were deleted",
        ["compare", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/rows-deleted"],
    ),
    # special files (FIFOs) where a run or corpus file is expected: refused, never blocking
    ("metrics.json is a FIFO", ["extrapolate", "--runs", "{tmp}/fifo-metrics", "--lengths", "16", "--out", "{out}"]),
    ("config.yaml is a FIFO", ["extrapolate", "--runs", "{tmp}/fifo-config", "--lengths", "16", "--out", "{out}"]),
    (
        "checkpoint.pt is a FIFO",
        ["extrapolate", "--runs", "{tmp}/fifo-checkpoint", "--lengths", "16", "--out", "{out}"],
    ),
    ("kernels of a FIFO checkpoint", ["kernels", "--runs", "{tmp}/fifo-checkpoint", "--out", "{tmp}/k"]),
    ("train.log is a FIFO", ["train", "hydra.run.dir={tmp}/fifo-log"]),
    ("resume from a FIFO", ["train", "resume={tmp}/fifo-checkpoint/checkpoint.pt"]),
    ("lm corpus holding a FIFO", ["train", "task=lm", "task.corpus={tmp}/fifo-corpus", "task.pattern=*.txt"]),
    ("report of a FIFO table", ["report", "{tmp}/fifo-table"]),
    (
        "extrapolate into a FIFO table",
        ["extrapolate", "--runs", "{run}", "--lengths", "16", "--out", "{tmp}/fifo-table"],
    ),
    # work that cannot fit in memory, refused before it starts (--no-memory-check overrides)
    ("sequences beyond memory", ["extrapolate", "--runs", "{run}", "--sequences", "2000000000", "--out", "{out}"]),
    (
        "sequences beyond memory to compare",
        ["compare", "--runs", "{run}", "--sequences", "2000000000", "--out", "{tmp}/c"],
    ),
    # work that would take longer than --max-hours (default 24 h), refused before it starts
    (
        "lengths beyond the time limit",
        [
            "extrapolate",
            "--runs",
            "{run}",
            "--lengths",
            "1048576",
            "--sequences",
            "100000",
            "--include-not-learned",
            "--no-memory-check",
            "--out",
            "{out}",
        ],
    ),
    (
        "lengths beyond the time limit to compare",
        [
            "compare",
            "--runs",
            "{run}",
            "--lengths",
            "1048576",
            "--sequences",
            "100000",
            "--include-not-learned",
            "--no-memory-check",
            "--out",
            "{tmp}/c",
        ],
    ),
    # a comma list without -m is a sweep Hydra refuses in six lines
    ("sweep without -m", ["train", "encoder=rope,alibi"]),
    ("sweep of seeds without -m", ["train", "seed=0,1"]),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, request) -> Path:
    """A finished tiny run, a folder of tables, and the broken things the cases point at."""
    tmp = tmp_path_factory.mktemp("bad-input")
    result = runner.invoke(app, ["train", *TINY, f"hydra.run.dir={tmp / 'run'}"])
    assert result.exit_code == 0, result.output
    out = tmp / "out"
    assert (
        runner.invoke(app, ["extrapolate", "--runs", str(tmp / "run"), "--lengths", "16", "--out", str(out)]).exit_code
        == 0
    )
    (tmp / "empty").mkdir()
    (tmp / "tiny-corpus").mkdir()
    (tmp / "tiny-corpus" / "one.txt").write_text("ab")  # one file of two bytes: no held-out split
    (tmp / "small-corpus").mkdir()
    for i in range(20):
        (tmp / "small-corpus" / f"t{i}.txt").write_text("x = 1\n" * 20)  # 2,400 bytes in all
    for name, content in [
        ("garbage", b"not a checkpoint"),
        ("unfinished", (tmp / "run" / CHECKPOINT_FILE).read_bytes()),
    ]:
        (tmp / name).mkdir()
        (tmp / name / CHECKPOINT_FILE).write_bytes(content)
    (tmp / "garbage" / METRICS_FILE).write_text("{}")
    import shutil

    import torch

    state = torch.load(tmp / "run" / CHECKPOINT_FILE, weights_only=False)
    (tmp / "truncated").mkdir()
    whole = (tmp / "run" / CHECKPOINT_FILE).read_bytes()
    (tmp / "truncated" / CHECKPOINT_FILE).write_bytes(whole[: len(whole) // 2])
    for name, config in [("stringy", {**state["config"], "encoder": "rope"}), ("badckpt", "not a mapping")]:
        shutil.copytree(tmp / "run", tmp / name)
        torch.save({**state, "config": config}, tmp / name / CHECKPOINT_FILE)
    (tmp / "foreign").mkdir()
    import pandas as pd

    pd.DataFrame({"run": ["x"], "exact_match": [1.0]}).to_parquet(tmp / "foreign" / "extrapolation.parquet")
    (tmp / "damaged").mkdir()
    (tmp / "damaged" / "extrapolation.parquet").write_bytes(b"PAR1 broken")
    for name, text in [
        ("metrics-empty", ""),
        ("metrics-truncated", (tmp / "run" / METRICS_FILE).read_text()[:40]),
        ("metrics-list", "[1, 2]"),
        ("metrics-mistyped", '{"exact_match": "high", "learned": true}'),
    ]:
        shutil.copytree(tmp / "run", tmp / name)
        (tmp / name / METRICS_FILE).write_text(text)
    shutil.copytree(tmp / "run", tmp / "config-damaged")
    (tmp / "config-damaged" / CONFIG_FILE).write_text("task: [unclosed\n")
    for name, file in [
        ("fifo-metrics", METRICS_FILE),
        ("fifo-config", CONFIG_FILE),
        ("fifo-checkpoint", CHECKPOINT_FILE),
    ]:
        shutil.copytree(tmp / "run", tmp / name)
        (tmp / name / file).unlink()
        os.mkfifo(tmp / name / file)
    (tmp / "fifo-log").mkdir()
    os.mkfifo(tmp / "fifo-log" / LOG_FILE)
    shutil.copytree(tmp / "small-corpus", tmp / "fifo-corpus")
    os.mkfifo(tmp / "fifo-corpus" / "t0.txt.fifo.txt")
    assert (
        runner.invoke(
            app, ["compare", "--runs", str(tmp / "run"), "--lengths", "16", "--out", str(tmp / "rows-deleted")]
        ).exit_code
        == 0
    )
    shutil.copytree(tmp / "rows-deleted", tmp / "fifo-table")
    (tmp / "fifo-table" / "extrapolation.parquet").unlink()
    os.mkfifo(tmp / "fifo-table" / "extrapolation.parquet")
    sequences = pd.read_parquet(tmp / "rows-deleted" / "sequences.parquet")
    sequences.iloc[: len(sequences) // 2].to_parquet(tmp / "rows-deleted" / "sequences.parquet")
    (tmp / "readonly").mkdir()
    os.chmod(tmp / "readonly", 0o555)
    request.addfinalizer(lambda: os.chmod(tmp / "readonly", 0o755))
    return tmp


HANG_SECONDS = 120


class Hung(Exception):
    pass


def _hung(signum, frame):
    raise Hung(f"no answer within {HANG_SECONDS} s")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case, args", CASES, ids=[c for c, _ in CASES])
def test_bad_input_is_refused_in_one_line_and_changes_nothing(workspace, monkeypatch, case, args):
    if case == "read-only output folder" and os.geteuid() == 0:
        pytest.skip("root can write into read-only folders")
    monkeypatch.chdir(workspace)
    places = {"run": workspace / "run", "out": workspace / "out", "tmp": workspace}
    argv = [a.format(**places) for a in args]
    if argv[0] == "train":
        argv = ["train", *TINY, *argv[1:]]
    before = snapshot(workspace)
    signal.signal(signal.SIGALRM, _hung)
    signal.alarm(HANG_SECONDS)  # a reader blocked on a FIFO (or any hang) fails the case, not the suite
    try:
        result = runner.invoke(app, argv)
    finally:
        signal.alarm(0)
    assert result.exit_code == 2, (result.exit_code, result.output)
    stderr = result.stderr
    assert "Traceback" not in stderr, stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    after = snapshot(workspace)
    changed = {k for k in before if before[k] != after.get(k)}
    assert not changed, f"{case}: changed {changed}"
    assert sorted(after) == sorted(before), f"{case}: wrote {sorted(set(after) - set(before))}"
