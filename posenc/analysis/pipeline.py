"""The evaluation pipeline's last steps, shared by the commands: merge new evaluations into an output
folder's store, select what is compared, aggregate, render - all into a staging folder whose files then
replace their namesakes together (posenc.analysis.folders.updating: the old set or the new, never a mix; nothing else
in the folder is touched).

    posenc extrapolate:  extrapolate (new rows) -> store_into(out)   -> store.merge -> write
    posenc compare:      extrapolate (new rows) -> compare_into(out) -> store.merge -> aggregate -> render
    posenc report:       regenerate(out)        -> store.read        -> aggregate -> render
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from posenc import files as run_files
from posenc.analysis.compare import TABLE_STEM, aggregate, variants
from posenc.analysis.folders import discard, moved, settle, updating
from posenc.analysis.report import render
from posenc.analysis.selection import CHOICES_STEM
from posenc.analysis.store import Results, merge, read_results, write_results
from posenc.analysis.tables import read_table, write_tables
from posenc.analysis.views import summary_markdown
from posenc.errors import PosencError

REPORT = "report.md"


def select(results: Results, run_ids: set[str], lengths: list[int] | None) -> Results:
    """The rows of ``run_ids`` (at ``lengths``, or every evaluated length), with their ``variant``."""
    ev = results.evaluations
    keep = ev["run_id"].isin(run_ids) & (ev["eval_length"].isin(lengths) if lengths is not None else True)
    ev = ev[keep]
    if ev.empty:
        raise PosencError("no evaluations of these runs to compare")
    ev = ev.assign(variant=variants(ev))
    keys = ["run_id", "eval_length"]
    pick = ev[keys].drop_duplicates()
    return Results(
        ev.reset_index(drop=True), results.sequences.merge(pick, on=keys), results.positions.merge(pick, on=keys)
    )


def compared_results(out: Path) -> Results:
    """The evaluations ``out``'s comparison aggregates (its runs, at its lengths), read from its tables alone:
    what its report judged, for scripts that judge more (scripts/scale_check.py)."""
    results, run_ids = read_results(out), compared_run_ids(out)
    if results is None or run_ids is None:
        raise PosencError(
            f"{out} holds no comparison (no extrapolation.parquet and {TABLE_STEM}.parquet); run "
            "`posenc compare --out` there first"
        )
    return select(results, run_ids, _compared_lengths(out))


def _write(
    out: Path, chosen: Results, command: str, choices: pd.DataFrame | None
) -> tuple[pd.DataFrame, list[Path], dict]:
    comparison = aggregate(chosen)
    paths = write_tables(comparison, out, TABLE_STEM)
    text, figures = render(chosen, comparison, out, command, choices)
    run_files.atomic_write_text(out / REPORT, text)
    return comparison, paths, figures


def store_into(out: Path, new: Results) -> list[Path]:
    """Merge ``new`` into ``out``'s store and write its tables (``posenc extrapolate``); the paths written."""
    with updating(out) as stage:  # merge into the tables as they are now: another command may have written them
        merged = merge(read_results(out), new)
        paths = write_results(stage, merged, summary=summary_markdown(merged.evaluations))
    return moved(paths, stage, out)


def compare_into(
    out: Path,
    new: Results,
    run_ids: set[str],
    lengths: list[int] | None,
    command: str,
    choices: pd.DataFrame | None = None,
    extend: bool = False,
    replaced: set[str] = frozenset(),
    facts: dict[str, dict] | None = None,
) -> tuple[pd.DataFrame, list[Path], dict]:
    """Merge ``new`` into ``out``'s store, then aggregate ``run_ids`` and write tables, figures, report;
    ``choices``: how the runs were chosen among candidates (``--choose``), written beside them.

    ``extend``: also aggregate the runs ``out``'s comparison already covers, from ``out``'s tables (their run
    folders need not exist here: runs trained elsewhere stay in the comparison), with their ``choices`` and at
    the lengths it covers as well as ``lengths``; of its runs, those in ``replaced`` (the runs given this time,
    before any ``--choose``) are compared only if in ``run_ids``: a candidate not chosen now leaves it.
    ``facts``: run id -> column values its run folder decides now (:func:`posenc.running.extrapolate.run_facts`),
    written over its stored rows."""
    with updating(out) as stage:  # a parallel command into the same folder merges, never overwrites
        if extend:
            run_ids, choices = _extended(out, run_ids, choices, replaced)
            if lengths is not None:  # the comparison keeps its lengths and gains these
                lengths = sorted(set(lengths) | set(_compared_lengths(out)))
        merged = with_facts(merge(read_results(out), new), facts or {})
        paths = write_results(stage, merged, summary=summary_markdown(merged.evaluations))
        discard(stage, f"{CHOICES_STEM}.*")  # from an earlier --choose: not this comparison's
        if choices is not None:
            paths += write_tables(choices, stage, CHOICES_STEM)
        comparison, more, figures = _write(stage, select(merged, run_ids, lengths), command, choices)
    return comparison, moved(paths + more, stage, out), _moved_figures(figures, stage, out)


