"""Tidy tables: writing and reading them (CSV, Parquet, Markdown); a run's path as tables name it."""

from __future__ import annotations

from pathlib import Path

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
    """The table ``stem`` previously written to ``out_dir`` (from its Parquet file), or None if absent."""
    path = Path(out_dir) / f"{stem}.parquet"
    if not path.exists():
        return None
    run_files.check_regular(path, "a result table")  # a FIFO would block the reader
    try:
        return pd.read_parquet(path)
    except OSError as err:
        raise PosencError(f"cannot read {path}: {err.strerror or type(err).__name__}; make it readable or move it "
                          "away") from err
    except Exception as err:  # a damaged file is reported, never silently overwritten
        raise PosencError(f"cannot update {path}: unreadable ({type(err).__name__}); move it away first") from err


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
    atomically.

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
        run_files.atomic_write(paths[-1], lambda f: stored.to_parquet(f, index=False))
        if markdown:
            paths.append(out_dir / f"{stem}.md")
            run_files.atomic_write_text(paths[-1], table.to_markdown(index=False, floatfmt=".4f") + "\n")
        if summary is not None:
            paths.append(out_dir / f"{stem}_summary.md")
            run_files.atomic_write_text(paths[-1], summary)
    except OSError as err:
        raise PosencError(f"cannot write tables to {out_dir}: {err.strerror or err}") from err
    return paths
