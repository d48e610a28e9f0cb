"""Every committed comparison under results/ regenerates from its committed tables alone, identical to the
committed report.md but for the line saying when it was made: a report the code no longer produces fails."""

import shutil
from pathlib import Path

import pytest

from posenc.analysis.pipeline import REPORT, regenerate
from posenc.analysis.report import same_report

# End to end (every committed report redrawn, figures included): with the integration set.
pytestmark = pytest.mark.integration

RESULTS = Path(__file__).resolve().parent.parent / "results"
COMMITTED = sorted(p.parent for p in RESULTS.glob("*/comparison.parquet"))


def test_there_are_committed_reports():
    assert COMMITTED, "no committed comparison under results/"
    assert all((folder / REPORT).is_file() for folder in COMMITTED)


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: p.name)
def test_committed_report_regenerates_identically(folder, tmp_path):
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    regenerate(copy, f"posenc report results/{folder.name}")
    committed, fresh = (folder / REPORT).read_text(), (copy / REPORT).read_text()
    assert same_report(committed, fresh), (
        f"results/{folder.name}/report.md is stale: run `posenc report results/{folder.name}`"
    )
