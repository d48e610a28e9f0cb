"""Run directories: finding them, reading their checkpoints, loading a trained model (needs torch).

Writing files atomically and the names of a run's files live in :mod:`posenc.files` (no torch).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from posenc import files as run_files
from posenc.analysis.run_folder import config_difference, disagreement, metrics_disagreement, read_config, run_config
from posenc.analysis.store import without_neutral
from posenc.errors import PosencError
from posenc.files import CHECKPOINT_FILE, CONFIG_FILE, METRICS_FILE, check_regular
from posenc.running.config import RunConfig, how_to_load, run_config_from_dict


def find_runs(paths: list[Path], unreadable: list[str] | None = None, weightless: bool = False) -> list[Path]:
    """Run directories named in ``paths`` and every one below them, sorted: a sweep folder's runs, and the
    runs with overrides that `posenc train` nests inside the default run's folder
    (``runs/copy/rope/seed0/train.steps=100/``). Symlinked folders below ``paths`` are not followed (name
    them in ``paths``).

    A folder that cannot be listed (no permission) may hold runs: it is never passed over in silence. Each
    is a line in ``unreadable`` when given (the command reports them as skipped), else an error.

    ``weightless``: also finished runs whose checkpoint was removed after they were evaluated (a folder with
    ``metrics.json`` and ``config.yaml``): ``compare --extend --choose`` weighs them as candidates, and a chosen
    one is aggregated from OUT's tables (runs trained on a GPU and evaluated there, brought back without weights)."""
    runs: set[Path] = set()
    problems: list[str] = []
    for path in paths:
        if not path.exists():
            raise PosencError(f"run directory not found: {path}")
        if not path.is_dir():
            raise PosencError(f"not a directory: {path}")

        def report(err: OSError) -> None:
            problems.append(
                f"cannot read folder {err.filename}: {err.strerror or err}; any runs in it are left "
                "out (make it readable to include them)"
            )

        for root, _, names in os.walk(path, onerror=report):
            if CHECKPOINT_FILE in names or (weightless and {METRICS_FILE, CONFIG_FILE} <= set(names)):
                runs.add(Path(root))
    if problems and unreadable is None:
        raise PosencError(problems[0])
    if unreadable is not None:
        unreadable.extend(problems)
    if not runs:
        where = ", ".join(map(str, paths))
        raise PosencError(
            problems[0] if problems else f"no trained runs (folders with {CHECKPOINT_FILE}) under: {where}"
        )
    return sorted(runs)


def read_checkpoint(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint payload at ``path`` (holding a ``config``).

    An unreadable, truncated or foreign file raises :class:`PosencError`.
    """
    check_regular(path, "a checkpoint")  # a FIFO would block torch.load forever
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
        payload["config"]
    except Exception as err:  # any truncated or foreign file: report it, do not crash
        reason = f"not a posenc checkpoint ({type(err).__name__})"
        raise PosencError(f"cannot read checkpoint {path}: {reason}") from err
    if not isinstance(payload, dict) or not isinstance(payload["config"], dict):
        raise PosencError(f"cannot read checkpoint {path}: its config is not a mapping (not a posenc checkpoint)")
    return payload


def load_run(run_dir: Path, device: torch.device | str = "cpu"):
    """``(RunConfig, task, model)`` of a trained run, the model in eval mode on ``device``. A checkpoint of
    another run than the folder's ``config.yaml`` and ``metrics.json`` is refused (:func:`files_disagreement`):
    its weights are never labelled with the folder's settings."""
    path = Path(run_dir) / CHECKPOINT_FILE
    payload = read_checkpoint(path, device)
    if why := files_disagreement(Path(run_dir), payload):
        raise PosencError(why)
    if why := unregistered(payload["config"]):
        raise PosencError(f"cannot load run {run_dir}: {why}")
    try:
        cfg: RunConfig = run_config_from_dict(payload["config"])
    except PosencError as err:
        raise PosencError(f"cannot read checkpoint {path}: its config is invalid ({err})") from err
    task, _, model = cfg.build()
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, KeyError) as err:
        raise PosencError(f"checkpoint {path} does not match its config: {str(err).splitlines()[0]}") from err
    return cfg, task, model.to(device).eval()


