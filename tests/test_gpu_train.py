"""scripts/gpu_train.py (docs/gpu.md, "Training issue 39's runs after the check"): what comes back from the device
goes into the run folders here by fixed rules (a run finished here is never overwritten, an unfinished one only by
a run further along, a foreign or garbled pack is refused in one line, nothing is written while another process
trains the sweep here), the pack keeps within the device tool's limits, and the CPU dry run trains, packs and
unpacks tiny runs."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
gpu_train = load_script("gpu_train")
SWEEP = "results/multirun/kazemnejad_matched"


def _run(folder: Path, step: int, finished: bool, steps: int = 1000, device: str = "cuda", lr: float = 3e-3) -> Path:
    """A stand-in run folder as `posenc train` leaves it: config, checkpoint at ``step``, metrics if finished."""
    config = {"encoder": {"name": "rope"}, "train": {"steps": steps, "lr": lr, "precision": "fp32"}, "seed": 0}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({**config, "device": device}))
    torch.save({"config": {**config, "device": device}, "step": step, "optimizer": {}}, folder / "checkpoint.pt")
    (folder / "train.log").write_text(
        f"training rope on copy (length 43), {steps} steps, device {device} -> {folder}\n"
    )
    if finished:
        (folder / "metrics.json").write_text(json.dumps({"steps": step, "learned": True}) + "\n")
    return folder


def _pack(tmp_path: Path, runs: dict[str, tuple[int, bool]], name: str = "out") -> Path:
    """A pack of stand-in runs ``{path below the sweep: (step, finished)}``, as `gpu_train.py train` writes it."""
    trained, logs, out = tmp_path / f"{name}-train", tmp_path / f"{name}-logs", tmp_path / name
    logs.mkdir(parents=True)
    for path, (step, finished) in runs.items():
        _run(trained / SWEEP / path, step, finished)
    report = {"format": gpu_train.FORMAT, "device": "cuda", "gpu": "NVIDIA H200"}
    gpu_train.pack(gpu_train.collect(trained, "NVIDIA H200", "cuda"), out, report, logs)
    return out


def _step(folder: Path) -> int:
    return torch.load(folder / "checkpoint.pt", weights_only=True)["step"]


def test_a_run_finished_here_is_never_overwritten(tmp_path):
    pack = _pack(tmp_path, {"copy/rope/seed3": (900, True), "copy/rope/seed4": (4000, True)})
    here = tmp_path / "checkout"
    _run(here / SWEEP / "copy/rope/seed3", 500, finished=True, device="cpu")
    before = {f.name: f.read_bytes() for f in (here / SWEEP / "copy/rope/seed3").iterdir()}
    lines = gpu_train.unpack(pack, here)
    assert {f.name: f.read_bytes() for f in (here / SWEEP / "copy/rope/seed3").iterdir()} == before
    assert any(line.startswith("kept") and "seed3: finished here" in line for line in lines)
    # the other run was not here: written, with where it was trained
    written = here / SWEEP / "copy/rope/seed4"
    assert _step(written) == 4000 and (written / "metrics.json").is_file()
    assert json.loads((written / gpu_train.PROVENANCE).read_text())["gpu"] == "NVIDIA H200"
    assert not list(here.glob(".gpu-unpack-*"))  # the scratch folder is gone


def test_an_unfinished_run_is_replaced_only_by_one_further_along(tmp_path):
    runs = {"copy/t5/seed5": (700, False), "copy/t5/seed6": (300, False), "copy/t5/seed7": (900, True)}
    pack = _pack(tmp_path, runs)
    here = tmp_path / "checkout"
    for seed in (5, 6, 7):
        _run(here / SWEEP / f"copy/t5/seed{seed}", 500, finished=False, device="cpu")
    lines = gpu_train.unpack(pack, here)
    assert _step(here / SWEEP / "copy/t5/seed5") == 700  # a later step: replaced
    assert _step(here / SWEEP / "copy/t5/seed6") == 500  # an earlier one: kept
    assert _step(here / SWEEP / "copy/t5/seed7") == 900  # finished on the device: replaced
    assert (here / SWEEP / "copy/t5/seed7/metrics.json").is_file()
    assert json.loads((here / SWEEP / "copy/t5/seed5" / gpu_train.PROVENANCE).read_text())["replaced_step_here"] == 500
    assert not (here / SWEEP / "copy/t5/seed6" / gpu_train.PROVENANCE).exists()
    assert sum(line.startswith("written") for line in lines) == 2
    # another configuration in the folder (another lr) is never replaced, however far the pack's run is
    other = tmp_path / "other"
    _run(other / SWEEP / "copy/t5/seed5", 100, finished=False, lr=1e-3)
    assert any("different configuration" in line for line in gpu_train.unpack(pack, other))
    assert _step(other / SWEEP / "copy/t5/seed5") == 100


def test_a_foreign_or_garbled_pack_is_refused_in_one_line(tmp_path, capsys):
    here = tmp_path / "checkout"
    here.mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "summary.md").write_text("what gpu_check returns\n")
    assert gpu_train.main(["unpack", str(tmp_path / "foreign"), "--into", str(here)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a gpu_train pack" in err
    pack = _pack(tmp_path, {"copy/rope/seed3": (900, True)})
    manifest = json.loads((pack / gpu_train.MANIFEST).read_text())
    (pack / gpu_train.MANIFEST).write_text(json.dumps({**manifest, "format": "something else"}))
    with pytest.raises(gpu_train.Refused, match="not a gpu_train pack"):
        gpu_train.unpack(pack, here)
    escaping = {**manifest, "packed": [{**manifest["packed"][0], "path": "../elsewhere/copy/rope/seed3"}]}
    (pack / gpu_train.MANIFEST).write_text(json.dumps(escaping))
    with pytest.raises(gpu_train.Refused, match="not below results/multirun"):
        gpu_train.unpack(pack, here)
    (pack / gpu_train.MANIFEST).write_text(json.dumps(manifest))
    shard = pack / manifest["packed"][0]["shard"]
    with tarfile.open(shard) as tar:
        at = next(m.offset_data for m in tar.getmembers() if m.name.endswith("checkpoint.pt"))
    data = bytearray(shard.read_bytes())
    data[at + 10] ^= 0xFF  # a byte of the checkpoint's data
    shard.write_bytes(bytes(data))
    with pytest.raises(gpu_train.Refused, match="differs from its sha256"):
        gpu_train.unpack(pack, here)
    assert not (here / "results").exists() and not list(here.glob(".gpu-unpack-*"))  # nothing written


def test_the_pack_keeps_to_the_tools_limits_finished_runs_first(tmp_path, monkeypatch):
    runs = {f"copy/nope/seed{i}": (100 * i, i % 2 == 0) for i in range(8)}  # finished: 0, 2, 4, 6
    one = gpu_train._tar_size(list((_run(tmp_path / "probe", 1, True)).iterdir()))
    monkeypatch.setattr(gpu_train, "SHARD_BYTES", 2 * one + 20 * 512)  # two runs a shard
    monkeypatch.setattr(gpu_train, "TOTAL_BYTES", gpu_train.KEEP_FREE + 6 * 20 * 512 + 5 * one + 100)
    pack = _pack(tmp_path, runs)
    manifest = json.loads((pack / gpu_train.MANIFEST).read_text())
    packed = [(r["path"].rsplit("/", 1)[1], r["finished"]) for r in manifest["packed"]]
    # the four finished, then the furthest unfinished (seed7); seeds 5, 3, 1 had no room
    assert packed[:4] == [(f"seed{i}", True) for i in (0, 2, 4, 6)] and packed[4:] == [("seed7", False)]
    assert [r["path"].rsplit("/", 1)[1] for r in manifest["left_out"]] == ["seed5", "seed3", "seed1"]
    files = list(pack.iterdir())
    assert len(files) <= 8 and sum(f.stat().st_size for f in files) <= gpu_train.TOTAL_BYTES
    assert all(f.stat().st_size <= gpu_train.SHARD_BYTES for f in files if f.suffix == ".tar")
    assert all(set(f.name) <= set("abcdefghijklmnopqrstuvwxyz0123456789._-") for f in files)
    lines = gpu_train.unpack(pack, tmp_path / "checkout")
    assert sum(line.startswith("absent") for line in lines) == 3


def test_the_device_call_is_the_one_the_docs_give():
    docs = (ROOT / "docs" / "gpu.md").read_text()
    section = docs.split("## Training issue 39's runs after the check")[1].split("\n## ")[0]
    for text in (section, gpu_train.__doc__):
        assert gpu_train.DEVICE_COMMAND in text
        assert f'carry:     ["{gpu_train.CARRY[0]}"]' in text and f"timeout_s: {gpu_train.TIMEOUT_S}" in text
    assert len(gpu_train.DEVICE_COMMAND) <= 2000 and len(gpu_train.CARRY) <= 8
    assert gpu_train.BUDGET + 20 <= gpu_train.TIMEOUT_S <= 600  # it packs and returns inside the call
    assert gpu_train.SHARDS + 2 <= 8 and gpu_train.SHARD_BYTES <= 16 * 2**20


@pytest.mark.integration  # it starts a process
def test_nothing_is_unpacked_while_a_process_here_writes_the_sweep(tmp_path):
    pack = _pack(tmp_path, {"copy/rope/seed3": (900, True)})
    here = tmp_path / "checkout"
    (here / SWEEP).mkdir(parents=True)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"hydra.sweep.dir={SWEEP}"], cwd=here
    )
    try:
        time.sleep(0.5)
        with pytest.raises(gpu_train.Refused, match="stop it first"):
            gpu_train.unpack(pack, here)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not (here / SWEEP / "copy").exists()
    assert any(line.startswith("written") for line in gpu_train.unpack(pack, here))


TINY = (
    "experiment=kazemnejad_matched hydra.sweep.dir=results/multirun/kazemnejad_matched model.d_model=16 "
    "model.n_heads=2 model.n_layers=1 model.d_mlp=32 train.batch_size=4 train.eval_sequences=4 "
    "train.check_sequences=8 train.check_every=0"
)


@pytest.mark.slow  # a whole script run, minutes on a busy CI core: -m slow
@pytest.mark.integration  # it trains three tiny runs in subprocesses: about a minute on an idle 2-core CPU
def test_the_cpu_dry_run_trains_packs_and_unpacks(tmp_path):
    """Two tiny runs finish, a third is stopped at the deadline (it checkpoints); the pack holds all three with
    the device that trained them, and they unpack into run folders that posenc resumes or skips."""
    from posenc.running.checkpoint import load_training_state

    runs = tmp_path / "gpu_runs.txt"
    runs.write_text(
        f"{TINY} seed=0 task=copy encoder=rope train.steps=20\n# a comment\n"
        f"{TINY} seed=0 task=reverse encoder=nope train.steps=20\n"
        f"{TINY} seed=1 task=copy encoder=alibi train.steps=1000000\n"
    )
    out = tmp_path / "out"
    command = [sys.executable, "scripts/gpu_train.py", "train", "--dry-run", "--runs", str(runs), "--out", str(out)]
    result = subprocess.run(
        [*command, "--work", str(tmp_path / "work"), "--budget", "90"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    files = sorted(f.name for f in out.iterdir())
    assert files == ["logs.tar.gz", "manifest.json", "runs-1.tar"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dry_run"] and manifest["refused"] == {} and manifest["left_out"] == []
    assert [r["finished"] for r in manifest["packed"]] == [True, True, False]
    assert all(r["device"] == ["cpu"] and r["precision"] == "fp32" for r in manifest["packed"])
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert "logs/runs/throughput.json" in tar.getnames()
    here = tmp_path / "checkout"
    lines = gpu_train.unpack(out, here)
    assert sum(line.startswith("written") for line in lines) == 3
    unfinished = here / manifest["packed"][2]["path"]
    state = load_training_state(unfinished / "checkpoint.pt", yaml.safe_load((unfinished / "config.yaml").read_text()))
    assert state["step"] == manifest["packed"][2]["step"] > 0  # posenc resumes it from there
    assert all((here / r["path"] / "metrics.json").is_file() for r in manifest["packed"][:2])
