"""Result writes touch only what they write (issue 27): posenc's tables, figures and reports land file by
file in `--out`, never by copying or swapping the folder, so a training run writing under `<out>/runs/`,
a user's notes and other commands' output in the same folder are left exactly as they are; and an `--out`
that would put results where they do not belong is refused in one line before anything is written."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from fake_results import fake_run, results_of
from typer.testing import CliRunner

from posenc import files
from posenc.analysis.folders import updating
from posenc.analysis.pipeline import compare_into, regenerate, store_into
from posenc.cli.app import app

runner = CliRunner()


def _sweep(lengths=(64, 128), encoders=("rope", "alibi")):
    return results_of(*(fake_run(e, {n: [1.0, 0.0, 1.0] for n in lengths}, seed=s) for e in encoders for s in (0, 1)))


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: (kind, inode, mtime, content or link target), directories included."""
    entries = {}
    for path in sorted(Path(root).rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            entries[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif path.is_dir():
            entries[str(path.relative_to(root))] = ("dir", st.st_ino, st.st_mtime_ns)
        else:
            entries[str(path.relative_to(root))] = ("file", st.st_ino, st.st_mtime_ns, path.read_bytes())
    return entries


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_a_training_run_under_out_loses_nothing_while_results_are_written(tmp_path):
    """A fake training keeps appending to its train.log (one open handle, as logging does) and rewriting its
    checkpoint, metrics and history under <out>/runs/ while extrapolate- and compare-style writes go into
    <out> again and again: every line and every file of the training is there at the end."""
    out = tmp_path / "results"
    run = out / "runs" / "copy" / "rope" / "seed0"
    run.mkdir(parents=True)
    files.atomic_write_text(run / files.CONFIG_FILE, "encoder: rope\n")
    files.atomic_write_text(run / files.OVERRIDES_FILE, "[]\n")
    stop = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def train():
        try:
            with open(run / files.LOG_FILE, "a") as log:
                step = 0
                while not stop.is_set() or step < 50:
                    log.write(f"step {step}\n")
                    log.flush()
                    written.append(step)
                    if step % 5 == 0:
                        files.atomic_write(run / files.CHECKPOINT_FILE, lambda f, s=step: f.write(b"ckpt %d" % s))
                        files.atomic_write_text(run / files.HISTORY_FILE, f"step\n{step}\n")
                    step += 1
                    time.sleep(0.002)
                files.write_json(run / files.METRICS_FILE, {"step": step})
                files.atomic_write(run / files.CHECKPOINT_FILE, lambda f: f.write(b"ckpt final %d" % step))
        except BaseException as err:  # noqa: BLE001 - the assertion below names it
            errors.append(err)

    trainer = threading.Thread(target=train)
    trainer.start()
    try:
        results = _sweep((64,))
        ids = set(results.evaluations["run_id"])
        for i in range(8):
            store_into(out, _sweep((64, 128 + i)))
            with updating(out) as stage:
                files.atomic_write_text(stage / "training.csv", f"round {i}\n")
        compare_into(out, results, ids, None, "posenc compare")
    finally:
        stop.set()
        trainer.join(timeout=60)
    assert not errors, errors
    steps = written[-1] + 1
    log = (run / files.LOG_FILE).read_text().splitlines()
    assert log == [f"step {s}" for s in range(steps)], f"train.log holds {len(log)} of {steps} lines"
    assert (run / files.METRICS_FILE).is_file() and (run / files.HISTORY_FILE).is_file()
    assert (run / files.CHECKPOINT_FILE).read_bytes() == b"ckpt final %d" % steps
    assert (run / files.CONFIG_FILE).read_text() == "encoder: rope\n"
    assert (out / "comparison.parquet").is_file() and (out / "training.csv").read_text() == "round 7\n"


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_files_posenc_did_not_write_are_left_exactly_as_they_were(tmp_path):
    """A user's notes, another experiment's report folder and a run keep their inode, content and mtime
    through compare, extrapolate and report writes into the folder holding them; the folder itself stays."""
    out = tmp_path / "results"
    for name, data in [
        ("notes.txt", "mine"),
        (".hidden", "dot"),
        ("headline/report.md", "committed report"),
        ("headline/comparison.parquet", "committed table"),
        ("runs/copy/rope/seed0/checkpoint.pt", "weights"),
        ("runs/copy/rope/seed0/train.log", "log"),
    ]:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(data)
    old = 1_000_000_000 * 10**9
    for path in out.rglob("*"):
        os.utime(path, ns=(old, old))  # an mtime no write of now could give it back
    before = tree(out)
    folder = out.stat().st_ino
    results = _sweep()
    compare_into(out, results, set(results.evaluations["run_id"]), None, "posenc compare")
    store_into(out, _sweep((64, 256)))
    regenerate(out, "posenc report")
    after = tree(out)
    mine = {k: v for k, v in after.items() if k in before and v[0] == "file"}
    assert mine == {k: v for k, v in before.items() if v[0] == "file"}
    assert {k: v for k, v in after.items() if k.startswith(("headline", "runs"))} == {
        k: v for k, v in before.items() if k.startswith(("headline", "runs"))
    }
    assert out.stat().st_ino == folder  # written into, not replaced
    new = set(after) - set(before)
    assert {"comparison.parquet", "report.md", "extrapolation.parquet"} <= new
    assert not [n for n in new if n.startswith(".")], new  # no staging or commit record left behind


def test_two_writers_into_one_folder_both_land(tmp_path):
    """Two extrapolate-style writes of different runs into one --out at once: both sets of rows are there."""
    out = tmp_path / "tables"
    parts = [_sweep((64,), ("rope",)), _sweep((64,), ("alibi",))]
    errors = []

    def write(part):
        try:
            for _ in range(3):
                store_into(out, part)
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=write, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    import pandas as pd

    table = pd.read_parquet(out / "extrapolation.parquet")
    assert sorted(set(table["encoder"])) == ["alibi", "rope"] and len(table) == 4


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_a_comparison_without_choose_removes_only_the_stale_choices(tmp_path):
    """The one thing a write removes: choices.* of an earlier --choose into the same folder."""
    out = tmp_path / "cmp"
    results = _sweep()
    ids = set(results.evaluations["run_id"])
    compare_into(out, results, ids, None, "posenc compare")
    for name in ("choices.csv", "choices.md", "choices.parquet"):  # as an earlier --choose left them
        (out / name).write_text("an earlier choice")
    (out / "choices-notes.txt").write_text("mine")
    compare_into(out, results, ids, None, "posenc compare")
    assert not list(out.glob("choices.*")) and (out / "choices-notes.txt").read_text() == "mine"


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_a_symlinked_out_is_written_through_and_stays_a_link(tmp_path):
    target = tmp_path / "real-tables"
    link = tmp_path / "tables"
    results = _sweep()
    compare_into(target, results, set(results.evaluations["run_id"]), None, "posenc compare")
    link.symlink_to(target)
    result = runner.invoke(app, ["report", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert (target / "report.md").is_file() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tables")]


@pytest.mark.integration  # end to end: a whole comparison written, every figure drawn (seconds)
def test_report_in_the_working_directory_leaves_the_shell_in_it(tmp_path, monkeypatch):
    """`cd tables && posenc report .`: the folder is written into, so the shell's working directory remains."""
    out = tmp_path / "tables"
    results = _sweep()
    compare_into(out, results, set(results.evaluations["run_id"]), None, "posenc compare")
    (out / "notes.txt").write_text("mine")
    monkeypatch.chdir(out)
    inode = os.stat(".").st_ino
    result = runner.invoke(app, ["report", "."])
    assert result.exit_code == 0, result.output
    assert os.stat(".").st_ino == inode and os.path.samefile(os.getcwd(), out)
    assert (out / "notes.txt").read_text() == "mine"


def test_a_bare_kernels_leaves_the_committed_kernels_alone(tmp_path, monkeypatch):
    """`posenc kernels` without --out writes results/kernels-latest, never the committed results/kernels."""
    committed = tmp_path / "results" / "kernels"
    committed.mkdir(parents=True)
    for name in ("kernels.parquet", "kernels_summary.md", "rotary.png"):
        (committed / name).write_text(f"committed {name}")
    before = tree(tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["kernels", "--encoders", "rope", "--max-distance", "8", "--rope-scaling", "none"])
    assert result.exit_code == 0, result.output
    after = tree(tmp_path / "results")
    assert {k: v for k, v in after.items() if k.startswith("kernels/") or k == "kernels"} == before
    assert (tmp_path / "results" / "kernels-latest" / "kernels.parquet").is_file()


# --- --out kinds refused in one line, exit 2, nothing written ---------------------------------------------

KINDS = ["empty", "working directory", "git repository root", "run folder", "started run folder", "dangling symlink"]
WHY = {
    "empty": "working directory",
    "working directory": "working directory",
    "git repository root": "git repository",
    "run folder": "run folder",
    "started run folder": "run folder",
    "dangling symlink": "symlink",
}
COMMANDS = ["extrapolate", "compare", "kernels", "runs", "report"]


@pytest.fixture(scope="module")
def comparison_tables(tmp_path_factory) -> dict[str, bytes]:
    """The tables `posenc report` regenerates from (a comparison's Parquet files)."""
    out = tmp_path_factory.mktemp("comparison")
    results = _sweep()
    compare_into(out, results, set(results.evaluations["run_id"]), None, "posenc compare")
    return {p.name: p.read_bytes() for p in out.glob("*.parquet")}


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    ws = tmp_path / "ws"
    (ws / "work").mkdir(parents=True)
    (ws / "work" / "notes.txt").write_text("cwd")
    (ws / "repo" / ".git").mkdir(parents=True)
    (ws / "repo" / "README.md").write_text("repo")
    (ws / "run").mkdir()
    (ws / "run" / files.CHECKPOINT_FILE).write_bytes(b"weights")
    (ws / "run" / files.METRICS_FILE).write_text("{}")
    (ws / "started").mkdir()  # a run killed before its first checkpoint
    for name in (files.CONFIG_FILE, files.OVERRIDES_FILE, files.LOG_FILE):
        (ws / "started" / name).write_text("x")
    (ws / "runs" / "r").mkdir(parents=True)
    (ws / "runs" / "r" / files.CHECKPOINT_FILE).write_bytes(b"weights")
    (ws / "runs" / "r" / files.METRICS_FILE).write_text("{}")
    (ws / "dangling").symlink_to(ws / "missing")
    monkeypatch.chdir(ws / "work")
    return ws


def _target(ws: Path, kind: str) -> str:
    return {
        "empty": "",
        "working directory": ".",
        "git repository root": str(ws / "repo"),
        "run folder": str(ws / "run"),
        "started run folder": str(ws / "started"),
        "dangling symlink": str(ws / "dangling"),
    }[kind]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", KINDS)
def test_an_out_that_is_no_result_folder_is_refused_in_one_line(workspace, comparison_tables, command, kind):
    if command == "report" and kind in ("empty", "working directory"):
        pytest.skip("report regenerates a comparison where it is: see test_report_in_the_working_directory_...")
    target = _target(workspace, kind)
    why = WHY[kind]
    if command == "report" and kind == "dangling symlink":
        why = "holds no comparison"
    elif command == "report":  # a whole comparison there, so that only the folder's kind refuses
        for name, data in comparison_tables.items():
            (Path(target) / name).write_bytes(data)
    argv = {
        "extrapolate": ["extrapolate", "--runs", str(workspace / "runs"), "--lengths", "16", "--out", target],
        "compare": ["compare", "--runs", str(workspace / "runs"), "--lengths", "16", "--out", target],
        "kernels": ["kernels", "--encoders", "rope", "--max-distance", "8", "--out", target],
        "runs": ["runs", "--runs", str(workspace / "runs"), "--out", target],
        "report": ["report", target],
    }[command]
    before = tree(workspace)
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.stderr, result.stderr
    assert why in lines[0], lines[0]
    shown = target or "."
    assert shown in lines[0] or str(Path(shown).resolve()) in lines[0], lines[0]
    assert tree(workspace) == before
