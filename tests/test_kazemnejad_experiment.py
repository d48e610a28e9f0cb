"""conf/experiment/kazemnejad_matched.yaml: Kazemnejad et al.'s copy and reverse in the paper's protocol."""

from pathlib import Path

import yaml
from conftest import compose_dict, posenc_cli


def test_matched_experiment_composes_the_papers_data_and_the_sweep():
    """100 symbols, 4..20 of them in training (lengths 10..43 with the end token), the end token scored, the
    claim's five encoders on both tasks over 15 seeds; its script trains into the record's sweep folder."""
    from posenc.running.config import run_config_from_dict

    cfg = compose_dict(["experiment=kazemnejad_matched"])
    task = cfg["task"]
    assert (task["length"], task["min_length"], task["variable_length"], task["length_draw"]) == (
        43,
        10,
        True,
        "example",
    )
    assert task["n_symbols"] == 100 and task["end_token"] is True
    assert cfg["train"]["steps"] == 10000 and cfg["train"]["target_exact_match"] == 0.99
    result = posenc_cli("train", "experiment=kazemnejad_matched", "--cfg", "hydra", cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    hydra = yaml.safe_load(result.stdout)["hydra"]
    params = hydra["sweeper"]["params"]
    assert params["seed"] == "range(0,15)" and params["task"] == "copy,reverse"
    assert params["encoder"].split(",") == ["nope", "t5", "alibi", "rope", "sinusoidal"]
    # a plain `-m` sweeps into a new folder; scripts/kazemnejad.sh names the record's (hydra.sweep.dir)
    assert hydra["sweep"]["dir"] == "${paths.results}/multirun/${now:%Y%m%d-%H%M%S}"
    assert "hydra.sweep.dir=$sweep" in Path("scripts/kazemnejad.sh").read_text()
    for name in ("copy", "reverse"):
        for encoder in params["encoder"].split(","):
            run = run_config_from_dict(
                compose_dict(["experiment=kazemnejad_matched", f"task={name}", f"encoder={encoder}"])
            )
            built, _, _ = run.build()
            assert built.vocab_size == 103 and built.eos == 102
            assert [built.symbols_at(n) for n in run.training_lengths(built)] == [4, 20]
            _, positional, _ = run.check()  # the encoders as the paper's code builds them (experiment_encoder/)
            if encoder == "t5":
                assert (positional.num_buckets, positional.max_distance) == (32, 128)
            if encoder == "rope":
                assert positional.rotary_dim == 4 and positional.fraction == 0.25  # int(0.25 * head_dim 16)


def test_the_schedule_arm_trains_afresh_and_stops_each_finished_run_at_its_mastery(tmp_path):
    """ARM=schedule trains every run afresh (a finished mastery-arm run is no starting point: its folder is on
    the machine that trained it); its tables stop each finished run at its first check that met the target
    (resume=<run>/mastery.pt), a run that never met it as a whole (resume=<run>), once, into arm
    schedule_at_mastery, and tabulate that arm beside."""
    import os
    import subprocess

    from conftest import listed_runs

    results = tmp_path / "results"
    (results / "multirun" / "kazemnejad_matched" / "copy" / "nope" / "seed0").mkdir(parents=True)
    (results / "multirun" / "kazemnejad_matched" / "copy" / "nope" / "seed0" / "metrics.json").write_text("{}")
    sweep = results / "multirun" / "kazemnejad_matched_schedule"
    at_mastery = results / "multirun" / "kazemnejad_matched_schedule_at_mastery"
    runs = {e: sweep / "copy" / e / "seed0" / "train.stop_at_mastery=False" for e in ("nope", "t5", "alibi")}
    for encoder, run in runs.items():  # finished: t5 met the target (mastery.pt), nope never did
        run.mkdir(parents=True)
        (run / "metrics.json").write_text("{}")
    (runs["t5"] / "mastery.pt").write_bytes(b"")
    (at_mastery / "copy" / "alibi" / "seed0").mkdir(parents=True)  # alibi's is stopped already
    (at_mastery / "copy" / "alibi" / "seed0" / "metrics.json").write_text("{}")
    runs["rope"] = sweep / "copy" / "rope" / "seed0" / "train.stop_at_mastery=False"  # its stop was killed
    runs["rope"].mkdir(parents=True)
    (runs["rope"] / "metrics.json").write_text("{}")
    (runs["rope"] / "mastery.pt").write_bytes(b"")
    (at_mastery / "copy" / "rope" / "seed0").mkdir(parents=True)
    (at_mastery / "copy" / "rope" / "seed0" / "checkpoint.pt").write_bytes(b"")
    log = tmp_path / "calls.txt"
    fake = tmp_path / "posenc"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> {log}\n')
    fake.chmod(0o755)
    env = {**os.environ, "ARM": "schedule", "SEEDS": "0", "RESULTS": str(results), "POSENC": str(fake),
           "PYTHON": "true", "TABLES_ONLY": "1"}  # fmt: skip
    only = subprocess.run(["bash", "scripts/kazemnejad.sh"], env=env, capture_output=True, text=True, timeout=120)
    assert only.returncode == 0, only.stderr
    calls = log.read_text().splitlines()
    assert [line.split()[0] for line in calls] == ["runs", "compare", "train", "train", "train", "runs", "compare"]
    assert all(f"--runs {sweep} " in line for line in calls[:2])
    assert all(f"--runs {at_mastery} " in line for line in calls[5:])
    stopped = {line.split("encoder=")[1].split()[0]: line for line in calls[2:5]}
    assert stopped["nope"].endswith(f"resume={runs['nope']}") and " train.stop_at_mastery=false" not in stopped["nope"]
    assert stopped["t5"].endswith(f"resume={runs['t5'] / 'mastery.pt'}")
    assert stopped["rope"].endswith(" resume=true")  # its twin began: it finishes from its own checkpoint
    assert all(f"hydra.sweep.dir={at_mastery} " in line and " seed=0 task=copy " in line for line in calls[2:5])
    log.unlink()  # training: every unfinished run afresh, none resumed from the mastery arm
    done = subprocess.run(["bash", "scripts/kazemnejad.sh"], env={**env, "TABLES_ONLY": "0"}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    trained = [line for line in log.read_text().splitlines() if f"hydra.sweep.dir={sweep} " in line]
    assert len(trained) == 6 and all(line.endswith("train.stop_at_mastery=false") for line in trained)
    listed = listed_runs(Path("scripts/kazemnejad.sh"), results, ARM="schedule", SEEDS="0")
    assert [line.split("encoder=")[1].split()[0] for line in listed[:2]] == ["sinusoidal", "nope"]
    assert len(listed) == 6 and not any("resume=" in line for line in listed)


def test_the_long_arm_lists_the_papers_step_count_into_its_own_sweep(tmp_path):
    """ARM=long: every run of the matched protocol at 40000 steps (the paper's, at its batch 64), in its own
    sweep folder, seed by seed like the other arms; an unknown arm is refused in one line."""
    import os
    import subprocess

    from conftest import compose_dict, listed_runs

    assert compose_dict(["experiment=kazemnejad_matched"])["train"]["batch_size"] == 64
    listed = listed_runs(Path("scripts/kazemnejad.sh"), tmp_path, ARM="long", SEEDS="0 1")
    assert len(listed) == 20 and all(line.endswith(" train.steps=40000") for line in listed)
    assert all(f"hydra.sweep.dir={tmp_path}/multirun/kazemnejad_matched_long " in line for line in listed)
    assert [line.split()[2] for line in listed[::10]] == ["seed=0", "seed=1"]
    env = {**os.environ, "ARM": "longer", "LIST": "1", "RESULTS": str(tmp_path)}
    done = subprocess.run(["bash", "scripts/kazemnejad.sh"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == "ARM must be mastery, schedule or long, got longer"
