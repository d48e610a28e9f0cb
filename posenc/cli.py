"""The ``posenc`` command line (Typer): train, extrapolate, compare, runs, encoders, tasks."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from posenc.encoders import ENCODERS
from posenc.errors import PosencError
from posenc.progress import console, print_error
from posenc.tasks import TASKS

app = typer.Typer(
    help="Compare positional encodings for transformers on length extrapolation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_RESULTS = Path("results")
RunsOption = Annotated[
    Optional[list[Path]],
    typer.Option("--runs", help="Run directories, or folders holding them (e.g. a sweep). Repeatable."),
]
SequencesOption = Annotated[
    Optional[int], typer.Option(help="Sequences per length (default: ~32k tokens, at least 4).")
]
DeviceOption = Annotated[str, typer.Option(help="auto | cpu | cuda")]


def _check_eval_options(sequences: int | None, device: str) -> None:
    if sequences is not None and sequences < 1:
        raise PosencError(f"--sequences must be >= 1, got {sequences}")
    if device not in ("auto", "cpu", "cuda"):
        raise PosencError(f"--device must be auto, cpu or cuda; got {device!r}")


def fail(message: str) -> None:
    """Print one error line and exit with status 2."""
    print_error(message)
    raise typer.Exit(2)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def train(ctx: typer.Context) -> None:
    """Train one model, or a sweep with -m. Takes Hydra overrides, e.g. `encoder=alibi task=retrieval seed=1`.

    Everything Hydra accepts works: -m/--multirun, hydra/launcher=..., --cfg job, --help.
    """
    from posenc.precheck import precheck
    from posenc.train import hydra_main

    try:
        precheck(ctx.args)
    except PosencError as err:
        fail(str(err))
    sys.argv = ["posenc train", *ctx.args]
    hydra_main()


@app.command()
def extrapolate(
    lengths: Annotated[str, typer.Option(help="Comma-separated evaluation lengths.")] = "512,2048,8192",
    runs: RunsOption = None,
    out: Annotated[Path, typer.Option(help="Folder for extrapolation.{csv,parquet,md}.")] = DEFAULT_RESULTS,
    sequences: SequencesOption = None,
    device: DeviceOption = "auto",
) -> None:
    """Evaluate trained runs at each length and write one tidy table (CSV, Parquet, Markdown)."""
    from posenc.extrapolate import TABLE_STEM, merge_into, parse_lengths, summary, summary_markdown
    from posenc.extrapolate import extrapolate as run_extrapolation
    from posenc.io import find_runs
    from posenc.tables import read_table, table_lock, write_tables

    try:
        wanted = parse_lengths(lengths)
        _check_eval_options(sequences, device)
        found = find_runs(runs or _default_runs())
        previous = read_table(out, TABLE_STEM)  # read before the long work: a bad --out fails early
        table, skipped = run_extrapolation(found, wanted, sequences=sequences, device=device)
        with table_lock(out):  # merge into the table as it is now: another command may have written it
            merged = merge_into(read_table(out, TABLE_STEM), table)
            paths = write_tables(merged, out, TABLE_STEM, summary=summary_markdown(merged))
    except PosencError as err:
        fail(str(err))
    except KeyboardInterrupt:  # tables are written only at the end, atomically: nothing is half-written
        print_error("interrupted; no table written")
        raise typer.Exit(130)
    shown = summary(table).reset_index()
    shown.columns = [str(c) for c in shown.columns]
    console.print("[bold]exact match by evaluation length[/] (all columns in the files below)")
    print_table(shown)
    for reason in skipped:
        console.print(f"[yellow]skipped:[/] {reason}", highlight=False, soft_wrap=True)
    console.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


@app.command()
def compare(
    runs: RunsOption = None,
    lengths: Annotated[
        Optional[str],
        typer.Option(help="Comma-separated evaluation lengths (default: each run's training length doubled "
                          "up to --up-to)."),
    ] = None,
    up_to: Annotated[int, typer.Option(help="Longest default evaluation length.")] = 8192,
    out: Annotated[Path, typer.Option(help="Folder for the tables, figures and report.md.")] = DEFAULT_RESULTS,
    sequences: SequencesOption = None,
    device: DeviceOption = "auto",
) -> None:
    """Aggregate runs across seeds: mean, std and 95% CI per encoder, task and length; tables, plots, report.

    Reuses evaluations in OUT/extrapolation.parquet, evaluates only missing (run, length) pairs, never trains.
    """
    from posenc.compare import pivot, write_comparison
    from posenc.extrapolate import TABLE_STEM as EVAL_STEM
    from posenc.extrapolate import extrapolate as run_extrapolation
    from posenc.extrapolate import parse_lengths
    from posenc.io import find_runs
    from posenc.tables import describe_run, read_table, table_lock

    try:
        wanted = parse_lengths(lengths) if lengths is not None else None
        if wanted is None:
            parse_lengths(str(up_to))  # same range check as --lengths
        _check_eval_options(sequences, device)
        found = find_runs(runs or _default_runs())
        previous = read_table(out, EVAL_STEM)  # read before the long work: a bad --out fails early
        done = frozenset() if previous is None else frozenset(zip(previous["run"], previous["eval_length"]))
        new, skipped = run_extrapolation(found, wanted, sequences=sequences, device=device, up_to=up_to,
                                         done=done, allow_empty=previous is not None)
        reused = 0
        if previous is not None:
            mine = previous[previous["run"].isin({describe_run(run) for run in found})]
            reused = len(mine if wanted is None else mine[mine["eval_length"].isin(wanted)])
        console.print(f"{len(new)} new evaluations, {reused} reused", highlight=False)
        command = "posenc compare " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "posenc compare"
        with table_lock(out):  # a parallel compare into the same folder merges, never overwrites
            comparison, paths, figures = write_comparison(out, new, found, wanted, skipped, command)
    except PosencError as err:
        fail(str(err))
    except OSError as err:
        fail(f"cannot write to {out}: {err.strerror or err}")
    except KeyboardInterrupt:  # every file is written atomically at the end: nothing is half-written
        print_error("interrupted; no table written")
        raise typer.Exit(130)
    console.print("[bold]exact match by evaluation length[/] (mean ± 95% CI over seeds)")
    print_table(pivot(comparison, "exact_match"))
    for reason in skipped:
        console.print(f"[yellow]skipped:[/] {reason}", highlight=False, soft_wrap=True)
    console.print(f"wrote {out / 'report.md'}, {len(figures)} figures (PNG + SVG) and "
                  f"{', '.join(p.name for p in paths)} in {out}", highlight=False)


@app.command()
def runs(
    runs: RunsOption = None,
    out: Annotated[
        Optional[Path], typer.Option(help="Also write training.{csv,parquet,md} into this folder.")
    ] = None,
) -> None:
    """List trained runs with their training time and metrics at the training length."""
    from posenc.io import find_runs
    from posenc.tables import training_table, write_tables

    try:
        table = training_table(find_runs(runs or _default_runs()))
        paths = write_tables(table, out, "training") if out is not None else []
    except PosencError as err:
        fail(str(err))
    print_table(table)
    if paths:
        console.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


def _default_runs() -> list[Path]:
    if not DEFAULT_RESULTS.is_dir():
        raise PosencError(f"no {DEFAULT_RESULTS}/ folder here: train with `posenc train`, or pass --runs PATH")
    return [DEFAULT_RESULTS]


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
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
    Console(width=None if sys.stdout.isatty() else 200).print(view)


@app.command()
def encoders() -> None:
    """List the registered positional encoders, one per line."""
    width = max(map(len, ENCODERS))
    for key, cls in ENCODERS.items():
        typer.echo(f"{key:<{width}}  {cls.description}")


@app.command()
def tasks() -> None:
    """List the registered tasks, one per line."""
    width = max(map(len, TASKS))
    for key, cls in TASKS.items():
        typer.echo(f"{key:<{width}}  {cls.description}")
