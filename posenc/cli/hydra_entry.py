"""``posenc train``'s Hydra entry point: compose the config, then call the plain :func:`posenc.running.train.train`.

As in lightning-hydra-template, the ``@hydra.main`` function only converts the composed config into the typed
:class:`~posenc.running.config.RunConfig` and maps errors to exit codes; training itself knows nothing of Hydra.
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from posenc.errors import PosencError
from posenc.plugins import provenance
from posenc.progress import print_error
from posenc.running.checkpoint import TrainingInterrupted
from posenc.running.config import check_no_ignored_settings, run_config_from_dict
from posenc.running.train import train

log = logging.getLogger("posenc.running.train")
# A log line that cannot be written (a full disk under train.log) is dropped, not printed as a traceback: the
# checkpoint write that follows fails in one line naming its file (posenc.files.atomic_write).
logging.raiseExceptions = False


def short_dirname(text: str, limit: int = 120) -> str:
    """A folder name for an override string: itself when short, else a prefix and a stable hash of it.

    Run directories are named after their overrides; file systems cap a name at 255 bytes.
    """
    if len(text) <= limit:
        return text
    return f"{text[:80]}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


# Used by conf/config.yaml's run and sweep directories; registered on import, also in launcher workers.
OmegaConf.register_new_resolver("posenc_dirname", short_dirname, replace=True)
# Used by conf/hydra/launcher/slurm.yaml's setup lines: a value as one shell word, whatever quotes or spaces
# it holds (a plugin path such as "it's mine/enc.py" would end a hand-written '...' early).
OmegaConf.register_new_resolver("posenc_shell_word", lambda text: shlex.quote(str(text)), replace=True)


def _job_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved job config (without Hydra's own node) as a plain mapping."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


@hydra.main(version_base="1.3", config_path="pkg://posenc.conf", config_name="config")
def hydra_main(cfg: DictConfig) -> float:
    """``posenc train``: compose the config with Hydra, then call :func:`train` in the job's folder."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        config_dict = _job_config(cfg)
        launcher = str(hydra_cfg.launcher.get("_target_", ""))
        if "BasicLauncher" not in launcher:
            config_dict["progress"] = False  # parallel or cluster jobs: no live bars
        run_cfg = run_config_from_dict(config_dict)
        check_no_ignored_settings(run_cfg)
        plugins = provenance(run_cfg.encoder.name, run_cfg.task.name)
        if plugins:  # where a plugin's code came from: recorded, outside the run's identity
            config_dict["plugins"] = plugins
        overrides = list(hydra_cfg.overrides.task)
        metrics = train(run_cfg, Path(hydra_cfg.runtime.output_dir), config_dict, overrides)
    except TrainingInterrupted as err:  # checkpoint saved: stop this process (a whole sweep too)
        print_error(str(err))
        sys.exit(err.exit_code)
    except PosencError as err:
        if multirun:  # mark this job failed; the launcher goes on with the others
            log.error("%s", err)
            raise
        print_error(str(err))
        sys.exit(2)
    except KeyboardInterrupt:  # a second Ctrl-C: files on disk are whole (atomic writes)
        print_error("interrupted; the last checkpoint is kept")
        sys.exit(130)
    return metrics["exact_match"]
