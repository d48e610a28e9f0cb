#!/usr/bin/env python3
"""The prepared GPU check (issue 42): posenc's GPU path checked and measured in one device call.

A session that is lent a GPU (the device tool's ``status``: ``can_start_another`` true) runs it first:

  1. here (the CPU machine), once:  bash scripts/gpu_wheelhouse.sh      # fills .gpu-wheels/ (git-ignored)
  2. the device tool's ``run`` with
       command:   PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py --out "$OUT"
       carry:     [".gpu-wheels"]
       timeout_s: 570
  3. the files that come back (at most 8, under files_at) go to results/gpu/, with docs/gpu.md's section on
     them naming the device; fix what failed, and rerun only those steps (``--steps``, ``--budget``).

On the device it installs posenc from the carried wheelhouse (no internet there; torch, transformers, pytest
and the rest are already on the device) and a wheel of posenc built there from this working tree, then runs
each step under its own time limit, so that one failure or hang cannot eat the call (``--budget`` seconds in
all, 500 by default). A step starts only with at least what it needs left of the budget (NEEDS); else it is
skipped for budget, and machine.json and the summary say which. In this order, one at a time except unit:

  setup         the install above, and an import check                                  (always runs)
  machine       nvidia-smi, torch/CUDA/Triton versions, the GPU's name, memory and multiprocessors, the
                CPU's model (always runs: the test steps read pytest's plugins from it)
  gpu_tests     pytest -m gpu (tests/test_gpu_cuda.py and the other gpu-marked tests), 4 workers
  unit          the unit suite with CUDA visible (device=auto runs go to CUDA): beside gpu_tests, at the
                lowest CPU priority on the cores it leaves idle, stopped when it ends (so it costs no
                time; what ran is reported); on its own when gpu_tests is not selected
  train_resume  `posenc train` (the default run: rope on copy, CUDA's defaults: compile, bf16 autocast,
                fused AdamW) killed with SIGKILL after its first checkpoint, then the same command again:
                it must resume from that step and learn its task. Alone: beside the test steps it starved
  forward       scripts/bench.py --sections forward at 131072, 32768 and 8192 tokens, the longest first (one
                process each, so a failure at one length keeps the others; rope and nope first in each,
                rows written as they are measured): time and peak CUDA memory per encoder
  mps           scripts/train_parallel.py: one run alone, then many at once, under CUDA MPS when the device
                has it (nvidia-cuda-mps-control -d), else time-sliced (recorded); steps/s from the checkpoints
  throughput    training tokens/s of HF LlamaForCausalLM and posenc with every encoder at the same shape
                (scripts/bench.py's model and step), eager (interleaved rounds), then compiled one at a time

Everything is written to --out: summary.md, steps.csv, machine.json, train.csv, throughput.csv, mps.csv,
forward.csv and logs.tar.gz (every log), at most 8 files, as the device tool returns. Timings from different
cards are never compared: every ratio here (to Llama, to rope, to one run alone) is taken within this call.

CPU dry run (``--dry-run`` or DRY_RUN=1; tests/test_gpu_check.py runs it in the test suite): every step that
can run on a CPU does, at tiny sizes, in this environment (nothing installed); the rest is skipped with its
reason. Its numbers are not figures.

Subcommands used by the steps (in a child process, where posenc and torch are importable): ``facts``,
``checkpoint-facts`` and ``throughput``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

# The device tool's call (docs/gpu.md repeats it; tests/test_gpu_check.py keeps the two the same).
DEVICE_COMMAND = 'PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py --out "$OUT"'
CARRY = [".gpu-wheels"]
TIMEOUT_S = 570
WHEELS = ".gpu-wheels"

STEPS = ["setup", "machine", "gpu_tests", "unit", "train_resume", "forward", "mps", "throughput"]
# One group after another; the steps of a group at once. Only the two test steps share the machine (neither
# is a timing, and unit runs at the lowest CPU priority): train_resume timed out beside them on the H200.
GROUPS = [["setup"], ["machine"], ["gpu_tests", "unit"], ["train_resume"], ["forward"], ["mps"], ["throughput"]]
BACKGROUND = {"unit": "gpu_tests"}  # runs beside that step on the cores it leaves idle; stops when it ends
ALWAYS = ["setup", "machine"]  # every machine starts bare, and the test steps need machine's facts
# The first H200 call (results/gpu/) measured: setup 16 s, machine 6, gpu_tests 144 of its 145 tests in 170 s
# alone on one worker (and 100 in 175 s on four beside unit and train_resume), train_resume 59 alone, forward
# two lengths in part in 85, mps 64, throughput 32 of its 36 rows in 114. Seconds each step may run (LIMITS)
# and the least it starts with (NEEDS): a complete run for the tests, train_resume and mps; rope at 131072 for
# forward (its rows are written as they come); some rows for throughput (likewise).
# The second (results/gpu/h200-2026-11-28-*): setup 14, machine 12, gpu_tests all 145 in 211 on four workers
# beside unit, train_resume 63, forward 152 (out of time at each length, above), mps 65, throughput 132.
MEASURED = {"setup": 16, "machine": 12, "gpu_tests": 211, "train_resume": 63, "mps": 65}  # complete or a floor
LIMITS = {
    "setup": 90,
    "machine": 30,
    "gpu_tests": 255,
    "unit": 255,
    "train_resume": 120,
    "forward": 150,
    "mps": 90,
    "throughput": 150,
}
NEEDS = {
    "setup": 20,
    "machine": 10,
    "gpu_tests": 215,
    "unit": 20,
    "train_resume": 80,
    "forward": 60,
    "mps": 75,
    "throughput": 40,
}
# Limits, not expected times: the dry run takes about a minute in all on an idle 2-core CPU.
DRY_LIMITS = {
    "setup": 120,
    "machine": 120,
    "gpu_tests": 120,
    "unit": 120,
    "train_resume": 240,
    "forward": 120,
    "mps": 240,
    "throughput": 120,
}
DRY_NEEDS = dict.fromkeys(STEPS, 20)
# Each length's own limit within the step's, the longest first: 131072 was never reached on the H200's first
# call. On its second (results/gpu/h200-2026-11-28-check) every length ran out of time in xPos, the 16th of 17
# encoders: its query-blocked path (and CoPE's) takes time in s^2, 0.077 s (0.156 s) a call at 8192 tokens on
# the first call, so about 20 s (40 s) at 131072, with a first call and a memory pass besides.
FORWARD_LENGTHS = {131072: 55, 32768: 45, 8192: 40}
FORWARD_QUADRATIC = {"xpos": 32768, "cope": 32768}  # the longest length each is measured at, for that reason
BUDGET = 500  # seconds for the whole check: about 8 minutes, with the machine's start well inside 15
RESERVE = 15  # seconds kept for writing the results
MIN_STEP = 20  # a forward length with less time than this left is skipped, not started
OUTPUTS = [
    "summary.md",
    "steps.csv",
    "machine.json",
    "train.csv",
    "throughput.csv",
    "mps.csv",
    "forward.csv",
    "logs.tar.gz",
]
# The dry run's tiny model and task (tests/conftest.py's TINY, without its step count, and without a
# task.min_length, which a fixed-length task does not use: posenc is to refuse an ignored setting, issue 38).
TINY = [
    "model.d_model=16",
    "model.n_heads=2",
    "model.n_layers=1",
    "model.d_mlp=32",
    "train.batch_size=4",
    "train.eval_sequences=4",
    "task.length=16",
    "task.variable_length=False",
]
COMPILED_FIRST = ["llama", "rope"]  # compiled throughput: these first, then every other encoder in order
NO_TRANSFORMERS = "transformers not installed (the reference; the bench extra)"


# --- the orchestrator ---------------------------------------------------------------------------------------
class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.dry = args.dry_run
        self.out = Path(args.out).resolve()
        self.work = Path(args.work or tempfile.mkdtemp(prefix="gpu_check_")).resolve()
        self.logs = self.work / "logs"
        self.wheels = (ROOT / args.wheels).resolve()
        self.selected = set(args.steps)
        self.budget = args.budget
        self.limits = dict(DRY_LIMITS if self.dry else LIMITS)
        self.needs = dict(DRY_NEEDS if self.dry else NEEDS)
        self.decided = {name: threading.Event() for name in STEPS}  # set once a step runs or is skipped
        self.ended = {name: threading.Event() for name in STEPS}
        self.device = "cpu" if self.dry else "cuda"
        self.python = sys.executable
        self.start = time.monotonic()
        self.deadline = self.start + args.budget
        # PYTHONSAFEPATH: no process of the check (pytest's xdist workers too) imports the tree's own posenc
        # package, which lacks posenc.conf, instead of the installed one
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "PYTHONSAFEPATH": "1"}
        self.env.pop("PYTEST_ADDOPTS", None)
        if self.dry:  # one thread a process: a shared 2-core CPU thrashes with more
            self.env["OMP_NUM_THREADS"] = "1"
        self.posenc = _beside_python("posenc")
        self.facts: dict = {}
        self.records: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)

    # -- running things --
    def left(self) -> float:
        return self.deadline - time.monotonic() - RESERVE

    def say(self, text: str) -> None:
        line = f"[gpu_check {time.monotonic() - self.start:5.0f} s] {text}"
        with self.lock:
            with open(self.logs / "gpu_check.log", "a") as f:
                f.write(line + "\n")
            try:
                print(line, flush=True)
            except OSError:  # a closed console must not lose the results
                pass

    def run(
        self,
        command: list[str],
        seconds: float,
        log: str,
        cwd: Path | None = None,
        env: dict | None = None,
        stop: threading.Event | None = None,
    ) -> int | None:
        """``command`` with its output in ``logs/<log>``, in a process group of its own; None if it ran past
        ``seconds`` or ``stop`` was set (then SIGINT to the group, so pytest still writes its report, and
        SIGKILL 15 s later)."""
        until = time.monotonic() + max(1.0, seconds)
        with open(self.logs / log, "ab") as f:
            f.write(f"$ {shlex.join(command)}\n".encode())
            f.flush()
            proc = subprocess.Popen(
                command,
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=cwd or ROOT,
                env=env or self.env,
                start_new_session=True,
                preexec_fn=_interruptible,
            )
            while True:
                try:
                    return proc.wait(timeout=max(0.01, min(0.5, until - time.monotonic())))
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= until or (stop is not None and stop.is_set()):
                        break
            _stop(proc)
            why = "its step's end" if stop is not None and stop.is_set() else f"{seconds:.0f} s"
            f.write(f"\n[gpu_check] stopped after {why}\n".encode())
            return None

    def shared_env(self) -> dict:
        """For the steps that run at once (tests, train_resume): two inductor compile workers a process, not
        one per core each (a dozen processes compile at once on the device's 16 cores)."""
        return {**self.env, "TORCHINDUCTOR_COMPILE_THREADS": "2"}

    def child(self, *args: str) -> list[str]:
        """This script's subcommand in the environment the check installed (-P: not the tree's own posenc)."""
        return [self.python, "-P", str(THIS), *args]

    # -- steps --
    def beside(self, name: str) -> str | None:
        """The step ``name`` runs beside (BACKGROUND), when that one is selected too; else None. Not in the
        dry run: there the tiny gpu_tests could end before unit's one test and stop it (they still run at
        once)."""
        foreground = BACKGROUND.get(name)
        return foreground if foreground in self.selected and not self.dry else None

    def skip_reason(self, name: str, seconds: float) -> str | None:
        """Why ``name`` does not start (None: it starts). A background step waits until its foreground step
        has started or been skipped, and goes with it."""
        foreground = self.beside(name)
        if foreground:
            self.decided[foreground].wait()
        if name not in self.selected:
            return "not selected (--steps)"
        if name != "setup" and self.records.get("setup", {}).get("status") == "failed":
            return "setup failed"
        if foreground and self.records.get(foreground, {}).get("status") == "skipped":
            return f"runs beside {foreground}, which did not run"
        if not foreground and self.left() < self.needs[name]:
            return f"skipped for budget: needs {self.needs[name]} s, {max(0, self.left()):.0f} s left"
        return None

    def step(self, name: str) -> None:
        begun = time.monotonic()
        seconds = max(0.0, min(self.limits[name], self.left()))
        why = self.skip_reason(name, seconds)
        if why is not None:
            status, note = "skipped", why
            with self.lock:
                self.records[name] = {
                    "step": name,
                    "status": status,
                    "seconds": 0.0,
                    "limit": round(seconds),
                    "need": self.needs[name],
                    "note": note,
                }
            self.decided[name].set()
        else:
            self.decided[name].set()
            self.say(f"{name}: up to {seconds:.0f} s" + (f", beside {self.beside(name)}" if self.beside(name) else ""))
            try:
                status, note = getattr(self, f"step_{name}")(seconds)
            except Exception as err:  # noqa: BLE001  a step's own bug must not lose the other steps' results
                status, note = "failed", f"{type(err).__name__}: {err}"
        record = {
            "step": name,
            "status": status,
            "seconds": round(time.monotonic() - begun, 1),
            "limit": round(seconds),
            "need": self.needs[name],
            "note": note,
        }
        with self.lock:
            self.records[name] = record
        self.ended[name].set()
        self.say(f"{name}: {status} ({record['seconds']} s) {note}")

    def step_setup(self, seconds: float) -> tuple[str, str]:
        check = self.child("facts", "--only-imports")
        if self.dry:
            rc = self.run(check, seconds, "setup.log")
            note = "dry run: this environment, nothing installed (the wheelhouse install runs on the device)"
            return ("ok" if rc == 0 else "failed"), note
        wheels = sorted(self.wheels.glob("*.whl"))
        tools = sorted((self.wheels / "build").glob("*.whl"))
        if not wheels or not tools:
            return "failed", (
                f"no wheelhouse at {self.wheels}: run `bash scripts/gpu_wheelhouse.sh` on the "
                f"CPU machine and carry {WHEELS}"
            )
        site, build, built = self.work / "site", self.work / "build-tools", self.work / "posenc-wheel"
        pip = [
            self.python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--disable-pip-version-check",
        ]
        until = time.monotonic() + seconds
        # posenc itself is built here from this working tree (never a stale wheel), with the carried
        # setuptools, in a copy of what its wheel holds: the build leaves nothing in the tree the tests run in
        source = self.work / "posenc-source"
        shutil.copytree(
            ROOT,
            source,
            ignore=shutil.ignore_patterns(
                ".git", ".venv", WHEELS, "build", "dist", "*.egg-info", "results", "tests", "scripts", "__pycache__"
            ),
        )
        steps = [
            (pip + ["--target", str(site), *map(str, wheels)], self.env),
            (pip + ["--target", str(build), *map(str, tools)], self.env),
            (
                [
                    self.python,
                    "-m",
                    "pip",
                    "wheel",
                    "-q",
                    "--no-deps",
                    "--no-build-isolation",
                    "--no-index",
                    "-w",
                    str(built),
                    str(source),
                ],
                {**self.env, "PYTHONPATH": str(build)},
            ),
        ]
        for command, env in steps:
            if self.run(command, until - time.monotonic(), "setup.log", env=env) != 0:
                return "failed", f"`{shlex.join(command[:6])} ...` failed (logs/setup.log)"
        posenc_wheel = sorted(built.glob("posenc-*.whl"))
        if (
            self.run(pip + ["--target", str(site), *map(str, posenc_wheel)], until - time.monotonic(), "setup.log") != 0
            or not posenc_wheel
        ):
            return "failed", "installing posenc's wheel failed (logs/setup.log)"
        self.env["PYTHONPATH"] = str(site)
        self.env["PATH"] = f"{site / 'bin'}{os.pathsep}{self.env.get('PATH', '')}"
        self.posenc = str(site / "bin" / "posenc")
        if self.run(check, until - time.monotonic(), "setup.log") != 0:
            return "failed", "posenc does not import after the install (logs/setup.log)"
        return "ok", f"{len(wheels)} wheels and posenc built from this tree, into {site}"

    def step_machine(self, seconds: float) -> tuple[str, str]:
        if shutil.which("nvidia-smi"):
            self.run(["nvidia-smi"], 20, "machine.log")
            self.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv"],
                20,
                "machine.log",
            )
        facts = self.child("facts", "--json", str(self.work / "machine.json"))
        rc = self.run(facts, seconds - 5, "machine.log")
        if rc != 0 or not (self.work / "machine.json").is_file():
            return "failed", "the facts did not come (logs/machine.log)"
        self.facts = json.loads((self.work / "machine.json").read_text())
        where = self.facts.get("device_name") or "no CUDA device"
        note = f"{where}; torch {self.facts.get('torch')}; python {self.facts.get('python')}"
        if not self.dry and not self.facts.get("cuda_available"):
            return "failed", note + ": torch sees no CUDA device"
        return "ok", note

    def _pytest(
        self, name: str, seconds: float, selection: list[str], workers: int, beside: str | None = None
    ) -> tuple[str, str]:
        """pytest on ``selection``; ``beside``: a step this one runs beside, at the lowest CPU priority, and
        stops when it ends ("partial" if tests were left: not a failure, what ran is counted)."""
        report = self.logs / f"{name}.xml"
        command = [
            self.python,
            "-P",
            "-m",
            "pytest",
            "-q",
            "-rfE",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            *selection,
        ]
        if workers > 1 and self.facts.get("xdist"):
            command += ["-n", str(workers)]
        if self.facts.get("pytest_timeout"):
            command += [f"--timeout={int(max(60, min(150, seconds - 20)))}"]
        if beside and shutil.which("nice"):
            command = ["nice", "-n", "19", *command]
        stop = self.ended[beside] if beside else None
        rc = self.run(command, seconds, f"{name}.log", env=self.shared_env(), stop=stop)
        counts = junit_counts(report)
        if rc is None and stop is not None and stop.is_set():
            note = counts["text"] + f"; stopped when {beside} ended (it ran on the cores {beside} left idle)"
            return ("failed" if counts["failed"] or counts["errors"] else "partial"), note
        note = counts["text"] + ("; stopped at its time limit" if rc is None else "")
        if counts["failed_names"]:
            note += "; failing: " + ", ".join(counts["failed_names"][:12])
        if rc is None:
            return "timeout", note
        return ("ok" if rc == 0 else "failed"), note

    def step_gpu_tests(self, seconds: float) -> tuple[str, str]:
        # on the CPU every gpu test skips: what the dry run checks is that they are collected and skip cleanly
        selection = ["-m", "gpu"] + (["tests/test_gpu_cuda.py", "tests/running/test_train.py"] if self.dry else [])
        return self._pytest("gpu_tests", seconds, selection, workers=2 if self.dry else 4)

    def step_unit(self, seconds: float) -> tuple[str, str]:
        selection = ["-m", "not slow and not gpu and not integration"]
        if self.dry:  # one quick test: the whole suite is the suite's own business on CPU
            selection += ["tests/running/test_checkpoint.py::test_rng_states_round_trip"]
        beside = self.beside("unit")
        workers = 1 if self.dry else 4 if beside else 8  # dry: one test, no workers to start on a small CPU
        return self._pytest("unit", seconds, selection, workers=workers, beside=beside)

    def step_train_resume(self, seconds: float) -> tuple[str, str]:
        until = time.monotonic() + seconds
        cwd, run = self.work / "train", self.work / "train" / "run"
        cwd.mkdir(parents=True, exist_ok=True)
        if self.dry:
            config = [
                *TINY,
                "train.steps=300",
                "train.checkpoint_every=5",
                "train.check_every=0",
                "train.log_every=100",
            ]
        else:  # the default run (rope on copy) with CUDA's defaults; a checkpoint every 50 steps for the kill
            config = ["train.checkpoint_every=50"]
        command = [self.posenc, "train", *config, f"hydra.run.dir={run}", "progress=false"]
        checkpoint = run / "checkpoint.pt"
        with open(self.logs / "train_killed.log", "ab") as log:
            log.write(f"$ {shlex.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=self.shared_env(), start_new_session=True
            )
            while proc.poll() is None and not checkpoint.exists() and time.monotonic() < until:
                time.sleep(0.05)
            running = proc.poll() is None
            if running:
                os.killpg(proc.pid, signal.SIGKILL)  # mid-run, right after its first checkpoint
            proc.wait()
        if not running:
            return "failed", (
                f"the first run ended (exit {proc.returncode}) before it could be killed (logs/train_killed.log)"
            )
        if not checkpoint.exists():
            return "timeout", "no checkpoint within the time limit (logs/train_killed.log)"
        killed = checkpoint_facts([checkpoint], self)[0]
        rc = self.run(command, until - time.monotonic(), "train_resumed.log", cwd=cwd, env=self.shared_env())
        text = (self.logs / "train_resumed.log").read_text(errors="replace")
        resumed = f"from step {killed['step']}" in text and "resuming" in text
        metrics_file = run / "metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        final = checkpoint_facts([checkpoint], self)[0] if metrics else {}
        row = {
            "killed_at_step": killed["step"],
            "resumed_from_step": killed["step"] if resumed else "",
            "learned": metrics.get("learned", ""),
            "steps_to_learn": metrics.get("steps_to_learn", ""),
            "steps": metrics.get("steps", ""),
            "exact_match": metrics.get("exact_match", ""),
            "train_seconds": metrics.get("train_seconds", ""),
            "device": metrics.get("device", ""),
            "fused_adamw": final.get("fused", killed.get("fused")),
            "compile_and_bf16": "auto: on" if self.device == "cuda" else "auto: off (CPU)",
            "note": "alone on the machine (after the test steps)",
        }
        write_csv(self.work / "train.csv", [row])
        if rc is None:
            return "timeout", f"resumed={resumed}; stopped at its time limit before it finished"
        note = (
            f"killed (SIGKILL) after its step-{killed['step']} checkpoint; resumed from it: {resumed}; "
            f"learned: {metrics.get('learned')} (steps {metrics.get('steps')}, exact match "
            f"{metrics.get('exact_match')}); fused AdamW: {row['fused_adamw']}"
        )
        good = rc == 0 and resumed and bool(metrics) and (self.dry or metrics.get("learned") is True)
        if self.dry:
            note += " (tiny CPU run: learning not expected)"
        return ("ok" if good else "failed"), note

    def step_throughput(self, seconds: float) -> tuple[str, str]:
        table = self.work / "throughput.csv"
        sizes = (
            [
                "--batch",
                "2",
                "--length",
                "16",
                "--steps",
                "1",
                "--rounds",
                "1",
                "--encoders",
                "rope,alibi",
                "--compiled",
                "none",
            ]
            if self.dry
            else []
        )
        rc = self.run(
            self.child("throughput", "--device", self.device, "--csv", str(table), *sizes), seconds, "throughput.log"
        )
        rows = read_csv(table)
        errors = [
            r["model"] + " " + r["mode"]
            for r in rows
            if r.get("error") and not (self.dry and r["error"] == NO_TRANSFORMERS)
        ]
        note = f"{len(rows)} rows" + (f"; errors: {', '.join(errors)}" if errors else "")
        if self.dry:
            note += "; dry run: compiled models skipped (minutes of C++ compilation on a CPU)"
        if rc is None:
            return "timeout", note + "; stopped at its time limit (rows so far kept)"
        return ("ok" if rc == 0 and rows and not errors else "failed"), note

    def step_mps(self, seconds: float) -> tuple[str, str]:
        until = time.monotonic() + seconds
        env = dict(self.env)
        if self.dry:
            settings = [(1, 0.0), (2, 0.0)]  # no deadline: short runs that end (a loaded CPU starts slowly)
            runs = [
                " ".join(
                    [*TINY, "device=cpu", "train.steps=40", "train.check_every=0", "train.log_every=20", f"seed={i}"]
                )
                for i in range(2)
            ]
        else:
            many = max(2, min(14, (os.cpu_count() or 4) - 2))  # a CPU core per process, two left over
            settings = [(1, 20.0), (many, 30.0)]
            runs = [f"experiment=scale_copy encoder=rope seed={i}" for i in range(many)]
        with cuda_mps(self, env) as (daemon, note):
            rows = [self.parallel_row(jobs, deadline, runs[:jobs], env, daemon, until) for jobs, deadline in settings]
        if len(rows) == 2 and rows[0]["steps_per_s"]:
            rows[1]["vs_one_run"] = round(rows[1]["steps_per_s"] / rows[0]["steps_per_s"], 2)
        write_csv(self.work / "mps.csv", rows)
        ok = len(rows) == len(settings) and all(r["exit"] == 0 and r["runs_with_checkpoint"] for r in rows)
        note += "; " + "; ".join(
            f"{r['jobs']} at once: {r['steps_per_s']} steps/s ({r['runs_with_checkpoint']} runs)" for r in rows
        )
        return ("ok" if ok else "failed"), note

    def parallel_row(self, jobs: int, deadline: float, runs: list[str], env: dict, mps: bool, until: float) -> dict:
        """``runs`` trained ``jobs`` at once by scripts/train_parallel.py until ``deadline`` seconds (0: to their
        end), and mps.csv's row of what their checkpoints show: steps, and steps/s summed and per run."""
        cwd = self.work / f"parallel_{jobs}"
        cwd.mkdir(parents=True, exist_ok=True)
        command = [self.python, "-P", str(ROOT / "scripts" / "train_parallel.py"), "--jobs", str(jobs)]
        command += ["--deadline", str(deadline), "--every", "10", "--logs", str(cwd / "logs"), "--posenc", self.posenc]
        begun = time.monotonic()
        limit = min((deadline or 60) + 60, until - time.monotonic())
        rc = self.run([*command, *runs], limit, f"mps_{jobs}.log", cwd=cwd, env=env)
        wall = deadline or time.monotonic() - begun
        facts = checkpoint_facts(sorted(cwd.glob("results/**/checkpoint.pt")), self)
        rates = [f["step"] / f["elapsed"] for f in facts if f.get("elapsed")]
        return {
            "jobs": jobs,
            "mps": mps,
            "deadline_s": deadline,
            "exit": rc,
            "runs_with_checkpoint": len(facts),
            "steps": sum(f["step"] for f in facts),
            "steps_per_s": round(sum(rates), 2),
            "steps_per_s_per_run": round(sum(rates) / len(rates), 2) if rates else "",
            "wall_steps_per_s": round(sum(f["step"] for f in facts) / wall, 2),
        }

    def step_forward(self, seconds: float) -> tuple[str, str]:
        until = time.monotonic() + seconds
        lengths = {64: 60} if self.dry else FORWARD_LENGTHS
        order = ["rope", "alibi"] if self.dry else forward_order(self.python, self.env)
        rows, notes = [], []
        for length, cap in lengths.items():
            encoders = forward_encoders(order, length)
            allowed = min(cap, until - time.monotonic())
            if allowed < MIN_STEP:
                notes.append(f"{length}: skipped, out of time")
                continue
            folder = self.work / f"forward_{length}"
            rc = self.run(
                [
                    self.python,
                    "-P",
                    str(ROOT / "scripts" / "bench.py"),
                    "--device",
                    self.device,
                    "--sections",
                    "forward",
                    "--lengths",
                    str(length),
                    "--out",
                    str(folder),
                    "--encoders",
                    ",".join(encoders),
                ],
                allowed,
                f"forward_{length}.log",
            )
            got = [r for r in read_csv(folder / "forward.csv") if str(r.get("length")) == str(length)]
            if not got:  # killed before its first row was written: the rows its log shows
                got = forward_rows_from_log((self.logs / f"forward_{length}.log").read_text(errors="replace"))
            rows += got
            left_out = [n for n in order if n not in encoders]
            notes.append(forward_note(length, rc, got) + (f", not run: {', '.join(left_out)}" if left_out else ""))
        write_csv(self.work / "forward.csv", rows)
        good = all(": ok," in n for n in notes)
        return ("ok" if good else "failed"), "; ".join(notes)

    def run_plan(self) -> None:
        """Every group in turn, the steps of a group at once."""
        for group in GROUPS:
            threads = [threading.Thread(target=self.step, args=(name,)) for name in group]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

    # -- results --
    def plan(self, records: list[dict], seconds: float) -> dict:
        """The check's plan as it ran, for machine.json: the budget, each step's group, limit, need, status
        and seconds, and the steps skipped for budget (with what they needed and what was left)."""
        group = {name: i for i, names in enumerate(GROUPS) for name in names}
        steps = [
            {
                "step": r["step"],
                "group": group[r["step"]],
                "beside": self.beside(r["step"]),
                "limit_s": self.limits[r["step"]],
                "need_s": self.needs[r["step"]],
                "status": r["status"],
                "seconds": r["seconds"],
                "note": r["note"],
            }
            for r in records
        ]
        return {
            "dry_run": self.dry,
            "budget_s": self.budget,
            "reserve_s": RESERVE,
            "seconds": round(seconds, 1),
            "steps": steps,
            "skipped_for_budget": skipped_for_budget(records),
        }

    def finish(self) -> int:
        records = [
            self.records.get(name)
            or {
                "step": name,
                "status": "skipped",
                "seconds": 0,
                "limit": 0,
                "need": self.needs[name],
                "note": "not reached",
            }
            for name in STEPS
        ]
        write_csv(self.out / "steps.csv", records)
        for name in ("train.csv", "throughput.csv", "mps.csv", "forward.csv"):
            if (self.work / name).is_file():
                shutil.copyfile(self.work / name, self.out / name)
        seconds = time.monotonic() - self.start
        facts = read_json(self.work / "machine.json")
        (self.out / "machine.json").write_text(
            json.dumps({**facts, "check": self.plan(records, seconds)}, indent=1) + "\n"
        )
        (self.out / "summary.md").write_text(summary(records, self.work, self.dry, seconds))
        with tarfile.open(self.out / "logs.tar.gz", "w:gz") as tar:
            tar.add(self.logs, arcname="logs")
            for folder in sorted(self.work.glob("forward_*")):
                for md in folder.glob("*.md"):
                    tar.add(md, arcname=f"logs/{folder.name}_{md.name}")
            for folder in sorted(self.work.glob("parallel_*/logs")):  # one log per run of train_parallel
                tar.add(folder, arcname=f"logs/{folder.parent.name}")
        failed = [r["step"] for r in records if r["status"] in ("failed", "timeout")]
        self.say(
            f"done in {time.monotonic() - self.start:.0f} s; results in {self.out}"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
        return 1 if failed else 0


def _beside_python(name: str) -> str:
    """The console script ``name`` installed with this interpreter, else the one on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def _interruptible() -> None:
    """In a step's process, before exec: SIGINT back to its default. A SIGINT the parent ignores (a job a
    non-interactive shell started with ``&``) stays ignored across exec, and Python then installs no
    KeyboardInterrupt handler, so :func:`_stop`'s SIGINT would not end the step gently."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# Their CUDA inference loops over small query blocks: measured last, so that a time limit keeps the rest.
