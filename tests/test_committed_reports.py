"""Every committed comparison under results/ has its report. That each regenerates from its committed tables
alone, identical to the committed report.md but for the line saying when it was made, is checked with its
figures' layout, from one regeneration per folder (tests/analysis/test_figure_layout.py): redrawing every
committed figure is the costliest step of the suite, and two tests each redrawing them all doubled it."""

from conftest import COMMITTED_COMPARISONS as COMMITTED

from posenc.analysis.pipeline import REPORT


def test_there_are_committed_reports():
    assert COMMITTED, "no committed comparison under results/"
    assert all((folder / REPORT).is_file() for folder in COMMITTED)
