"""scripts/bench.py runs end to end (tiny sizes) and writes complete tables; the real figures come from a
full run, never from a timed test."""

import argparse
import re
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from posenc.encoders import ENCODERS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a whole script run, minutes on a busy CI core: -m slow
def test_bench_quick_run_writes_every_table(tmp_path):
    """Every section but jobs, which its own test runs (test_bench_jobs_section_...: 20-40 s of the suite)."""
    out = tmp_path / "bench"
    sections = ["--sections", "training,step,rope,forward"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--no-reference", *sections, "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    training = pd.read_csv(out / "training.csv")
    assert list(training["model"]) == [f"posenc {name}" for name in ENCODERS]
    assert (training["tokens_per_s"] > 0).all() and (training["mfu"] > 0).all()
    low, median, high = (training[c] for c in ("vs_rope_low", "vs_rope", "vs_rope_high"))
    assert (low <= median).all() and (median <= high).all()
    assert training.loc[training["model"] == "posenc rope", ["vs_rope_low", "vs_rope_high"]].eq(1.0).all(axis=None)
    assert training["vs_rope_low"].lt(training["vs_rope_high"]).any()  # two rounds, each measured anew
    assert "median of 2 interleaved rounds" in (out / "bench.md").read_text()
    forward = pd.read_csv(out / "forward.csv")
    assert sorted(set(forward["encoder"])) == sorted(ENCODERS) and set(forward["length"]) == {256, 1024}
    assert (forward["seconds"] > 0).all() and (forward["peak_mib"] > 0).all()
    step = pd.read_csv(out / "step.csv")  # the headline's own step, broken down
    assert step["encoder"].iloc[0] == "rope" and {"cope", "fox", "pope"} <= set(step["encoder"])
    assert (step["ms_per_step"] > 0).all() and (step["mfu"] > 0).all() and step["vs_rope"].iloc[0] == 1.0
    phases = step[["data_ms", "forward_ms", "backward_ms", "optimizer_ms"]].sum(axis=1)
    assert (phases <= step["ms_per_step"] * 1.5).all() and (step["matmul_share"] > 0).all()
    shares = step.filter(like="_share").sum(axis=1)
    assert ((shares > 0.5) & (shares < 1.5)).all()  # the categories and the rest cover the profiled time
    kernels = step[["matmul_share", "attention_share", "norm_activation_share", "optimizer_share"]].sum(axis=1)
    assert (step["mfu_if_only_kernels"] - step["mfu"] / kernels).abs().max() < 1e-9
    assert (step["mfu_if_only_matmuls"] >= step["mfu_if_only_kernels"]).all()
    rope = pd.read_csv(out / "rope.csv")
    assert rope["ms"].gt(0).all() and rope["vs_rotate_half"].iloc[-1] == 1.0
    assert "Training throughput" in (out / "bench.md").read_text()
    table = _summary(out, "--lengths", "256,1024", "--growth", "256,1024")
    assert table.returncode == 0, table.stderr
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.stdout.splitlines()[2:] if line}
    assert set(rows) == {"rope (reference)", *(n for n in ENCODERS if n != "rope")}
    alibi = forward.set_index(["encoder", "length"]).loc[("alibi", 1024)]
    assert rows["alibi"][5] == f"{alibi['time_vs_rope']:.2f}×" and rows["alibi"][6] == f"{alibi['time_vs_sdpa']:.2f}×"


def _summary(folder, *args):
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_summary.py"), str(folder), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_performance_page_speed_table_is_the_summary_of_the_committed_bench():
    """docs/performance.md's speed table is scripts/bench_summary.py's output for results/bench: a bench rerun
    without it fails."""
    table = _summary(ROOT / "results" / "bench")
    assert table.returncode == 0, table.stderr
    assert table.stdout in (ROOT / "docs" / "performance.md").read_text(), (
        "docs/performance.md's speed table is stale: rerun bench_summary.py"
    )


