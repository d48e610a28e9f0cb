"""Shared fixtures: tiny configs and a tiny trained run, so CLI tests stay fast."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from posenc.running.config import RunConfig, run_config_from_dict

# Overrides that make a run take a second or two on a laptop CPU.
TINY = [
    "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.d_mlp=32",
    "train.steps=4", "train.batch_size=4", "train.eval_sequences=4", "train.log_every=2",
    "task.length=16", "task.variable_length=False", "progress=false",  # Hydra names folders with False
]  # fmt: skip
# With mastery checks patched to score 1.0 (fixture `always_learns`, or `posenc_cli(..., learns=True)`), a tiny
# run is learned at its first check, step 2 of its 4: evaluated past its training length like a learned run.
LEARNS = ["train.check_every=2"]
HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"  # the committed results, read by the tests that check them


def committed(table: str) -> list[Path]:
    """Every committed file named ``table`` under results/, at every depth: an experiment with arms keeps one
    comparison per arm (results/kazemnejad/long, results/t5_layout/L/first), and a glob one level deep missed
    them."""
    return sorted(RESULTS.rglob(table))


COMMITTED_COMPARISONS = [table.parent for table in committed("comparison.parquet")]  # one folder per comparison


def compose_dict(overrides: list[str] | None = None) -> dict:
    """The job config Hydra composes for ``posenc train OVERRIDES``, as a plain mapping."""
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="posenc.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides or []))
    return OmegaConf.to_container(cfg, resolve=True)


def tiny_dict(*overrides: str) -> dict:
    """The composed config of a tiny run with ``overrides``."""
    return compose_dict([*TINY, *overrides])


def tiny_config(*overrides: str) -> RunConfig:
    return run_config_from_dict(tiny_dict(*overrides))


def posenc_cli(*args: str, cwd: Path, timeout: float = 300, learns: bool = False) -> subprocess.CompletedProcess:
    """Run the installed `posenc` command as a user would (fresh process, own working directory).

    ``learns``: every mastery check scores 1.0 (tests/always_learns.py), so tiny runs count as learned.
    """
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("HYDRA_FULL_ERROR", None)
    command = [sys.executable, str(HERE / "always_learns.py")] if learns else [sys.executable, "-m", "posenc"]
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def always_learns(monkeypatch):
    """Every mastery check scores 1.0: with LEARNS, a tiny run is learned at step 2 (and stops there)."""
    import posenc.running.train

    calls = []

    def check(model, task, length, sequences):
        calls.append(length)
        return 1.0

    monkeypatch.setattr(posenc.running.train, "mastery_check", check)
    return calls


def learned_run(run_dir: Path, *overrides: str) -> dict:
    """Train a tiny run into ``run_dir`` that counts as learned (needs the `always_learns` fixture)."""
    from posenc.running.train import train

    overrides = (*LEARNS, *overrides)
    return train(tiny_config(*overrides), run_dir, tiny_dict(*overrides))


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory) -> Path:
    """A tiny multirun sweep (rope and learned on copy) trained once for the whole test session; both runs
    count as learned (mastery checks patched to 1.0, see LEARNS), so they are evaluated at every length."""
    root = tmp_path_factory.mktemp("sweep")
    result = posenc_cli(
        "train",
        "-m",
        "encoder=rope,learned",
        *TINY,
        *LEARNS,
        f"hydra.sweep.dir={root / 'sweep'}",
        cwd=root,
        learns=True,
    )
    assert result.returncode == 0, result.stderr
    return root / "sweep"


# A test that starts another process (the posenc command, a Hydra sweep, a script, a SIGKILL target) or
# uses the sweep trained that way is an integration test: `pytest -q` leaves it out, CI runs it
# (README: `pytest -q -n 2 -m "not slow and not gpu"`). Marked from the test's own source, so that a new test
# of that kind cannot land in the fast unit suite by forgetting a decorator.
_SPAWNS = ("posenc_cli(", "subprocess.", "Popen(", "start_training(", "run_script(")
# Likewise a test that compiles kernels (FlexAttention through inductor: seconds each, minutes on a cold
# cache), from a marker in its source: `kind="flex"`, `.flex(`, `torch.compile(`, or `# compiles` where the
# compiled path is reached indirectly (the `auto` attention kind past FLEX_MIN_LENGTH).
_COMPILES = ('kind="flex"', ".flex(", "torch.compile(", "# compiles")


def pytest_collection_modifyitems(config, items):
    import inspect

    for item in items:
        function = getattr(item, "function", None)
        try:
            source = inspect.getsource(function) if function else ""
        except (OSError, TypeError):
            source = ""
        if any(s in source for s in _SPAWNS + _COMPILES) or "trained_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


def load_script(name: str):
    """``scripts/<name>.py`` imported as a module (scripts are not a package), for tests of its functions."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def listed_runs(script: Path, results: Path, **env: str) -> list[str]:
    """An experiment script's ``LIST=1`` output (scripts/kazemnejad.sh's convention): one line of Hydra overrides
    per unfinished run under ``results``, in the order the script would train them."""
    done = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "LIST": "1", "RESULTS": str(results), "POSENC": "posenc", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
