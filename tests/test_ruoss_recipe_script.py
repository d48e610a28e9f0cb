"""scripts/ruoss_recipe.sh, conf/experiment/ruoss_recipe.yaml and scripts/ungated_claims.py: Ruoss et al. on
reverse with the paper's recipe beside the current one, and the ungated line beside each gated verdict."""

from pathlib import Path

import pytest
from conftest import compose_dict, listed_runs, load_script
from fake_results import config_of, fake_run, results_of

from posenc.analysis.pipeline import compare_into
from posenc.analysis.store import flatten_config, run_identity

SCRIPT = Path("scripts/ruoss_recipe.sh")
ARMS = {"current": "randomized_positions", "paper": "ruoss_recipe"}
ENCODERS = {"randomized": "encoder=randomized encoder.max_position=2048", "sinusoidal": "encoder=sinusoidal"}


def listed(results: Path, **env: str) -> list[str]:
    return listed_runs(SCRIPT, results, **env)


def expected(results: Path, seeds=(0, 1, 2)) -> list[str]:
    return [
        f"experiment={experiment} hydra.sweep.dir={results}/multirun/ruoss_recipe/{arm} seed={seed} task=reverse "
        + encoder
        for seed in seeds
        for arm, experiment in ARMS.items()
        for encoder in ENCODERS.values()
    ]


@pytest.mark.integration  # runs the script (bash)
def test_list_prints_both_arms_seed_by_seed_and_skips_finished_runs(tmp_path):
    assert listed(tmp_path) == expected(tmp_path)
    assert listed(tmp_path, SEEDS="2") == expected(tmp_path, seeds=(2,))
    for folder in ("paper/reverse/randomized/seed0/encoder.max_position=2048", "current/reverse/sinusoidal/seed1"):
        (tmp_path / "multirun/ruoss_recipe" / folder).mkdir(parents=True)
        (tmp_path / "multirun/ruoss_recipe" / folder / "metrics.json").write_text("{}")
    assert listed(tmp_path) == [x for i, x in enumerate(expected(tmp_path)) if i not in (2, 5)]


@pytest.mark.parametrize("encoder", ENCODERS.values())
def test_the_paper_arm_is_the_current_one_with_the_papers_model_and_optimiser(encoder):
    """5 layers, 8 heads of 8, lr 1e-3, batch 128 (google-deepmind/randomized_positional_encodings,
    experiments/example.py); everything else as conf/experiment/randomized_positions.yaml; both compose."""
    from posenc.running.config import run_config_from_dict

    current, paper = (compose_dict([f"experiment={e}", "task=reverse", *encoder.split()]) for e in ARMS.values())
    a, b = flatten_config(current), flatten_config(paper)
    assert a.keys() == b.keys()
    assert {k: b[k] for k in a if a[k] != b[k]} == {
        "model.n_layers": 5,
        "model.n_heads": 8,
        "train.lr": 1e-3,
        "train.batch_size": 128,
    }
    assert b["model.d_model"] == 64 and b["model.d_mlp"] == 256  # the paper's width 64, MLP 4x
    assert b["task.length_draw"] == "batch" and b["task.length"] == 32 and b["train.steps"] == 15000
    for cfg in (current, paper):
        run_config_from_dict(cfg).check()


def _folder(folder: Path, randomized_score: float) -> Path:
    """randomized (not learned: short of the gate at L) and sinusoidal on reverse, 3 seeds, evaluated past L."""
    lengths = (32, 48, 128)
    n = 40

    def values(score):
        return {32: [1.0] * (n - 4) + [0.0] * 4, 48: [score] * n, 128: [score / 2] * n}

    runs = [
        fake_run(enc, values(score), task="reverse", seed=s, train_length=32, learned=enc == "sinusoidal")
        for enc, score in (("randomized", randomized_score), ("sinusoidal", 0.2))
        for s in range(3)
    ]
    ids = {
        run_identity(config_of(enc, "reverse", s, 32)).run_id for enc in ("randomized", "sinusoidal") for s in range(3)
    }
    compare_into(folder, results_of(*runs), ids, list(lengths), "test")
    return folder


@pytest.mark.integration  # a whole comparison written, every figure drawn (seconds)
def test_ungated_claims_writes_the_gated_verdict_and_what_lifting_the_gate_says(tmp_path):
    script = load_script("ungated_claims")
    above, below = _folder(tmp_path / "above", 0.9), _folder(tmp_path / "below", 0.0)
    out = tmp_path / "verdicts.md"
    args = ["--folder", str(above), "--folder", str(below), "--claim", "ruoss2023_reverse", "--out", str(out)]
    assert script.main(args) == 0
    text = out.read_text()
    assert text.count("**not testable** — Ruoss") == 2 and "randomized did not learn reverse in distribution" in text
    above_part, below_part = text.split(f"## `{below}`")
    assert "would say **agrees**" in above_part
    assert "would say **differs**" in below_part
    assert script.main([*args, "--note", "Protocol: the paper's recipe."]) == 0  # a note under the header
    noted = out.read_text()
    assert noted.index("how much the gate decides.\n\nProtocol: the paper's recipe.\n") < noted.index("## `")
    assert "Protocol" not in text
    assert script.main(["--folder", str(above), "--claim", "nope", "--out", str(out)]) == 2
