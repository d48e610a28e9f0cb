"""Finding run directories (posenc/running/runs.py)."""

import pytest

from posenc.errors import PosencError
from posenc.files import CHECKPOINT_FILE
from posenc.running.runs import find_runs


def test_runs_nested_in_a_run_folder_are_found_with_it(tmp_path):
    """`posenc train` puts a run with overrides inside the default run's folder: naming that folder names
    all of them (`posenc runs --runs results/runs/copy/rope/seed0` lists three runs, not one)."""
    default = tmp_path / "seed0"
    runs = [default, default / "train.steps=100", default / "train.lr=0.001"]
    for run in runs:
        run.mkdir(parents=True, exist_ok=True)
        (run / CHECKPOINT_FILE).write_bytes(b"")
    (tmp_path / "seed0" / "empty").mkdir()
    assert find_runs([default]) == sorted(runs)
    assert find_runs([tmp_path]) == sorted(runs)
    assert find_runs([default / "train.lr=0.001"]) == [default / "train.lr=0.001"]


def test_nothing_to_find_is_one_error(tmp_path):
    with pytest.raises(PosencError, match="no trained runs"):
        find_runs([tmp_path])
    with pytest.raises(PosencError, match="not found"):
        find_runs([tmp_path / "missing"])
