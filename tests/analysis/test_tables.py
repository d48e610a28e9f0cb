"""posenc.analysis.tables: how a table is written (Parquet encoding, Markdown view)."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from posenc.analysis import tables
from posenc.analysis.tables import MARKDOWN_MAX_ROWS, markdown_view, write_tables


def _per_sequence(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "run_id": [f"r{i % 3}" for i in range(rows)],
            "eval_length": np.arange(rows, dtype=np.int64),
            "depth": np.full(rows, np.nan),  # all missing, as for a task without depths
            "exact_match": rng.integers(0, 2, rows).astype(np.float32),
            "token_accuracy": (rng.integers(0, 21, rows) / 20).astype(np.float32),  # k/n: few distinct values
            "loss": np.r_[rng.exponential(size=rows - 2), np.nan, np.inf],  # float64, a NaN and an inf kept
        }
    )


def test_parquet_round_trips_every_value_and_dtype(tmp_path):
    frame = _per_sequence(1000)
    write_tables(frame, tmp_path, "sequences", markdown=False, csv=False)
    back = pd.read_parquet(tmp_path / "sequences.parquet")
    pd.testing.assert_frame_equal(back, frame)  # bit for bit (NaN where NaN), dtypes included
    column = {
        c.path_in_schema: c
        for c in (pq.ParquetFile(tmp_path / "sequences.parquet").metadata.row_group(0).column(i) for i in range(6))
    }
    assert "BYTE_STREAM_SPLIT" in column["loss"].encodings  # many distinct floats: split, which is the saving
    assert column["loss"].compression == "ZSTD"
    for few in ("exact_match", "token_accuracy", "depth"):  # few distinct floats: a dictionary of them
        assert "RLE_DICTIONARY" in column[few].encodings and "BYTE_STREAM_SPLIT" not in column[few].encodings
    assert not {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} & set(column["eval_length"].encodings)  # integers plain


def test_parquet_encoding_is_smaller_than_splitting_every_float(tmp_path):
    """The dictionary for few-valued floats and plain integers beat splitting every float (the earlier encoding)."""
    frame = _per_sequence(20000).assign(eval_length=lambda f: 32 + (f.index // 256) * 2)  # a length per 256
    tables.to_parquet(frame, tmp_path / "ours.parquet")
    floats = [c for c in frame.columns if frame[c].dtype.kind == "f"]
    frame.to_parquet(
        tmp_path / "split.parquet", index=False, compression="zstd", compression_level=tables.PARQUET_ZSTD_LEVEL,
        use_byte_stream_split=floats, use_dictionary=[c for c in frame.columns if c not in floats],
    )  # fmt: skip
    assert (tmp_path / "ours.parquet").stat().st_size < 0.97 * (tmp_path / "split.parquet").stat().st_size


def test_parquet_encoding_is_smaller_than_zstd_alone_on_losses(tmp_path):
    frame = _per_sequence(20000)
    tables.to_parquet(frame, tmp_path / "ours.parquet")
    frame.to_parquet(tmp_path / "plain.parquet", index=False, compression="zstd")
    assert (tmp_path / "ours.parquet").stat().st_size < 0.95 * (tmp_path / "plain.parquet").stat().st_size


def test_markdown_view_is_the_table_up_to_the_row_limit():
    frame = pd.DataFrame({"encoder": ["rope"] * MARKDOWN_MAX_ROWS, "loss": [0.123456] * MARKDOWN_MAX_ROWS})
    text = markdown_view(frame, "extrapolation")
    assert text.startswith("| encoder") and "0.1235" in text
    assert text.count("\n") == MARKDOWN_MAX_ROWS + 2  # header, rule and every row


def test_markdown_view_past_the_limit_names_the_files_that_hold_the_table(tmp_path):
    frame = pd.DataFrame({"encoder": ["rope"] * (MARKDOWN_MAX_ROWS + 1), "loss": 1.0})
    write_tables(frame, tmp_path, "extrapolation", summary="# seed means\n")
    text = (tmp_path / "extrapolation.md").read_text()
    assert "| encoder" not in text
    assert f"{MARKDOWN_MAX_ROWS + 1} rows of 2 columns" in text
    for name in ("extrapolation.csv", "extrapolation.parquet", "extrapolation_summary.md"):
        assert f"`{name}`" in text and (tmp_path / name).is_file()
    assert "_summary.md" not in markdown_view(frame, "comparison")  # only named where one is written
