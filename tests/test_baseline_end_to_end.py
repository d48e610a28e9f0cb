"""``posenc compare --baseline``, end to end: a plugin encoder (examples/log_alibi, through POSENC_PLUGINS)
trained as a user would and placed beside a small committed-style comparison that is never written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import LEARNS, TINY, posenc_cli

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "log_alibi" / "posenc_log_alibi.py"
LENGTHS = "16,32"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A baseline of rope and alibi (seeds 0, 1) and the plugin's runs of the same configuration."""
    root = tmp_path_factory.mktemp("beside")
    env_runs = [("base", "encoder=rope,alibi"), ("mine", "encoder=log_alibi")]
    os.environ["POSENC_PLUGINS"] = str(PLUGIN)
    try:
        for sweep, encoders in env_runs:
            done = posenc_cli(
                "train",
                "-m",
                encoders,
                "seed=0,1",
                *TINY,
                *LEARNS,
                f"hydra.sweep.dir={root / sweep}",
                cwd=root,
                learns=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr
        compared = posenc_cli(
            "compare", "--runs", str(root / "base"), "--lengths", LENGTHS, "--out", str(root / "B"), cwd=root
        )
        assert compared.returncode == 0, compared.stderr
        yield root
    finally:
        os.environ.pop("POSENC_PLUGINS", None)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_plugin_run_is_placed_beside_the_baseline_with_paired_intervals(made, monkeypatch):
    monkeypatch.setenv("POSENC_PLUGINS", str(PLUGIN))
    before = _snapshot(made / "B")
    result = posenc_cli(
        "compare", "--baseline", str(made / "B"), "--runs", str(made / "mine"), "--out", str(made / "O"), cwd=made
    )
    assert result.returncode == 0, result.stderr
    assert _snapshot(made / "B") == before  # the baseline is never written
    ev = pd.read_parquet(made / "O" / "extrapolation.parquet")
    assert set(ev["encoder"]) == {"rope", "alibi", "log_alibi"}
    assert set(ev.loc[ev["encoder"] != "log_alibi", "baseline"]) == {"B"}
    assert set(ev.loc[ev["encoder"] == "log_alibi", "baseline"]) == {""}
    assert sorted(ev["eval_length"].unique()) == [16, 32]  # the baseline's lengths
    assert ev.groupby("eval_length")["fingerprint"].nunique().eq(1).all()  # one set of sequences per length
    report = (made / "O" / "report.md").read_text()
    assert "## Beside the baseline (B)" in report
    assert any(line.startswith("| log_alibi − rope") for line in report.splitlines())
    again = posenc_cli("report", str(made / "O"), cwd=made)  # redrawn from the tables alone, section included
    assert again.returncode == 0 and "## Beside the baseline" in (made / "O" / "report.md").read_text()


def test_a_run_of_another_configuration_is_refused_and_nothing_is_written(made, monkeypatch):
    monkeypatch.setenv("POSENC_PLUGINS", str(PLUGIN))
    other = made / "other"
    trained = posenc_cli(
        "train", "encoder=log_alibi", *TINY, *LEARNS, "train.lr=0.01", f"hydra.run.dir={other}", cwd=made, learns=True
    )
    assert trained.returncode == 0, trained.stderr
    result = posenc_cli(
        "compare", "--baseline", str(made / "B"), "--runs", str(other), "--out", str(made / "O2"), cwd=made
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        rf"error: {re.escape(str(other))} differs from the baseline {re.escape(str(made / 'B'))}'s runs in more "
        r"than its encoder and seed: train\.lr=0\.01 here, [0-9.e-]+ there; train it under the baseline's "
        r"protocol \(its experiment config\)",
        lines[0],
    )
    assert not (made / "O2").exists()


def test_other_sequences_are_refused_before_anything_is_published(made, monkeypatch, tmp_path):
    monkeypatch.setenv("POSENC_PLUGINS", str(PLUGIN))
    forged = tmp_path / "forged"
    forged.mkdir()
    for name, data in _snapshot(made / "B").items():
        (forged / name).write_bytes(data)
    ev = pd.read_parquet(forged / "extrapolation.parquet")
    ev["fingerprint"] = "0" * 16  # as if another torch's generator had made the baseline's sequences
    ev.to_parquet(forged / "extrapolation.parquet")
    result = posenc_cli(
        "compare", "--baseline", str(forged), "--runs", str(made / "mine"), "--out", str(tmp_path / "O"), cwd=made
    )
    assert result.returncode == 2 and "other sequences than the baseline" in result.stderr
    assert not (tmp_path / "O").exists()