FORWARD_LAST = ["xpos", "cope"]
FORWARD_LINE = r"forward (\S+) @ (\d+): ([\d.]+) s \(first call ([\d.]+) s\)"
MEMORY_LINE = r"memory (\S+) @ (\d+), pass \d+/\d+: peak ([\d.]+) MiB \(\+(-?[\d.]+)\)"


@contextlib.contextmanager
def cuda_mps(check: Check, env: dict):
    """CUDA MPS (``nvidia-cuda-mps-control -d``) for the block, where the device has it: many processes then
    share the GPU at once instead of taking turns (scripts/gpu_train.py's runs too). ``env`` gets MPS's pipe and
    log folders, for the processes started in the block. Yields (started, a note for the results); the daemon
    is told to quit after the block."""
    control = shutil.which("nvidia-cuda-mps-control")
    if check.dry or not control:
        yield False, ("MPS skipped: a CPU has none" if check.dry else "no nvidia-cuda-mps-control here: time-sliced")
        return
    for key, name in (("CUDA_MPS_PIPE_DIRECTORY", "mps-pipe"), ("CUDA_MPS_LOG_DIRECTORY", "mps-log")):
        env[key] = str(check.work / name)
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    started = check.run([control, "-d"], 20, "mps.log", env=env) == 0
    try:
        yield started, ("under MPS" if started else "MPS daemon did not start (logs/mps.log): time-sliced")
    finally:
        if started:
            subprocess.run([control], input="quit\n", text=True, env=env, timeout=20, capture_output=True, check=False)


