"""Experiment files and the folders they write (issue 38, item 7): a user's trial of an experiment never lands in
the sweep folder a committed record is built from, the scripts that build records name that folder themselves,
and an experiment whose runs are a sweep says so without -m instead of training something else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import compose_dict
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from typer.testing import CliRunner

from posenc.cli.app import app
from posenc.errors import PosencError
from posenc.running.arguments import experiment_single_run

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
runner = CliRunner()


def sweep_dir(*overrides: str) -> str:
    """``hydra.sweep.dir`` as composed for ``posenc train -m OVERRIDES``, unresolved (``${now:...}`` kept)."""
    with initialize_config_module(config_module="posenc.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    return OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"]


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_an_experiment_sweeps_into_a_new_folder_like_any_sweep(experiment):
    """Issue 38: `posenc train -m experiment=headline` wrote a user's trial into results/multirun/headline, the
    folder results/headline is compared from. A plain sweep of an experiment gets the time-stamped folder of
    any sweep; only a command naming hydra.sweep.dir (the scripts) writes a record's folder."""
    assert sweep_dir(f"experiment={experiment}") == sweep_dir()
    assert re.search(r"multirun/\$\{now:[^}]*\}$", sweep_dir(f"experiment={experiment}"))


def _statements(text: str) -> list[str]:
    """A shell script's lines with their continuation lines (ending in a backslash) joined."""
    return re.sub(r"\\\n\s*", " ", text).splitlines()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("*.sh")))
def test_every_script_names_the_sweep_folder_it_trains_into(script):
    """What makes the scripts build their records in the same folders as before: every `posenc train -m` they
    run names hydra.sweep.dir, directly or in each call of the shell function that wraps it."""
    lines = _statements((ROOT / "scripts" / script).read_text())
    for i, line in enumerate(lines):
        if not re.search(r'posenc"? train -m', line) or "hydra.sweep.dir=" in line:
            continue
        wrapper = next(
            re.match(r"\s*(\w+)\(\) \{", lines[j])[1]
            for j in range(i, -1, -1)
            if re.match(r"\s*(\w+)\(\) \{", lines[j])
        )
        calls = [c for c in lines if re.match(rf"\s*(\[.*\] && )?{wrapper} ", c)]
        assert calls, f"{script}: {wrapper}() trains without naming its sweep folder, and is never called"
        for call in calls:
            assert "hydra.sweep.dir=" in call, f"{script}: `{call.strip()}` trains into an unnamed sweep folder"


@pytest.mark.parametrize("experiment", ["headline_retrieval", "scale_retrieval"])
def test_an_experiment_whose_run_without_m_is_none_of_its_runs_is_refused(experiment):
    """Issue 38: `posenc train experiment=headline_retrieval` (no -m) trained copy without a word."""
    with pytest.raises(PosencError, match=rf"experiment={experiment} is a sweep .*task=copy.*add -m"):
        experiment_single_run([f"experiment={experiment}"])
    assert experiment_single_run([f"experiment={experiment}", "task=retrieval", "encoder=rope", "seed=0"]) is None
    assert experiment_single_run(["-m", f"experiment={experiment}"]) is None  # the sweep itself
    assert experiment_single_run([f"experiment={experiment}", "--cfg", "job"]) is None  # Hydra's own modes


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_without_m_is_refused_or_names_the_one_run_it_trains(experiment):
    try:
        note = experiment_single_run([f"experiment={experiment}"])
    except PosencError as err:
        assert "add -m" in str(err)
        return
    assert note is not None and "-m trains them all" in note and "this trains one of them" in note, note


def test_the_refusal_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from conftest import TINY

    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app, ["train", "experiment=headline_retrieval", *TINY]
    )  # TINY: a broken check trains 4 steps
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: experiment=headline_retrieval is a sweep"), lines
    assert list(tmp_path.iterdir()) == []


EXPERIMENT_ENCODER = sorted((ROOT / "conf" / "experiment_encoder").glob("*.yaml"))


def experiment_and_encoder(stem: str) -> tuple[str, str]:
    """``(experiment, encoder)`` a conf/experiment_encoder file's stem names (``<experiment>_<encoder>``), or
    ``("", "")`` when no recorded experiment and registry encoder make it up."""
    from posenc.encoders import ENCODERS

    for experiment in EXPERIMENTS:
        encoder = stem.removeprefix(f"{experiment}_")
        if encoder != stem and encoder in ENCODERS:
            return experiment, encoder
    return "", ""


@pytest.mark.parametrize("path", EXPERIMENT_ENCODER, ids=lambda p: p.stem)
def test_an_experiments_encoder_settings_name_an_encoder_it_sweeps_and_reach_its_runs(path):
    """conf/experiment_encoder/<experiment>_<encoder>.yaml is read through an optional default, which passes
    over a misnamed file in silence: each file names a recorded experiment and an encoder that experiment
    sweeps, sets options that encoder takes, and every one of them reaches the composed run; a command-line
    override still wins."""
    from posenc.encoders import ENCODERS
    from posenc.options import keyword_options

    experiment, encoder = experiment_and_encoder(path.stem)
    assert experiment, f"{path.name}: not <experiment>_<encoder> for a file in conf/experiment and an encoder"
    with initialize_config_module(config_module="posenc.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    assert encoder in str(cfg.hydra.sweeper.params.get("encoder", "")).split(","), f"{experiment} sweeps no {encoder}"
    settings = yaml.safe_load(path.read_text())
    assert settings and set(settings) <= set(keyword_options(ENCODERS[encoder])), settings
    composed = compose_dict([f"experiment={experiment}", f"encoder={encoder}"])["encoder"]
    assert {key: composed[key] for key in settings} == settings
    key = next(iter(settings))
    changed = compose_dict([f"experiment={experiment}", f"encoder={encoder}", f"encoder.{key}=null"])
    assert changed["encoder"][key] is None  # the command line's value, not the file's


def test_an_encoder_without_experiment_settings_composes_as_its_own_config():
    """Only the named pair changes: an encoder the experiment has no file for composes as without the
    experiment, and the same encoder under another experiment (or none) keeps its own default."""
    assert compose_dict(["experiment=kazemnejad_matched", "encoder=alibi"])["encoder"] == {"name": "alibi"}
    assert compose_dict(["encoder=t5"])["encoder"]["max_distance"] is None
    assert compose_dict(["experiment=kazemnejad_matched", "encoder=t5"])["encoder"]["max_distance"] == 128
    assert compose_dict(["experiment=length_generalization", "encoder=t5"])["encoder"]["max_distance"] is None
