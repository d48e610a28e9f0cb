"""posenc.analysis.store.RUN_NEUTRAL_KEYS is the one list of keys that do not change what a run computes: changing one
keeps a run's identity, its resume and its Hydra folder; changing any other key changes all three."""

from pathlib import Path

import pytest
import yaml
from conftest import compose_dict

from posenc.analysis.store import LATER_DEFAULTS, RUN_NEUTRAL_KEYS, run_identity
from posenc.running.checkpoint import comparable, config_difference

CONF = Path(__file__).resolve().parents[1] / "conf" / "config.yaml"
FOLDER_KEYS = {"encoder", "task", "seed", "experiment"}  # name the run folder's path itself
# A new value for each neutral key, and for keys that do change a run
NEUTRAL_VALUES = {
    "device": "cuda",
    "progress": False,
    "resume": False,
    "paths": {"results": "elsewhere"},
    "logger": {"name": "tensorboard"},
    "train.compile": True,
    "model.attention": "blocked",
    "train.log_every": 7,
    "train.checkpoint_every": 3,
    "train.eval_sequences": 9,
    "plugins": {"encoder": {"origin": "file", "source": "/x/mine.py", "object": "mine:Mine"}},
}
CHANGING_VALUES = {
    "seed": 5,
    "train.lr": 0.1,
    "train.steps": 11,
    "train.batch_size": 3,
    "model.d_model": 32,
    "model.n_layers": 5,
    "task.length": 40,
    "encoder.name": "alibi",
    "encoder.fraction": 0.25,
    "model.mixer": "base_conv",
    "train.precision": "bf16",
}


def _with(config: dict, dotted: str, value) -> dict:
    out = dict(config)
    head, _, rest = dotted.partition(".")
    out[head] = _with(config.get(head, {}), rest, value) if rest else value
    return out


def _same_run(a: dict, b: dict) -> tuple[bool, bool]:
    """(same identity, resumable under the other)"""
    return run_identity(a).run_id == run_identity(b).run_id, config_difference(comparable(a), comparable(b)) is None


def test_every_neutral_key_has_a_case():
    assert set(NEUTRAL_VALUES) == set(RUN_NEUTRAL_KEYS)


@pytest.mark.parametrize("key", RUN_NEUTRAL_KEYS)
def test_a_neutral_key_keeps_identity_and_resume(key):
    config = compose_dict()
    assert _same_run(config, _with(config, key, NEUTRAL_VALUES[key])) == (True, True)


@pytest.mark.parametrize("key", sorted(CHANGING_VALUES))
def test_any_other_key_changes_identity_and_blocks_resume(key):
    config = compose_dict()
    assert _same_run(config, _with(config, key, CHANGING_VALUES[key])) == (False, False)


def test_a_later_key_at_its_default_is_the_run_recorded_before_it_existed():
    config = compose_dict()
    for dotted, default in LATER_DEFAULTS.items():
        head, _, rest = dotted.partition(".")
        older = {**config, head: {k: v for k, v in config[head].items() if k != rest}}
        assert _same_run(config, older) == (True, True) and _with(config, dotted, default) == config


def test_hydra_folder_names_leave_out_exactly_the_neutral_keys():
    exclude = yaml.safe_load(CONF.read_text())["hydra"]["job"]["config"]["override_dirname"]["exclude_keys"]
    neutral = {"paths.results" if k == "paths" else k for k in RUN_NEUTRAL_KEYS}  # paths: its one key
    assert set(exclude) == FOLDER_KEYS | neutral