def test_bench_summary_says_what_is_missing_in_one_line(tmp_path):
    result = _summary(tmp_path)
    assert result.returncode == 2 and "has no training.csv, forward.csv" in result.stderr
    assert "Traceback" not in result.stderr
    result = _summary(ROOT / "results" / "bench", "--lengths", "8192")
    assert result.returncode == 2 and "two lengths each" in result.stderr
    result = _summary(ROOT / "results" / "bench", "--lengths", "8192,65536")
    assert result.returncode == 2 and "not all of [2048, 8192, 32768, 65536]" in result.stderr


def test_bench_rejects_bad_lengths_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--lengths", "512,-1", "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "error: --lengths" in result.stderr
    assert "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--rounds", "0", "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "error: --rounds must be at least 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_runs_a_chosen_section_and_encoders_always_with_rope(tmp_path):
    out = tmp_path / "bench"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench.py"),
            "--quick",
            "--sections",
            "forward",
            "--encoders",
            "alibi",
            "--out",
            str(out),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    forward = pd.read_csv(out / "forward.csv")
    assert sorted(set(forward["encoder"])) == ["alibi", "nope", "rope"] and not (out / "training.csv").exists()
    assert (forward["first_s"] > 0).all()
    at = forward.set_index(["encoder", "length"])
    for reference, suffix in (("rope", "rope"), ("nope", "sdpa")):  # each ratio against its reference's row
        for length in (256, 1024):
            want = at.loc[("alibi", length), "seconds"] / at.loc[(reference, length), "seconds"]
            assert at.loc[("alibi", length), f"time_vs_{suffix}"] == pytest.approx(want)
            want = at.loc[("alibi", length), "rise_mib"] / at.loc[(reference, length), "rise_mib"]
            assert at.loc[("alibi", length), f"rise_vs_{suffix}"] == pytest.approx(want)
    cpu = _bench().cpu_model()  # the bench names the CPU model in its output and its Markdown (issue 38)
    assert f"CPU {cpu}" in (out / "bench.md").read_text() and cpu in re.sub(r"\s+", " ", result.stderr)
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--encoders", "nosuch"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 2 and "unknown encoder 'nosuch'" in bad.stdout + bad.stderr


def test_bench_jobs_section_compares_one_thread_jobs_with_one_job_of_every_thread(tmp_path):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--sections", "jobs", "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = pd.read_csv(out / "jobs.csv")
    assert (
        len(jobs) == 2
        and jobs["setting"].iloc[0].startswith("1 job x")
        and jobs["setting"].iloc[1].endswith("x 1 thread")
    )
    assert (jobs["steps_per_s"] > 0).all() and (jobs["seconds"] > 0).all()
    assert jobs["vs_first"].iloc[1] == jobs["steps_per_s"].iloc[1] / jobs["steps_per_s"].iloc[0]


