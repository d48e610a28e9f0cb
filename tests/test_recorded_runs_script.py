"""scripts/recorded_runs.py and scripts/train_or_list.sh's read_recorded/recorded/extend_of: a run that another
machine trained (its git-ignored folder is not here, its row is in the committed training table) is not trained
again, and the incremental scripts' tables extend the committed ones instead of replacing them."""

import csv
import os
import subprocess
from pathlib import Path

import pytest
from conftest import listed_runs, load_script

recorded_runs = load_script("recorded_runs")


def write_training(folder: Path, runs: list[str], unfinished: tuple[str, ...] = ()) -> None:
    """A committed training table holding finished ``runs`` and ``unfinished`` ones (a row with its run alone,
    as ``posenc runs`` writes a run without metrics.json); only run and steps matter here."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "training.csv").open("w", newline="") as handle:
        table = csv.writer(handle)
        table.writerow(["run", "encoder", "seed", "steps"])
        table.writerows([run, "x", 0, 100] for run in runs)
        table.writerows([run, "", "", ""] for run in unfinished)


def test_runs_are_read_from_their_runs_folder_on_whatever_root_they_were_trained_under(tmp_path):
    """The csv module reads a quoted run path holding a comma (Hydra's override_dirname) whole; each path is
    cut at its last multirun component, a path without one kept as it is; an unfinished run's row, or no
    table, records nothing."""
    write_training(
        tmp_path / "out",
        [
            "results/multirun/a/copy/nope/seed0",
            "/elsewhere/results/multirun/t5_gap/copy/t5/seed0/encoder.max_distance=null,task.n_symbols=16",
            "runs/seed3",
        ],
        unfinished=("results/multirun/a/copy/nope/seed1",),
    )
    assert recorded_runs.recorded_runs(tmp_path / "out") == [
        "multirun/a/copy/nope/seed0",
        "multirun/t5_gap/copy/t5/seed0/encoder.max_distance=null,task.n_symbols=16",
        "runs/seed3",
    ]
    assert recorded_runs.recorded_runs(tmp_path / "none") == []


def test_an_unreadable_table_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "training.csv").write_text("encoder,seed\nnope,0\n")
    assert recorded_runs.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no run or steps column" in err


@pytest.mark.integration  # runs the script (bash)
def test_the_arms_skip_the_runs_their_committed_tables_record(tmp_path):
    """Recorded under another root, with or without an override folder: skipped; seed 1 is not seed 10's prefix,
    and a recorded run of one arm does not finish another arm's."""
    results = tmp_path / "results"
    mastery_runs = "multirun/kazemnejad_matched/copy/nope/seed0", "multirun/kazemnejad_matched/reverse/t5/seed10"
    unfinished = ("results/multirun/kazemnejad_matched/copy/t5/seed0",)  # training when the table was written
    write_training(
        results / "kazemnejad" / "mastery", [f"/other/machine/results/{run}" for run in mastery_runs], unfinished
    )
    long_run = "multirun/kazemnejad_matched_long/copy/t5/seed1/train.steps=40000"
    write_training(results / "kazemnejad" / "long", [f"results/{long_run}"])
    mastery = listed_runs(Path("scripts/kazemnejad.sh"), results, SEEDS="0 1")
    assert len(mastery) == 19 and not any("seed=0 task=copy encoder=nope" in line for line in mastery)
    assert any("seed=1 task=reverse encoder=t5" in line for line in mastery)
    assert any("seed=0 task=copy encoder=t5" in line for line in mastery)
    long = listed_runs(Path("scripts/kazemnejad.sh"), results, ARM="long", SEEDS="0 1")
    assert len(long) == 19 and not any("seed=1 task=copy encoder=t5 " in line for line in long)
    assert len(listed_runs(Path("scripts/kazemnejad.sh"), results, ARM="schedule", SEEDS="0 1")) == 20


@pytest.mark.integration  # runs the script (bash)
def test_an_override_folder_is_not_taken_for_a_longer_one_beside_it(tmp_path):
    """t5_gap's baseline folder ``encoder.max_distance=null`` is a prefix of alphabet16's
    ``encoder.max_distance=null,task.n_symbols=16`` as a string, not as a folder."""
    alphabet16 = "copy/t5/seed0/encoder.max_distance=null,task.n_symbols=16"
    write_training(tmp_path / "t5_gap", [f"{tmp_path}/multirun/t5_gap/{alphabet16}"])
    listed = listed_runs(Path("scripts/t5_gap.sh"), tmp_path, SEEDS="0", VARIANTS="alphabet16")
    assert len(listed) == 1 and listed[0].endswith("encoder.max_distance=null")


@pytest.mark.integration  # runs the script (bash)
def test_tables_extend_the_committed_ones(tmp_path):
    """With a comparison in the arm's folder, both tables are extended (the runs recorded elsewhere stay);
    without one, compare starts it (--extend would refuse an empty folder)."""
    results = tmp_path / "results"
    run = results / "multirun" / "kazemnejad_matched" / "copy" / "nope" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    log = tmp_path / "calls.txt"
    fake = tmp_path / "posenc"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> {log}\n')
    fake.chmod(0o755)
    env = {**os.environ, "RESULTS": str(results), "POSENC": str(fake), "PYTHON": "true", "TABLES_ONLY": "1"}

    def calls() -> list[str]:
        done = subprocess.run(["bash", "scripts/kazemnejad.sh"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = log.read_text().splitlines()
        log.unlink()
        return lines

    started = calls()
    assert started[0].startswith("runs --extend ") and "--extend" not in started[1]
    (results / "kazemnejad" / "mastery").mkdir(parents=True)
    (results / "kazemnejad" / "mastery" / "comparison.parquet").write_bytes(b"")
    extended = calls()
    assert extended[0].startswith("runs --extend ") and extended[1].startswith("compare ")
    assert " --extend " in extended[1]


@pytest.mark.integration  # runs the script (bash)
def test_an_unreadable_committed_table_stops_the_script_before_any_training(tmp_path):
    (tmp_path / "kazemnejad" / "mastery").mkdir(parents=True)
    (tmp_path / "kazemnejad" / "mastery" / "training.csv").write_text("encoder\nnope\n")
    env = {**os.environ, "RESULTS": str(tmp_path), "POSENC": "false", "LIST": "1"}
    done = subprocess.run(["bash", "scripts/kazemnejad.sh"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().endswith("has no run or steps column: not a posenc training table")
