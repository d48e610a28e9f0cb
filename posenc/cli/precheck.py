"""Check `posenc train` overrides before Hydra starts, so bad input is one line and no job starts.

Hydra reports composition errors over several lines, and in a sweep only once jobs have run. Here every
configuration a simple sweep would produce (plain comma lists; up to :data:`MAX_COMBINATIONS`) is
composed with Hydra's compose API and converted to a checked :class:`~posenc.running.config.RunConfig`.
Overrides Hydra handles itself (``hydra.*``, ``hydra/...``, sweep functions like ``range()``) are left to it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posenc.analysis.folders import check_writable
from posenc.encoders import ENCODERS
from posenc.errors import ConfigError, PosencError
from posenc.files import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    HISTORY_FILE,
    LOG_FILE,
    METRICS_FILE,
    OVERRIDES_FILE,
    check_regular,
)
from posenc.running.config import check_no_ignored_settings, run_config_from_dict
from posenc.running.tracking import check_logger
from posenc.tasks import TASKS

MAX_COMBINATIONS = 64  # beyond this, each value once with the others' first, and every encoder x task
_SWEEP_FUNCTION = re.compile(r"=\s*\w+\(")  # range(...), choice(...), glob(...), interval(...)


def _split(override: str) -> tuple[str, list[str]]:
    key, _, value = override.partition("=")
    if value.startswith(("[", "{", "'", '"')):
        return key, [value]  # a list/dict/quoted value, not a sweep
    return key, value.split(",")


def _combinations(overrides: list[str]) -> list[list[str]]:
    choices = []
    for override in overrides:
        key, values = _split(override)
        choices.append([f"{key}={v}" for v in values])
    if len(list(itertools.islice(itertools.product(*choices), MAX_COMBINATIONS + 1))) <= MAX_COMBINATIONS:
        return [list(c) for c in itertools.product(*choices)]
    # Too many to compose each: every value of every key at least once (the others at their first value),
    # and every encoder x task pair (options are checked per encoder and task).
    first = [c[0] for c in choices]
    each = [[*first[:i], value, *first[i + 1 :]] for i, c in enumerate(choices) for value in c[1:]]
    every = [c for c in choices if c[0].split("=")[0] in ("encoder", "task")]
    return [first] + each + [[*first, *picked] for picked in itertools.product(*every)]


def check_known_choices(overrides: list[str]) -> None:
    """Unknown encoders and tasks, named with the known ones."""
    registries = {registry.group: registry for registry in (ENCODERS, TASKS)}
    for override in overrides:
        key, values = _split(override)
        if key in registries:
            for value in values:
                registries[key].check(value)


# Overrides whose value is a path: posenc's own folder names hold `=` and `,` (`.../train.steps=400,seed=1`),
# which Hydra's override grammar reads as syntax unless the value is quoted.
PATH_KEYS = ("resume", "hydra.run.dir", "hydra.sweep.dir")
_PLAIN = re.compile(r"[^=,\[\]{}()'\" ]*")


def quote_path_overrides(args: list[str]) -> list[str]:
    """``args`` with the value of each path override (:data:`PATH_KEYS`) quoted for Hydra where it holds
    characters of its grammar (``=``, ``,``, brackets, quotes, spaces), so that ``resume=PATH`` takes any
    folder posenc itself named; values already quoted or holding an interpolation are left as they are."""
    out = []
    for arg in args:
        key, equals, value = arg.partition("=")
        if (
            equals
            and key.lstrip("+~") in PATH_KEYS
            and value
            and not _PLAIN.fullmatch(value)
            and not value.startswith(("'", '"'))
            and "${" not in value
        ):
            quote = next((q for q in ("'", '"') if q not in value), None)  # a path holding both is left as is
            if quote is not None and not value.endswith("\\"):
                arg = f"{key}={quote}{value}{quote}"
        out.append(arg)
    return out


def _unquoted(value: str) -> str:
    """A path override's value as the path it names (:func:`quote_path_overrides` undone)."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def check_not_a_sweep(args: list[str]) -> None:
    """Without ``-m``, a comma list (``encoder=rope,alibi``) is a sweep Hydra refuses in six lines: one here."""
    if any(a in ("-m", "--multirun") for a in args):
        return
    for override in args:
        if override.startswith(("-", "hydra.", "hydra/", "+hydra")) or _SWEEP_FUNCTION.search(override):
            continue
        key, values = _split(override)
        if len(values) > 1:
            raise ConfigError(
                f"{override} gives several values, a sweep: add -m to train one run per value "
                f"(posenc train -m {override}), or quote it ({key}='{','.join(values)}') to mean one "
                "value holding commas"
            )