@pytest.mark.integration
def test_the_ensemble_bench_trains_stacked_seeds_as_they_train_alone(tmp_path):
    """scripts/ensemble_bench.py: K seeds as stacked weights end where each trained alone ends (to rounding), and
    both throughputs are measured."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "ensemble_bench.py"),
            "--members",
            "1,3",
            "--steps",
            "3",
            "--out",
            str(tmp_path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = pd.read_csv(tmp_path / "ensemble_cpu.csv")
    assert list(table["members"]) == [1, 3]
    assert (table[["alone_steps_per_s_per_seed", "stacked_steps_per_s_per_seed"]] > 0).all(axis=None)
    assert (table["max_param_difference"] < 1e-5).all()


@pytest.mark.slow  # a whole script run, minutes on a busy CI core: -m slow
@pytest.mark.integration
def test_the_bounds_script_writes_what_each_kernel_allows(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_bounds.py"), "--length", "256", "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = pd.read_csv(tmp_path / "bounds.csv")
    assert list(table["measure"]) == ["forward 256"] * 5 + ["training 32x128"] * 3 + ["headline step, one thread"]
    assert [name.endswith("(fire)") for name in table["kernel"].iloc[:5]] == [False, False, False, True, True]
    rows = table.iloc[:8]
    assert (rows["floor_vs_rope"] > 0).all() and (rows.loc[[0, 5], "vs_sdpa"] == 1.0).all()
    assert 0 < table["matmul_mfu_bound"].iloc[-1] < 3
    arithmetic = pd.read_csv(tmp_path / "arithmetic.csv")  # the work per score against the machine's limits
    assert list(arithmetic["encoder"]) == ["pope", "fire", "fire_outside", "cope", "pope", "rope"]
    assert (arithmetic["bound_at_machine_limits"] > 0).all() and arithmetic["verdict"].str.len().gt(0).all()
    assert arithmetic["kernel_floor"].iloc[:5].tolist() == [table["floor_vs_rope"][i] for i in (1, 3, 4, 7, 6)]
    assert "## What physics allows" in (tmp_path / "bounds.md").read_text()


def test_peak_memory_is_the_least_of_the_passes_over_every_row():
    """The forward section's memory: per row, the least peak and the least rise of its passes (outside load only
    adds), measured row by row in each pass so that a drift reaches every row alike."""
    from conftest import load_script

    bench = load_script("bench")
    rows = [{"encoder": "rope", "length": 8}, {"encoder": "xpos", "length": 8}]
    readings = iter([(500.0, 30.0), (520.0, 50.0), (490.0, 35.0), (530.0, 40.0), (510.0, 25.0), (525.0, 60.0)])
    order = []
    bench.least_memory(rows, lambda row: order.append(row["encoder"]) or next(readings), 3)
    assert order == ["rope", "xpos"] * 3
    assert (rows[0]["peak_mib"], rows[0]["rise_mib"]) == (490.0, 25.0)
    assert (rows[1]["peak_mib"], rows[1]["rise_mib"]) == (520.0, 40.0)


def _bench():
    from conftest import load_script

    return load_script("bench")


def _forward_args(out: Path, **given) -> argparse.Namespace:
    defaults = {"lengths": [16], "encoders": ["rope", "nope"], "quick": True, "compile": False, "out": out}
    return argparse.Namespace(**{**defaults, **given})


def test_a_failing_forward_row_is_recorded_and_the_rows_so_far_are_written_after_each(tmp_path, monkeypatch):
    """One encoder failing at one length (out of memory) is a row with its error, and the others are
    measured; forward.csv holds every row measured so far before the next begins, so that a bench stopped at a
    time limit keeps them."""
    bench = _bench()
    real, written = bench.forward_fn, []

    def forward_fn(name, length, device, autocast, compiled=False):
        table = tmp_path / "forward.csv"
        written.append(len(pd.read_csv(table)) if table.is_file() else 0)
        if name == "alibi" and length == 32:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB\nmore")
        return real(name, length, device, autocast, compiled)

    monkeypatch.setattr(bench, "forward_fn", forward_fn)
    args = _forward_args(tmp_path, encoders=["rope", "alibi", "nope"], lengths=[16, 32])
    table = bench.forward_section(args, torch.device("cpu"), None).set_index(["encoder", "length"])
    assert written[:6] == [0, 1, 2, 3, 4, 5]  # then the memory pass over the five rows measured
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 GiB"  # its first line only
    assert table.loc[("alibi", 32), "error"] == oom
    assert pd.isna(table.loc[("alibi", 32), "seconds"]) and pd.isna(table.loc[("alibi", 32), "time_vs_rope"])
    measured = table.drop(("alibi", 32))
    assert (measured["error"] == "").all()
    assert (measured["seconds"] > 0).all() and (measured["peak_mib"] > 0).all()
    assert len(pd.read_csv(tmp_path / "forward.csv")) == 6


def test_on_cuda_each_forward_row_has_one_memory_pass_right_after_its_timing(tmp_path, monkeypatch):
    """CUDA's allocator statistics do not move with the machine's load: one pass a row, no passes after."""
    bench = _bench()
    calls = []
    monkeypatch.setattr(
        bench,
        "forward_fn",
        lambda name, length, device, autocast, compiled=False: (
            calls.append(f"build {name} compiled={compiled}") or (lambda: None)
        ),
    )
    monkeypatch.setattr(bench, "first_and_best_time", lambda fn, device, repeats: calls.append("time") or (2.0, 1.0))
    monkeypatch.setattr(bench, "peak_memory", lambda fn, device: calls.append("memory") or (100.0, 40.0))
    monkeypatch.setattr(bench, "least_memory", lambda *args: calls.append("passes"))
    table = bench.forward_section(_forward_args(tmp_path, compile=True), torch.device("cuda"), torch.bfloat16)
    per_row = [(f"build {name} compiled=True", "time", "memory") for name in ("rope", "nope")]
    assert calls == [call for row in per_row for call in row]
    assert table["peak_mib"].tolist() == [100.0, 100.0] and table["peak_vs_sdpa"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compile_applies_to_every_model_the_training_section_measures(device, monkeypatch):
    """``--compile``: the HF Llama and every posenc model are compiled alike (no row compares a compiled model
    with an eager one); on CUDA every model's AdamW is fused, so no separate fused row."""
    bench = _bench()
    compiled = {}
    monkeypatch.setattr(bench, "matmul_flops", lambda *args: 1e9)
    monkeypatch.setattr(bench, "llama_reference", lambda *args: torch.nn.Linear(4, 4))
    monkeypatch.setattr(bench, "posenc_model", lambda *args, **kwargs: torch.nn.Linear(4, 4))

    def tokens_per_s(model, *args, compiled=False, fused=None):
        calls.append(compiled)
        return 1000.0

    monkeypatch.setattr(bench, "training_tokens_per_s", tokens_per_s)
    for flag in (True, False):
        calls = []
        args = argparse.Namespace(
            no_reference=False,
            encoders=["rope", "nope"],
            quick=False,
            compile=flag,
            rounds=2,
            batch=2,
            length=8,
            steps=1,
        )
        compiled[flag] = (list(bench.training_section(args, torch.device(device), None)["model"]), calls)
    models, calls = compiled[True]
    assert all(calls) and len(calls) == 2 * len(models) and "llama (HF transformers, sdpa)" in models
    assert not any("torch.compile" in m for m in models)
    models, calls = compiled[False]
    assert calls.count(True) == 2 and models[-1] == "posenc rope, torch.compile"  # the one compiled row
    assert any("fused AdamW" in m for m in models) == (device == "cpu")


