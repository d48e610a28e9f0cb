"""scripts/compact_results.py: an older posenc's tables rewritten in the current encoding, every value kept."""

import numpy as np
import pandas as pd
from conftest import load_script

from posenc.analysis.tables import MARKDOWN_MAX_ROWS


def _old_folder(folder, rows):
    """A result folder as posenc wrote it before: Parquet at zstd's default, every Markdown view a table."""
    folder.mkdir()
    rng = np.random.default_rng(1)
    table = pd.DataFrame({"run": [f"r{i}" for i in range(rows)], "loss": rng.exponential(size=rows)})
    table.to_parquet(folder / "extrapolation.parquet", index=False, compression="zstd")
    table.to_csv(folder / "extrapolation.csv", index=False)
    (folder / "extrapolation.md").write_text(table.to_markdown(index=False, floatfmt=".4f") + "\n")
    (folder / "extrapolation_summary.md").write_text("# seed means\n")
    return table


def test_rewrites_tables_losslessly_then_has_nothing_left_to_do(tmp_path, capsys):
    script = load_script("compact_results")
    long_table = _old_folder(tmp_path / "long", MARKDOWN_MAX_ROWS + 1)
    short_table = _old_folder(tmp_path / "short", 3)
    short_md = (tmp_path / "short" / "extrapolation.md").read_text()
    folders = [str(tmp_path / "long"), str(tmp_path / "short")]

    assert script.main(["--check", *folders]) == 1  # something to do, nothing done
    assert "would rewrite 3 files" in capsys.readouterr().out
    assert script.main(folders) == 0
    assert "rewrote 3 files in 2 folders" in capsys.readouterr().out

    for folder, table in (("long", long_table), ("short", short_table)):
        back = pd.read_parquet(tmp_path / folder / "extrapolation.parquet")
        pd.testing.assert_frame_equal(back, table)  # every value and dtype
    pointer = (tmp_path / "long" / "extrapolation.md").read_text()
    assert f"{MARKDOWN_MAX_ROWS + 1} rows of 2 columns" in pointer and "`extrapolation_summary.md`" in pointer
    assert (tmp_path / "short" / "extrapolation.md").read_text() == short_md  # a short view is the table
    assert not [p for p in (tmp_path / "long").iterdir() if p.name.startswith(".") and "lock" not in p.name]
    assert script.main(["--check", *folders]) == 0  # done: the current encoding is what it holds


def test_a_folder_that_is_not_there_is_one_line_and_exit_2(tmp_path, capsys):
    assert load_script("compact_results").main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("error: not a folder:")
