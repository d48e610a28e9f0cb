"""Rewrite result folders' tables in the encoding posenc writes now, losslessly, so that tables written by an
older posenc take the space new ones take (posenc.analysis.tables.to_parquet: zstd level 9, floats with many
distinct values byte-stream split, those with few dictionary-encoded, integers plain; a Markdown view longer
than MARKDOWN_MAX_ROWS rows replaced by a paragraph naming the table's files).

    python scripts/compact_results.py              # every folder under results/ holding a table
    python scripts/compact_results.py results/lm   # these folders only
    python scripts/compact_results.py --check      # only say what would change (exit 1 if anything would)

Why: the whole working tree travels to a GPU under the device tool's 64 MiB limit (scripts/gpu_wheelhouse.sh),
and the per-sequence tables are most of it. Each Parquet file is read back after writing and must equal the
table it held, every value and dtype; a file whose content would change is left as it was and named. Each
folder is rewritten under its lock (posenc.analysis.folders.updating), so a posenc command writing there at the
same time is waited for, never mixed with. A short Markdown view is left as written: it is the table itself.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posenc import files as run_files  # noqa: E402
from posenc.analysis.folders import updating  # noqa: E402
from posenc.analysis.tables import MARKDOWN_MAX_ROWS, markdown_view, to_parquet  # noqa: E402


def parquet_rewrite(path: Path) -> bytes | None:
    """``path``'s table in the current encoding, or None when that is what it holds already (same bytes)."""
    table = pd.read_parquet(path)
    buffer = io.BytesIO()
    to_parquet(table, buffer)
    data = buffer.getvalue()
    if data == path.read_bytes():
        return None
    back = pd.read_parquet(io.BytesIO(data))
    if not (back.equals(table) and back.dtypes.equals(table.dtypes)):
        raise SystemExit(f"error: {path} would not read back the same in the new encoding; left as it is")
    return data


def markdown_rewrite(path: Path) -> str | None:
    """The Markdown view of a table over MARKDOWN_MAX_ROWS rows (its columns: the CSV's), or None when it has
    no CSV and Parquet beside it, is short enough to stay a table, or already is that view."""
    stem = path.stem
    csv, parquet = path.with_suffix(".csv"), path.with_suffix(".parquet")
    if not (csv.is_file() and parquet.is_file()):
        return None
    rows = pq.ParquetFile(parquet).metadata.num_rows
    if rows <= MARKDOWN_MAX_ROWS:
        return None
    columns = pd.read_csv(csv, nrows=0).columns
    shape = pd.DataFrame(index=range(rows), columns=columns)  # markdown_view reads only the shape past the limit
    text = markdown_view(shape, stem, summary=(path.parent / f"{stem}_summary.md").is_file())
    return None if text == path.read_text() else text


def rewrites(folder: Path) -> dict[Path, bytes]:
    """``folder``'s files whose content the current encoding writes otherwise, with that content."""
    changed = {}
    for path in sorted(folder.glob("*.parquet")):
        data = parquet_rewrite(path)
        if data is not None:
            changed[path] = data
    for path in sorted(folder.glob("*.md")):
        text = markdown_rewrite(path)
        if text is not None:
            changed[path] = text.encode()
    return changed


def compact(folder: Path, check: bool) -> list[Path]:
    """Rewrite ``folder``'s tables (or, with ``check``, only find them); the files that changed or would."""
    if check:
        return list(rewrites(folder))
    with updating(folder) as stage:  # the folder's lock held while reading, too; all files replaced together
        changed = rewrites(folder)
        for path, data in changed.items():
            run_files.atomic_write(stage / path.name, lambda f, d=data: f.write(d))
    return list(changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="result folders (default: every one under results/)")
    parser.add_argument("--check", action="store_true", help="only list what would change; exit 1 if anything")
    args = parser.parse_args(argv)
    folders = args.folders or sorted({p.parent for p in (ROOT / "results").rglob("*.parquet")})
    folders = [f.resolve() for f in folders if "multirun" not in f.parts]  # run folders are not result folders
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    changed = []
    for folder in folders:
        changed += compact(folder, args.check)
    verb = "would rewrite" if args.check else "rewrote"
    names = [p.relative_to(ROOT) if p.is_relative_to(ROOT) else p for p in changed]
    print(f"{verb} {len(changed)} files in {len(folders)} folders" + "".join(f"\n  {n}" for n in names))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
