"""scripts/train_parallel.py reports its throughput at the end: steps/s of all runs together and per run,
printed and written to ``<logs>/throughput.json``, with each run's steps read from its log."""

from __future__ import annotations

import json
import stat
import sys

import pytest
from conftest import load_script

train_parallel = load_script("train_parallel")

# What `posenc train` logs, per run: one trains from scratch and finishes, one resumes from step 40 and is
# stopped at step 73, one was finished before and trains nothing.
FAKE_POSENC = """#!{python}
import sys
seed = [a for a in sys.argv if a.startswith("seed=")][0]
lines = {{
    "seed=0": ["training rope on copy (length 64), 100 steps, 1,000 parameters, device cpu -> run0",
               "step 50  loss 2.7845  token acc 0.0580", "step 100  held-out exact match 1.0000 (target 0.99)",
               "done in 1.0 s: exact match 1.0000"],
    "seed=1": ["resuming run1 from step 40", "step 50  loss 2.1  token acc 0.3",
               "error: SIGTERM at step 73/1000: checkpoint saved in run1; run the same command again to resume"],
    "seed=2": ["run2 is finished (step 300); not retraining"],
}}[seed]
print("\\n".join(lines))
sys.exit(143 if seed == "seed=1" else 0)
"""


def test_steps_trained_reads_the_last_step_less_the_resumed_one():
    assert train_parallel.steps_trained("step 50  loss 2\nstep 100  held-out exact match 0.5\n") == 100
    assert (
        train_parallel.steps_trained(
            "resuming r from step 40\nstep 50  loss 2\nerror: SIGTERM at step 73/1000: checkpoint saved\n"
        )
        == 33
    )
    wrapped = (  # as a log file holds it: wrapped at 80 columns, the resumed step on a line of its own
        "INFO     resuming\n                             /copy/seed10/train.steps=40000 from step\n"
        "                             13090\nINFO     step 13800  held-out exact match 0.9902\n"
    )
    assert train_parallel.steps_trained(wrapped) == 710
    assert train_parallel.steps_trained("r is finished (step 300); not retraining\n") == 0
    assert train_parallel.steps_trained("training rope on copy (length 64), 10000 steps\n") == 0


@pytest.mark.integration  # it starts processes (a stand-in for posenc)
def test_train_parallel_prints_and_records_its_throughput(tmp_path, capsys):
    fake = tmp_path / "posenc"
    fake.write_text(FAKE_POSENC.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    logs = tmp_path / "logs"
    runs = [f"experiment=scale_copy encoder=rope seed={i}" for i in range(3)]
    assert train_parallel.main(["--jobs", "2", "--every", "60", "--logs", str(logs), "--posenc", str(fake), *runs]) == 0
    report = json.loads((logs / "throughput.json").read_text())
    assert [r["steps"] for r in report["per_run"]] == [100, 33, 0] and report["steps"] == 133
    assert report["runs"] == 3 and all(r["seconds"] > 0 for r in report["per_run"])
    # wall_s is rounded to 0.1 s and steps_per_s to 0.01: the true wall time lies within 0.05 s of wall_s
    wall = report["wall_s"]
    assert 133 / (wall + 0.05) - 0.005 <= report["steps_per_s"] <= 133 / max(wall - 0.05, 1e-9) + 0.005
    rates = [r["steps_per_s"] for r in report["per_run"]]
    assert rates[0] > 0 and report["steps_per_s_per_run"] == round(sum(rates) / 3, 2)
    printed = capsys.readouterr().out
    assert f"throughput: 133 steps in {report['wall_s']:.0f} s: {report['steps_per_s']} steps/s in all" in printed
    assert f"{report['steps_per_s_per_run']} steps/s per run (3 runs;" in printed
