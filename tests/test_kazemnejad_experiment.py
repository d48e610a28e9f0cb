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