def test_the_bench_adamw_is_the_fused_kernel_on_cuda():
    bench = _bench()
    model = torch.nn.Linear(2, 2)
    assert bench.adamw(model, torch.device("cuda")).defaults["fused"] is True
    assert not bench.adamw(model, torch.device("cpu")).defaults["fused"]
    assert bench.adamw(model, torch.device("cuda"), fused=False).defaults["fused"] is False


def test_the_bench_names_the_cpu_model_and_the_gpu(monkeypatch):
    """From /proc/cpuinfo's "model name"; where it names none (ARM), lscpu's "Model name"; the GPU on CUDA."""
    bench = _bench()
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    named = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    assert bench.cpu_model() == (named[0] if named else bench.cpu_model()) and bench.cpu_model()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H200")
    assert re.match(r"GPU NVIDIA H200; CPU .+, \d+ threads; torch ", bench.machine(torch.device("cuda")))
    assert bench.machine(torch.device("cpu")).startswith(f"CPU {bench.cpu_model()}, ")
    no_model_name = types.SimpleNamespace(read_text=lambda: "processor\t: 0\n")  # as on ARM
    monkeypatch.setattr(bench, "Path", lambda path: no_model_name)
    monkeypatch.setattr(
        bench.subprocess,
        "run",
        lambda *args, **kwargs: types.SimpleNamespace(stdout="Architecture:  aarch64\nModel name:    Neoverse-V2\n"),
    )
    assert bench.cpu_model() == "Neoverse-V2"


def test_the_console_tables_never_cut_a_value_of_a_wide_table(capsys):
    """Wider than any terminal (30 columns), piped: every header and value is printed whole, none squeezed."""
    from conftest import load_script

    bench = load_script("bench")
    table = pd.DataFrame({f"column_{i:02d}_tokens_per_second": [123456.789 + i, 0.000123] for i in range(30)})
    bench.show("wide", table)
    out = capsys.readouterr().out
    assert "…" not in out
    for i in range(30):
        assert f"column_{i:02d}_tokens_per_second" in out
        assert f"{123456.789 + i:,.3g}" in out
    assert "0.000123" in out