def with_facts(results: Results, facts: dict[str, dict]) -> Results:
    """``results`` with each run's rows given the column values in ``facts[run_id]``."""
    ev = results.evaluations
    if not facts or ev.empty or not ev["run_id"].isin(list(facts)).any():
        return results
    ev = ev.copy()
    for run_id, values in facts.items():
        rows = ev["run_id"] == run_id
        for column, value in values.items():
            ev.loc[rows, column] = value
    return Results(ev, results.sequences, results.positions)


def compared_run_ids(out: Path) -> set[str] | None:
    """The runs ``out``'s comparison table covers, or None where ``out`` holds no comparison. ``out``'s
    evaluations (``extrapolation.*``) keep every run ever evaluated there, a run since moved or removed from
    the runs compared too: scripts that read them select these."""
    previous = read_table(out, TABLE_STEM)
    if previous is None:
        return None
    return {r for cell in previous["run_ids"].dropna() for r in str(cell).split(",") if r}


def _compared_lengths(out: Path) -> list[int]:
    """The evaluation lengths ``out``'s comparison table covers."""
    return sorted(int(n) for n in read_table(out, TABLE_STEM)["eval_length"].unique())


def check_extendable(out: Path) -> set[str]:
    """The runs ``out``'s comparison covers; an error where it holds none (``--extend``: before any work)."""
    compared = compared_run_ids(out)
    if compared is None:
        raise PosencError(
            f"{out} holds no comparison to extend (no {TABLE_STEM}.parquet); run `posenc compare "
            "--out` there without --extend first"
        )
    return compared


def _extended(
    out: Path, run_ids: set[str], choices: pd.DataFrame | None, replaced: set[str] = frozenset()
) -> tuple[set[str], pd.DataFrame | None]:
    """``run_ids`` and ``choices`` with those of ``out``'s comparison added (``posenc compare --extend``), but
    for the runs ``replaced``: given again, they are compared now only if ``run_ids`` holds them."""
    compared = check_extendable(out) - set(replaced)
    earlier = read_table(out, CHOICES_STEM)
    if earlier is not None and choices is not None:
        choices = (
            pd.concat([earlier, choices], ignore_index=True)
            .drop_duplicates(subset=["config_id", "key", "value"], keep="last")
            .reset_index(drop=True)
        )
    elif earlier is not None:
        choices = earlier
    return compared | run_ids, choices


def _moved_figures(figures: dict, stage: Path, out: Path) -> dict:
    return dict(zip(figures, moved(figures.values(), stage, out)))


def regenerate(out: Path, command: str) -> tuple[pd.DataFrame, list[Path], dict]:
    """Rewrite ``out``'s comparison, figures and report from its tables alone: the runs and lengths its
    ``comparison`` table covers, re-aggregated from ``extrapolation``/``sequences``/``positions``."""
    settle(out)  # a publish a killed writer left half done is finished first: its comparison may be the one waiting
    if not (Path(out) / f"{TABLE_STEM}.parquet").is_file():  # before the lock, which would create `out`
        raise PosencError(
            f"{out} holds no comparison (no {TABLE_STEM}.parquet); run `posenc compare --out` there first"
        )
    for stem in ("extrapolation", "sequences", "positions", TABLE_STEM, CHOICES_STEM):  # before the lock, too
        run_files.check_regular(Path(out) / f"{stem}.parquet", "a result table")  # a FIFO would block the reader
    with updating(out) as stage:
        results = read_results(out)
        previous = read_table(out, TABLE_STEM)
        if results is None or previous is None:
            raise PosencError(
                f"{out} holds no comparison (no extrapolation.parquet and comparison.parquet); "
                "run `posenc compare --out` there first"
            )
        run_ids = compared_run_ids(out)
        lengths = _compared_lengths(out)
        choices = read_table(out, CHOICES_STEM)
        comparison, paths, figures = _write(stage, select(results, run_ids, lengths), command, choices)
    return comparison, moved(paths, stage, out), _moved_figures(figures, stage, out)