PLUGIN_HOWTO = (
    "if it is a plugin, load it with POSENC_PLUGINS=FILE.py (or a module name), or install the package "
    "that registers it (entry point group posenc.{group}s); see docs/extending.md"
)


def unregistered(config: dict[str, Any]) -> str | None:
    """Why a run's encoder or task cannot be built in this process: its key is not registered (a plugin not
    loaded here), with how to load it, from where its code was when it trained (``config.yaml``'s ``plugins``)
    if recorded; None when both are registered. Said as such, not as an invalid config: the run is fine, this
    process lacks its code."""
    from posenc.encoders import ENCODERS
    from posenc.tasks import TASKS

    plugins = config.get("plugins") if isinstance(config.get("plugins"), dict) else {}
    for group, registry in (("encoder", ENCODERS), ("task", TASKS)):
        section = config.get(group)
        key = section.get("name") if isinstance(section, dict) else None
        if not isinstance(key, str) or key in registry:
            continue
        missing = f"its {group} '{key}' is not registered here"
        origin = plugins.get(group)
        if isinstance(origin, dict) and origin.get("source"):
            return (
                f"{missing}: it trained with the plugin {origin.get('object')} ({origin.get('origin')} "
                f"{origin['source']}); load it the same way ({how_to_load(origin)}; docs/extending.md)"
            )
        return f"{missing} (registered: {', '.join(registry)}); {PLUGIN_HOWTO.format(group=group)}"
    return None


def files_disagreement(run: Path, payload: dict[str, Any]) -> str | None:
    """Why the files of run folder ``run`` are not one run's, given its checkpoint ``payload`` (already read):
    :func:`posenc.analysis.run_folder.disagreement` of its ``config.yaml``, ``metrics.json`` and checkpoint."""
    run = Path(run)
    config = run_config(run) if os.path.lexists(run / CONFIG_FILE) else {}
    try:
        metrics = run_files.read_metrics(run) if os.path.lexists(run / METRICS_FILE) else {}
    except PosencError:
        metrics = {}  # damaged: named by whoever reads it
    return disagreement(run, config, metrics, payload)


_ELSEWHERE = "train this config into another hydra.run.dir"


def check_training_folder(
    run_dir: Path, config: dict[str, Any], state: dict[str, Any] | None, resumed_from: str | None = None
) -> None:
    """Refuse, in one line, to train ``config`` into ``run_dir`` where a run file there is not this run's to
    go on from or write over: another configuration's ``config.yaml`` or ``metrics.json``, a damaged one, a
    ``metrics.json`` or ``history.csv`` without the checkpoint they end (a finished run whose checkpoint was
    removed, or files posenc did not write), ``overrides.yaml`` or ``tracking.json`` without the run's config,
    ``mastery.pt`` beside no checkpoint that met the target.
    ``state``: the checkpoint training goes on from (None: a fresh start); ``resumed_from``: ``resume=PATH``'s
    value, whose checkpoint starts a folder that must hold none of a run's results yet. Other files (notes,
    the folders of runs with overrides) are not run files and are left alone."""
    run_dir = Path(run_dir)
    present = [name for name in run_files.RUN_FILES if os.path.lexists(run_dir / name)]
    if not present:
        return
    if CONFIG_FILE in present:
        try:
            held = read_config(run_dir)
        except PosencError as err:
            raise PosencError(f"{err}; training would write over it: move it away, or {_ELSEWHERE}") from None
        if diff := config_difference(without_neutral(held), without_neutral(config)):
            raise PosencError(f"{run_dir / CONFIG_FILE} belongs to a different run: {diff}; {_ELSEWHERE}")
    results = [name for name in (CHECKPOINT_FILE, METRICS_FILE, run_files.HISTORY_FILE, run_files.MASTERY_FILE)
               if name in present]  # fmt: skip
    if resumed_from is not None and results:
        raise PosencError(
            f"resume={resumed_from}: {run_dir} already holds {', '.join(results)}; resume=PATH starts a "
            f"run folder from another one's checkpoint and never writes over a run: continue {run_dir} "
            f"with resume=true, or {_ELSEWHERE}"
        )
    for name in (run_files.OVERRIDES_FILE, run_files.TRACKING_FILE):
        if name in present and CONFIG_FILE not in present:
            raise PosencError(
                f"{run_dir / name} is not this run's: posenc writes it only beside the run's "
                f"{CONFIG_FILE}, which is missing; move it away, or {_ELSEWHERE}"
            )
    if run_files.OVERRIDES_FILE in present:
        _check_overrides(run_dir / run_files.OVERRIDES_FILE)
    if METRICS_FILE in present:
        _check_metrics(run_dir, config, state)
    if run_files.HISTORY_FILE in present:
        _check_history(run_dir, state)
    if run_files.MASTERY_FILE in present:
        check_mastery_snapshot(run_dir, state)


