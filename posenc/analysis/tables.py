"""Tidy tables: writing and reading them (CSV, Parquet, Markdown); a run's path as tables name it."""

from __future__ import annotations

import math
import numbers
from pathlib import Path

import numpy as np
import pandas as pd

from posenc import files as run_files
from posenc.errors import PosencError


def describe_run(run: Path) -> str:
    """``run`` relative to the working directory when below it, else as given."""
    try:
        return str(run.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(run)


def read_table(out_dir: Path, stem: str) -> pd.DataFrame | None:
    """The table ``stem`` previously written to ``out_dir`` (from its Parquet file), or None if absent.

    A publish into ``out_dir`` that a killed writer left half done is finished first (under the folder's lock,
    :func:`posenc.analysis.folders.settle`), so the tables read are one set. A damaged or foreign table is one
    line naming the file and the column (:func:`check_table`), never a traceback from whoever reads it."""
    from posenc.analysis.folders import settle

    settle(out_dir)
    path = Path(out_dir) / f"{stem}.parquet"
    if not path.exists():
        return None
    run_files.check_regular(path, "a result table")  # a FIFO would block the reader
    try:
        table = pd.read_parquet(path)
    except OSError as err:
        raise PosencError(
            f"cannot read {path}: {err.strerror or type(err).__name__}; make it readable or move it away"
        ) from err
    except Exception as err:  # a damaged file is reported, never silently overwritten
        raise PosencError(f"cannot update {path}: unreadable ({type(err).__name__}); move it away first") from err
    check_table(table, path, stem)
    return table


# The columns a table posenc reads back must hold, by stem (the store checks its own three tables' columns).
REQUIRED_COLUMNS = {
    "comparison": ("run_ids", "eval_length"),
    "choices": ("task", "encoder", "key", "value", "seeds", "n_learned", "n_trained", "steps_to_learn", "chosen"),
    "training": ("run",),
}
# Columns that hold numbers wherever they appear (and ``<metric>_mean``/``_low``/``_high``), and true/false ones.
NUMBER_COLUMNS = frozenset({
    "train_length", "eval_length", "scaling_factor", "depth", "seed", "steps_to_learn", "loss", "perplexity",
    "token_accuracy", "exact_match", "n_sequences", "seconds", "sequence", "position", "bin_width", "correct",
    "total", "n_seeds", "n_learned", "n_trained", "steps", "budget", "train_seconds", "heldout_loss_fall",
    "chance_token_accuracy",
})  # fmt: skip
FLAG_COLUMNS = frozenset({"learned", "chosen"})
LENGTH_COLUMNS = frozenset({"train_length", "eval_length"})  # keys: a whole number of tokens in every row
# ... but where a table's rows may be of runs that have not finished: a training table (posenc runs) lists an
# unfinished run with every cell but its run empty, its train_length too (its metrics.json is not written yet)
EMPTY_LENGTHS = {"training": frozenset({"train_length"})}


def check_table(table: pd.DataFrame, path: Path, stem: str) -> None:
    """Raise one line naming ``path`` and the column where ``table`` (read from it) is not the posenc table
    ``stem``: a column it must hold is missing, or a column of numbers (or of true/false) holds anything else
    (a word, a number stored as text)."""
    missing = [c for c in REQUIRED_COLUMNS.get(stem, ()) if c not in table.columns]
    if missing:
        raise PosencError(
            f"{path} is not a posenc {stem} table of this version (no column {', '.join(missing)}); "
            "restore it, or move it away and run the command that wrote it again"
        )
    for column in table.columns:
        name = str(column)
        kind = (
            "length"
            if name in LENGTH_COLUMNS
            else "flag"
            if name in FLAG_COLUMNS
            else "number"
            if name in NUMBER_COLUMNS or name.endswith(("_mean", "_low", "_high"))
            else None
        )
        values = table[column]
        if (
            kind is None
            or (kind == "number" and pd.api.types.is_numeric_dtype(values))
            or (kind == "flag" and pd.api.types.is_bool_dtype(values))
        ):
            continue
        empty_ok = name in EMPTY_LENGTHS.get(stem, ())
        bad = values.map(lambda v, kind=kind: not (empty_ok and _empty(v)) and not _fits(v, kind))
        if bad.any():
            row = int(bad.to_numpy().argmax())
            shown = {"length": "a whole number of tokens", "flag": "true or false", "number": "a number"}[kind]
            raise PosencError(
                f"damaged {path}: column {name} holds {_shown(values.iloc[row])} (row {row + 1}), not "
                f"{shown}; the table was edited or damaged: restore it, or move it away and run the "
                "command that wrote it again"
            )


def _shown(value) -> str:
    """One cell as a message shows it: text quoted, a number plain (no numpy type), a missing cell said so."""
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return "no value"
    value = value.item() if isinstance(value, np.generic) else value
    return repr(value)


def _empty(value) -> bool:
    return bool(pd.api.types.is_scalar(value) and pd.isna(value))


def _fits(value, kind: str) -> bool:
    """Whether one cell of a column of ``kind`` (``"number"``, ``"flag"``: true/false, ``"length"``) holds one;
    a missing cell does, but in a length column."""
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return kind != "length"
    if isinstance(value, (bool, np.bool_)):
        return kind == "flag"
    if not isinstance(value, numbers.Real):
        return False
    if kind == "flag":
        return value in (0, 1)
    return kind == "number" or (math.isfinite(value) and value == int(value) and value >= 1)


# A Markdown view longer than this is not read as Markdown (a row per run and length: up to 0.9 MB each, most of
# the committed results' text, and the whole working tree travels to a GPU under a size limit): it names the
# files that hold the table instead. Rows, not bytes: the same table gives the same file on every machine.
MARKDOWN_MAX_ROWS = 300
# zstd's level 9 writes a per-sequence table about as fast as its default level and a little smaller
PARQUET_ZSTD_LEVEL = 9


def markdown_view(table: pd.DataFrame, stem: str, summary: bool = False) -> str:
    """``table`` as a Markdown table (``.4f`` floats), or, past :data:`MARKDOWN_MAX_ROWS` rows, a paragraph
    naming the files that hold it (``<stem>_summary.md`` too when ``summary``)."""
    if len(table) <= MARKDOWN_MAX_ROWS:
        return table.to_markdown(index=False, floatfmt=".4f") + "\n"
    readable = f" Its readable view is `{stem}_summary.md`." if summary else ""
    return (
        f"# {stem}\n\n{len(table)} rows of {len(table.columns)} columns, too long to read as Markdown (more than "
        f"{MARKDOWN_MAX_ROWS} rows): the whole table is `{stem}.csv` and `{stem}.parquet`.{readable}\n"
    )


# A float column holding at most one distinct value per this many rows is dictionary-encoded (see to_parquet)
DICTIONARY_ROWS_PER_VALUE = 8


def to_parquet(frame: pd.DataFrame, f) -> None:
    """Write ``frame`` as Parquet to the binary file ``f``, losslessly, every column's dtype kept.

    A float column with many distinct values (a per-sequence loss) is stored byte-stream split (each value's
    bytes grouped by significance, so that zstd finds the repeated exponents); one with few (exact match 0/1,
    token accuracy k/n, a depth), at most one per :data:`DICTIONARY_ROWS_PER_VALUE` rows, is dictionary-encoded,
    as are text and flag columns. Integer columns are stored plain: zstd finds their runs and cycles (a length
    repeated per sequence, a sequence index 0..n-1) better than in dictionary indices. With zstd level 9, on the
    committed per-sequence and position tables (2026-12-04): 22.1 MiB, against 26.2 MiB byte-stream splitting
    every float column and dictionary-encoding the rest (the earlier encoding)."""
    kinds = {str(c): frame[c].dtype.kind for c in frame.columns}
    split = [str(c) for c in frame.columns if kinds[str(c)] == "f" and not _few_values(frame[c])]
    plain = [c for c, kind in kinds.items() if kind in "iu"]
    frame.to_parquet(
        f,
        index=False,
        compression="zstd",
        compression_level=PARQUET_ZSTD_LEVEL,
        use_byte_stream_split=split or False,
        use_dictionary=[c for c in kinds if c not in split and c not in plain],
    )


def _few_values(column: pd.Series) -> bool:
    """Whether ``column`` holds at most one distinct value (NaN counted as one) per DICTIONARY_ROWS_PER_VALUE rows."""
    return column.nunique(dropna=False) * DICTIONARY_ROWS_PER_VALUE <= len(column)


def write_tables(
    table: pd.DataFrame,
    out_dir: Path,
    stem: str,
    summary: str | None = None,
    markdown: bool = True,
    csv: bool = True,
    parquet_table: pd.DataFrame | None = None,
) -> list[Path]:
    """Write ``table`` as CSV, Parquet and (unless ``markdown`` is False) Markdown into ``out_dir``, each file
    atomically (Markdown: :func:`markdown_view`; Parquet: :func:`to_parquet`).

    ``summary`` (Markdown text), if given, goes to ``<stem>_summary.md``: for tables too long to read as
    Markdown (``posenc kernels``: a row per distance), the summary is the Markdown view. ``csv=False``
    writes no CSV (per-sequence tables: Parquet only). ``parquet_table``, if given, is what the Parquet file
    holds (columns too long for CSV and Markdown, such as a run's whole configuration).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PosencError(f"--out is not a directory: {out_dir}")
    paths = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if csv:
            paths.append(out_dir / f"{stem}.csv")
            run_files.atomic_write_text(paths[-1], table.to_csv(index=False))
        paths.append(out_dir / f"{stem}.parquet")
        stored = table if parquet_table is None else parquet_table
        # zstd: a third smaller than pandas' default snappy on the per-sequence tables, which are most of the
        # committed results' size (and the whole working tree travels to a GPU under a size limit)
        run_files.atomic_write(paths[-1], lambda f: to_parquet(stored, f))
        if markdown:
            paths.append(out_dir / f"{stem}.md")
            run_files.atomic_write_text(paths[-1], markdown_view(table, stem, summary is not None))
        if summary is not None:
            paths.append(out_dir / f"{stem}_summary.md")
            run_files.atomic_write_text(paths[-1], summary)
    except OSError as err:
        raise PosencError(f"cannot write tables to {out_dir}: {err.strerror or err}") from err
    return paths
