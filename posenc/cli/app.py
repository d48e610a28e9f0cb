"""The ``posenc`` command line (Typer): train, extrapolate, compare, runs, encoders, tasks."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from posenc.analysis.printing import by_headline_metric, print_comparison, print_notes, print_registry, print_table
from posenc.errors import PosencError
from posenc.progress import console, print_error
from posenc.running.arguments import (
    DEFAULT_MAX_HOURS,
    check_eval_options,
    check_max_hours,
    experiment_single_run,
    parse_encoders,
    parse_lengths,
    parse_scalings,
)

app = typer.Typer(
    help="Compare positional encodings for transformers on length extrapolation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help, not Rich's panels: the panels cut long option names and values
    # ("--include-not-lear…") at 80 columns and show a type beside every flag ("--help <bool>"); click wraps
    # every line instead, at the terminal's width ($COLUMNS, or 80 without a terminal): max_content_width
    # lifts click's own cap of 80.
    rich_markup_mode=None,
    context_settings={"max_content_width": 10_000},
)

DEFAULT_RESULTS = Path("results")
RunsOption = Annotated[
    Optional[list[Path]],
    typer.Option("--runs", metavar="PATH", help="Run directories, or folders holding them (e.g. a sweep). Repeatable."),
]
SequencesOption = Annotated[
    Optional[int], typer.Option(metavar="N", help="Sequences per length (default: ~32k tokens, at least 64).")
]
DeviceOption = Annotated[str, typer.Option(metavar="DEVICE", help="auto | cpu | cuda")]
ScalingOption = Annotated[
    str,
    typer.Option(
        "--rope-scaling",
        metavar="METHODS",
        help="Comma-separated RoPE extension methods to evaluate "
        "rotary runs under, without retraining: none (as trained), linear, ntk, dynamic_ntk, yarn, "
        "llama3; options after a colon, e.g. yarn:beta_fast=16,beta_slow=1 or llama3:low_freq_factor=1 "
        "(an unknown option is refused with the method's options listed).",
    ),
]
NotLearnedOption = Annotated[
    bool,
    typer.Option(
        "--include-not-learned",
        help="Also evaluate runs that did not learn their task past their "
        "training length (by default they are evaluated there only); they stay marked not learned.",
    ),
]
MemoryOption = Annotated[
    bool,
    typer.Option(
        "--memory-check/--no-memory-check",
        help="Refuse, before any work, an evaluation estimated to "
        "need more memory than is available (--no-memory-check: try anyway).",
    ),
]
MaxHoursOption = Annotated[
    float,
    typer.Option(
        "--max-hours",
        metavar="HOURS",
        help="Refuse, before any work, an evaluation estimated to take "
        "longer than this many hours (inf: no limit); one estimated over a minute is announced.",
    ),
]
FactorOption = Annotated[
    Optional[float],
    typer.Option(
        "--rope-factor",
        metavar="FACTOR",
        help="Fixed extension factor for --rope-scaling (default: "
        "follows the evaluation length, s = eval length / training length).",
    ),
]


def fail(message: str) -> None:
    """Print one error line and exit with status 2."""
    print_error(message)
    raise typer.Exit(2)


@contextmanager
def one_line_errors(out: Path | None = None) -> Iterator[None]:
    """Every command's expected failures as one line and an exit status, never a traceback: a
    :class:`PosencError` (2); an ``OSError`` while writing to ``out`` (2: disk full, no permission); Ctrl-C
    (130: with ``out``, a line saying truthfully whether its new files were published)."""
    try:
        yield
    except PosencError as err:
        fail(str(err))
    except OSError as err:
        if out is None:
            raise
        fail(f"cannot write to {out}: {err.strerror or err}")
    except KeyboardInterrupt:
        if out is not None:
            _interrupted(out)
        print_error("interrupted")
        raise typer.Exit(130)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def train(ctx: typer.Context) -> None:
    """Train one model, or a sweep with -m. Takes Hydra overrides, e.g. `encoder=alibi task=retrieval seed=1`.

    Everything Hydra accepts works: -m/--multirun, hydra/launcher=..., --cfg job, --help.
    """
    from posenc.cli.hydra_entry import hydra_main
    from posenc.cli.precheck import precheck, quote_path_overrides
    from posenc.errors import ConfigError
    from posenc.running.config import store_plugin_configs

    args = quote_path_overrides(ctx.args)  # resume=PATH of posenc's own folder names (`=`, `,`)
    # `~experiment` removes the experiment default, which is null: nothing. Passed on, it would leave conf/config.yaml's
    # experiment_encoder default (`${experiment}_${encoder}`) without a value to read.
    args = [a for a in args if a not in ("~experiment", "~experiment=null")]
    with one_line_errors():
        try:
            store_plugin_configs(args)  # encoder=KEY of a plugin composes like a built-in (here and in workers)
            precheck(args)
        except ConfigError as err:
            raise _with_plugin_hint(err) from None
        note = experiment_single_run(args)  # an experiment's sweep without -m: refused, or the one run named
    if note:
        print_notes([], note)
    sys.argv = ["posenc train", *args]
    hydra_main()


def _with_plugin_hint(err: PosencError) -> PosencError:
    """An unknown encoder or task key, with how to load the plugin it may be (the registry names the known keys
    only: a plugin's key looks like a typo where its module is not loaded)."""
    from posenc.running.runs import PLUGIN_HOWTO

    for group in ("encoder", "task"):
        if str(err).startswith(f"unknown {group} '"):
            return type(err)(f"{err}; {PLUGIN_HOWTO.format(group=group)}")
    return err


@app.command()
def extrapolate(
    lengths: Annotated[
        str, typer.Option(metavar="LENGTHS", help="Comma-separated evaluation lengths.")
    ] = "512,2048,8192",
    runs: RunsOption = None,
    out: Annotated[
        Path, typer.Option(metavar="FOLDER", help="Folder for extrapolation.{csv,parquet,md}.")
    ] = DEFAULT_RESULTS,
    sequences: SequencesOption = None,
    device: DeviceOption = "auto",
    rope_scaling: ScalingOption = "none",
    rope_factor: FactorOption = None,
    include_not_learned: NotLearnedOption = False,
    memory_check: MemoryOption = True,
    max_hours: MaxHoursOption = DEFAULT_MAX_HOURS,
) -> None:
    """Evaluate trained runs at each length and write tidy tables (CSV, Parquet, Markdown).

    One row per run and length in extrapolation.*, one per evaluated sequence in sequences.parquet, accuracy
    by answer position in positions.parquet. With --rope-scaling, rotary runs are also evaluated under each
    RoPE extension method (a `scaling` column).
    """
    from posenc.analysis.folders import check_destination
    from posenc.analysis.pipeline import store_into
    from posenc.analysis.store import read_results
    from posenc.analysis.views import summary
    from posenc.running.extrapolate import distinct_runs, not_learned_note, scaling_note
    from posenc.running.extrapolate import extrapolate as run_extrapolation
    from posenc.running.runs import find_runs

    unreadable: list[str] = []
    with one_line_errors(out):
        check_max_hours(max_hours)
        wanted = parse_lengths(lengths)
        scalings = parse_scalings(rope_scaling, rope_factor)
        check_eval_options(sequences, device)
        found, same = distinct_runs(find_runs(runs or _default_runs(), unreadable))
        check_destination(out)
        read_results(out)  # read before the long work: a bad --out or damaged table fails early
        new, skipped = run_extrapolation(
            found,
            wanted,
            sequences=sequences,
            device=device,
            scalings=scalings,
            memory_check=memory_check,
            include_not_learned=include_not_learned,
            max_hours=max_hours,
        )
        paths = store_into(out, new)  # tables are written only at the end, all or nothing
    table = new.evaluations
    for metric, view in by_headline_metric(table):
        shown = summary(view, metric).reset_index()
        shown.columns = [str(c) for c in shown.columns]
        console.print(
            f"[bold]{metric.replace('_', ' ')} by evaluation length[/] (mean over seeds; all columns "
            "in the files below)"
        )
        print_table(shown)
    print_notes(
        unreadable + skipped,
        same,
        scaling_note(table, scalings),
        None if include_not_learned else not_learned_note(table, wanted),
        None if include_not_learned else not_learned_hint(table, wanted),
    )
    console.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


NOT_LEARNED_HINT = (
    "— past the training length marks a configuration that did not learn its task there, so it "
    "was evaluated at its training length only; --include-not-learned evaluates it at every length "
    "(it stays marked not learned)"
)


def not_learned_hint(table, lengths: list[int] | None) -> str | None:
    """:data:`NOT_LEARNED_HINT` when ``table`` (evaluations, or a comparison's rows) holds a configuration held
    back at its training length while longer ``lengths`` were asked for (None: the default, longer ones): a
    small-budget trial otherwise shows only "—" past 1x, with nothing naming the option that fills it."""
    from posenc.analysis.compare import held_back

    if table.empty or not {"learned", "task", "train_length"} <= set(table.columns):
        return None
    held = table[[held_back(bool(learned), task) for learned, task in zip(table["learned"], table["task"])]]
    if held.empty or (lengths is not None and max(lengths) <= held["train_length"].min()):
        return None
    return NOT_LEARNED_HINT


def _interrupted(out: Path) -> None:
    """Ctrl-C: one line saying truthfully whether the new files were published in ``out``; exit 130."""
    from posenc.analysis.folders import interrupted_message

    print_error(interrupted_message(out))
    raise typer.Exit(130)


def _command(name: str) -> str:
    return f"posenc {name} " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else f"posenc {name}"


CompareLengthsOption = Annotated[
    Optional[str],
    typer.Option(
        metavar="LENGTHS",
        help="Comma-separated evaluation lengths (default: L/4, L/2, 3L/4 for a "
        "run trained on a range of lengths, L, every L/8 up to 2L, then doubling up to --up-to).",
    ),
]
UpToOption = Annotated[int, typer.Option(metavar="LENGTH", help="Longest default evaluation length.")]
ComparisonOutOption = Annotated[
    Path, typer.Option(metavar="FOLDER", help="Folder for the tables, figures and report.md.")
]
ChooseOption = Annotated[
    Optional[str],
    typer.Option(
        metavar="KEY",
        help="A config key (e.g. train.lr): among runs that differ only in it, compare "
        "the value whose seeds learned best at the training length (written to choices.md).",
    ),
]
BaselineOption = Annotated[
    Optional[Path],
    typer.Option(
        "--baseline",
        metavar="FOLDER",
        help="A committed comparison (e.g. results/length_generalization) "
        "to place these runs beside: its tables are copied into OUT (it is never written, retrained or "
        "re-evaluated), the runs are evaluated at its lengths on its sequences and paired with its "
        "encoders. Runs must differ from its runs only in encoder and seed.",
    ),
]
ExtendOption = Annotated[
    bool,
    typer.Option(
        "--extend",
        help="Keep the runs OUT's comparison already covers (from OUT's tables: their run "
        "folders need not be here) and add these runs to it.",
    ),
]


@app.command()
def compare(
    runs: RunsOption = None,
    lengths: CompareLengthsOption = None,
    up_to: UpToOption = 8192,
    out: ComparisonOutOption = DEFAULT_RESULTS,
    sequences: SequencesOption = None,
    device: DeviceOption = "auto",
    rope_scaling: ScalingOption = "none",
    rope_factor: FactorOption = None,
    choose: ChooseOption = None,
    extend: ExtendOption = False,
    baseline: BaselineOption = None,
    include_not_learned: NotLearnedOption = False,
    memory_check: MemoryOption = True,
    max_hours: MaxHoursOption = DEFAULT_MAX_HOURS,
) -> None:
    """Aggregate runs across seeds (only runs of one configuration are pooled): mean and 95% interval per
    encoder, task and length; tables, figures, report.md with literature checks.

    Reuses evaluations in OUT's tables, evaluates only missing (run, length) pairs, never trains.
    """
    from posenc.analysis.pipeline import compare_into
    from posenc.running.extrapolate import extrapolate as run_extrapolation
    from posenc.running.extrapolate import not_learned_note, run_facts, scaling_note

    unreadable: list[str] = []
    with one_line_errors(out), _beside(baseline, out, lengths, choose) as base:  # all or nothing
        check_max_hours(max_hours)
        if base is not None:  # the baseline's lengths, its choice of runs, its comparison extended
            lengths, choose, extend = ",".join(map(str, base.lengths)), base.choose, True
        wanted, scalings = _checked_compare_options(
            lengths, up_to, rope_scaling, rope_factor, sequences, device, choose
        )
        picked = _compared_runs(runs, out, base, choose, extend, unreadable)
        done = frozenset() if picked.previous is None else picked.previous.done()
        new, skipped = run_extrapolation(
            picked.evaluated,
            wanted,
            sequences=sequences,
            device=device,
            up_to=up_to,
            scalings=scalings,
            done=done,
            allow_empty=picked.previous is not None,
            memory_check=memory_check,
            include_not_learned=include_not_learned,
            max_hours=max_hours,
        )
        console.print(f"{len(new.evaluations)} new evaluations", highlight=False)
        if base is not None:  # the same sequences as the baseline's, or nothing is published
            base.check_fingerprints(new.evaluations)
        run_ids = {picked.folders[run].run_id for run in picked.found}
        comparison, paths, figures = compare_into(
            out,
            new,
            run_ids,
            wanted,
            _command("compare"),
            picked.choices,
            extend=extend,
            replaced=picked.given,
            facts=run_facts(picked.folders[run] for run in picked.found),
        )
    print_comparison(comparison)
    print_notes(
        unreadable + skipped,
        picked.same,
        scaling_note(new.evaluations, scalings),
        None if include_not_learned else not_learned_note(new.evaluations, wanted),
        None if include_not_learned else not_learned_hint(comparison, wanted),
    )  # its rows, old ones too
    console.print(
        f"wrote {out / 'report.md'}, {len(figures)} figures (PNG + SVG) and "
        f"{', '.join(p.name for p in paths)} in {out}",
        highlight=False,
    )


@dataclass
class _ComparedRuns:
    """The runs ``compare`` pools, and what OUT already holds."""

    found: list[Path]  # the runs compared, one per run identity
    same: list[str]  # notes on runs found twice (one kept)
    folders: dict  # run path -> its RunFolder, read once
    given: set[str]  # run ids whose evaluations in OUT these runs replace (with --extend)
    choices: object  # with --choose: the table of values weighed, else None
    previous: object  # OUT's results before this command (None: none)
    evaluated: list[Path]  # the runs evaluated now (not the weightless ones OUT already covers)


def _compared_runs(
    runs: list[Path] | None, out: Path, base, choose: str | None, extend: bool, unreadable: list[str]
) -> _ComparedRuns:
    """The runs ``compare`` pools: found under ``runs``, deduplicated, checked against the baseline, chosen by
    ``choose`` (with ``extend``, OUT's candidates too); OUT checked and read before any long work."""
    from posenc.analysis.folders import check_destination
    from posenc.analysis.pipeline import check_extendable
    from posenc.analysis.run_folder import RunFolder
    from posenc.analysis.selection import CHOICES_STEM, choose_runs, losing_runs
    from posenc.analysis.store import read_results
    from posenc.analysis.tables import read_table
    from posenc.running.extrapolate import distinct_runs
    from posenc.running.runs import find_runs

    weighable = extend and choose is not None  # candidates evaluated before, brought back without weights
    found, same = distinct_runs(find_runs(runs or _default_runs(), unreadable, weightless=weighable))
    folders = {run: RunFolder.read(run) for run in found}  # each run's files read, its identity made, once
    if base is not None:
        base.check_configs({run: folder.config for run, folder in folders.items() if folder.config})
    given = {folders[run].run_id for run in found}  # with --extend: these replace their past
    choices = None
    check_destination(out)
    previous = read_results(out)  # read before the long work: a bad --out fails early
    compared = check_extendable(out) if extend else set()
    if choose is not None:  # with --extend: OUT's candidates are weighed too, and its losing runs leave
        earlier = read_table(out, CHOICES_STEM) if extend else None
        found, choices = choose_runs(found, [folders[run].config for run in found], choose, earlier)
        if extend and previous is not None:
            given |= losing_runs(previous.evaluations, choices, choose)
    weightless = _weightless_runs(found, compared)
    evaluated = [run for run in found if run not in weightless]
    return _ComparedRuns(found, same, folders, given, choices, previous, evaluated)


def _checked_compare_options(
    lengths: str | None,
    up_to: int,
    rope_scaling: str,
    rope_factor: float | None,
    sequences: int | None,
    device: str,
    choose: str | None,
):
    """``compare``'s options checked before any work: the lengths wanted (None: each run's defaults, up to
    ``up_to``, range-checked as ``--lengths``) and the RoPE scalings."""
    from posenc.analysis.selection import check_choose_key

    wanted = parse_lengths(lengths) if lengths is not None else None
    if wanted is None:
        parse_lengths(str(up_to))  # same range check as --lengths
    scalings = parse_scalings(rope_scaling, rope_factor)
    check_eval_options(sequences, device)
    if choose is not None:
        check_choose_key(choose)
    return wanted, scalings


@app.command()
def report(
    out: Annotated[Path, typer.Argument(metavar="OUT", help="A folder written by `posenc compare`.")],
) -> None:
    """Regenerate a comparison's tables, figures and report.md from its tables alone (no runs needed)."""
    from posenc.analysis.pipeline import regenerate

    with one_line_errors(out):
        comparison, paths, figures = regenerate(out, _command("report"))
    print_comparison(comparison)
    console.print(
        f"wrote {out / 'report.md'}, {len(figures)} figures (PNG + SVG) and "
        f"{', '.join(p.name for p in paths)} in {out}",
        highlight=False,
    )


@app.command()
def runs(
    runs: RunsOption = None,
    out: Annotated[
        Optional[Path],
        typer.Option(metavar="FOLDER", help="Also write training.{csv,parquet,md} into this folder."),
    ] = None,
    extend: Annotated[
        bool, typer.Option("--extend", help="With --out: keep the rows of OUT's training table for other runs.")
    ] = False,
) -> None:
    """List trained runs with their training time and metrics at the training length."""
    from posenc.analysis.folders import check_destination, moved, updating
    from posenc.analysis.run_folder import extend_training_table, training_table
    from posenc.analysis.tables import write_tables
    from posenc.running.runs import find_runs

    notes: list[str] = []
    with one_line_errors(out):
        if out is not None:
            check_destination(out)
        table = training_table(find_runs(runs or _default_runs(), notes), notes)
        paths = []
        if out is not None:
            with updating(out) as stage:
                written = extend_training_table(out, table) if extend else table
                paths = moved(write_tables(written, stage, "training"), stage, out)
    print_table(table)
    print_notes(notes)
    if paths:
        console.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False)


