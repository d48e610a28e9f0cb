"""The prepared GPU check (scripts/gpu_check.py, scripts/gpu_wheelhouse.sh; docs/gpu.md) cannot rot: its CPU
dry run runs every step a CPU can at tiny sizes, its device call is the one the docs give, and the wheelhouse
still covers posenc's dependencies."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import time
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
gpu_check = load_script("gpu_check")


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_cpu_dry_run_runs_every_step_a_cpu_can(tmp_path):
    """About a minute on an idle 2-core CPU: setup (this environment), the machine's facts, the gpu tests (all
    skipping), one unit test, a tiny run killed with SIGKILL and resumed, eager throughput, train_parallel
    without MPS, the forward bench; then at most 8 files, as the device tool returns them."""
    out, work = tmp_path / "out", tmp_path / "work"
    begun = time.monotonic()
    result = subprocess.run([sys.executable, "scripts/gpu_check.py", "--dry-run", "--out", str(out), "--work",
                             str(work)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - begun
    steps_table = (out / "steps.csv").read_text() if (out / "steps.csv").is_file() else "(no steps.csv)"
    assert result.returncode == 0, steps_table + result.stdout[-2000:] + result.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert set(files) <= set(gpu_check.OUTPUTS) and len(files) <= 8
    assert all((out / f).is_file() for f in files)
    steps = {row["step"]: row for row in _rows(out / "steps.csv")}
    assert list(steps) == gpu_check.STEPS
    assert {name: row["status"] for name, row in steps.items()} == dict.fromkeys(gpu_check.STEPS, "ok"), steps
    assert "skipped" in steps["gpu_tests"]["note"] and "0 failed" in steps["gpu_tests"]["note"]
    assert "resumed from it: True" in steps["train_resume"]["note"]
    assert "MPS skipped" in steps["mps"]["note"] and "compiled models skipped" in steps["throughput"]["note"]
    train = _rows(out / "train.csv")[0]
    assert int(train["killed_at_step"]) > 0 and train["resumed_from_step"] == train["killed_at_step"]
    assert {r["model"] for r in _rows(out / "throughput.csv") if r["tokens_per_s"]} == {"rope", "alibi"}
    assert {r["encoder"] for r in _rows(out / "forward.csv")} == {"rope", "nope", "alibi"}
    assert [r["jobs"] for r in _rows(out / "mps.csv")] == ["1", "2"]
    summary = (out / "summary.md").read_text()
    assert "CPU dry run" in summary and "not figures" in summary
    print(f"dry run: {seconds:.0f} s")


def test_the_device_call_is_the_one_the_docs_give():
    """docs/gpu.md and the script's header give the same call, within the device tool's limits (a command of
    at most 2000 characters, at most 8 carried paths, 600 s), and what it carries is git-ignored."""
    docs = (ROOT / "docs" / "gpu.md").read_text()
    header = gpu_check.__doc__
    for text in (docs, header):
        assert gpu_check.DEVICE_COMMAND in text
        assert f"carry: {str(gpu_check.CARRY).replace(chr(39), chr(34))}" in re.sub(r"\s+", " ", text)
        assert f"timeout_s: {gpu_check.TIMEOUT_S}" in text
    assert len(gpu_check.DEVICE_COMMAND) <= 2000 and len(gpu_check.CARRY) <= 8
    assert gpu_check.BUDGET + 60 <= gpu_check.TIMEOUT_S <= 600  # the check ends, and packs, inside the call
    assert gpu_check.CARRY == [gpu_check.WHEELS]
    assert f"{gpu_check.WHEELS}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_every_step_has_a_place_and_a_limit():
    assert sorted(s for group in gpu_check.GROUPS for s in group) == sorted(gpu_check.STEPS)
    assert set(gpu_check.CAPS) == set(gpu_check.DRY_CAPS) == set(gpu_check.STEPS)
    assert len(gpu_check.OUTPUTS) <= 8  # the device tool returns at most 8 files
    assert set(gpu_check.FORWARD_LENGTHS) == {8192, 32768, 131072}


def test_junit_counts_reads_a_report_and_survives_a_missing_one(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="one"/>'
        '<testcase classname="tests.test_a" name="two"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b" name="three"><skipped/></testcase>'
        '<testcase classname="tests.test_b" name="four"><error message="y"/></testcase>'
        '</testsuite></testsuites>')
    counts = gpu_check.junit_counts(report)
    assert (counts["passed"], counts["failed"], counts["errors"], counts["skipped"]) == (1, 1, 1, 1)
    assert counts["failed_names"] == ["test_a::two", "test_b::four"]
    assert gpu_check.junit_counts(tmp_path / "absent.xml")["text"].startswith("no report")


def test_the_wheelhouse_covers_posencs_dependencies():
    """What the device lacks of posenc's needs (hydra-core and its parser runtime, the launcher plugins) is
    fetched; what it has (torch, numpy, pandas, ...) is not; setuptools comes for building posenc there. The
    script fails if a dependency is neither on the device nor installed here."""
    result = subprocess.run(["bash", "scripts/gpu_wheelhouse.sh", "--list"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    plan = [line.split() for line in result.stdout.splitlines()]
    fetched = {spec.split("==")[0] for kind, spec in plan if kind == "run"}
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime"} <= fetched
    on_the_device = {"torch", "triton", "numpy", "pandas", "transformers", "pytest"}
    assert not fetched & (on_the_device | {"mlflow-skinny", "wandb"})
    assert [spec.split("==")[0] for kind, spec in plan if kind == "build"] == ["setuptools"]


def test_a_stopped_forward_bench_keeps_the_rows_its_log_shows():
    """bench writes its table at the end; a length stopped at its limit keeps each timed encoder's time, and
    the least peak of the memory passes that ran."""
    log = ("  forward rope @ 131072: 0.512 s (first call 3.20 s)\n"
           "  forward alibi @ 131072: 0.733 s (first call 9.81 s)\n"
           "  memory rope @ 131072, pass 1/2: peak 2100 MiB (+1900)\n"
           "  memory rope @ 131072, pass 2/2: peak 2000 MiB (+1800)\n"
           "[gpu_check] stopped after 65 s\n")
    rows = {r["encoder"]: r for r in gpu_check.forward_rows_from_log(log)}
    assert set(rows) == {"rope", "alibi"} and rows["alibi"]["seconds"] == "0.733"
    assert (rows["rope"]["peak_mib"], rows["rope"]["rise_mib"]) == (2000.0, 1800.0)
    assert rows["alibi"]["peak_mib"] == ""
