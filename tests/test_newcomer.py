"""A newcomer's day without surprises (issue 27, item 4): progress when output is piped, numbers never cut in
`posenc runs`, help text not broken mid-sentence, evaluating a run that did not learn when asked."""

from __future__ import annotations

import pytest
from conftest import learned_run
from typer.testing import CliRunner

import posenc.progress
from posenc.cli import app

runner = CliRunner()


def test_extrapolate_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    monkeypatch.setattr(posenc.progress, "LINE_SECONDS", 0.0)  # a line at every step (5 s apart by default)
    result = runner.invoke(app, ["extrapolate", "--runs", "run", "--lengths", "16,24,32", "--sequences", "4",
                                 "--out", "tables"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("evaluate ")]
    assert [line.split(" s")[0].rsplit(",", 1)[0] for line in lines] == [
        "evaluate 1/3 (33%) rope/copy @ 16", "evaluate 2/3 (67%) rope/copy @ 24", "evaluate 3/3 (100%) rope/copy @ 32"]


def test_runs_never_cuts_numbers_in_a_100_column_terminal(tmp_path, monkeypatch, capsys):
    import types

    import pandas as pd

    import posenc.analysis.printing
    from posenc.analysis.run_folder import TRAINING_COLUMNS

    row = {"run": "results/runs/copy/rope/seed0/train.lr=0.001,train.steps=4000", "encoder": "rope_partial",
           "task": "retrieval", "train_length": 64, "seed": 2, "learned": True, "steps_to_learn": 1250,
           "steps": 1250, "budget": 4000, "train_seconds": 123.456, "exact_match": 0.991, "token_accuracy": 0.998,
           "loss": 0.0123, "n_sequences": 512, "device": "cpu"}
    table = pd.DataFrame([row], columns=TRAINING_COLUMNS)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(posenc.analysis.printing, "sys", types.SimpleNamespace(stdout=types.SimpleNamespace(isatty=lambda: True)))
    posenc.analysis.printing.print_table(table)
    shown = capsys.readouterr().out
    assert "…" not in shown, shown
    for value in ("123.456", "0.991", "0.998", "0.012", "1250", "4000", "512", "rope_partial", "retrieval"):
        assert value in shown, (value, shown)


def test_a_run_that_did_not_learn_is_evaluated_past_its_training_length_when_asked(tmp_path, monkeypatch):
    import pandas as pd
    from conftest import TINY

    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["train", *TINY, "hydra.run.dir=run"]).exit_code == 0  # 4 steps: not learned
    args = ["extrapolate", "--runs", "run", "--lengths", "16,32", "--sequences", "4"]
    result = runner.invoke(app, [*args, "--out", "default"])
    assert result.exit_code == 0 and "not learned" in result.stderr, result.output
    assert set(pd.read_parquet(tmp_path / "default" / "extrapolation.parquet")["eval_length"]) == {16}
    result = runner.invoke(app, [*args, "--include-not-learned", "--out", "asked"])
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(tmp_path / "asked" / "extrapolation.parquet")
    assert set(table["eval_length"]) == {16, 32} and not table["learned"].any()  # still marked not learned


@pytest.mark.parametrize("args, sentence", [
    (["extrapolate", "--help"], "accuracy by answer position in positions.parquet. With --rope-scaling, rotary runs"),
    (["--help"], "mean and 95% interval per encoder, task and length"),  # the list of commands
    (["kernels", "--help"], "Encoders with learned parameters are drawn only from trained runs (--runs), with their "
                            "own shape."),
])
def test_help_text_flows_to_the_terminal_width_not_the_source_lines(args, sentence):
    result = runner.invoke(app, args, env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert result.exit_code == 0, result.output
    assert any(sentence in line for line in result.output.splitlines()), result.output