@contextmanager
def _beside(baseline: Path | None, out: Path, lengths: str | None, choose: str | None):
    """``compare --baseline``: the baseline read and checked, its files copied into ``out`` if ``out`` holds no
    tables yet; yields it (None without --baseline). If the comparison then fails, an ``out`` made here goes."""
    if baseline is None:
        yield None
        return
    import shutil

    from posenc.analysis.baseline import check_out, read_baseline, seed_out

    if lengths is not None or choose is not None:
        raise PosencError(
            "--baseline compares at the baseline's lengths and chooses runs as it did: leave out --lengths and --choose"
        )
    base = read_baseline(baseline)
    check_out(base, out)
    made = seed_out(base, out)
    try:
        yield base
    except BaseException:
        if made:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _weightless_runs(found: list[Path], compared: set[str]) -> set[Path]:
    """The runs in ``found`` without a checkpoint (``compare --extend --choose`` candidates); each must be in
    OUT's comparison (``compared``, its run ids) already, since it cannot be evaluated again."""
    from posenc.analysis.run_folder import RunFolder
    from posenc.files import CHECKPOINT_FILE

    weightless = {run for run in found if not (run / CHECKPOINT_FILE).exists()}
    for run in sorted(weightless):
        if RunFolder.read(run).run_id not in compared:
            raise PosencError(
                f"{run} was chosen but has no {CHECKPOINT_FILE}, and the comparison in --out holds no "
                "evaluation of it; restore its checkpoint or train it again"
            )
    return weightless


