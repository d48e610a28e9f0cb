"""Rich console and progress bars shared by the CLI commands (on stderr; stdout is for tables)."""

from __future__ import annotations

import logging
import time

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


def live_bars(enabled: bool) -> bool:
    """Whether live bars are shown: asked for, and stderr is a terminal."""
    return enabled and console.is_terminal


LINE_SECONDS = 5.0  # without a terminal: a progress line at most this often


class LineProgress:
    """What a progress bar shows, as a plain line on stderr every :data:`LINE_SECONDS` (the first after that
    long), for output piped or logged, where live bars are off: ``evaluate 3/12 (25%) rope/copy @ 512, 40 s``.
    Offers the calls of :class:`rich.progress.Progress` that posenc makes (``add_task``, ``update``,
    ``advance``)."""

    def __init__(self) -> None:
        self.tasks: dict[int, dict] = {}
        self.start = self.last = time.monotonic()

    def __enter__(self) -> LineProgress:
        self.start = self.last = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **fields: object) -> int:
        self.tasks[len(self.tasks)] = {"description": description, "total": total, "completed": 0, **fields}
        return len(self.tasks) - 1

    def update(self, task: int, *, total: float | None = None, advance: float = 0, **fields: object) -> None:
        if total is not None:
            self.tasks[task]["total"] = total
        self.tasks[task].update(fields)
        self.advance(task, advance)

    def advance(self, task: int, advance: float = 1) -> None:
        self.tasks[task]["completed"] += advance
        if advance:
            self._maybe_print(task)

    def _maybe_print(self, task: int) -> None:
        now = time.monotonic()
        if now - self.last < LINE_SECONDS:
            return
        self.last = now
        t = self.tasks[task]
        done, total = t["completed"], t["total"] or 0
        share = f" ({100 * done / total:.0f}%)" if total else ""
        current = str(t.get("current") or "")
        console.print(f"{t['description']} {done:g}/{total:g}{share}{' ' + current if current else ''}, "
                      f"{now - self.start:.0f} s", highlight=False, soft_wrap=True)


def make_progress(enabled: bool, fields: str = "loss {task.fields[loss]:.4f}  acc {task.fields[acc]:.3f}",
                  lines: bool = False) -> Progress | LineProgress:
    """A progress bar with ``fields`` (a format string over the task's fields).

    A no-op when disabled or when stderr is not a terminal (logs and CI output stay free of bar frames); with
    ``lines``, enabled without a terminal, a :class:`LineProgress` instead: a line every few seconds.
    """
    if lines and enabled and not console.is_terminal:
        return LineProgress()
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
