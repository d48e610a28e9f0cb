"""The prepared GPU check (scripts/gpu_check.py, scripts/gpu_wheelhouse.sh; docs/gpu.md) cannot rot: its CPU
dry run runs every step a CPU can at tiny sizes, its device call is the one the docs give, and the wheelhouse
still covers posenc's dependencies."""

from __future__ import annotations

import argparse
import csv
import json
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
gpu_check = load_script("gpu_check")


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # a whole script run, minutes on a busy CI core: -m slow
def test_the_cpu_dry_run_runs_every_step_a_cpu_can(tmp_path):
    """About a minute on an idle 2-core CPU: setup (this environment), the machine's facts, the gpu tests (all
    skipping) with one unit test beside them, a tiny run killed with SIGKILL and resumed, the forward bench,
    train_parallel without MPS (its throughput recorded), eager throughput; then at most 8 files, as the
    device tool returns them, machine.json with the plan as it ran."""
    out, work = tmp_path / "out", tmp_path / "work"
    begun = time.monotonic()
    result = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--dry-run", "--out", str(out), "--work", str(work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
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
    forward = _rows(out / "forward.csv")
    assert sorted(r["encoder"] for r in forward) == ["alibi", "nope", "rope"]
    assert not any(r["error"] for r in forward)
    assert [r["jobs"] for r in _rows(out / "mps.csv")] == ["1", "2"]
    plan = json.loads((out / "machine.json").read_text())["check"]
    assert [s["step"] for s in plan["steps"]] == gpu_check.STEPS and plan["skipped_for_budget"] == []
    assert plan["dry_run"] and plan["budget_s"] == gpu_check.BUDGET
    with tarfile.open(out / "logs.tar.gz") as tar:  # train_parallel's own throughput record, per setting
        names = tar.getnames()
    assert {"logs/parallel_1/throughput.json", "logs/parallel_2/throughput.json"} <= set(names)
    summary = (out / "summary.md").read_text()
    assert "CPU dry run" in summary and "not figures" in summary and "Skipped for budget: none" in summary
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


def test_every_step_has_a_place_a_limit_and_what_the_h200_measured():
    """Each step is in one group, in STEPS' order; only the test steps share one. Each limit gives a step what
    the first H200 call measured, with a fifth more; what a step needs to start is within its limit; and
    with the tests and train_resume at their full limits, forward still gets what it needs (rope at 131072,
    the longest length first)."""
    assert [s for group in gpu_check.GROUPS for s in group] == gpu_check.STEPS
    assert [g for g in gpu_check.GROUPS if len(g) > 1] == [["gpu_tests", "unit"]]
    assert gpu_check.BACKGROUND == {"unit": "gpu_tests"} and gpu_check.ALWAYS == ["setup", "machine"]
    for plan in (gpu_check.LIMITS, gpu_check.NEEDS, gpu_check.DRY_LIMITS, gpu_check.DRY_NEEDS):
        assert list(plan) == gpu_check.STEPS
    assert all(gpu_check.LIMITS[s] >= 1.2 * seconds for s, seconds in gpu_check.MEASURED.items())
    assert all(gpu_check.NEEDS[s] <= gpu_check.LIMITS[s] for s in gpu_check.STEPS)
    before_forward = sum(gpu_check.MEASURED[s] for s in ("setup", "machine")) + sum(
        gpu_check.LIMITS[s] for s in ("gpu_tests", "train_resume")
    )
    assert before_forward + gpu_check.NEEDS["forward"] <= gpu_check.BUDGET - gpu_check.RESERVE
    assert list(gpu_check.FORWARD_LENGTHS) == [131072, 32768, 8192]
    assert sum(gpu_check.FORWARD_LENGTHS.values()) <= gpu_check.LIMITS["forward"]
    assert len(gpu_check.OUTPUTS) <= 8  # the device tool returns at most 8 files