def _default_runs() -> list[Path]:
    if not DEFAULT_RESULTS.is_dir():
        raise PosencError(f"no {DEFAULT_RESULTS}/ folder here: train with `posenc train`, or pass --runs PATH")
    return [DEFAULT_RESULTS]


@app.command()
def encoders(
    check: Annotated[
        Optional[str],
        typer.Option(
            "--check",
            metavar="KEY",
            help="Check encoder KEY against posenc's encoder contract instead of listing: "
            "one line per property (shapes, causality, determinism, fast paths, lengths, training); exit 0 only if "
            "every one holds, 1 if one fails.",
        ),
    ] = None,
) -> None:
    """List the registered positional encoders, one per line, with where each comes from (built-in or a
    plugin: POSENC_PLUGINS, entry points `posenc.encoders`); or check one (--check KEY)."""
    if check is not None:
        from posenc.conformance import print_check

        with one_line_errors():
            status = print_check(check)
        raise typer.Exit(status)
    from posenc.encoders import ENCODERS  # here: `posenc report` and `runs` start without torch
    from posenc.plugins import listing

    print_registry(listing(ENCODERS))


@app.command()
def tasks() -> None:
    """List the registered tasks, one per line, with where each comes from (built-in or a plugin)."""
    from posenc.plugins import listing
    from posenc.tasks import TASKS

    print_registry(listing(TASKS))


