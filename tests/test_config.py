"""Hydra configs compose with overrides and convert into checked, typed dataclasses."""

import pytest
from conftest import compose_dict, tiny_config

from posenc.config import run_config_from_dict
from posenc.encoders import ENCODERS
from posenc.errors import ConfigError
from posenc.tasks import TASKS


def test_defaults_compose_to_rope_on_copy():
    cfg = run_config_from_dict(compose_dict())
    assert (cfg.encoder.name, cfg.task.name, cfg.task.length, cfg.seed) == ("rope", "copy", 64, 0)
    assert cfg.encoder.options == {"base": 10000.0}
    assert cfg.task.options == {"n_symbols": 16}
    assert cfg.model.d_model == 128 and cfg.train.steps > 0


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_every_encoder_and_task_composes_and_builds(encoder, task):
    shortest = max(8, TASKS[task].min_length)  # TINY's task.min_length=8 is too short for passkey's key
    cfg = tiny_config(f"encoder={encoder}", f"task={task}", f"task.min_length={shortest}")
    built_task, built_encoder, model = cfg.build()
    assert type(built_encoder) is ENCODERS[encoder] and built_task.key == task
    assert model.cfg.vocab_size == built_task.vocab_size


def test_overrides_reach_the_typed_config():
    cfg = tiny_config("seed=7", "task.length=32", "train.steps=9", "model.n_layers=3", "encoder=xpos",
                      "encoder.gamma=0.5")
    assert (cfg.seed, cfg.task.length, cfg.train.steps, cfg.model.n_layers) == (7, 32, 9, 3)
    assert cfg.encoder.options["gamma"] == 0.5


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.steps=abc", "train.steps must be of type int"),
        ("train.steps=0", "train.steps must be > 0"),
        ("train.lr=-1", "train.lr must be > 0"),
        ("task.length=0", "task.length must be between"),
        ("task.length=-5", "task.length must be between"),
        ("task.min_length=99", "task.min_length must be in"),
        ("task.min_length=2", "needs sequences of at least 3"),
        ("model.n_heads=5", "divisible"),
        ("model.d_model=18", "even head dimension"),
        ("seed=-1", "seed must be a non-negative integer"),
        ("device=tpu", "device must be one of"),
        ("encoder.base=1.0", "encoder.base must be > 1"),
    ],
)
def test_bad_values_raise_one_clear_config_error(override, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(override).build()


def test_unknown_keys_are_refused():
    with pytest.raises(ConfigError, match="unknown config key 'model.width'"):
        run_config_from_dict({**compose_dict(), "model": {**compose_dict()["model"], "width": 3}})
    with pytest.raises(ConfigError, match="unknown encoder 'bogus'"):
        run_config_from_dict({**compose_dict(), "encoder": {"name": "bogus"}})