FORWARD_FIRST = ["rope", "nope"]  # the references of every ratio: measured first, so a time limit keeps them


def forward_order(python: str, env: dict) -> list[str]:
    """Every encoder, rope and nope first, those of FORWARD_LAST last (bench measures them in this order)."""
    names = subprocess.run(
        [python, "-c", "from posenc.encoders import ENCODERS; print(*ENCODERS)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    middle = [n for n in names if n not in FORWARD_FIRST + FORWARD_LAST]
    return [n for n in FORWARD_FIRST if n in names] + middle + [n for n in FORWARD_LAST if n in names]


def forward_encoders(order: list[str], length: int) -> list[str]:
    """The encoders of ``order`` measured at ``length``: those of FORWARD_QUADRATIC only up to their length."""
    return [name for name in order if length <= FORWARD_QUADRATIC.get(name, length)]


def forward_note(length: int, rc: int | None, rows: list[dict]) -> str:
    """One length's outcome: how bench ended, its rows, and the encoders that failed there (an OOM row is a
    finding, not a failure of the check)."""
    ended = "ok" if rc == 0 else "timeout" if rc is None else f"exit {rc}"
    errors = [f"{r['encoder']} {r['error'].split(':')[0]}" for r in rows if r.get("error")]
    return f"{length}: {ended}, {len(rows)} rows" + (f" (failed: {', '.join(errors)})" if errors else "")


def forward_rows_from_log(text: str) -> list[dict]:
    """bench's forward rows from its progress lines, for a run stopped before it wrote its table: each timed
    encoder's time, and its least peak over the memory passes that ran (none: empty)."""
    import re

    rows = {}
    for name, length, seconds, first in re.findall(FORWARD_LINE, text):
        rows[(name, length)] = {
            "encoder": name,
            "length": length,
            "seconds": seconds,
            "first_s": first,
            "peak_mib": "",
            "rise_mib": "",
            "source": "bench's log (stopped)",
        }
    for name, length, peak, rise in re.findall(MEMORY_LINE, text):
        row = rows.get((name, length))
        if row is not None:
            row["peak_mib"] = min(float(peak), float(row["peak_mib"] or "inf"))
            row["rise_mib"] = min(float(rise), float(row["rise_mib"] or "inf"))
    return list(rows.values())


def checkpoint_facts(paths: list[Path], check: Check) -> list[dict]:
    """Each checkpoint's step, training seconds and whether its AdamW was fused (read in a child process)."""
    if not paths:
        return []
    result = subprocess.run(
        check.child("checkpoint-facts", *map(str, paths)),
        env=check.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"checkpoint-facts failed: {result.stderr.strip()[-300:]}")
    return json.loads(result.stdout)


def junit_counts(report: Path) -> dict:
    """Passed, failed, errors and skipped from a pytest JUnit XML report, and the failing tests' names."""
    import xml.etree.ElementTree as ET

    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failed_names": []}
    if not report.is_file():
        counts["text"] = "no report (pytest did not finish)"
        return counts
    try:
        cases = ET.parse(report).getroot().iter("testcase")
    except ET.ParseError:
        counts["text"] = "unreadable report"
        return counts
    for case in cases:
        kinds = {child.tag for child in case}
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if "failure" in kinds or "error" in kinds:
            counts["failed" if "failure" in kinds else "errors"] += 1
            counts["failed_names"].append(name)
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    counts["text"] = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "errors", "skipped"))
    return counts