def precheck(args: list[str]) -> None:
    """Raise a one-line :class:`PosencError` if ``posenc train ARGS`` would fail on its config."""
    modes = [a for a in args if a in ("-m", "--multirun", "-c", "--cfg", "-i", "--info", "-sc")]
    if len({m.lstrip("-")[0] for m in modes}) > 1:  # Hydra itself would answer with a traceback
        raise ConfigError(
            f"{' and '.join(modes)} cannot be combined; e.g. print a sweep's config "
            "without -m: posenc train OVERRIDES --cfg job"
        )
    if any(a.startswith("-") and a not in ("-m", "--multirun") for a in args):
        return  # --cfg, --help, --info, -c ...: Hydra's own modes
    check_not_a_sweep(args)
    check_output_overrides(args)
    overrides = [a for a in args if not a.startswith("-") and not a.startswith(("hydra.", "hydra/", "+hydra"))]
    if any(_SWEEP_FUNCTION.search(o) for o in overrides):
        return
    # a config folder of the user's own (a plugin's YAML): every composition below searches it too, and its
    # config names need not be registry keys (the composed config's name is checked instead)
    searchpath = [a for a in args if a.partition("=")[0].lstrip("+") == "hydra.searchpath"]
    if not searchpath:
        check_known_choices(overrides)
    hydra_groups = [a for a in args if a.startswith(("hydra/", "+hydra/"))]  # e.g. hydra/launcher=joblib
    overrides = [*searchpath, *overrides]
    try:
        with initialize_config_module(config_module="posenc.conf", version_base="1.3"):
            combinations = _combinations(overrides)
            if hydra_groups:  # an unknown launcher or sweeper, named with the known ones
                compose(config_name="config", overrides=[*combinations[0], *hydra_groups], return_hydra_config=True)
            for combination in combinations:
                cfg = compose(config_name="config", overrides=combination)
                run_cfg = run_config_from_dict(OmegaConf.to_container(cfg, resolve=True))
                run_cfg.check()  # the model itself is built once, by training
                check_no_ignored_settings(run_cfg)
                check_logger(run_cfg.logger)  # its package installed, its options known
                if isinstance(run_cfg.resume, str):
                    check_resume_source(run_cfg.resume)
                elif run_cfg.resume and len(combinations) == 1:
                    check_existing_checkpoint(args, OmegaConf.to_container(cfg, resolve=True))
                check_writable("paths.results", str(cfg.paths.results))
    except (HydraException, OmegaConfBaseException) as err:
        if isinstance(err, PosencError):
            raise
        raise ConfigError(_one_line(str(err))) from err


def check_resume_source(resume: str) -> None:
    """``resume=PATH`` names a checkpoint file, or a run folder holding one (as training reads it)."""
    source = Path(resume)
    source = source / CHECKPOINT_FILE if source.is_dir() else source
    check_regular(source, f"resume={resume}")
    if not source.is_file():
        raise PosencError(f"resume={resume}: no checkpoint there")


def check_existing_checkpoint(args: list[str], config: dict) -> None:
    """A checkpoint already in the ``hydra.run.dir`` given on the command line is one training would
    resume: refused now if it is unreadable or another configuration's, and so is a folder holding run files
    that are not this run's (:func:`posenc.running.runs.check_training_folder`), before Hydra writes a log there.
    Training checks again, under the folder's lock."""
    from posenc.running.checkpoint import load_training_state
    from posenc.running.runs import check_training_folder

    for arg in args:
        key, _, value = arg.partition("=")
        value = _unquoted(value)
        if key == "hydra.run.dir" and "${" not in value:
            for name in (CHECKPOINT_FILE, CONFIG_FILE, METRICS_FILE, HISTORY_FILE, LOG_FILE, OVERRIDES_FILE):
                check_regular(Path(value) / name, f"a run's {name}")  # a FIFO would block the writer or reader
            state = None
            if (Path(value) / CHECKPOINT_FILE).is_file():
                state = load_training_state(Path(value) / CHECKPOINT_FILE, config)
            check_training_folder(Path(value), config, state)


def check_output_overrides(args: list[str]) -> None:
    """The run and sweep folders given on the command line, checked as :func:`check_writable` does."""
    for arg in args:
        key, _, value = arg.partition("=")
        value = _unquoted(value)
        if key in ("hydra.run.dir", "hydra.sweep.dir") and value and "${" not in value:
            check_writable(key, value)


def _one_line(message: str) -> str:
    """Hydra's multi-line composition error as one line, without hints that do not apply to posenc."""
    unknown = re.match(r"Could not override '([^']+)'", message)
    if unknown:  # Hydra suggests `+key=value`, which posenc would refuse as an unknown key anyway
        return f"unknown config key '{unknown[1]}' (posenc train --cfg job shows every key)"
    message = message.split("Config search path")[0]
    return " ".join(line.strip() for line in message.splitlines() if line.strip())
