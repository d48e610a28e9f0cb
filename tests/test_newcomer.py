"""A newcomer's day without surprises (issue 27, item 4; issue 38, item 7): progress when output is piped (with
totals and an ETA), numbers never cut in `posenc runs`, help text whole at 80 columns, evaluating a run that did
not learn when asked (and a hint naming the option), the sample sizes behind training's summary, a plain word for
a run whose encoder is not registered, no empty log file from a refused run."""

from __future__ import annotations

import re

import pytest
from conftest import learned_run
from typer.testing import CliRunner

import posenc.progress
from posenc.cli.app import app

runner = CliRunner()


def test_extrapolate_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path, always_learns, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    monkeypatch.setattr(posenc.progress, "LINE_SECONDS", 0.0)  # a line at every step (5 s apart by default)
    result = runner.invoke(
        app, ["extrapolate", "--runs", "run", "--lengths", "16,24,32", "--sequences", "4", "--out", "tables"]
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("evaluate ")]
    assert [line.split(" s")[0].rsplit(",", 1)[0] for line in lines] == [
        "evaluate 1/3 (33%) rope/copy @ 16",
        "evaluate 2/3 (67%) rope/copy @ 24",
        "evaluate 3/3 (100%) rope/copy @ 32",
    ]


def test_runs_never_cuts_numbers_in_a_100_column_terminal(tmp_path, monkeypatch, capsys):
    import types

    import pandas as pd

    import posenc.analysis.printing
    from posenc.analysis.run_folder import TRAINING_COLUMNS

    row = {
        "run": "results/runs/copy/rope/seed0/train.lr=0.001,train.steps=4000",
        "encoder": "rope_partial",
        "task": "retrieval",
        "train_length": 64,
        "seed": 2,
        "learned": True,
        "steps_to_learn": 1250,
        "steps": 1250,
        "budget": 4000,
        "train_seconds": 123.456,
        "exact_match": 0.991,
        "token_accuracy": 0.998,
        "loss": 0.0123,
        "n_sequences": 512,
        "device": "cpu",
    }
    table = pd.DataFrame([row], columns=TRAINING_COLUMNS)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(
        posenc.analysis.printing, "sys", types.SimpleNamespace(stdout=types.SimpleNamespace(isatty=lambda: True))
    )
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
    assert "--include-not-learned evaluates it at every length" in result.stderr, result.stderr  # the way out
    assert set(pd.read_parquet(tmp_path / "default" / "extrapolation.parquet")["eval_length"]) == {16}
    result = runner.invoke(app, [*args, "--include-not-learned", "--out", "asked"])
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(tmp_path / "asked" / "extrapolation.parquet")
    assert set(table["eval_length"]) == {16, 32} and not table["learned"].any()  # still marked not learned


@pytest.mark.parametrize(
    "args, sentence",
    [
        (
            ["extrapolate", "--help"],
            "accuracy by answer position in positions.parquet. With --rope-scaling, rotary runs",
        ),
        (["--help"], "mean and 95% interval per encoder, task and length"),  # the list of commands
        (
            ["kernels", "--help"],
            "Encoders with learned parameters are drawn only from trained runs (--runs), with their own shape.",
        ),
    ],
)
def test_help_text_flows_to_the_terminal_width_not_the_source_lines(args, sentence):
    result = runner.invoke(app, args, terminal_width=250)  # click's test runner fixes 80 columns otherwise
    assert result.exit_code == 0, result.output
    assert any(sentence in line for line in result.output.splitlines()), result.output


def _commands():
    """Every command's click object, the top level's first: (name, command)."""
    import typer

    group = typer.main.get_command(app)
    return [("posenc", group), *((name, cmd) for name, cmd in group.commands.items() if name != "train")]


@pytest.mark.parametrize("name", [name for name, _ in _commands()])
def test_every_help_is_whole_at_80_columns_off_a_terminal(name):
    """Issue 38: Rich's help panels cut option names and text ("--include-not-lear…") at 80 columns and showed
    "<bool>" beside every flag. Every line fits, nothing is cut, every option is named whole. (train's help is
    Hydra's own.)"""
    command = dict(_commands())[name]
    args = [] if name == "posenc" else [name]
    result = runner.invoke(app, [*args, "--help"], terminal_width=80)  # a user's: `posenc ... | less`, COLUMNS=80
    assert result.exit_code == 0, result.output
    text = result.output
    flowing = re.sub(r"- ", "-", " ".join(text.split()))  # lines may end after a hyphen ("re-|evaluated")
    assert "…" not in text and "<bool>" not in text and "<str>" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
    for param in command.params:  # every option named whole, its help text whole (no word broken in two)
        assert all(option in text for option in (*param.opts, *param.secondary_opts) if option.startswith("-"))
        assert re.sub(r"- ", "-", " ".join((getattr(param, "help", None) or "").split())) in flowing, (param.name, text)
    for sub in getattr(command, "commands", {}).values():  # the list of commands: first paragraphs whole
        assert " ".join(sub.get_short_help_str().split()) in flowing, (sub.name, text)