def write_csv(path: Path, rows: list[dict]) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def skipped_for_budget(records: list[dict]) -> list[str]:
    return [r["step"] for r in records if r["note"].startswith("skipped for budget")]


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "(none)\n"
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value).replace("|", "/").replace("\n", " ")
    return f"{number:.4g}" if number != int(number) or abs(number) >= 1e6 else str(int(number))


def summary(records: list[dict], work: Path, dry: bool, seconds: float) -> str:
    facts = read_json(work / "machine.json")
    where = facts.get("device_name") or "no CUDA device"
    lines = [
        "# posenc GPU check\n",
        (
            f"Device: {where}; torch {facts.get('torch', '?')} (CUDA {facts.get('cuda') or '-'}), python "
            f"{facts.get('python', '?')}; CPU {facts.get('cpu_model', '?')}, {facts.get('cpu_count', '?')} "
            f"cores. {seconds:.0f} s in all.\n"
        ),
    ]
    if dry:
        lines.append(
            "**CPU dry run**: tiny sizes on a CPU, to show that every step runs. These numbers are "
            "not figures; no GPU was used.\n"
        )
    lines.append("Timings from different cards are never compared: every ratio below is taken within this call.\n")
    lines += ["## Steps\n", _markdown(records, ["step", "status", "seconds", "limit", "need", "note"])]
    short = skipped_for_budget(records)
    lines.append(f"Skipped for budget: {', '.join(short) if short else 'none'} (machine.json: check).\n")
    sections = [
        ("Default run killed and resumed (train.csv)", "train.csv", None),
        (
            "Training throughput (throughput.csv; ratios within a mode)",
            "throughput.csv",
            ["model", "mode", "tokens_per_s", "vs_llama", "vs_rope", "call_s", "error"],
        ),
        ("Many runs per GPU (mps.csv)", "mps.csv", None),
        (
            "Forward pass, batch 1 (forward.csv)",
            "forward.csv",
            ["encoder", "length", "seconds", "first_s", "peak_mib", "time_vs_rope", "peak_vs_rope", "error"],
        ),
    ]
    for title, name, columns in sections:
        rows = read_csv(work / name)
        lines += [
            f"## {title}\n",
            _markdown(rows, columns if rows and columns and all(c in rows[0] for c in columns) else None),
        ]
    return "\n".join(lines)


