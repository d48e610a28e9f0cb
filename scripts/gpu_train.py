#!/usr/bin/env python3
"""Train pending sweep runs on a lent GPU in the call after the prepared check, and unpack them here.

After scripts/gpu_check.py a session has about 4-5 minutes of device time left on the warm machine; this spends
them on issue 39's pending runs (docs/gpu.md, "Training issue 39's runs after the check"):

  1. here:   LIST=1 bash scripts/kazemnejad.sh > gpu_runs.txt    # one line of overrides per unfinished run
             (untracked and not ignored, so it travels; lists of several experiments may be concatenated)
  2. device: the device tool's ``run`` with
       command:   PYTHONUNBUFFERED=1 python3 scripts/gpu_train.py train --runs gpu_runs.txt --out "$OUT"
       carry:     [".gpu-wheels"]
       timeout_s: 270
  3. here:   python scripts/gpu_train.py unpack FILES_AT     # FILES_AT: the folder the reply names
             bash scripts/kazemnejad.sh                      # tabulates and evaluates (skips finished runs)

``train`` (on the device): installs posenc exactly as the check's setup step does (gpu_check.Check, imported),
refuses runs that would not train in fp32 (``posenc train --cfg job`` of each experiment's first line), starts
CUDA MPS, and trains the runs with ``device=cuda`` via scripts/train_parallel.py, JOBS at once, in the list's
order, until a deadline that leaves RESERVE seconds of ``--budget`` for stopping and packing; unfinished runs are
sent SIGTERM and save a checkpoint. Then it packs, within the device tool's return limits (8 files, 16 MiB each,
64 MiB in all): ``manifest.json`` (every run: its folder, finished or not, step, device, GPU, precision, the
sha256 of each file; the runs left out and why), ``logs.tar.gz`` and up to six ``runs-N.tar`` holding whole run
folders exactly as posenc wrote them (checkpoint with its AdamW state, which ``posenc train`` needs to resume or
to recognise a finished run). Finished runs first, in the list's order; then unfinished ones, furthest first,
while they fit; what does not fit is named in the manifest and trains again later.

``unpack`` (here): checks the pack (format, every file's sha256; a foreign or garbled pack is refused in one line),
refuses while a process writes the same sweep here (a ``posenc`` process naming its folder, or a script such as
scripts/kazemnejad.sh that names it, running in this checkout: stop it first), and copies each run into its
folder under ``--into`` (default: this checkout), holding posenc's run-folder lock: a run finished here is never
overwritten; an unfinished one is replaced only by a pack run further along (finished, or a later step) of the
same configuration. Each run written gets ``device.json`` (where its steps were trained).

CPU dry run: ``train --dry-run`` does the same in this environment on the CPU (nothing installed, no MPS,
``device=cpu``, JOBS 2); tests/test_gpu_train.py runs it on tiny runs, then unpacks what it packed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEVICE_COMMAND = 'PYTHONUNBUFFERED=1 python3 scripts/gpu_train.py train --runs gpu_runs.txt --out "$OUT"'
CARRY = [".gpu-wheels"]
TIMEOUT_S = 270
BUDGET = 245  # seconds from start to packed results: TIMEOUT_S less 25 s for the interpreter and the transfers
RESERVE = 35  # of the budget, kept after the training deadline: SIGTERM, checkpoints (20 s at most), packing
JOBS = 14  # runs at once: the H200 ran 14 under MPS at 11.3x and 13.1x one run (results/gpu/*/mps.csv)
FORMAT = "posenc-gpu-train/1"
MANIFEST = "manifest.json"
LOGS = "logs.tar.gz"
# The device tool returns at most 8 files, 16 MiB each, 64 MiB together: the manifest, the logs, six shards.
SHARDS, SHARD_BYTES, TOTAL_BYTES = 6, 16 * 2**20, 64 * 2**20
KEEP_FREE = 2**20  # of TOTAL_BYTES, for the manifest and the logs
TAR_BLOCK = 512
PROVENANCE = "device.json"  # written into each unpacked run folder: where its steps were trained
RUN_FILES = ("config.yaml", "overrides.yaml", "checkpoint.pt", "metrics.json", "history.csv", "mastery.pt", "train.log")
DEVICE_LINE = re.compile(r"\bdevice (\w+) -> ")


class Refused(Exception):
    """A pack, or an unpack here, refused in one line."""


def _gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)
    spec.loader.exec_module(module)
    return module


def read_lines(path: Path) -> list[list[str]]:
    """The runs of a list file, each a list of overrides (blank lines and ``#`` comments skipped)."""
    runs = [shlex.split(line.split("#", 1)[0]) for line in Path(path).read_text().splitlines()]
    return [r for r in runs if r]


# --- on the device ------------------------------------------------------------------------------------------
def fp32_refusals(check, runs: list[list[str]], seconds: float) -> dict[str, str]:
    """``{experiment: why}`` for each experiment of ``runs`` whose first run would not train in fp32 (its
    composed ``train.precision``): GPU runs must share the CPU runs' arithmetic, and ``auto`` is bf16 on CUDA."""
    import yaml

    refused, first = {}, {}
    for overrides in runs:
        first.setdefault(_experiment(overrides), overrides)
    for experiment, overrides in first.items():
        log = check.logs / "compose.log"
        command = [check.posenc, "train", "--cfg", "job", *overrides]
        try:
            out = subprocess.run(command, env=check.env, capture_output=True, text=True, timeout=seconds, check=False)
        except subprocess.TimeoutExpired:
            refused[experiment] = f"composing its config took over {seconds:.0f} s"
            continue
        with log.open("a") as f:
            f.write(f"$ {shlex.join(command)}\n{out.stdout}{out.stderr}\n")
        try:
            precision = (yaml.safe_load(out.stdout) or {}).get("train", {}).get("precision")
        except yaml.YAMLError:
            precision = None
        if out.returncode != 0 or precision != "fp32":
            refused[experiment] = f"train.precision is {precision!r}, not fp32 (logs/compose.log)"
    return refused


def _experiment(overrides: list[str]) -> str:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "")


