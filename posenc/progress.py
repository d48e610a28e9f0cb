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


def duration(seconds: float) -> str:
    """``seconds`` for a progress line: ``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _count(value: float) -> str:
    """A count as written: whole numbers in full (``1000000``, never ``1e+06``)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def fraction(done: float, total: float | None) -> str:
    """``150/2000 (8%)``; ``150`` alone without a total."""
    if not total:
        return _count(done)
    return f"{_count(done)}/{_count(total)} ({100 * done / total:.0f}%)"


def timing(elapsed: float | None, speed: float | None, left: float | None) -> str:
    """``12 s elapsed, ETA 2 min 30 s`` (``left`` units of work to go at ``speed`` units per second); the ETA
    is left out until a speed is measured: a guess from nothing would mislead."""
    text = f"{duration(elapsed or 0)} elapsed"
    if speed and left is not None:
        text += f", ETA {duration(max(0.0, left) / speed)}"
    return text


def task_status(progress: Progress | LineProgress, task_id: int, done: float) -> tuple[str, str]:
    """``(fraction, timing)`` of a progress bar's task at ``done`` units of work: what a line written off the
    terminal shows instead of the bar (``150/2000 (8%)``, ``12 s elapsed, ETA 2 min 30 s``). A live bar keeps
    its clock and speed even when disabled (output piped or logged), so both come from it."""
    if isinstance(progress, LineProgress):
        return progress.status(task_id, done)
    task = next(t for t in progress.tasks if t.id == task_id)
    total = task.total
    return fraction(done, total), timing(task.elapsed, task.speed, None if total is None else total - done)


class LineProgress:
    """What a progress bar shows, as a plain line on stderr every :data:`LINE_SECONDS` (the first after that
    long), for output piped or logged, where live bars are off:
    ``evaluate 3/12 (25%) rope/copy @ 512, 40 s elapsed, ETA 2 min 00 s``. Offers the calls of
    :class:`rich.progress.Progress` that posenc makes (``add_task``, ``update``, ``advance``)."""

    def __init__(self) -> None:
        self.tasks: dict[int, dict] = {}
        self.start = self.last = time.monotonic()

    def __enter__(self) -> LineProgress:
        self.start = self.last = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **fields: object) -> int:
        task = {"description": description, "total": total, "completed": 0, **fields}
        task["initial"] = task["completed"]  # work done before this process (a resumed job): not its speed
        self.tasks[len(self.tasks)] = task
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

    def status(self, task: int, done: float, now: float | None = None) -> tuple[str, str]:
        """``(fraction, timing)`` at ``done``: the speed is this process's work over its time so far."""
        t, elapsed = self.tasks[task], (time.monotonic() if now is None else now) - self.start
        worked = done - t["initial"]
        speed = worked / elapsed if worked > 0 and elapsed > 0 else None
        return fraction(done, t["total"]), timing(elapsed, speed, None if not t["total"] else t["total"] - done)

    def _maybe_print(self, task: int) -> None:
        now = time.monotonic()
        if now - self.last < LINE_SECONDS:
            return
        self.last = now
        t = self.tasks[task]
        done, clock = self.status(task, t["completed"], now)
        current = str(t.get("current") or "")
        console.print(
            f"{t['description']} {done}{' ' + current if current else ''}, {clock}", highlight=False, soft_wrap=True
        )


def make_progress(
    enabled: bool, fields: str = "loss {task.fields[loss]:.4f}  acc {task.fields[acc]:.3f}", lines: bool = False
) -> Progress | LineProgress:
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
