"""What installing posenc takes: the config tree ships inside the package (every group folder a listed package
with __init__.py), and the main job (README's first command) needs neither the test extra nor a tracker."""

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


ROOT = Path(__file__).resolve().parents[1]


def test_every_config_folder_is_a_listed_package():
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for folder in [ROOT / "conf", *(p for p in (ROOT / "conf").rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        name = ".".join(("posenc", *folder.relative_to(ROOT).parts))
        assert name in packages, f"{name} is not listed in pyproject.toml: it would drop out of the wheel"
        assert (folder / "__init__.py").is_file(), f"{folder} has no __init__.py"


def _quick_start_commands() -> list[str]:
    """The ```bash blocks of README's Quick start section, in order: the first run, then the tests."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def test_readmes_first_command_installs_posenc_without_the_test_extra():
    """Issue 38: the first command installed the `test` extra (about 90 packages: wandb, mlflow, fastapi ...)
    to train and evaluate one model. It installs posenc alone; the test command installs the extra itself."""
    first, tests = _quick_start_commands()[:2]
    assert "pip install -e . " in first and "[test]" not in first, first
    assert "posenc train" in first and "posenc extrapolate" in first, first
    assert 'pip install -e ".[test]"' in tests and "pytest" in tests, tests
    assert tests.index('pip install -e ".[test]"') < tests.index("pytest"), tests


def test_the_main_job_depends_on_no_test_tracking_or_launcher_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    extras = project["optional-dependencies"]
    optional = {
        re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower()
        for key in ("test", "tracking", "launchers")
        for dep in extras[key]
    } - {"posenc"}
    assert {"wandb", "mlflow-skinny", "tensorboard", "pytest"} <= optional
    assert not names & optional, names & optional
