"""Experiment tracking (posenc.running.tracking): each backend, offline, records what a user opens later."""

import json

import pytest
from conftest import tiny_config, tiny_dict

from posenc.analysis.store import run_identity
from posenc.errors import ConfigError
from posenc.options import keyword_options
from posenc.running.tracking import TRACKERS, LoggerConfig, check_logger, open_tracker
from posenc.running.train import train


def _train(tmp_path, *overrides):
    overrides = (*overrides, f"paths.results={tmp_path / 'results'}")
    run = tmp_path / "run"
    return run, train(tiny_config(*overrides), run, tiny_dict(*overrides))


def test_every_logger_has_a_yaml_of_its_options():
    from pathlib import Path

    import yaml

    folder = Path(__file__).parents[2] / "conf" / "logger"
    assert sorted(p.stem for p in folder.glob("*.yaml")) == sorted(TRACKERS)
    for name, tracker in TRACKERS.items():
        options = {k: v for k, v in yaml.safe_load((folder / f"{name}.yaml").read_text()).items() if k != "name"}
        assert options == keyword_options(tracker), name


@pytest.mark.integration  # a real tracking backend (W&B starts a service process)
def test_tensorboard_writes_scalars_by_step_and_the_final_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, metrics = _train(tmp_path, "logger=tensorboard", "train.steps=6", "train.check_every=3")
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"loss", "token_accuracy", "lr", "heldout_exact_match"} <= set(scalars)
    assert [e.step for e in events.Scalars("loss")] == [2, 4, 6]  # train.log_every=2
    assert [e.step for e in events.Scalars("heldout_exact_match")] == [3, 6]
    history = (run / "history.csv").read_text().splitlines()
    loss = float(history[-1].split(",")[history[0].split(",").index("loss")])
    assert events.Scalars("loss")[-1].value == pytest.approx(loss)
    assert "config/text_summary" in events.Tags()["tensors"]


@pytest.mark.integration  # a real tracking backend (W&B starts a service process)
def test_mlflow_logs_params_metrics_and_files_into_a_file_store_and_a_resumed_run_into_the_same_run(tmp_path):
    mlflow = pytest.importorskip("mlflow")

    run, metrics = _train(tmp_path, "logger=mlflow", "train.steps=6", "train.check_every=3")
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "results" / "mlruns").as_uri())
    (found,) = client.search_runs([client.get_experiment_by_name("posenc").experiment_id])
    assert found.data.params["encoder.name"] == "rope" and found.data.params["task.length"] == "16"
    assert found.data.metrics["final.exact_match"] == pytest.approx(metrics["exact_match"])
    assert [m.step for m in client.get_metric_history(found.info.run_id, "loss")] == [2, 4, 6]
    assert {a.path for a in client.list_artifacts(found.info.run_id)} == {"config.yaml", "history.csv", "metrics.json"}
    assert found.info.status == "FINISHED"
    again = open_tracker(LoggerConfig("mlflow"), run, tiny_dict(f"paths.results={tmp_path / 'results'}"))
    assert again.run_id == found.info.run_id  # tracking.json: a resumed run logs into the same MLflow run
    again.close()


@pytest.mark.integration  # a real tracking backend (W&B starts a service process)
def test_wandb_offline_writes_a_run_a_user_can_sync(tmp_path):
    pytest.importorskip("wandb")

    run, _ = _train(tmp_path, "logger=wandb", "train.steps=4")
    (offline,) = (run / "wandb").glob("offline-run-*")
    assert list(offline.glob("run-*.wandb")) and (offline / "files" / "metrics.json").is_file()
    assert json.loads((run / "tracking.json").read_text())["wandb_run_id"] in offline.name


def test_logger_does_not_change_a_runs_identity_and_a_run_resumes_under_another_logger(tmp_path):
    from posenc.files import CHECKPOINT_FILE
    from posenc.running.checkpoint import load_training_state

    plain, tracked = tiny_dict(), tiny_dict("logger=tensorboard")
    assert run_identity(plain) == run_identity(tracked)
    run, _ = _train(tmp_path)
    state = load_training_state(run / CHECKPOINT_FILE, tiny_dict("logger=tensorboard", f"paths.results={tmp_path}"))
    assert state["step"] == 4  # accepted under another logger: it resumes where it stopped


def test_the_suite_passes_without_the_tracking_extra():
    """The unit tests of this file pass where mlflow, wandb and tensorboard are not installed (issue 27)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('mlflow', 'wandb', 'tensorboard'):\n"
        "    sys.modules[name] = None  # find_spec says absent, import fails: as without the extra\n"
        "import pytest\n"
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {__file__!r}, '-k', 'not without_the_tracking']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(__import__("pathlib").Path(__file__).parent),
    )
    assert result.returncode == 0, result.stdout[-3000:]


def test_a_missing_package_or_an_unknown_option_is_refused_in_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(
        ConfigError, match=r"^logger=mlflow needs the mlflow package: pip install 'posenc\[tracking\]'$"
    ):
        check_logger(LoggerConfig("mlflow"))
    check_logger(LoggerConfig("none"))
    with pytest.raises(ConfigError, match="logger 'tensorboard' has no option 'colour'"):
        check_logger(LoggerConfig("tensorboard", {"colour": 1}))
    with pytest.raises(ConfigError, match="unknown logger 'bogus'; known loggers: none, tensorboard, wandb, mlflow"):
        check_logger(LoggerConfig("bogus"))


def test_bad_values_and_a_backend_that_cannot_start_are_one_line_before_training(tmp_path):
    with pytest.raises(ConfigError, match="^logger.mode must be offline, online or disabled; got 'bogus'$"):
        check_logger(LoggerConfig("wandb", {"mode": "bogus"}))
    from posenc.errors import PosencError

    pytest.importorskip("mlflow")  # the `tracking` extra; without it, open_tracker says the package is missing
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tracking.json").write_text("{broken")
    with pytest.raises(PosencError, match="cannot read .*tracking.json.*delete it"):
        open_tracker(LoggerConfig("mlflow"), tmp_path / "run", tiny_dict(f"paths.results={tmp_path}"))
    with pytest.raises(PosencError, match="^logger=mlflow could not start: "):
        open_tracker(
            LoggerConfig("mlflow", {"tracking_uri": "bogus-scheme://nowhere"}),
            tmp_path / "other",
            tiny_dict(f"paths.results={tmp_path}"),
        )


@pytest.mark.integration  # a real tracking backend (W&B starts a service process)
def test_mlflow_marks_a_run_that_stopped_on_an_error_failed(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    tracker = open_tracker(LoggerConfig("mlflow"), tmp_path / "run", tiny_dict(f"paths.results={tmp_path}"))
    with pytest.raises(RuntimeError), tracker:
        raise RuntimeError("training broke")
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    assert client.get_run(tracker.run_id).info.status == "FAILED"


def test_config_is_logged_under_dotted_keys_with_values_a_tracker_takes():
    from posenc.running.tracking import _flat

    config = {
        "train": {"lr": 0.001, "steps": 5},
        "task": {"name": "copy", "lengths": [8, 16], "min": None},
        "progress": False,
    }
    assert _flat(config) == {
        "train.lr": 0.001,
        "train.steps": 5,
        "task.name": "copy",
        "task.lengths": "[8, 16]",
        "task.min": "None",
        "progress": False,
    }
