"""posenc/running/evaluation_budget.py: the time an evaluation will take, estimated before any work: shown when
long, refused past
--max-hours."""

from __future__ import annotations

import pytest
from conftest import learned_run, posenc_cli
from typer.testing import CliRunner

from posenc.cli.app import app

runner = CliRunner()
MODEL = {"d_model": 128, "d_mlp": 512, "n_layers": 2, "n_heads": 4, "vocab_size": 18}


def _estimate(lengths, sequences, model=MODEL, rate=1e10):
    from posenc.running.evaluation_budget import time_estimate

    configs = {"run": {"model": model, "task": {"name": "copy"}}}
    return time_estimate(configs, {"run": list(lengths)}, {"run": ["none"]}, sequences, rate)


def test_the_time_estimate_grows_quadratically_in_length_and_linearly_in_sequences():
    long = _estimate([2**16], 100)
    assert 3.8 < _estimate([2**17], 100) / long <= 4.0  # attention's n^2 dominates at long lengths
    assert _estimate([2**17], 200) == pytest.approx(2 * _estimate([2**17], 100))
    assert _estimate([2**17], 100, rate=2e10) == pytest.approx(long * 4 / 2, rel=0.05)  # divided by the rate
    assert _estimate([2**16, 2**17], 100) == pytest.approx(long + _estimate([2**17], 100))  # lengths add up
    wider = {**MODEL, "d_model": 256, "d_mlp": 1024}
    assert _estimate([512], 100, wider) > 3 * _estimate([512], 100)  # ~d^2 at short lengths
    deeper = {**MODEL, "n_layers": 4}
    assert _estimate([2**16], 100, deeper) == pytest.approx(2 * long, rel=0.01)


def test_the_matmul_rate_is_measured_quickly():
    import time

    import torch

    from posenc.running.evaluation_budget import matmul_rate

    start = time.perf_counter()
    rate = matmul_rate(torch.device("cpu"))
    assert 1e7 < rate < 1e16  # FLOP/s
    assert time.perf_counter() - start < 2


def test_a_huge_request_is_refused_in_one_line_before_any_work(trained_runs, tmp_path):
    for command, out in [("extrapolate", "tables"), ("compare", "report")]:
        result = posenc_cli(
            command,
            "--runs",
            str(trained_runs),
            "--lengths",
            "1048576",
            "--sequences",
            "100000",
            "--no-memory-check",
            "--out",
            out,
            cwd=tmp_path,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: this evaluation would take about "), result.stderr
        assert "--max-hours" in lines[0] and "1048576" in lines[0]
        assert not (tmp_path / out).exists()


def test_a_long_evaluation_is_announced_and_max_hours_raises_the_limit(tmp_path, always_learns, monkeypatch):
    import posenc.analysis.run_folder
    import posenc.running.evaluation_budget

    monkeypatch.chdir(tmp_path)
    learned_run(tmp_path / "run")
    flops = posenc.running.evaluation_budget.time_estimate(
        {"r": posenc.analysis.run_folder.run_config(tmp_path / "run")}, {"r": [16, 32]}, {"r": ["none"]}, 4, 1.0
    )
    monkeypatch.setattr(posenc.running.evaluation_budget, "matmul_rate", lambda device: flops / (30 * 3600))  # 30 h
    args = ["extrapolate", "--runs", "run", "--lengths", "16,32", "--sequences", "4", "--out", "tables"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: this evaluation would take about 30 h"), result.stderr
    assert "more than the 24 h limit" in lines[0] and "--max-hours" in lines[0]
    assert not (tmp_path / "tables").exists()
    result = runner.invoke(app, [*args, "--max-hours", "48"])
    assert result.exit_code == 0, result.output
    assert "estimated evaluation time: about 1800 min (2 evaluations, longest 32 tokens)" in result.stderr
    monkeypatch.setattr(posenc.running.evaluation_budget, "matmul_rate", lambda device: flops / 30)  # 30 s: not shown
    result = runner.invoke(app, [*args[:-1], "tables-2"])
    assert result.exit_code == 0, result.output
    assert "estimated evaluation time" not in result.stderr


@pytest.mark.parametrize("hours", ["0", "-1", "nan"])
def test_max_hours_must_be_positive(tmp_path, hours, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["extrapolate", "--runs", "nowhere", "--max-hours", hours, "--out", "tables"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --max-hours must be"), result.stderr
