"""What the command line prints: DataFrames as rich tables, a comparison's headline views, notes, registries."""

from __future__ import annotations

import math
import sys

import pandas as pd
from rich.console import Console
from rich.table import Table

from posenc.progress import console


def by_headline_metric(table):
    """``(metric, rows)`` for each task's headline metric (perplexity for ``lm``, else exact match)."""
    from posenc.compare import report_metrics

    headline = table["task"].map(lambda task: report_metrics(task)[0])
    return [(metric, table[headline == metric]) for metric in dict.fromkeys(headline)]


def print_notes(skipped: list[str], *notes: str | None) -> None:
    for reason in skipped:
        console.print(f"[yellow]skipped:[/] {reason}", highlight=False, soft_wrap=True)
    for note in notes:
        if note:
            console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def _fmt(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def print_table(table) -> None:
    """Print a DataFrame as a rich table on stdout (text columns left, numbers right)."""
    view = Table()
    for col in table.columns:
        numeric = pd.api.types.is_numeric_dtype(table[col])
        view.add_column(col.replace("_", " "), justify="right" if numeric else "left")
    for row in table.itertuples(index=False):
        view.add_row(*(_fmt(v) for v in row))
    # Piped or redirected: as wide as the table needs, so the names that tell runs apart are never cut.
    Console(width=None if sys.stdout.isatty() else 100_000).print(view)


def print_comparison(comparison) -> None:
    from posenc.compare import pivot

    for metric, view in by_headline_metric(comparison):
        console.print(f"[bold]{metric.replace('_', ' ')} by evaluation length[/] (mean [95% interval])")
        print_table(pivot(view, metric))


def print_registry(registry) -> None:
    """One line per registry key: the key, padded, and its class's ``description``."""
    width = max(map(len, registry))
    for key, cls in registry.items():
        print(f"{key:<{width}}  {cls.description}")
