"""The `posenc` command as a user runs it: train, multirun, extrapolate, listings and bad input."""

from pathlib import Path

import pandas as pd
import pytest
from conftest import LEARNS, TINY, posenc_cli
from typer.testing import CliRunner

from posenc.analysis.store import COLUMNS, POSITION_COLUMNS, RUN_NEUTRAL_KEYS, SEQUENCE_COLUMNS
from posenc.cli.app import app
from posenc.cli.hydra_entry import short_dirname
from posenc.encoders import ENCODERS
from posenc.files import CHECKPOINT_FILE, CONFIG_FILE, HISTORY_FILE, LOG_FILE, METRICS_FILE

runner = CliRunner()
# The sub-folder Hydra names after the overrides of the `trained_runs` sweep (sorted, joined by commas).
# Hydra names the folder from the overrides that are not run-neutral (conf/config.yaml's exclude_keys)
OVERRIDE_DIR = short_dirname(",".join(sorted(o for o in [*TINY, *LEARNS] if o.split("=")[0] not in RUN_NEUTRAL_KEYS)))


def assert_one_line_error(returncode: int, stderr: str, *needles: str) -> None:
    assert returncode != 0
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_encoders_lists_the_registry_one_per_line():
    result = runner.invoke(app, ["encoders"])
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines][: len(ENCODERS.builtins())] == ENCODERS.builtins()


