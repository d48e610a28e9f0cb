"""`posenc train`'s Hydra entry point (posenc/cli/hydra_entry.py); its end-to-end runs are in test_cli.py."""

from omegaconf import OmegaConf

from posenc.cli.hydra_entry import short_dirname


def test_long_override_dirnames_are_shortened_stably():
    short = "model.n_layers=3,task.length=128"
    assert short_dirname(short) == short
    long = ",".join(f"train.option{i}={i}" for i in range(40))
    name = short_dirname(long)
    assert len(name) <= 100 and name == short_dirname(long) and name != short_dirname(long + "x")


def test_run_directory_resolver_is_registered_on_import():
    """conf/config.yaml names run and sweep folders through ${posenc_dirname:...}: importing the entry point
    (as launcher workers do) must register it."""
    cfg = OmegaConf.create({"dir": "${posenc_dirname:" + "x" * 200 + "}"})
    assert cfg.dir == short_dirname("x" * 200) != "x" * 200
