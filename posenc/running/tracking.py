"""Experiment tracking: a training run's config, per-step metrics, final metrics and files, sent to
TensorBoard, Weights & Biases or MLflow (the Hydra group ``logger``; ``none`` by default).

Every backend works offline and writes beside the run: TensorBoard event files in ``<run>/tensorboard``, an
MLflow file store (``${paths.results}/mlruns`` unless ``logger.tracking_uri`` names another), a W&B run in
``<run>/wandb`` in offline mode (``wandb sync`` uploads it later). The packages are optional
(``pip install 'posenc[tracking]'``); a logger whose package is missing is refused before training starts.

A run resumed after an interruption logs into the same tracked run where the backend can continue one (MLflow,
TensorBoard's event folder; W&B online): the backend's run id is kept in ``<run>/tracking.json``. W&B's offline
mode starts another offline run for each resumed process (wandb does not resume offline runs). Steps between
the last checkpoint and an interruption are logged again after the resume. Tracking never changes what is
trained: ``logger`` is not part of a run's identity, and a run may resume under another logger.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from posenc.analysis.store import flatten_config
from posenc.errors import ConfigError, PosencError
from posenc.files import TRACKING_FILE  # the backend's run id: one name, which run-folder checks read too


@dataclass
class LoggerConfig:
    name: str = "none"  # none | tensorboard | wandb | mlflow (conf/logger/<name>.yaml)
    options: dict[str, Any] = field(default_factory=dict)  # the backend's options (its yaml lists them)


class Tracker:
    """The interface training calls; this base class records nothing (``logger=none``).

    Args:
        run_dir: the run's folder.
        config: the resolved config, logged as the run's parameters.
    """

    package: ClassVar[str | None] = None  # the module the backend needs

    def __init__(self, run_dir: Path, config: dict[str, Any]) -> None:
        self.run_dir = Path(run_dir)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Scalars at a training step (loss, token accuracy, learning rate, held-out exact match)."""

    def log_final(self, metrics: dict[str, Any], files: list[Path]) -> None:
        """The final metrics (numbers only) and the run's files (config, history, metrics) as artifacts."""

    def close(self, failed: bool = False) -> None:
        """Flush and end the tracked run; ``failed``: training stopped on an error or a signal."""

    @classmethod
    def check(cls, options: dict[str, Any]) -> None:
        """Refuse option values the backend would refuse (types are checked against the defaults)."""

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        self.close(failed=kind is not None)

    def _remembered(self, key: str) -> str | None:
        return _read_tracking(self.run_dir).get(key)

    def _remember(self, key: str, value: str) -> None:
        from posenc.files import write_json

        write_json(self.run_dir / TRACKING_FILE, {**_read_tracking(self.run_dir), key: value})