def gpu_name(dry: bool) -> str:
    if dry or not shutil.which("nvidia-smi"):
        return "cpu (dry run)" if dry else "unknown (no nvidia-smi)"
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"


def train_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_train.py train", description="train the listed runs, then pack")
    parser.add_argument("--runs", required=True, help="the run list: one line of overrides per run")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="where the pack goes (device: $OUT)")
    parser.add_argument("--budget", type=float, default=BUDGET, help=f"seconds in all (default {BUDGET})")
    parser.add_argument("--jobs", type=int, help=f"runs at once (default {JOBS}, or cores less two; dry run 2)")
    parser.add_argument("--dry-run", action="store_true", help="the CPU dry run: this environment, device=cpu")
    parser.add_argument("--wheels", default=CARRY[0], help="the carried wheelhouse, relative to the repository")
    parser.add_argument("--work", help="scratch folder (default: a new temporary one)")
    args = parser.parse_args(argv)
    if not args.out:
        parser.error("--out is required (or $OUT)")
    runs = read_lines(Path(args.runs))
    if not runs:
        parser.error(f"{args.runs} lists no runs")
    gpu_check = _gpu_check()
    check = gpu_check.Check(
        argparse.Namespace(dry_run=args.dry_run, out=args.out, work=args.work, wheels=args.wheels, steps=["setup"],
                           budget=args.budget)
    )  # fmt: skip
    jobs = args.jobs or (2 if check.dry else max(2, min(JOBS, (os.cpu_count() or 4) - 2)))
    device = check.device  # cuda; cpu in the dry run
    check.say(f"gpu_train: {len(runs)} runs listed, {jobs} at once on {device}; budget {args.budget:.0f} s")
    check.step("setup")
    report = {"format": FORMAT, "dry_run": check.dry, "device": device, "gpu": gpu_name(check.dry), "jobs": jobs}
    report["setup"] = check.records["setup"]
    trained = check.work / "train"
    trained.mkdir(parents=True, exist_ok=True)
    if check.records["setup"]["status"] == "ok":
        refused = fp32_refusals(check, runs, 60)
        report["refused"] = refused
        runs = [r for r in runs if _experiment(r) not in refused]
        listed = check.work / "runs.txt"
        on = [[*(o for o in r if not o.startswith("device=")), f"device={device}"] for r in runs]  # a neutral key
        listed.write_text("".join(shlex.join(r) + "\n" for r in on))
        env = dict(check.env)
        with gpu_check.cuda_mps(check, env) as (_, note):
            deadline = check.deadline - time.monotonic() - RESERVE
            report.update(mps=note, deadline_s=round(deadline))
            check.say(f"training: {len(runs)} runs, deadline {deadline:.0f} s, {note}")
            command = [check.python, "-P", str(ROOT / "scripts" / "train_parallel.py"), "--jobs", str(jobs),
                       "--deadline", str(max(1.0, deadline)), "--every", "15", "--logs", str(check.logs / "runs"),
                       "--posenc", check.posenc, "--from", str(listed)]  # fmt: skip
            report["train_parallel_exit"] = check.run(command, max(1.0, deadline) + 25, "train.log", trained, env)
    runs_found = collect(trained, report["gpu"], device)
    report["runs_found"] = len(runs_found)
    pack(runs_found, Path(args.out), report, check.logs)
    check.say(f"packed: {len(report['packed'])} runs ({sum(r['finished'] for r in report['packed'])} finished), "
              f"{len(report['left_out'])} left out; {Path(args.out) / MANIFEST}")  # fmt: skip
    return 0 if check.records["setup"]["status"] == "ok" and runs_found else 1


