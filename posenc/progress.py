"""Rich console and progress bars shared by the CLI commands (on stderr; stdout is for tables)."""

from __future__ import annotations

import logging

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


def live_bars(enabled: bool) -> bool:
    """Whether live bars are shown: asked for, and stderr is a terminal."""
    return enabled and console.is_terminal


def make_progress(enabled: bool, fields: str = "loss {task.fields[loss]:.4f}  acc {task.fields[acc]:.3f}") -> Progress:
    """A progress bar with ``fields`` (a format string over the task's fields).

    A no-op when disabled or when stderr is not a terminal (logs and CI output stay free of bar frames).
    """
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(fields),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not live_bars(enabled),
    )


def rich_log_handler() -> logging.Handler:
    """Logging handler on the console above, so log lines and live bars share one screen (Hydra config)."""
    return RichHandler(console=console, show_path=False)


def print_error(message: str) -> None:
    """One red ``error:`` line on stderr, never wrapped."""
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
