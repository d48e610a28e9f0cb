"""Sweeps through Hydra's launcher plugins (joblib, submitit) and the experiment configs."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import TINY, compose_dict, posenc_cli

from posenc.files import METRICS_FILE

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

ZOO_ONLY = ("cope", "fox", "pope")  # compared in results/zoo (conf/experiment/zoo.yaml), not in the headline


def _finished(sweep: Path) -> dict[str, dict]:
    """task/encoder/seed (the override sub-folder left out) -> metrics of each finished run."""
    return {
        "/".join(p.parent.relative_to(sweep).parts[:3]): json.loads(p.read_text()) for p in sweep.rglob(METRICS_FILE)
    }


@pytest.mark.parametrize(
    ("experiment", "tasks", "layers"), [("headline", "copy,reverse", 3), ("headline_retrieval", "retrieval", 2)]
)
def test_headline_experiments_compose_the_published_sweep(experiment, tasks, layers):
    """The headline's two experiment files: every registry encoder (but rope_ntk) x their tasks x 3 seeds,
    into one sweep folder, with the protocol's budget and model."""
    from posenc.encoders import ENCODERS
    from posenc.running.config import run_config_from_dict

    cfg = compose_dict([f"experiment={experiment}"])
    assert cfg["encoder"]["name"] == "rope" and cfg["task"]["length"] == 32 and cfg["model"]["d_model"] == 64
    assert cfg["model"]["n_layers"] == layers
    assert cfg["train"]["steps"] == 8000 and cfg["train"]["check_every"] == 100  # a budget, stopped when learned
    assert cfg["train"]["target_exact_match"] == 0.99 and cfg["task"]["variable_length"] is False
    result = posenc_cli("train", f"experiment={experiment}", "--cfg", "hydra", cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    hydra = yaml.safe_load(result.stdout)["hydra"]
    params = hydra["sweeper"]["params"]
    encoders = params["encoder"].split(",")
    # every encoder of the registry but rope_ntk (rope's checkpoints evaluated with NTK scaling instead),
    # schedule (a pattern of the others, for the user to choose) and the 2026 data-dependent encoders, which the
    # zoo experiment trains on copy beside rope and nope (a later addition; the headline stays re-runnable in
    # its wall time)
    assert sorted(encoders) == sorted(
        name
        for name in ENCODERS.builtins()  # an installed plugin is no baseline
        if name not in ("rope_ntk", "schedule", *ZOO_ONLY)
    )
    assert params["task"] == tasks and params["seed"] == "0,1,2"
    for task in params["task"].split(","):  # every job of the sweep is a valid configuration
        for encoder in encoders:
            run_config_from_dict(
                compose_dict([f"experiment={experiment}", f"task={task}", f"encoder={encoder}"])
            ).build()
    # a plain `-m` sweeps into a new folder; scripts/headline.sh names the record's
    assert hydra["sweep"]["dir"] == "${paths.results}/multirun/${now:%Y%m%d-%H%M%S}"


def test_zoo_and_headline_together_cover_the_registry():
    """An encoder added to the registry is trained by one of the committed comparisons."""
    from posenc.encoders import ENCODERS

    result = posenc_cli("train", "experiment=zoo", "--cfg", "hydra", cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    zoo = yaml.safe_load(result.stdout)["hydra"]["sweeper"]["params"]["encoder"].split(",")
    result = posenc_cli("train", "experiment=headline", "--cfg", "hydra", cwd=Path.cwd())
    headline = yaml.safe_load(result.stdout)["hydra"]["sweeper"]["params"]["encoder"].split(",")
    assert set(ZOO_ONLY) <= set(zoo) and {"rope", "nope"} <= set(zoo)  # the new ones beside two references
    assert set(zoo) | set(headline) | {"rope_ntk", "schedule"} == set(ENCODERS.builtins())  # plugins are not posenc's


def test_slurm_preset_selects_the_submitit_slurm_launcher(tmp_path):
    result = posenc_cli("train", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "--cfg", "hydra", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    launcher = yaml.safe_load(result.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert launcher["partition"] == "gpu" and launcher["timeout_min"] == 120


def test_slurm_preset_exports_posenc_plugins_to_its_jobs(tmp_path, monkeypatch):
    """sbatch may not pass the environment on (--export=NONE): each job's setup exports the submitting shell's
    POSENC_PLUGINS, its file paths made absolute (a job starts in another folder), as one shell word whatever
    quotes or spaces the path holds."""
    import os
    import shutil
    import subprocess

    awkward = tmp_path / "it's a $HOME; folder"
    awkward.mkdir()
    plugin = awkward / "posenc_log_alibi.py"
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "log_alibi" / "posenc_log_alibi.py", plugin)
    args = ("train", "hydra/launcher=slurm", "hydra.launcher.partition=gpu")
    exported = {}
    for value in (None, os.path.relpath(plugin, tmp_path)):
        if value is None:
            monkeypatch.delenv("POSENC_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("POSENC_PLUGINS", value)
        result = posenc_cli(*args, "--cfg", "all", "--resolve", cwd=tmp_path)  # the hydra node alone cannot resolve
        assert result.returncode == 0, result.stderr
        (setup,) = yaml.safe_load(result.stdout)["hydra"]["launcher"]["setup"]
        job = subprocess.run(  # what the job's shell makes of the line, in an environment without the variable
            ["bash", "-c", f'{setup}\nprintf %s "$POSENC_PLUGINS"'],
            env={"PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=True,
        )
        exported[value] = job.stdout
    assert exported == {None: "", os.path.relpath(plugin, tmp_path): str(plugin)}


def test_joblib_runs_jobs_in_parallel_without_bars_and_keeps_every_result(tmp_path):
    """Two jobs train at once, each into its own run directory; a diverging third job fails alone."""
    sweep = tmp_path / "sweep"
    result = posenc_cli(
        "train",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "encoder=rope,alibi",
        *TINY,
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    done = _finished(sweep)
    assert sorted(done) == ["copy/alibi/seed0", "copy/rope/seed0"]
    for config in sweep.rglob("config.yaml"):
        assert yaml.safe_load(config.read_text())["progress"] is False
    failing = posenc_cli(
        "train",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "encoder=xpos",
        *TINY,
        "train.lr=1e30,0.003",
        "train.warmup_steps=0",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        timeout=600,
    )
    assert failing.returncode != 0  # the sweep reports its failure ...
    assert "loss became non-finite" in failing.stderr + failing.stdout
    finished = sorted(_finished(sweep))  # ... the other job of the batch finished, and nothing was lost
    assert finished == ["copy/alibi/seed0", "copy/rope/seed0", "copy/xpos/seed0"]  # xpos: the lr=0.003 job
    out = tmp_path / "cmp"
    compared = posenc_cli("compare", "--runs", str(sweep), "--lengths", "16", "--out", str(out), cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert sorted(pd.read_parquet(out / "comparison.parquet")["encoder"]) == ["alibi", "rope", "xpos"]


def test_submitit_local_runs_real_submitit_jobs(tmp_path):
    sweep = tmp_path / "sweep"
    result = posenc_cli(
        "train",
        "-m",
        "hydra/launcher=submitit_local",
        "encoder=nope,learned",
        *TINY,
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(_finished(sweep)) == ["copy/learned/seed0", "copy/nope/seed0"]
    assert list(sweep.rglob("*_submitted.pkl")), "no submitit job files: not run through submitit"
