"""`posenc train` overrides checked before Hydra starts (posenc/cli/precheck.py)."""

import pytest

from posenc.cli.precheck import MAX_COMBINATIONS, precheck
from posenc.errors import PosencError


def test_a_large_sweep_checks_every_value_not_just_the_first():
    seeds = ",".join(str(s) for s in range(9))
    lrs = "0.001,0.002,0.003,0.004,0.005,0.006,0.007,nan"
    assert 9 * 8 > MAX_COMBINATIONS
    with pytest.raises(PosencError, match="train.lr must be a finite number"):
        precheck(["-m", f"seed={seeds}", f"train.lr={lrs}", "model.n_layers=1"])


def test_a_large_sweep_of_good_values_passes():
    seeds = ",".join(str(s) for s in range(9))
    precheck(["-m", f"seed={seeds}", "train.lr=0.001,0.002,0.003,0.004,0.005,0.006,0.007,0.008", "model.n_layers=1"])


def test_an_unknown_launcher_is_named_with_the_known_ones():
    with pytest.raises(PosencError, match="rocket.*joblib"):
        precheck(["-m", "hydra/launcher=rocket", "seed=0,1"])


@pytest.mark.parametrize(
    "override",
    [
        "hydra.run.dir={tmp}/file",
        "hydra.sweep.dir={tmp}/file/below",
        "hydra.run.dir={tmp}/" + "x" * 300,
        "paths.results={tmp}/file",
    ],
)
def test_output_locations_that_cannot_be_written_are_refused_first(tmp_path, override):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PosencError, match="cannot write to"):
        precheck([override.format(tmp=tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing created on the way


def test_precheck_checks_every_rule_of_build_but_builds_no_model(monkeypatch):
    """`posenc train` builds each model once, in training: the precheck checks without building."""
    import posenc.nn.model

    built = []
    real = posenc.nn.model.Transformer.__init__
    monkeypatch.setattr(
        posenc.nn.model.Transformer, "__init__", lambda self, *a, **k: built.append(1) or real(self, *a, **k)
    )
    precheck(["encoder=rope", "model.n_layers=1"])
    assert built == []
    with pytest.raises(PosencError, match="model.n_heads"):  # a rule build() enforces, found without a model
        precheck(["model.d_model=30", "model.n_heads=4"])
