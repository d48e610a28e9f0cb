"""The config tree ships inside the package: every group folder is a listed package with __init__.py."""

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