def check_mastery_snapshot(run_dir: Path, state: dict[str, Any] | None) -> None:
    """``mastery.pt`` in ``run_dir`` is the state of the first check that met the target of the run whose
    checkpoint is ``state`` (None: there is none): its step is the checkpoint's ``learned_at``. Refused in one
    line otherwise (a stray file, or another run's: e.g. one left beside a run trained afresh elsewhere)."""
    path = run_dir / run_files.MASTERY_FILE
    learned_at = None if state is None else state.get("learned_at")
    if learned_at is None:
        raise PosencError(
            f"{path} is not this run's: posenc writes it when the run first meets its mastery target, which "
            f"{'no checkpoint here records' if state is None else 'it has not yet'}; training would write over "
            f"it: move it away, or {_ELSEWHERE}"
        )
    try:
        step = read_checkpoint(path).get("step")
    except PosencError as err:
        raise PosencError(f"{err}; move it away, or {_ELSEWHERE}") from None
    if step != learned_at:
        raise PosencError(
            f"{path} is not this run's: it holds step {step}, and {run_dir / CHECKPOINT_FILE} first met its "
            f"target at step {learned_at}; move it away, or {_ELSEWHERE}"
        )


def _check_overrides(path: Path) -> None:
    """``overrides.yaml`` is posenc's: a YAML list of ``key=value`` strings (training writes it over)."""
    import yaml

    try:
        overrides = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        overrides = None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise PosencError(
            f"{path} is not posenc's (not a list of overrides), and training would write over it: "
            f"move it away, or {_ELSEWHERE}"
        )


def _check_metrics(run_dir: Path, config: dict[str, Any], state: dict[str, Any] | None) -> None:
    """``metrics.json`` is this run's, and ends the checkpoint training would go on from."""
    path = run_dir / METRICS_FILE
    try:
        metrics = run_files.read_metrics(run_dir)
    except PosencError as err:
        raise PosencError(f"{err}; training would write over it: move it away, or {_ELSEWHERE}") from None
    if why := metrics_disagreement(config, metrics, source="the config trained now"):
        raise PosencError(f"{path} belongs to a different run ({why}); {_ELSEWHERE}")
    if state is None:
        raise PosencError(
            f"{run_dir} holds {METRICS_FILE} but no {CHECKPOINT_FILE} (a finished run whose checkpoint "
            "was removed, or a file posenc did not write): training would write over it; restore "
            f"the run's {CHECKPOINT_FILE}, or {_ELSEWHERE}"
        )
    step, steps = state.get("step"), metrics.get("steps")
    if isinstance(steps, int) and step != steps:
        raise PosencError(
            f"{path} does not end {run_dir / CHECKPOINT_FILE} (training ended at step {steps} there, "
            f"the checkpoint is at step {step}); move the stray file away, or {_ELSEWHERE}"
        )


def _check_history(run_dir: Path, state: dict[str, Any] | None) -> None:
    """``history.csv`` is the curve (or the start of the curve) of the checkpoint training would go on from."""
    path = run_dir / run_files.HISTORY_FILE
    if state is None:
        raise PosencError(
            f"{run_dir} holds {run_files.HISTORY_FILE} but no {CHECKPOINT_FILE} (a finished run whose "
            "checkpoint was removed, or a file posenc did not write): training would write over it; "
            f"restore the run's {CHECKPOINT_FILE}, or {_ELSEWHERE}"
        )
    try:
        text = path.read_bytes().decode()  # as written: csv ends its lines with \r\n
    except (OSError, UnicodeDecodeError) as err:
        raise PosencError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    if not run_files.history_csv(state.get("history") or []).startswith(text):
        raise PosencError(
            f"{path} is not the training curve of {run_dir / CHECKPOINT_FILE} (another run's, or a file "
            f"posenc did not write), and training would write over it: move it away, or {_ELSEWHERE}"
        )