def test_not_learned_hint_names_the_option_for_a_comparison_too():
    """`posenc compare` prints the hint from its comparison's rows (old ones too: a rerun evaluates nothing new
    and still shows "—"), and only where longer lengths were asked for."""
    import pandas as pd

    from posenc.cli.app import NOT_LEARNED_HINT, not_learned_hint

    rows = pd.DataFrame(
        {
            "task": ["copy", "copy", "lm"],
            "learned": [False, True, False],
            "train_length": [16, 16, 128],
            "eval_length": [16, 32, 128],
        }
    )
    assert not_learned_hint(rows, None) == NOT_LEARNED_HINT
    assert "--include-not-learned" in NOT_LEARNED_HINT
    assert not_learned_hint(rows, [16]) is None  # nothing past the training length was asked for
    assert not_learned_hint(rows[rows["learned"]], None) is None
    assert not_learned_hint(rows[rows["task"] == "lm"], None) is None  # lm is compared at every length anyway


def test_progress_lines_off_a_terminal_carry_total_share_elapsed_and_eta(monkeypatch, capsys):
    import types

    clock = iter([0.0, 0.0, 10.0, 20.0])  # made, entered, then one reading per step
    monkeypatch.setattr(posenc.progress, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(posenc.progress, "LINE_SECONDS", 0.0)
    with posenc.progress.LineProgress() as bar:
        job = bar.add_task("evaluate", total=4, current="")
        bar.update(job, advance=1, current="rope/copy @ 64")
        bar.update(job, advance=1, current="rope/copy @ 128")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "evaluate 1/4 (25%) rope/copy @ 64, 10 s elapsed, ETA 30 s",
        "evaluate 2/4 (50%) rope/copy @ 128, 20 s elapsed, ETA 20 s",
    ], lines
    assert posenc.progress.duration(3725) == "1 h 02 min" and posenc.progress.duration(185) == "3 min 05 s"
    assert posenc.progress.fraction(150, 1_000_000) == "150/1000000 (0%)"  # a long budget in full, not 1e+06


def test_training_off_a_terminal_logs_step_of_total_eta_and_the_sample_sizes(tmp_path, monkeypatch):
    """Issue 38: the line every train.log_every steps had no total or ETA, and the summary's exact match (on
    train.eval_sequences) differed from extrapolate's at the same length without a word on why."""
    from conftest import TINY

    from posenc.files import LOG_FILE

    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", *TINY, "hydra.run.dir=run"])
    assert result.exit_code == 0, result.output
    log = (tmp_path / "run" / LOG_FILE).read_text()
    assert "step 2/4 (50%)  loss" in log and "step 4/4 (100%)  loss" in log, log
    assert " elapsed, ETA " in log, log
    # 4 sequences here (TINY's train.eval_sequences); extrapolate's default at 16 tokens: 32768 tokens' worth
    assert "at length 16 on 4 held-out sequences" in log and "posenc extrapolate scores 2048 at this length" in log


def test_a_run_of_an_unregistered_encoder_says_so_and_how_to_load_its_plugin(tmp_path, always_learns, monkeypatch):
    """Issue 38: such a run was skipped as "its config is invalid"."""
    import torch

    import posenc.running.runs
    from posenc.errors import PosencError
    from posenc.files import CHECKPOINT_FILE

    learned_run(tmp_path / "run")
    payload = torch.load(tmp_path / "run" / CHECKPOINT_FILE, weights_only=True)
    payload["config"]["encoder"]["name"] = "mine"  # a plugin's key, its plugin not loaded in this process
    torch.save(payload, tmp_path / "run" / CHECKPOINT_FILE)
    monkeypatch.setattr(posenc.running.runs, "files_disagreement", lambda run, payload: None)  # config.yaml says rope
    with pytest.raises(PosencError) as caught:
        posenc.running.runs.load_run(tmp_path / "run")
    message = str(caught.value)
    assert "encoder 'mine' is not registered here" in message and "invalid" not in message, message
    assert "POSENC_PLUGINS=" in message and "posenc.encoders" in message and "docs/extending.md" in message
    payload["config"]["plugins"] = {"encoder": {"object": "mine:Mine", "origin": "file", "source": "/x/mine.py"}}
    torch.save(payload, tmp_path / "run" / CHECKPOINT_FILE)
    with pytest.raises(PosencError, match=r"trained with the plugin mine:Mine .*POSENC_PLUGINS=/x/mine\.py"):
        posenc.running.runs.load_run(tmp_path / "run")


def test_an_unknown_encoder_in_train_names_the_plugin_ways(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "encoder=mine"])
    assert result.exit_code == 2
    assert "unknown encoder 'mine'" in result.stderr and "POSENC_PLUGINS=" in result.stderr, result.stderr
    assert not (tmp_path / "results").exists()


def test_a_run_refused_before_logging_leaves_no_log_file(tmp_path, monkeypatch):
    """Hydra's file handler opens train.log at the first line logged (delay: true): a start refused because
    another training holds the folder leaves nothing behind in it."""
    from conftest import TINY

    from posenc.files import LOG_FILE, train_lock

    monkeypatch.chdir(tmp_path)
    with train_lock(tmp_path / "run"):  # another training writing this folder right now
        result = runner.invoke(app, ["train", *TINY, "hydra.run.dir=run"])
        assert result.exit_code == 2 and "being written by another posenc train" in result.stderr, result.output
        assert not (tmp_path / "run" / LOG_FILE).exists()


def test_the_main_job_runs_without_any_tracking_backend(tmp_path, monkeypatch):
    """README's first command installs no tracker (wandb, mlflow, tensorboard are the `tracking` extra's):
    training and evaluating with the default logger never imports one."""
    import sys

    from conftest import TINY

    for name in ("wandb", "mlflow", "tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", *TINY, "hydra.run.dir=run"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["extrapolate", "--runs", "run", "--lengths", "16", "--sequences", "4", "--out", "t"])
    assert result.exit_code == 0, result.output