def collect(trained: Path, gpu: str, device: str) -> list[dict]:
    """Every run folder below ``trained`` with a checkpoint: its path there, finished or not, step, precision,
    the devices its log names; finished first in the order of their folders, then the rest furthest first."""
    import yaml

    found = []
    for checkpoint in sorted(trained.rglob("checkpoint.pt")):
        folder = checkpoint.parent
        try:
            step = checkpoint_step(checkpoint)
            config = yaml.safe_load((folder / "config.yaml").read_text())
        except Exception as err:  # noqa: BLE001  a damaged run is named, never packed
            found.append({"path": str(folder.relative_to(trained)), "damaged": f"{type(err).__name__}: {err}"})
            continue
        log = (folder / "train.log").read_text(errors="replace") if (folder / "train.log").is_file() else ""
        found.append(
            {
                "path": folder.relative_to(trained).as_posix(),
                "folder": str(folder),
                "finished": (folder / "metrics.json").is_file(),
                "step": step,
                "steps": config.get("train", {}).get("steps"),
                "precision": config.get("train", {}).get("precision"),
                "device": sorted(set(DEVICE_LINE.findall(log))) or [device],
                "gpu": gpu,
            }
        )
    return sorted(found, key=lambda r: (0, 0) if r.get("finished") else (1, -r.get("step", 0)))  # stable