# --- subcommands (child processes) -----------------------------------------------------------------------
def facts_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.py facts")
    parser.add_argument("--json")
    parser.add_argument("--only-imports", action="store_true", help="check that posenc and its needs import")
    args = parser.parse_args(argv)
    import importlib.metadata
    import importlib.util
    import platform

    # posenc's needs that the device lacks (carried in the wheelhouse), and conf/ inside the installed package
    import hydra  # noqa: F401
    import omegaconf  # noqa: F401
    import torch

    import posenc
    import posenc.conf

    print(
        f"posenc from {Path(posenc.__file__).parent}; torch {torch.__version__}; "
        f"CUDA available: {torch.cuda.is_available()}"
    )
    if args.only_imports:
        return 0

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    try:  # the bench's reading of the CPU's model (issue 38), so that both name it alike
        cpu = _load_script("bench").cpu_model()
    except Exception:  # noqa: BLE001  a fact missing is not a failed machine step
        cpu = platform.processor() or platform.machine()
    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "triton": version("triton"),
        "transformers": version("transformers"),
        "pytest": version("pytest"),
        "xdist": importlib.util.find_spec("xdist") is not None,
        "pytest_timeout": importlib.util.find_spec("pytest_timeout") is not None,
        "posenc_from": str(Path(posenc.__file__).parent),
        "mps_control": shutil.which("nvidia-cuda-mps-control"),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            device_name=props.name,
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            device_count=torch.cuda.device_count(),
            bf16=torch.cuda.is_bf16_supported(),
        )
    print(json.dumps(facts, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(facts, indent=1) + "\n")
    return 0


def checkpoint_facts_main(argv: list[str]) -> int:
    import torch

    out = []
    for path in argv:
        state = torch.load(path, map_location="cpu", weights_only=True)
        groups = state.get("optimizer", {}).get("param_groups", [{}])
        out.append(
            {
                "path": path,
                "step": state["step"],
                "elapsed": state.get("elapsed"),
                "learned_at": state.get("learned_at"),
                "fused": groups[0].get("fused"),
            }
        )
    print(json.dumps(out))
    return 0


def throughput_main(argv: list[str]) -> int:
    """Training tokens/s at scripts/bench.py's shape with its step (forward, loss, backward, clipping,
    AdamW: fused on CUDA, as posenc trains there), bf16 autocast on CUDA: every model eager in ``--rounds``
    interleaved rounds (median), then each of ``--compiled`` compiled and measured at once (``call_s``: the
    whole measurement, its compilation included). The CSV is rewritten after every measurement, so that a
    time limit keeps what was done."""
    parser = argparse.ArgumentParser(prog="gpu_check.py throughput")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--csv", required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--encoders", default="all")
    parser.add_argument("--compiled", default="all", help="llama and encoders to compile: all, none, a list")
    args = parser.parse_args(argv)
    # bench turns inductor's caches off at import (its first calls time a cold compile); here they help
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "0")
    import importlib.util

    import torch
    import torch._dynamo

    bench = _load_script("bench")
    from posenc.encoders import ENCODERS

    for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, key):  # one compiled forward per model: none may fall back to eager
            setattr(torch._dynamo.config, key, max(256, getattr(torch._dynamo.config, key)))
    device = torch.device(args.device)
    autocast = torch.bfloat16 if device.type == "cuda" else None
    fused = True if device.type == "cuda" else None
    encoders = list(ENCODERS) if args.encoders == "all" else args.encoders.split(",")
    names = (["llama"] if importlib.util.find_spec("transformers") else []) + encoders
    compiled = {"all": names, "none": []}.get(args.compiled, args.compiled.split(","))
    compiled = [n for n in COMPILED_FIRST if n in compiled and n in names] + [
        n for n in names if n in compiled and n not in COMPILED_FIRST
    ]
    rows: dict[tuple[str, str], dict] = {}
    if "llama" not in names:
        rows[("llama", "eager")] = {"model": "llama", "mode": "eager", "error": NO_TRANSFORMERS}

    def build(name: str):
        if name == "llama":
            return bench.llama_reference(device, args.length)
        return bench.posenc_model(name, args.length, device)

    def measure(name: str, model, mode: str) -> None:
        row = rows.setdefault((name, mode), {"model": name, "mode": mode, "rates": []})
        begun = time.perf_counter()
        try:
            rate = bench.training_tokens_per_s(
                model, device, autocast, args.batch, args.length, args.steps, compiled=mode == "compiled", fused=fused
            )
            row["rates"].append(rate)
            print(f"{name} {mode}: {rate:,.0f} tokens/s", flush=True)
        except Exception as err:  # noqa: BLE001  one model's failure (a compile error) is a row, not the end
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
            row["error"] = f"{type(err).__name__}: {first_line}"
            print(f"{name} {mode}: {row['error']}", flush=True)
        row["call_s"] = round(time.perf_counter() - begun, 2)
        _write_throughput(args.csv, rows)

    models = {}
    for name in names:
        try:
            models[name] = build(name)
        except Exception as err:  # noqa: BLE001  likewise when it is built
            rows[(name, "eager")] = {"model": name, "mode": "eager", "error": f"{type(err).__name__}: {err}"}
    for _ in range(args.rounds):
        for name, model in models.items():
            measure(name, model, "eager")
    for name in compiled:
        if name in models:
            measure(name, build(name), "compiled")  # a fresh model: eager rounds trained the other one
    _write_throughput(args.csv, rows)
    return 0 if all(not r.get("error") or r["error"] == NO_TRANSFORMERS for r in rows.values()) else 1


