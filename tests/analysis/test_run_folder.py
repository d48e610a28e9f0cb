"""posenc/analysis/run_folder.py: a run folder read once - config, metrics, identity, task, learned."""

import json

import yaml
from conftest import learned_run

from posenc.analysis.run_folder import DEFAULT_TRAIN_LENGTH, RunFolder
from posenc.analysis.store import run_identity


def test_a_finished_run_reads_whole_with_its_identity_computed_once(tmp_path, always_learns):
    metrics = learned_run(tmp_path / "run")
    folder = RunFolder.read(tmp_path / "run")
    assert folder.finished and folder.learned and folder.metrics == metrics
    assert folder.identity == run_identity(folder.config) and folder.identity is folder.identity  # cached
    assert folder.run_id == folder.identity.run_id and folder.task == "copy"
    assert folder.train_length == folder.config["task"]["length"] == metrics["train_length"]


def test_learned_follows_the_tasks_rule(tmp_path, always_learns):
    learned_run(tmp_path / "run")
    path = tmp_path / "run" / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, "steps_to_learn": None}))  # checks ran, none met the target
    assert not RunFolder.read(tmp_path / "run").learned
    config = (tmp_path / "run" / "config.yaml").read_text().replace("name: copy", "name: lm", 1)
    (tmp_path / "run" / "config.yaml").write_text(config)  # lm: learned is the run's recorded convergence
    metrics["run_id"] = run_identity(yaml.safe_load(config)).run_id  # an lm run's metrics name it
    (tmp_path / "run" / "checkpoint.pt").unlink()  # copy's weights: not the lm run's
    path.write_text(json.dumps({**metrics, "learned": False, "heldout_loss_fall": 0.03}))
    assert RunFolder.read(tmp_path / "run").task == "lm" and not RunFolder.read(tmp_path / "run").learned
    path.write_text(json.dumps({**metrics, "learned": True, "heldout_loss_fall": 0.01}))
    assert RunFolder.read(tmp_path / "run").learned


def test_an_unfinished_or_damaged_folder_reads_as_empty_without_raising(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(": not yaml [")
    folder = RunFolder.read(tmp_path / "run")
    assert folder.config == {} and folder.metrics == {} and not folder.finished
    assert folder.identity is None and folder.run_id is None and folder.task is None
    assert folder.train_length == DEFAULT_TRAIN_LENGTH
    assert "damaged" in folder.config_problem and "config.yaml" in folder.config_problem
    assert "unfinished" in folder.metrics_problem


def test_a_readable_folder_has_no_problems_and_a_damaged_metrics_file_names_itself(tmp_path, always_learns):
    learned_run(tmp_path / "run")
    folder = RunFolder.read(tmp_path / "run")
    assert folder.config_problem is None and folder.metrics_problem is None
    (tmp_path / "run" / "metrics.json").write_text('{"loss": ')  # truncated
    folder = RunFolder.read(tmp_path / "run")
    assert folder.metrics == {} and "metrics.json" in folder.metrics_problem and folder.config_problem is None


def test_extending_a_training_table_written_before_a_column_existed(tmp_path):
    """A committed training table without a column added since (heldout_loss_fall) is extended, not refused:
    its rows keep the column empty (`posenc runs --extend` into a copy of a baseline)."""
    import pandas as pd

    from posenc.analysis.run_folder import extend_training_table
    from posenc.analysis.tables import write_tables

    old = pd.DataFrame({"run": ["a"], "encoder": ["rope"], "seed": [0]})
    write_tables(old, tmp_path, "training")
    new = pd.DataFrame({"run": ["b"], "encoder": ["mine"], "seed": [1], "heldout_loss_fall": [0.5]})
    merged = extend_training_table(tmp_path, new)
    assert list(merged["run"]) == ["a", "b"] and merged["heldout_loss_fall"].isna().tolist() == [True, False]


def test_a_training_table_listing_an_unfinished_run_is_read_back_and_extended(tmp_path):
    """`posenc runs --out` lists a run still training with every cell but its run empty (no metrics.json yet),
    its train_length too; the same table is read back (`posenc runs --extend`), and the run, finished since,
    takes its row; a length that is there must still be a whole number of tokens."""
    import pandas as pd
    import pytest

    from posenc.analysis.run_folder import TRAINING_COLUMNS, extend_training_table, training_table
    from posenc.analysis.tables import write_tables
    from posenc.errors import PosencError

    (tmp_path / "training").mkdir()
    written = training_table([tmp_path / "training"])  # a folder without metrics.json: a run not finished
    assert written["train_length"].isna().all() and list(written.columns) == TRAINING_COLUMNS
    write_tables(written, tmp_path, "training")
    finished = written.assign(encoder="rope", train_length=pd.array([43], dtype="Int64"))
    merged = extend_training_table(tmp_path, finished)
    assert merged["encoder"].tolist() == ["rope"] and merged["train_length"].tolist() == [43]
    write_tables(written.assign(train_length=pd.array([0], dtype="Int64")), tmp_path, "training")
    with pytest.raises(PosencError, match="column train_length holds 0"):
        extend_training_table(tmp_path, finished)
