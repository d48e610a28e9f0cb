"""Every table posenc reads back is checked before it is used (issue 38): a foreign or damaged one is one line
naming the file and the column, never a KeyError, ValueError or TypeError from whoever reads it."""

import pandas as pd
import pytest

from posenc.analysis.run_folder import extend_training_table
from posenc.analysis.tables import read_table, write_tables
from posenc.errors import PosencError

CHOICES = {
    "task": ["copy"],
    "encoder": ["rope"],
    "config_id": ["abc"],
    "key": ["train.lr"],
    "value": ["0.001"],
    "seeds": ["0,1"],
    "n_learned": [2],
    "n_trained": [2],
    "steps_to_learn": [300.0],
    "chosen": [True],
}


@pytest.mark.parametrize("stem, table, says", [
    ("comparison", {"eval_length": [16]}, "not a posenc comparison table of this version (no column run_ids)"),
    ("choices", {k: v for k, v in CHOICES.items() if k != "key"}, "(no column key)"),
    ("choices", {**CHOICES, "n_learned": ["two"]}, "column n_learned holds 'two' (row 1), not a number"),
    ("choices", {**CHOICES, "chosen": ["yes"]}, "column chosen holds 'yes' (row 1), not true or false"),
    ("training", {"encoder": ["rope"]}, "not a posenc training table of this version (no column run)"),
    ("training", {"run": ["a", "b"], "steps": ["10", "ten"]}, "column steps holds '10' (row 1), not a number"),
    ("extrapolation", {"eval_length": [16.5]}, "column eval_length holds 16.5 (row 1), not a whole number"),
    ("extrapolation", {"eval_length": [None, 16]}, "column eval_length holds no value (row 1), not a whole number"),
    ("comparison", {"run_ids": ["a"], "eval_length": [16], "loss_mean": ["low"]},
     "column loss_mean holds 'low' (row 1), not a number"),
])  # fmt: skip
def test_a_foreign_or_damaged_table_is_one_line_naming_file_and_column(tmp_path, stem, table, says):
    pd.DataFrame(table).astype(object).to_parquet(tmp_path / f"{stem}.parquet", index=False)
    with pytest.raises(PosencError) as caught:
        read_table(tmp_path, stem)
    assert str(tmp_path / f"{stem}.parquet") in str(caught.value) and says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_posencs_own_tables_read_back_as_written(tmp_path):
    choices = pd.DataFrame(CHOICES)
    write_tables(choices, tmp_path, "choices")
    pd.testing.assert_frame_equal(read_table(tmp_path, "choices"), choices)
    training = pd.DataFrame(
        {
            "run": ["a", "b"],
            "learned": [True, None],
            "steps": pd.array([10, None], "Int64"),
            "exact_match": [1.0, float("nan")],
        }
    )
    write_tables(training, tmp_path, "training")
    assert extend_training_table(tmp_path, training.iloc[:1])["run"].tolist() == ["a", "b"]


def test_parquet_tables_are_written_with_zstd_and_read_back_whole(tmp_path):
    """The per-sequence tables are most of the committed results' size, and the working tree travels to a GPU
    under a size limit: Parquet is written with zstd (a third smaller than snappy on them), values unchanged."""
    import pyarrow.parquet as pq

    table = pd.DataFrame({"run_id": ["a"] * 4, "sequence": [0, 1, 2, 3], "loss": [0.125, 1 / 3, 2.5, 0.0]})
    path = next(
        p for p in write_tables(table, tmp_path, "sequences", markdown=False, csv=False) if p.suffix == ".parquet"
    )
    column = pq.ParquetFile(path).metadata.row_group(0).column(2)
    assert column.compression == "ZSTD"
    pd.testing.assert_frame_equal(pd.read_parquet(path), table)