def _write_throughput(path: str, rows: dict) -> None:
    table = []
    for (name, mode), row in rows.items():
        rates = row.get("rates") or []
        table.append(
            {
                "model": name,
                "mode": mode,
                "tokens_per_s": round(statistics.median(rates)) if rates else "",
                "rounds": len(rates),
                "call_s": row.get("call_s", ""),
                "error": row.get("error", ""),
            }
        )
    for row in table:
        for column, reference in (("vs_llama", "llama"), ("vs_rope", "rope")):
            ref = next((r for r in table if r["model"] == reference and r["mode"] == row["mode"]), None)
            ok = ref and ref["tokens_per_s"] and row["tokens_per_s"]
            row[column] = round(row["tokens_per_s"] / ref["tokens_per_s"], 3) if ok else ""
    write_csv(Path(path), table)


def _load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SUBCOMMANDS = {"facts": facts_main, "checkpoint-facts": checkpoint_facts_main, "throughput": throughput_main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=os.environ.get("OUT"), help="where the results go (device: $OUT)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="the CPU dry run (also DRY_RUN=1)",
        default=os.environ.get("DRY_RUN", "") not in ("", "0"),
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=float(os.environ.get("GPU_CHECK_BUDGET", BUDGET)),
        help=f"seconds for the whole check (default {BUDGET})",
    )
    parser.add_argument(
        "--steps",
        default=os.environ.get("GPU_CHECK_STEPS", ",".join(STEPS)),
        help="comma-separated steps to run (setup and machine always run)",
    )
    parser.add_argument("--wheels", default=WHEELS, help="the carried wheelhouse, relative to the repository")
    parser.add_argument("--work", help="scratch folder (default: a new temporary one)")
    args = parser.parse_args(argv)
    if not args.out:
        parser.error("--out is required (or $OUT)")
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = set(args.steps) - set(STEPS)
    if unknown:
        parser.error(f"unknown steps {sorted(unknown)}; the steps are {', '.join(STEPS)}")
    args.steps += ALWAYS  # nothing runs without them
    check = Check(args)
    chosen = ", ".join(s for s in STEPS if s in args.steps)
    check.say(
        f"{'CPU dry run' if check.dry else 'GPU check'}: steps {chosen}; budget {args.budget:.0f} s; "
        f"work in {check.work}; results to {check.out}"
    )
    try:
        check.run_plan()
    finally:
        code = check.finish()
    return code


if __name__ == "__main__":
    sys.exit(main())
