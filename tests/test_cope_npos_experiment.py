"""scripts/cope_npos.sh: CoPE on copy as committed (n_pos = L) against n_pos large enough that nothing is clamped."""

import re
from pathlib import Path

import pandas as pd
import torch
from conftest import compose_dict

from posenc.analysis.store import flatten_config

SCRIPT = Path("scripts/cope_npos.sh")
BASE = ["experiment=length_generalization", "task=copy", "encoder=cope", "seed=0"]


def script_value(name: str) -> str:
    found = re.search(rf"^{name}=(\S+)", SCRIPT.read_text(), re.MULTILINE)
    assert found, f"{SCRIPT} sets no {name}"
    return found.group(1)


def test_the_arms_are_the_committed_copy_config_and_differ_only_in_n_pos():
    """The control is the committed length_generalization CoPE copy run (n_pos null: the training length,
    counts clamped at L - 1); the treatment is the same config with encoder.n_pos, and nothing else, changed."""
    from posenc.running.config import run_config_from_dict

    npos = int(script_value("npos"))
    text = SCRIPT.read_text()
    assert "experiment=length_generalization task=copy encoder=cope" in text
    assert script_value("sweep") == "results/multirun/cope_npos" and "hydra.sweep.dir=$sweep" in text
    control = compose_dict(BASE)
    treatment = compose_dict([*BASE, f"encoder.n_pos={npos}"])
    a, b = flatten_config(control), flatten_config(treatment)
    assert a.keys() == b.keys()
    assert {k for k in a if a[k] != b[k]} == {"encoder.n_pos"}
    assert control["encoder"]["n_pos"] is None and treatment["encoder"]["n_pos"] == npos
    length = control["task"]["length"]
    _, built, _ = run_config_from_dict(control).build()
    assert built.n_pos == length == 32  # the record's clamp: at L - 1
    _, built, _ = run_config_from_dict(treatment).build()
    assert built.n_pos == npos


def test_the_treatment_clamps_no_count_at_any_evaluated_length():
    """A count p_ij sums at most N gates, each at most 1, so at evaluation length N it reaches N (every gate
    open); CoPE clamps it at n_pos - 1. The treatment's n_pos - 1 is at least every evaluated length, the
    control's is not past L; the lengths are the committed experiment's up to 4L, and none takes the band path
    (exact attention everywhere)."""
    from posenc import functional as pf
    from posenc.running.config import run_config_from_dict

    npos = int(script_value("npos"))
    lengths = [int(n) for n in script_value("lengths").split(",")]
    length = compose_dict(BASE)["task"]["length"]
    committed = pd.read_csv("results/length_generalization/comparison.csv")
    cope = committed[(committed["task"] == "copy") & (committed["encoder"] == "cope")]
    assert lengths == sorted(n for n in cope["eval_length"].unique() if n <= 4 * length)
    assert {length, 4 * length} <= set(lengths) and all(n in lengths for n in range(length, 2 * length + 1, 4))
    _, encoder, _ = run_config_from_dict(compose_dict([*BASE, f"encoder.n_pos={npos}"])).build()
    layer = encoder.for_layer(0)
    for n in lengths:
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        all_open = torch.full((n, n), 1e4).masked_fill(future, float("-inf"))  # every gate sigmoid(1e4) = 1
        top = float(pf.cope_positions(all_open).max())
        assert top == n
        assert top <= npos - 1, f"length {n}: a count of {top} is clamped at n_pos - 1 = {npos - 1}"
        assert n < 2 * layer.band()  # cope_band_attention is used only from 2 * band on
