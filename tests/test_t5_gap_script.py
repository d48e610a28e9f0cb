"""scripts/t5_gap.sh and scripts/t5_gap.py: T5's gap to the paper's matched copy number, one factor at a time."""

import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import compose_dict, listed_runs, load_script

from posenc.analysis.store import flatten_config

SCRIPT = Path("scripts/t5_gap.sh")
# the baseline pins posenc's layout rule: the matched experiment's own T5 takes the paper's (max_distance 128)
BASELINE = ["encoder.max_distance=null"]
VARIANTS = {  # name -> overrides, as scripts/t5_gap.sh gives them: the baseline's, one factor changed
    "alphabet16": [*BASELINE, "task.n_symbols=16"],
    "layout128": ["encoder.max_distance=128"],
    "size": [*BASELINE, "model.d_model=768", "model.n_layers=12", "model.n_heads=12", "model.d_mlp=3072"],
}


def listed(results: Path, **env: str) -> list[str]:
    return listed_runs(SCRIPT, results, **env)


def expected(results: Path, seeds=range(5), variants=tuple(VARIANTS)) -> list[str]:
    lines = []
    for seed in seeds:
        for name in ("baseline", *variants):
            lines.append(
                f"experiment=kazemnejad_matched hydra.sweep.dir={results}/multirun/t5_gap seed={seed} task=copy "
                f"encoder=t5 {' '.join(VARIANTS.get(name, BASELINE))}"
            )
    return lines


@pytest.mark.integration  # runs the script (bash)
def test_list_prints_the_baseline_and_each_variant_seed_by_seed(tmp_path):
    assert listed(tmp_path) == expected(tmp_path)
    assert listed(tmp_path, SEEDS="2", VARIANTS="layout128") == expected(tmp_path, [2], ["layout128"])
    # a finished run (its metrics.json where Hydra puts it: the overrides sorted) is not listed again
    for folder in ("t5_gap/copy/t5/seed0/" + BASELINE[0], "t5_gap/copy/t5/seed0/" + ",".join(sorted(VARIANTS["size"]))):
        (tmp_path / "multirun" / folder).mkdir(parents=True)
        (tmp_path / "multirun" / folder / "metrics.json").write_text("{}")
    assert listed(tmp_path) == [x for i, x in enumerate(expected(tmp_path)) if i not in (0, 3)]


@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_changes_one_factor_of_the_matched_t5_and_composes(name):
    """Each variant differs from the baseline (the matched protocol's T5 with posenc's layout) in its own keys
    only, and is a valid run; layout128 is the matched experiment's own T5."""
    from posenc.running.config import run_config_from_dict

    base = ["experiment=kazemnejad_matched", "task=copy", "encoder=t5"]
    baseline, variant = compose_dict([*base, *BASELINE]), compose_dict([*base, *VARIANTS[name]])
    a, b = flatten_config(baseline), flatten_config(variant)
    assert a.keys() == b.keys()
    assert {k for k in a if a[k] != b[k]} == {o.split("=")[0] for o in VARIANTS[name] if o not in BASELINE}
    if name == "layout128":
        assert variant == compose_dict(base)
    _, built, _ = run_config_from_dict(baseline).check()
    assert (built.num_buckets, built.max_distance) == (32, 32)  # posenc's rule at L = 43: max(32, 43 // 2)
    task, built, model = run_config_from_dict(variant).check()
    if name == "layout128":  # T5's own layout, the paper's code's: 32 buckets, max_distance 128
        assert (built.num_buckets, built.max_distance) == (32, 128)
    if name == "alphabet16":
        assert task.vocab_size == 19 and b["task.n_symbols"] == 16
    if name == "size":  # T5-base: 12 layers, 12 heads of 64, d_ff 3072
        assert (model.d_model, model.n_layers, model.n_heads, model.d_mlp) == (768, 12, 12, 3072)


def _rows(variant_folder: str, shift: float, seeds=(0, 1, 2)):
    script = load_script("kazemnejad_seeds")
    rows = []
    for seed in seeds:
        run = f"results/multirun/t5_gap/copy/t5/seed{seed}" + (f"/{variant_folder}" if variant_folder else "")
        for length in (script.TRAIN_LENGTH, *script.TEST, *script.BEYOND):
            value = 1.0 if length == script.TRAIN_LENGTH else 0.1 + shift + 0.05 * seed
            rows.append(
                {
                    "run": run,
                    "task": "copy",
                    "encoder": "t5",
                    "seed": seed,
                    "eval_length": length,
                    "scaling": "none",
                    "learned": True,
                    "steps_to_learn": 3000,
                    "exact_match": value,
                }
            )
    return rows


def test_the_gap_table_labels_variants_and_takes_each_against_the_baseline(tmp_path):
    script = load_script("t5_gap")
    folders = {name: ",".join(sorted(o)) for name, o in {"baseline": BASELINE, **VARIANTS}.items()}
    assert {folder: name for name, folder in folders.items()} == script.VARIANTS
    table = pd.DataFrame(
        _rows(folders["baseline"], 0.0) + _rows(folders["layout128"], 0.3) + _rows(folders["size"], 0.0)
    )
    table.to_csv(tmp_path / "extrapolation.csv", index=False)
    assert script.main(["--folder", str(tmp_path)]) == 0
    seeds = pd.read_csv(tmp_path / "gap_seeds.csv")
    assert list(seeds["variant"].unique()) == ["baseline", "layout128", "size"]
    gap = script.gap_table(script.per_seed(table)).set_index("variant")
    assert gap.loc["baseline", "mean"] == pytest.approx(0.15) and math.isnan(gap.loc["baseline", "minus baseline"])
    assert gap.loc["layout128", "minus baseline"] == pytest.approx(0.3)
    assert gap.loc["layout128", "low"] < 0.3 < gap.loc["layout128", "high"]  # equal spreads: a Welch interval
    assert gap.loc["size", "minus baseline"] == pytest.approx(0.0)
    text = (tmp_path / "gap.md").read_text()
    assert "0.420" in text and "0.549" in text and "layout128" in text
