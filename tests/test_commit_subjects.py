"""CONTRIBUTING.md's commit rule: a subject of at most 72 characters, the detail in the body. Checked on every
commit since the rule was written (5f88536, "Enforce ruff in CI; CONTRIBUTING.md"); older history is as it was."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RULE_COMMIT = "5f88536"  # the commit that wrote the rule into CONTRIBUTING.md
MAX_SUBJECT = 72


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def long_subjects(subjects: list[str], limit: int = MAX_SUBJECT) -> list[str]:
    """The subjects longer than ``limit`` characters."""
    return [s for s in subjects if len(s) > limit]


def test_long_subjects_finds_only_the_long_ones():
    assert long_subjects(["a" * 72, "b" * 73, "short"]) == ["b" * 73]


def test_commit_subjects_since_the_rule_are_short():
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    if _git("cat-file", "-e", f"{RULE_COMMIT}^{{commit}}").returncode != 0:
        pytest.skip(f"the history does not reach {RULE_COMMIT} (a shallow clone)")
    subjects = _git("log", "--format=%s", f"{RULE_COMMIT}^..HEAD").stdout.splitlines()
    assert subjects, "no commits found since the rule"
    too_long = long_subjects(subjects)
    assert not too_long, f"commit subjects over {MAX_SUBJECT} characters (CONTRIBUTING.md): {too_long}"