@app.command()
def kernels(
    encoders: Annotated[
        Optional[str],
        typer.Option(metavar="KEYS", help="Comma-separated encoders drawn untrained (default: all)."),
    ] = None,
    runs: RunsOption = None,
    max_distance: Annotated[int, typer.Option(metavar="N", help="Largest relative distance m - n.")] = 2048,
    rope_scaling: Annotated[
        str,
        typer.Option(metavar="METHODS", help="RoPE scaling methods drawn for rotary encoders (none = as trained)."),
    ] = "none,ntk,yarn",
    factor: Annotated[
        float,
        typer.Option("--factor", "--rope-factor", metavar="FACTOR", help="Extension factor of the scaling methods."),
    ] = 4.0,
    out: Annotated[
        Path,
        typer.Option(
            metavar="FOLDER",
            help="Folder for kernels.{csv,parquet,md} and the figures "
            "(the committed results/kernels is written only when named).",
        ),
    ] = (DEFAULT_RESULTS / "kernels-latest"),
) -> None:
    """What attention sees by relative distance: rotary decay, score biases, absolute similarity.

    Encoders with learned parameters are drawn only from trained runs (--runs), with their own shape.
    """
    from posenc.analysis.folders import check_destination, moved, updating
    from posenc.analysis.kernel_views import summary, summary_markdown, write_figures
    from posenc.analysis.tables import write_tables
    from posenc.running.distance_profiles import TABLE_STEM, kernel_table
    from posenc.running.runs import find_runs

    with one_line_errors(out):
        names = parse_encoders(encoders)
        scalings = parse_scalings(rope_scaling)
        check_destination(out)
        found = find_runs(runs) if runs else []
        result = kernel_table(names, found, max_distance, scalings, factor)
        with updating(out) as stage:
            paths = write_tables(
                result.table, stage, TABLE_STEM, summary=summary_markdown(result.table, factor), markdown=False
            )  # a row per distance: the summary is the Markdown view
            figures = write_figures(result.table, stage)
        paths, figures = moved(paths, stage, out), moved(figures, stage, out)
    console.print("[bold]attention kernels[/] (mean over heads; all distances in the files below)")
    print_table(summary(result.table))
    for note in result.notes:
        console.print(f"[yellow]skipped:[/] {note}", highlight=False, soft_wrap=True)
    console.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False, soft_wrap=True)
    shown = ", ".join(str(p) for p in figures)
    console.print(f"figures (PNG + SVG): {shown}", highlight=False, soft_wrap=True)


def _unwrapped(doc: str) -> str:
    """A docstring's paragraphs each on one line: the help text flows to the terminal's width instead of
    breaking sentences where the source wrapped them."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


for _info in app.registered_commands:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = _unwrapped(_info.callback.__doc__)
        # the list of commands shows the first paragraph whole, wrapped: click shortens a derived one to fit
        # one line ("…"), cutting sentences mid-word
        _info.short_help = _info.help.split("\n\n")[0]