def _fake_plan(tmp_path, monkeypatch, takes: dict[str, float], budget: float, steps=None):
    """The check's plan run on a fake clock, each step taking ``takes[name]`` seconds (at most its limit);
    unit, beside gpu_tests, takes none of its own and ends with it. Returns machine.json's ``check``."""
    clock = [0.0]
    monkeypatch.setattr(gpu_check.time, "monotonic", lambda: clock[0])

    def fake(name):
        def step(self, seconds):
            if self.beside(name):
                self.ended[self.beside(name)].wait(10)
                return "partial", "stopped when gpu_tests ended"
            clock[0] += min(takes[name], seconds)
            return "ok", f"took {min(takes[name], seconds):.0f} s"

        return step

    for name in gpu_check.STEPS:
        monkeypatch.setattr(gpu_check.Check, f"step_{name}", fake(name))
    args = argparse.Namespace(
        dry_run=False,
        out=str(tmp_path / "out"),
        work=str(tmp_path / "work"),
        wheels=gpu_check.WHEELS,
        steps=(steps or gpu_check.STEPS) + gpu_check.ALWAYS,
        budget=budget,
    )
    check = gpu_check.Check(args)
    check.run_plan()
    assert check.finish() == 0
    return json.loads((tmp_path / "out" / "machine.json").read_text())["check"]


def test_a_step_starts_only_with_what_it_needs_and_machine_json_names_those_skipped(tmp_path, monkeypatch):
    """The tests and train_resume at their full limits: forward gets the rest (its need is met), mps and
    throughput are skipped for budget, and machine.json and the summary say so."""
    takes = {
        "setup": 16,
        "machine": 6,
        "gpu_tests": 240,
        "unit": 0,
        "train_resume": 120,
        "forward": 150,
        "mps": 64,
        "throughput": 114,
    }
    plan = _fake_plan(tmp_path, monkeypatch, takes, gpu_check.BUDGET)
    status = {s["step"]: s["status"] for s in plan["steps"]}
    assert status == {
        "setup": "ok",
        "machine": "ok",
        "gpu_tests": "ok",
        "unit": "partial",
        "train_resume": "ok",
        "forward": "ok",
        "mps": "skipped",
        "throughput": "skipped",
    }
    assert plan["skipped_for_budget"] == ["mps", "throughput"]
    forward = next(s for s in plan["steps"] if s["step"] == "forward")
    assert forward["seconds"] == gpu_check.BUDGET - gpu_check.RESERVE - 382 >= gpu_check.NEEDS["forward"]
    steps = {row["step"]: row for row in _rows(tmp_path / "out" / "steps.csv")}
    assert steps["mps"]["note"] == f"skipped for budget: needs {gpu_check.NEEDS['mps']} s, 0 s left"
    assert "Skipped for budget: mps, throughput" in (tmp_path / "out" / "summary.md").read_text()


def test_unit_runs_alone_when_gpu_tests_is_not_selected_and_skips_when_it_does_not_run(tmp_path, monkeypatch):
    takes = dict.fromkeys(gpu_check.STEPS, 1.0)
    plan = _fake_plan(tmp_path / "a", monkeypatch, takes, 300, steps=["unit"])
    unit = next(s for s in plan["steps"] if s["step"] == "unit")
    assert (unit["status"], unit["beside"], unit["seconds"]) == ("ok", None, 1.0)
    plan = _fake_plan(tmp_path / "b", monkeypatch, takes, 150, steps=["gpu_tests", "unit"])  # 200 s needed
    notes = {s["step"]: s["note"] for s in plan["steps"]}
    assert notes["gpu_tests"].startswith("skipped for budget") and plan["skipped_for_budget"] == ["gpu_tests"]
    assert notes["unit"] == "runs beside gpu_tests, which did not run"


@pytest.mark.integration  # it starts a process
def test_a_background_step_stops_when_the_step_it_runs_beside_ends(tmp_path):
    args = argparse.Namespace(
        dry_run=True,
        out=str(tmp_path / "out"),
        work=str(tmp_path / "work"),
        wheels=gpu_check.WHEELS,
        steps=gpu_check.STEPS,
        budget=60,
    )
    check, ended = gpu_check.Check(args), threading.Event()
    log, stopped_at = check.logs / "sleep.log", []

    def end_the_step_once_the_child_sleeps():  # a SIGINT sent while the child's interpreter still starts up
        deadline = time.monotonic() + 120  # (seconds on a loaded machine) tests nothing: wait for it to sleep
        while time.monotonic() < deadline and "zzzzzz" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
        stopped_at.append(time.monotonic())
        ended.set()

    threading.Thread(target=end_the_step_once_the_child_sleeps, daemon=True).start()
    sleeper = [sys.executable, "-c", "import time; print('zz' * 3, flush=True); time.sleep(300)"]
    # as in a job a shell started with `&`: SIGINT ignored here, which a child inherits unless run() restores it
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert check.run(sleeper, 300, "sleep.log", stop=ended) is None
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - stopped_at[0] < 10  # SIGINT ends it at once (SIGKILL would come 15 s later)
    assert "stopped after its step's end" in (check.logs / "sleep.log").read_text()


