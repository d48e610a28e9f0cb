"""What the command line prints: DataFrames as rich tables, a comparison's headline views, notes, registries."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from posenc.progress import console


def by_headline_metric(table):
    """``(metric, rows)`` for each task's headline metric (perplexity for ``lm``, else exact match)."""
    from posenc.task_facts import report_metrics

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


def rich_table(compact: bool = False, **options) -> Table:
    """An empty rich table; ``compact``: without vertical rules or edge padding (for :func:`print_view`)."""
    return Table(box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD, pad_edge=not compact, **options)


def _view(table, compact: bool = False) -> Table:
    view = rich_table(compact)
    for col in table.columns:
        numeric = pd.api.types.is_numeric_dtype(table[col])
        view.add_column(col.replace("_", " "), justify="right" if numeric else "left")
    for row in table.itertuples(index=False):
        view.add_row(*(_fmt(v) for v in row))
    return view


def _natural_width(view: Table) -> int:
    wide = Console(width=100_000, color_system=None)
    with wide.capture() as capture:
        wide.print(view)
    return max((len(line) for line in capture.get().splitlines()), default=0)


def print_table(table) -> None:
    """Print a DataFrame as a rich table on stdout (text columns left, numbers right), never cutting a value
    (:func:`print_view`)."""
    print_view(lambda compact: _view(table, compact))


def print_view(make_view: Callable[[bool], Table]) -> None:
    """Print the rich table ``make_view(compact)`` builds on stdout, never cutting a value: piped or
    redirected, as wide as the table needs; in a terminal narrower than the table, compact (no vertical rules)
    and at its full width (the terminal wraps its lines) rather than squeezed into "0.…"."""
    if not sys.stdout.isatty():
        Console(width=100_000).print(make_view(False))
        return
    console = Console()
    view = make_view(False)
    if _natural_width(view) > console.width:
        view = make_view(True)
        console = Console(width=max(console.width, _natural_width(view)))
    console.print(view)


def print_comparison(comparison) -> None:
    from posenc.analysis.compare import pivot

    for metric, view in by_headline_metric(comparison):
        console.print(f"[bold]{metric.replace('_', ' ')} by evaluation length[/] (mean [95% interval])")
        print_table(pivot(view, metric))


def print_registry(rows: list[tuple[str, str, str]]) -> None:
    """One line per entry of ``rows`` (``posenc.plugins.listing``): the key, padded, its description, and for a
    plugin where it comes from (a broken plugin's description is its error)."""
    width = max(len(key) for key, _, _ in rows)
    for key, text, origin in rows:
        if not key:  # a plugin module that failed to import: its line alone
            print(text)
            continue
        print(f"{key:<{width}}  {text}" + ("" if origin == "built-in" else f"  [{origin}]"))
