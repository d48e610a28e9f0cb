"""scripts/regeneration_time.py: measured CPU hours, GPU runs projected at CPU seconds per step."""

import json
from pathlib import Path

import pandas as pd
from conftest import load_script


def _script():
    return load_script("regeneration_time")


def _folder(root: Path, name: str, runs: list[tuple[str, str, int, float, str, int]]) -> Path:
    """runs: (run, encoder, steps, train_seconds, device, d_model); evaluation: 2 s at 64, 6 s at 128 each."""
    folder = root / name
    folder.mkdir()
    pd.DataFrame(
        [
            {"run": r, "encoder": e, "task": "copy", "steps": s, "train_seconds": t, "device": d}
            for r, e, s, t, d, _ in runs
        ]
    ).to_parquet(folder / "training.parquet")
    config = {
        r: json.dumps({"model": {"d_model": w, "n_layers": 3}, "train": {"batch_size": 64}, "task": {"length": 32}})
        for r, *_, w in runs
    }
    pd.DataFrame(
        [
            {"run": r, "config": config[r], "eval_length": n, "seconds": sec}
            for r, *_ in runs
            for n, sec in ((64, 2.0), (128, 6.0))
        ]
    ).to_parquet(folder / "extrapolation.parquet")
    return folder


def test_gpu_runs_are_projected_at_the_cpu_rate_of_their_encoder_and_shape(tmp_path):
    script = _script()
    cpu = _folder(tmp_path, "cpu", [("a", "rope", 1000, 3600.0, "cpu", 64), ("b", "rope", 3000, 3600.0, "cpu", 64)])
    gpu = _folder(
        tmp_path,
        "gpu",
        [
            ("c", "rope", 500, 10.0, "cuda", 64),
            ("d", "rope", 100, 1.0, "cuda", 128),
            ("e", "alibi", 100, 1.0, "cuda", 64),
        ],
    )
    runs = pd.concat([script.runs_of(cpu), script.runs_of(gpu)], ignore_index=True)
    hours = script.training_hours(runs).set_index("experiment")
    assert hours.loc["cpu", "train_h_measured"] == 2.0 and hours.loc["cpu", "train_h_projected"] == 0
    # rope at d64: 7200 s over 4000 steps = 1.8 s/step, so 500 steps project to 900 s; d128 and alibi: no rate
    assert abs(hours.loc["gpu", "train_h_projected"] - 900 / 3600) < 1e-12
    assert "alibi" in hours.loc["gpu", "not_projected"] and "d128" in hours.loc["gpu", "not_projected"]
    evaluation = script.evaluation_hours(gpu)
    assert abs(evaluation["eval_h"] - 3 * 8 / 3600) < 1e-12 and evaluation["eval_share_two_longest"] == 1.0


def test_a_cpu_rate_is_per_encoder_and_shape(tmp_path):
    """rope trained on the CPU at two shapes: each shape has its own seconds per step (not the encoder's
    seconds over all its steps)."""
    script = _script()
    cpu = _folder(tmp_path, "cpu", [("a", "rope", 1000, 3600.0, "cpu", 64), ("b", "rope", 1000, 7200.0, "cpu", 128)])
    gpu = _folder(tmp_path, "gpu", [("c", "rope", 100, 1.0, "cuda", 128)])
    runs = pd.concat([script.runs_of(cpu), script.runs_of(gpu)], ignore_index=True)
    hours = script.training_hours(runs).set_index("experiment")
    assert abs(hours.loc["gpu", "train_h_projected"] - 100 * 7.2 / 3600) < 1e-12


def test_a_shape_no_cpu_run_had_is_timed_here(tmp_path):
    from conftest import tiny_dict

    script = _script()
    gpu = _folder(tmp_path, "gpu", [("c", "rope", 500, 10.0, "cuda", 16)])
    runs = script.runs_of(gpu)
    config = json.dumps(tiny_dict())
    rates = script.measured_rates(runs.assign(shape="tiny"), {"c": config}, steps=3)
    assert list(rates.index) == [("rope", "tiny")] and 0 < rates.iloc[0] < 5
    hours = script.training_hours(runs.assign(shape="tiny"), rates).set_index("experiment")
    assert abs(hours.loc["gpu", "train_h_projected"] - 500 * rates.iloc[0] / 3600) < 1e-12
    assert hours.loc["gpu", "not_projected"] == "-"