def _tar_size(files: list[Path]) -> int:
    """What adding ``files`` to a tar costs: a header and the data, padded to whole blocks."""
    return sum(TAR_BLOCK + -(-f.stat().st_size // TAR_BLOCK) * TAR_BLOCK for f in files)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def pack(runs: list[dict], out: Path, report: dict, logs: Path) -> None:
    """Write the pack into ``out``: whole run folders into shards (finished first, then furthest first, each
    into the first shard it fits; one that fits nowhere is left out), the manifest, and the logs."""
    out.mkdir(parents=True, exist_ok=True)
    shards: list[list[dict]] = [[] for _ in range(SHARDS)]
    used = [2 * TAR_BLOCK * 10] * SHARDS  # a tar's end blocks and its record padding
    room = TOTAL_BYTES - KEEP_FREE - sum(used)
    report["packed"], report["left_out"] = [], []
    for run in runs:
        if "damaged" in run:
            report["left_out"].append({**run, "why": "damaged"})
            continue
        folder = Path(run.pop("folder"))
        files = [folder / name for name in RUN_FILES if (folder / name).is_file()]
        size = _tar_size(files)
        shard = next((i for i in range(SHARDS) if used[i] + size <= SHARD_BYTES), None)
        if shard is None or size > room:
            report["left_out"].append({**run, "why": f"no room ({size} bytes) within the tool's return limits"})
            continue
        used[shard] += size
        room -= size
        run["shard"] = f"runs-{shard + 1}.tar"
        run["files"] = {f.name: _sha256(f) for f in files}
        run["_files"] = files
        shards[shard].append(run)
        report["packed"].append(run)
    for i, members in enumerate(shards):
        if members:
            with tarfile.open(out / f"runs-{i + 1}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for run in members:
                    for f in run.pop("_files"):
                        tar.add(f, arcname=f"{run['path']}/{f.name}", recursive=False)
    with tarfile.open(out / LOGS, "w:gz") as tar:
        tar.add(logs, arcname="logs")
    (out / MANIFEST).write_text(json.dumps(report, indent=1, default=str) + "\n")


# --- here -----------------------------------------------------------------------------------------------------
def read_pack(folder: Path) -> dict:
    """The pack's manifest, after checking that every file it names is there with its sha256; else Refused."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise Refused(f"{folder} is not a gpu_train pack: {MANIFEST} unreadable ({type(err).__name__})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise Refused(f"{folder} is not a gpu_train pack of format {FORMAT} ({MANIFEST} says otherwise)")
    for run in manifest.get("packed", []):
        path = str(run.get("path", ""))
        parts = Path(path).parts
        if Path(path).is_absolute() or ".." in parts or parts[:2] != ("results", "multirun") or len(parts) < 4:
            raise Refused(f"{folder}: a run's folder {path!r} is not below results/multirun/ (a garbled pack)")
        if not isinstance(run.get("files"), dict) or "checkpoint.pt" not in run["files"]:
            raise Refused(f"{folder}: run {path} names no checkpoint (a garbled pack)")
    return manifest


def _extract(folder: Path, manifest: dict, into: Path) -> None:
    """Every packed run's files into ``into/<path>``, each checked against its sha256; else Refused."""
    wanted = {f"{r['path']}/{name}": digest for r in manifest["packed"] for name, digest in r["files"].items()}
    for shard in sorted({r["shard"] for r in manifest["packed"]}):
        try:
            with tarfile.open(Path(folder) / shard) as tar:
                for member in tar.getmembers():
                    if member.name not in wanted or not member.isfile():
                        raise Refused(f"{folder}/{shard}: {member.name!r} is not in the manifest (a garbled pack)")
                    tar.extract(member, into, filter="data")
        except (OSError, tarfile.TarError) as err:
            raise Refused(f"{folder}/{shard}: unreadable ({type(err).__name__}: {err})") from None
    for name, digest in wanted.items():
        if not (into / name).is_file() or _sha256(into / name) != digest:
            raise Refused(f"{folder}: {name} is missing or differs from its sha256 in {MANIFEST} (a garbled pack)")


def writers(sweep: Path, me: int | None = None) -> list[str]:
    """Processes here that write into sweep folder ``sweep`` (resolved): a process whose argument names it
    (``hydra.sweep.dir=...``, ``--runs ...``, relative to its working directory), or a shell script that names
    its folder's name (scripts/kazemnejad.sh) running in the checkout that holds it; ``"PID (group PGID): command"``
    each."""
    found, me = [], me or os.getpid()
    repo = sweep.parents[2]  # <checkout>/results/multirun/<sweep>
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) in (me, os.getppid()):
            continue
        try:
            args = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        named = any(sweep.name in a and os.path.realpath(cwd / a.split("=", 1)[-1]) == str(sweep) for a in args if a)
        script = next((a for a in args if a.endswith(".sh")), None)
        if not named and script and os.path.realpath(cwd) == str(repo):
            with contextlib.suppress(OSError):
                named = sweep.name in (cwd / script).read_text(errors="replace")
        if named:
            with contextlib.suppress(OSError):
                found.append(f"{proc.name} (group {os.getpgid(int(proc.name))}): {' '.join(args)[:120]}")
    return found


def checkpoint_step(checkpoint: Path) -> int:
    """The step a run's checkpoint was saved at (raises what torch.load raises on a damaged one)."""
    import torch

    return int(torch.load(checkpoint, map_location="cpu", weights_only=True)["step"])


def _step(checkpoint: Path) -> int | None:
    """:func:`checkpoint_step`, or None for a missing or unreadable checkpoint (replaced only by a finished
    run)."""
    try:
        return checkpoint_step(checkpoint)
    except Exception:  # noqa: BLE001
        return None


def _same_run(a: Path, b: Path) -> str | None:
    """Why run folders ``a`` and ``b`` hold different configurations (posenc's identity), else None."""
    import yaml

    from posenc.analysis.run_folder import config_difference
    from posenc.analysis.store import without_neutral

    try:
        left, right = (yaml.safe_load((f / "config.yaml").read_text()) for f in (a, b))
    except (OSError, yaml.YAMLError) as err:
        return f"config.yaml unreadable ({type(err).__name__})"
    return config_difference(without_neutral(left), without_neutral(right)) or None


def decide(local: Path, packed: Path, run: dict) -> str | None:
    """Why the pack's run stays out of run folder ``local`` (None: it goes in): a run finished here is never
    overwritten; an unfinished one is replaced only by a finished run, or a later step, of the same config."""
    if (local / "metrics.json").exists():
        return "finished here: kept"
    if not (local / "checkpoint.pt").exists():
        return None
    if why := _same_run(local, packed):
        return f"a different configuration here ({why}): kept"
    if run["finished"]:
        return None
    step = _step(local / "checkpoint.pt")
    if step is not None and step >= run["step"]:
        return f"at step {step} here, the pack's at {run['step']}: kept"
    return None


def unpack(folder: Path, into: Path) -> list[str]:
    """Unpack ``folder`` (what the device returned) into the checkout ``into``; a line per run."""
    from posenc import files as run_files
    from posenc.errors import PosencError

    manifest = read_pack(folder)
    into = Path(into).resolve()
    into.mkdir(parents=True, exist_ok=True)
    sweeps = sorted({into.joinpath(*Path(r["path"]).parts[:3]) for r in manifest["packed"]})
    for sweep in sweeps:
        if busy := writers(Path(os.path.realpath(sweep))):
            raise Refused(
                f"{sweep} is being written here by {busy[0]}{' and others' if len(busy) > 1 else ''}: stop it "
                "first (kill -- -GROUP; a sweep script resumes when started again), then unpack again"
            )
    lines = []
    with tempfile.TemporaryDirectory(prefix=".gpu-unpack-", dir=into) as tmp:
        _extract(folder, manifest, Path(tmp))
        for run in manifest["packed"]:
            local, packed = into / run["path"], Path(tmp) / run["path"]
            if why := decide(local, packed, run):
                lines.append(f"kept    {run['path']}: {why}")
                continue
            try:
                with run_files.train_lock(local):
                    before = _step(local / "checkpoint.pt")
                    for name in RUN_FILES:
                        if (packed / name).is_file():
                            os.replace(packed / name, local / name)
                        elif name != "train.log":
                            (local / name).unlink(missing_ok=True)
                    provenance = {k: run.get(k) for k in ("device", "gpu", "step", "finished", "precision")}
                    provenance.update(pack_device=manifest.get("device"), replaced_step_here=before)
                    run_files.write_json(local / PROVENANCE, provenance)
            except PosencError as err:
                lines.append(f"kept    {run['path']}: {err}")
                continue
            state = "finished" if run["finished"] else f"unfinished, step {run['step']}"
            lines.append(f"written {run['path']}: {state}, trained on {', '.join(run['device'])} ({run['gpu']})")
    for run in manifest.get("left_out", []):
        lines.append(f"absent  {run.get('path')}: {run.get('why')} (trains again later)")
    return lines


def unpack_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_train.py unpack", description="unpack a pack into the run folders")
    parser.add_argument("pack", help="the folder the device tool's reply names (files_at)")
    parser.add_argument("--into", default=str(ROOT), help="the checkout whose results/multirun/ gets the runs")
    args = parser.parse_args(argv)
    try:
        lines = unpack(Path(args.pack), Path(args.into))
    except Refused as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    written = sum(line.startswith("written") for line in lines)
    print(f"{written} runs written; now `bash scripts/kazemnejad.sh` tabulates and evaluates them")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"train": train_main, "unpack": unpack_main}
    if not argv or argv[0] not in commands:
        print(__doc__.split("\n\n")[0] + "\n\nusage: gpu_train.py {train,unpack} ... (--help)", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