def _read_tracking(run_dir: Path) -> dict[str, str]:
    path = run_dir / TRACKING_FILE
    if not path.is_file():
        return {}
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise PosencError(f"cannot read {path}: {err}; delete it to track this run afresh") from err
    if not isinstance(known, dict):
        raise PosencError(f"cannot read {path}: not a mapping; delete it to track this run afresh")
    return known


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _flat(tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` under dotted keys (:func:`posenc.analysis.store.flatten_config`), each value one a tracker logs as
    it is (a number, a string, a bool) or as text."""
    return {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flatten_config(tree).items()}


class TensorBoardTracker(Tracker):
    """TensorBoard event files in ``<run>/<log_dir>``: scalars by step, the config as text, final metrics as
    hyperparameters (``tensorboard --logdir results/``)."""

    package = "tensorboard"

    def __init__(self, run_dir: Path, config: dict[str, Any], *, log_dir: str = "tensorboard") -> None:
        super().__init__(run_dir, config)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(self.run_dir / log_dir))
        self.config = _flat({k: v for k, v in config.items() if k != "hydra"})
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in self.config.items()))

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in _numbers(metrics).items():
            self.writer.add_scalar(key, value, step)

    def log_final(self, metrics: dict[str, Any], files: list[Path]) -> None:
        hparams = {k: v for k, v in self.config.items() if isinstance(v, int | float | str | bool)}
        self.writer.add_hparams(hparams, {f"final/{k}": v for k, v in _numbers(metrics).items()}, run_name=".")

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class MLflowTracker(Tracker):
    """An MLflow run in a file store (offline, no database; ``mlflow ui --backend-store-uri <store>`` shows
    it), or in any store ``tracking_uri`` names (e.g. ``sqlite:///mlflow.db`` with the full mlflow package)."""

    package = "mlflow"

    def __init__(
        self, run_dir: Path, config: dict[str, Any], *, tracking_uri: str | None = None, experiment: str = "posenc"
    ) -> None:
        super().__init__(run_dir, config)
        import mlflow

        results = Path((config.get("paths") or {}).get("results", "results"))
        uri = tracking_uri or (results / "mlruns").resolve().as_uri()
        if uri.startswith("file:"):  # MLflow 3 keeps the file store (offline, no database) behind this switch
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        run_id = self._remembered("mlflow_run_id")
        if run_id is None:
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
            run = self.client.create_run(experiment_id, run_name=str(self.run_dir))
            run_id = run.info.run_id
            self._remember("mlflow_run_id", run_id)
            for key, value in _flat({k: v for k, v in config.items() if k != "hydra"}).items():
                self.client.log_param(run_id, key, value)
        self.run_id = run_id

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in _numbers(metrics).items():
            self.client.log_metric(self.run_id, key, value, step=step)

    def log_final(self, metrics: dict[str, Any], files: list[Path]) -> None:
        for key, value in _numbers(metrics).items():
            self.client.log_metric(self.run_id, f"final.{key}", value)
        for path in files:
            self.client.log_artifact(self.run_id, str(path))

    def close(self, failed: bool = False) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class WandbTracker(Tracker):
    """A Weights & Biases run in ``<run>/wandb``, offline by default (``wandb sync <run>/wandb/offline-run-*``
    uploads it); ``logger.mode=online`` logs live."""

    package = "wandb"

    def __init__(
        self, run_dir: Path, config: dict[str, Any], *, project: str = "posenc", mode: str = "offline"
    ) -> None:
        super().__init__(run_dir, config)
        self.check({"mode": mode})
        import wandb

        run_id = self._remembered("wandb_run_id") or secrets.token_hex(4)  # W&B ids: any short [a-z0-9] string
        self._remember("wandb_run_id", run_id)
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=project,
            dir=str(self.run_dir),
            mode=mode,
            id=run_id,
            resume="allow",
            name=str(self.run_dir),
            config={k: v for k, v in config.items() if k != "hydra"},
        )

    @classmethod
    def check(cls, options: dict[str, Any]) -> None:
        mode = options.get("mode", "offline")
        if mode not in ("offline", "online", "disabled"):
            raise ConfigError(f"logger.mode must be offline, online or disabled; got {mode!r}")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_numbers(metrics), step=step)

    def log_final(self, metrics: dict[str, Any], files: list[Path]) -> None:
        self.run.summary.update({f"final.{k}": v for k, v in _numbers(metrics).items()})
        for path in files:
            self.run.save(str(path), base_path=str(path.parent), policy="now")

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


#: ``logger.name`` -> tracker class; ``conf/logger/<name>.yaml`` exists for every key.
TRACKERS: dict[str, type[Tracker]] = {
    "none": Tracker,
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "mlflow": MLflowTracker,
}


def check_logger(cfg: LoggerConfig) -> None:
    """Refuse an unknown logger, unknown options, or a logger whose package is not installed, in one line."""
    from posenc.options import check_options

    if cfg.name not in TRACKERS:
        raise ConfigError(f"unknown logger '{cfg.name}'; known loggers: {', '.join(TRACKERS)}")
    tracker = TRACKERS[cfg.name]
    tracker.check(check_options("logger", cfg.name, tracker, cfg.options))
    if tracker.package and importlib.util.find_spec(tracker.package) is None:
        raise ConfigError(f"logger={cfg.name} needs the {tracker.package} package: pip install 'posenc[tracking]'")


def open_tracker(cfg: LoggerConfig, run_dir: Path, config: dict[str, Any]) -> Tracker:
    """The tracker ``cfg`` names, started for ``run_dir`` (checked by :func:`check_logger` first)."""
    from posenc.options import check_options

    check_logger(cfg)
    tracker = TRACKERS[cfg.name]
    try:
        return tracker(run_dir, config, **check_options("logger", cfg.name, tracker, cfg.options))
    except (PosencError, ConfigError):
        raise
    except Exception as err:  # the backend's own refusal (no W&B login online, a bad MLflow URI): one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PosencError(f"logger={cfg.name} could not start: {first}") from err