def test_junit_counts_reads_a_report_and_survives_a_missing_one(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="one"/>'
        '<testcase classname="tests.test_a" name="two"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b" name="three"><skipped/></testcase>'
        '<testcase classname="tests.test_b" name="four"><error message="y"/></testcase>'
        "</testsuite></testsuites>"
    )
    counts = gpu_check.junit_counts(report)
    assert (counts["passed"], counts["failed"], counts["errors"], counts["skipped"]) == (1, 1, 1, 1)
    assert counts["failed_names"] == ["test_a::two", "test_b::four"]
    assert gpu_check.junit_counts(tmp_path / "absent.xml")["text"].startswith("no report")


def test_the_wheelhouse_covers_posencs_dependencies():
    """What the device lacks of posenc's needs (hydra-core and its parser runtime, the launcher plugins) is
    fetched; what it has (torch, numpy, pandas, ...) is not; setuptools comes for building posenc there. The
    script fails if a dependency is neither on the device nor installed here."""
    result = subprocess.run(
        ["bash", "scripts/gpu_wheelhouse.sh", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    plan = [line.split() for line in result.stdout.splitlines()]
    fetched = {spec.split("==")[0] for kind, spec in plan if kind == "run"}
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime"} <= fetched
    on_the_device = {"torch", "triton", "numpy", "pandas", "transformers", "pytest"}
    assert not fetched & (on_the_device | {"mlflow-skinny", "wandb", "ruff"})  # ruff: 10 MiB no step runs
    assert [spec.split("==")[0] for kind, spec in plan if kind == "build"] == ["setuptools"]


def test_a_stopped_forward_bench_keeps_the_rows_its_log_shows():
    """bench writes its table at the end; a length stopped at its limit keeps each timed encoder's time, and
    the least peak of the memory passes that ran."""
    log = (
        "  forward rope @ 131072: 0.512 s (first call 3.20 s)\n"
        "  forward alibi @ 131072: 0.733 s (first call 9.81 s)\n"
        "  memory rope @ 131072, pass 1/2: peak 2100 MiB (+1900)\n"
        "  memory rope @ 131072, pass 2/2: peak 2000 MiB (+1800)\n"
        "[gpu_check] stopped after 65 s\n"
    )
    rows = {r["encoder"]: r for r in gpu_check.forward_rows_from_log(log)}
    assert set(rows) == {"rope", "alibi"} and rows["alibi"]["seconds"] == "0.733"
    assert (rows["rope"]["peak_mib"], rows["rope"]["rise_mib"]) == (2000.0, 1800.0)
    assert rows["alibi"]["peak_mib"] == ""


def test_a_forward_length_notes_how_bench_ended_and_which_encoders_failed_there():
    """A row bench recorded as failed (out of memory at 131072) is a finding in the note, not a failed step."""
    rows = [{"encoder": "rope", "error": ""}, {"encoder": "fox", "error": "OutOfMemoryError: CUDA out of memory"}]
    assert gpu_check.forward_note(131072, 0, rows) == "131072: ok, 2 rows (failed: fox OutOfMemoryError)"
    assert gpu_check.forward_note(32768, None, rows[:1]) == "32768: timeout, 1 rows"
    assert gpu_check.forward_note(8192, 1, []) == "8192: exit 1, 0 rows"


def test_encoders_whose_time_grows_with_s_squared_are_left_out_past_their_length():
    """xPos and CoPE (query-blocked, time in s^2) ran every length out of time on the H200's second call: they
    are measured up to 32768 tokens, and every other encoder at every length, in the order given."""
    order = ["rope", "nope", "alibi", "fox", "xpos", "cope"]
    assert gpu_check.forward_encoders(order, 131072) == ["rope", "nope", "alibi", "fox"]
    assert gpu_check.forward_encoders(order, 32768) == order
    assert gpu_check.forward_encoders(order, 8192) == order
    assert sum(gpu_check.FORWARD_LENGTHS.values()) <= gpu_check.LIMITS["forward"]