def test_train_single_run_writes_the_run_directory(tmp_path):
    result = posenc_cli("train", *TINY, "hydra.run.dir=run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    for name in (CONFIG_FILE, CHECKPOINT_FILE, METRICS_FILE, HISTORY_FILE, LOG_FILE):
        assert (run / name).is_file(), name
    assert "done in" in (run / LOG_FILE).read_text()


def result_job(cwd: Path) -> str:
    return posenc_cli("train", "encoder=alibi", "task.length=32", "--cfg", "job", cwd=cwd).stdout


def test_train_passes_hydra_flags_through(tmp_path):
    result = posenc_cli("train", "encoder=alibi", "task.length=32", "--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "name: alibi" in result.stdout and "length: 32" in result.stdout
    result = posenc_cli("train", "--help", cwd=tmp_path)
    assert result.returncode == 0 and f"encoder: {', '.join(sorted(ENCODERS))}" in result.stdout
    assert not (tmp_path / "results").exists()  # printing config or help trains nothing
    # `~experiment` removes the default experiment, which is none: the config composes as without it
    removed = posenc_cli("train", "encoder=alibi", "task.length=32", "~experiment", "--cfg", "job", cwd=tmp_path)
    assert removed.returncode == 0 and removed.stdout == result_job(tmp_path), removed.stderr


def test_multirun_sweep_writes_one_run_per_job(trained_runs: Path):
    runs = sorted(str(p.parent.relative_to(trained_runs)) for p in trained_runs.rglob(CHECKPOINT_FILE))
    assert runs == ["copy/learned/seed0/" + OVERRIDE_DIR, "copy/rope/seed0/" + OVERRIDE_DIR]


def test_extrapolate_writes_tidy_tables_and_reports_learned_overflow(trained_runs: Path, tmp_path):
    out = tmp_path / "tables"
    result = runner.invoke(
        app,
        [
            "extrapolate",
            "--runs",
            str(trained_runs),
            "--lengths",
            "16,40",
            "--out",
            str(out),
            "--sequences",
            "3",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    text = ("note", "data", "fingerprint", "baseline")
    table = pd.read_csv(out / "extrapolation.csv", dtype=dict.fromkeys(text, object))
    for column in text:
        table[column] = table[column].fillna("")  # CSV has no empty-string/NaN distinction
    assert list(table.columns) == [c for c in COLUMNS if c != "config"]  # the whole config: Parquet only
    assert len(table) == 4 and set(table.eval_length) == {16, 40}
    stored = pd.read_parquet(out / "extrapolation.parquet")
    assert list(stored.columns) == COLUMNS and stored["config"].str.startswith("{").all()
    pd.testing.assert_frame_equal(stored.drop(columns="config"), table, check_dtype=False)
    sequences, positions = pd.read_parquet(out / "sequences.parquet"), pd.read_parquet(out / "positions.parquet")
    assert list(sequences.columns) == SEQUENCE_COLUMNS and list(positions.columns) == POSITION_COLUMNS
    assert len(sequences) == table.n_sequences.sum() == 3 * 3  # rope at 16 and 40, learned at 16
    assert not (out / "sequences.csv").exists()
    assert (table.learned == True).all() and (table.steps_to_learn == 2).all()  # noqa: E712
    assert "| encoder" in (out / "extrapolation.md").read_text()
    learned_long = table[(table.encoder == "learned") & (table.eval_length == 40)].iloc[0]
    assert pd.isna(learned_long.exact_match) and "16 positions" in learned_long.note
    rope = table[table.encoder == "rope"]
    assert rope.exact_match.notna().all() and (rope.n_sequences == 3).all()
    assert "learned" in result.stdout and "rope" in result.stdout


def test_extrapolate_updates_rows_in_place_and_skips_broken_runs(trained_runs: Path, tmp_path):
    out = tmp_path / "tables"
    args = ["extrapolate", "--runs", str(trained_runs), "--out", str(out), "--sequences", "2", "--device", "cpu"]
    assert runner.invoke(app, [*args, "--lengths", "16,24"]).exit_code == 0
    first = pd.read_parquet(out / "extrapolation.parquet")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / CHECKPOINT_FILE).write_bytes(b"garbage")
    (broken / METRICS_FILE).write_text("{}")
    result = runner.invoke(app, [*args, "--runs", str(broken), "--lengths", "24,32"])
    assert result.exit_code == 0, result.output
    assert "skipped:" in result.stderr and "cannot read checkpoint" in result.stderr
    table = pd.read_parquet(out / "extrapolation.parquet")
    assert len(table) == 6 and not table.duplicated(["run_id", "eval_length"]).any()
    assert sorted(set(table.eval_length)) == [16, 24, 32]
    kept = table[table.eval_length == 16].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first[first.eval_length == 16].reset_index(drop=True))
    sequences = pd.read_parquet(out / "sequences.parquet")
    assert sorted(sequences.groupby("eval_length").size().items()) == [(16, 4), (24, 2), (32, 2)]  # learned: 16 only


def test_extrapolate_says_which_runs_did_not_learn_and_were_evaluated_at_the_training_length(trained_runs, tmp_path):
    import json
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(trained_runs, runs)
    metrics = sorted(runs.rglob(METRICS_FILE))  # learned, then rope
    (metrics[1]).write_text(
        json.dumps({**json.loads(metrics[1].read_text()), "learned": False, "steps_to_learn": None})
    )
    args = [
        "extrapolate",
        "--runs",
        str(runs),
        "--out",
        str(tmp_path / "tables"),
        "--sequences",
        "2",
        "--device",
        "cpu",
    ]
    result = runner.invoke(app, [*args, "--lengths", "16,24"])
    assert result.exit_code == 0, result.output
    note = " ".join(result.stderr.split())  # as printed, folded at the terminal's width
    assert "note: not learned at the training length by every seed of the configuration, so evaluated there" in note
    assert f"rope/copy seed 0 (not learned) ({metrics[1].parent}" in note and "learned/copy" not in note
    result = runner.invoke(app, [*args, "--lengths", "16"])  # nothing longer asked for: nothing to say
    assert result.exit_code == 0 and "not learned" not in result.stderr


def test_runs_lists_training_metrics(trained_runs: Path, tmp_path):
    result = runner.invoke(app, ["runs", "--runs", str(trained_runs), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "training.csv")
    assert sorted(table.encoder) == ["learned", "rope"]
    assert (table.steps == 2).all() and (table.budget == 4).all()  # learned at the first check (step 2)
    assert (table.steps_to_learn == 2).all() and table.learned.all() and table.exact_match.between(0, 1).all()


@pytest.mark.parametrize("lengths", ["5x", "0", "-3", "", "512,,1", "1e3", "99999999"])
def test_extrapolate_refuses_malformed_lengths_and_keeps_existing_tables(trained_runs, tmp_path, lengths):
    out = tmp_path / "tables"
    out.mkdir()
    (out / "extrapolation.csv").write_text("precious\n")
    result = runner.invoke(app, ["extrapolate", "--runs", str(trained_runs), f"--lengths={lengths}", "--out", str(out)])
    assert_one_line_error(result.exit_code, result.stderr, "--lengths")
    assert (out / "extrapolation.csv").read_text() == "precious\n"


def test_extrapolate_refuses_missing_run_directories(tmp_path):
    result = runner.invoke(app, ["extrapolate", "--runs", str(tmp_path / "nope"), "--out", str(tmp_path)])
    assert_one_line_error(result.exit_code, result.stderr, "run directory not found")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["extrapolate", "--runs", str(empty), "--out", str(tmp_path)])
    assert_one_line_error(result.exit_code, result.stderr, "no trained runs")


def test_extrapolate_reports_unreadable_checkpoints(tmp_path):
    run = tmp_path / "broken"
    run.mkdir()
    (run / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    (run / METRICS_FILE).write_text("{}")
    result = runner.invoke(app, ["extrapolate", "--runs", str(run), "--out", str(tmp_path)])
    assert_one_line_error(result.exit_code, result.stderr, "cannot read checkpoint")


@pytest.mark.parametrize(
    "override, needle",
    [
        (
            "encoder=bogus",
            "unknown encoder 'bogus'; known encoders: nope, sinusoidal, learned, alibi, rope, rope_ntk, xpos",
        ),
        ("task=sorting", "unknown task 'sorting'; known tasks: copy, retrieval"),
        ("model.d_model=18", "even head dimension"),
        ("train.steps=abc", "train.steps must be of type int"),
        ("task.length=-4", "task.length must be between"),
    ],
)
def test_train_refuses_bad_input_in_one_line(tmp_path, override, needle):
    result = posenc_cli("train", *TINY, override, "hydra.run.dir=run", cwd=tmp_path)
    assert_one_line_error(result.returncode, result.stderr, needle)
    assert not (tmp_path / "run" / CHECKPOINT_FILE).exists()


def test_sweep_with_an_unknown_encoder_is_refused_before_any_job(tmp_path):
    result = posenc_cli("train", "-m", "encoder=rope,bogus", *TINY, cwd=tmp_path)
    assert_one_line_error(result.returncode, result.stderr, "unknown encoder 'bogus'")
    assert not (tmp_path / "results").exists()
