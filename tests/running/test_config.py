"""Hydra configs compose with overrides and convert into checked, typed dataclasses."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import compose_dict, tiny_config

import posenc.conf
from posenc.encoders import ENCODERS
from posenc.errors import ConfigError
from posenc.nn.model import ModelConfig
from posenc.options import keyword_options
from posenc.running.config import TrainConfig, check_no_ignored_settings, run_config_from_dict
from posenc.tasks import TASKS


def test_defaults_compose_to_rope_on_copy():
    cfg = run_config_from_dict(compose_dict())
    assert (cfg.encoder.name, cfg.task.name, cfg.task.length, cfg.seed) == ("rope", "copy", 64, 0)
    assert cfg.encoder.options == {"base": 10000.0, "fraction": 1.0}
    assert cfg.task.options == {"n_symbols": 16, "end_token": False}
    assert cfg.model.d_model == 128 and cfg.train.steps > 0


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_every_encoder_and_task_composes_and_builds(encoder, task):
    cfg = tiny_config(f"encoder={encoder}", f"task={task}")  # every batch at task.length=16 (the default)
    assert cfg.task.variable_length is False
    built_task, built_encoder, model = cfg.build()
    assert type(built_encoder) is ENCODERS[encoder] and built_task.key == task
    assert model.cfg.vocab_size == built_task.vocab_size
    assert built_task.min_length <= cfg.task.length  # retrieval's 4 * n_pairs = 16 fits exactly


def test_overrides_reach_the_typed_config():
    cfg = tiny_config(
        "seed=7", "task.length=32", "train.steps=9", "model.n_layers=3", "encoder=xpos", "encoder.gamma=0.5"
    )
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
        ("task.variable_length=true task.min_length=99", "task.min_length must be null or an integer in"),
        ("task.length_draw=sometimes", "task.length_draw must be example or batch"),
        ("task.variable_length=true task.min_length=2", "needs sequences of at least 3 tokens, but task.min_length"),
        ("task.length=2", "needs sequences of at least 3 tokens, but task.length is 2"),
        ("task=retrieval task.length=15", "needs sequences of at least 16 tokens, but task.length is 15"),
        ("task=retrieval task.n_pairs=8 task.length=31", "needs sequences of at least 32"),
        ("train.check_every=-1", "train.check_every must be >= 0"),
        ("train.check_sequences=0", "train.check_sequences must be > 0"),
        ("train.target_exact_match=0", "target_exact_match must be in \\(0, 1\\]"),
        ("train.target_exact_match=1.5", "target_exact_match must be in \\(0, 1\\]"),
        ("train.stop_at_mastery=false train.check_every=0", "train.stop_at_mastery=false needs checks"),
        ("model.n_heads=5", "divisible"),
        ("model.d_model=18", "even head dimension"),
        ("seed=-1", "seed must be an integer in 0"),
        ("device=tpu", "device must be one of"),
        ("encoder.base=1.0", "encoder.base must be > 1"),
    ],
)
def test_bad_values_raise_one_clear_config_error(override, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(*override.split()).build()


def test_min_length_matters_only_with_variable_length():
    cfg = tiny_config("task.min_length=99")  # a recorded run with it still reads: every batch is at task.length
    cfg.build()
    assert tiny_config("task.variable_length=true", "task.min_length=8").task.variable_length is True


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ("task.min_length=8", "task.min_length=8 applies only with task.variable_length=true"),
        ("task.length_draw=batch", "task.length_draw=batch applies only with task.variable_length=true"),
        ("model.attention=flex", "model.attention=flex chooses how a score bias is added, and encoder=rope has none"),
        ("model.attention=blocked encoder=fox", "encoder=fox has none"),
        ("model.mixer=base_conv encoder=nope model.attention=blocked", "model.mixer=base_conv does not attend"),
    ],
)
def test_a_setting_the_rest_would_ignore_is_refused_before_training(overrides, message):
    cfg = tiny_config(*overrides.split())
    with pytest.raises(ConfigError, match=message):
        check_no_ignored_settings(cfg)


@pytest.mark.parametrize(
    "overrides",
    [
        "task.variable_length=true task.min_length=8 task.length_draw=batch",  # each one used
        "model.attention=blocked encoder=alibi",
        "model.attention=flex encoder=t5",
    ],
)
def test_settings_that_take_effect_pass(overrides):
    check_no_ignored_settings(tiny_config(*overrides.split()))


def test_ignored_settings_are_refused_by_posenc_train_in_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "posenc",
            "train",
            "task.min_length=8",
            "train.steps=1",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: task.min_length=8 applies only with task.variable_length=true (task.variable_length is false: "
        "every sequence has task.length tokens)"
    ]
    assert not (tmp_path / "run").exists()


def test_mastery_defaults():
    cfg = run_config_from_dict(compose_dict())
    t = cfg.train
    assert (t.target_exact_match, t.check_every, t.check_sequences) == (0.99, 100, 512)
    for task in TASKS:  # one length by default; conf/experiment/length_generalization.yaml draws a range
        cfg = run_config_from_dict(compose_dict([f"task={task}"]))
        assert cfg.task.variable_length is False
        assert (cfg.task.min_length, cfg.task.length_draw) == (None, "example")


def test_training_lengths_default_to_the_shortest_the_task_allows():
    cfg = run_config_from_dict(compose_dict(["task=copy", "task.variable_length=true"]))
    task = cfg.build()[0]
    assert cfg.training_lengths(task) == (3, 64)  # copy's min_length: BOS x SEP x
    cfg = run_config_from_dict(compose_dict(["task=copy", "task.variable_length=true", "task.min_length=9"]))
    assert cfg.training_lengths(task) == (9, 64)
    cfg = run_config_from_dict(compose_dict(["task=copy", "task.variable_length=false", "task.min_length=9"]))
    assert cfg.training_lengths(task) == (64, 64)


def test_unknown_keys_are_refused():
    with pytest.raises(ConfigError, match="unknown config key 'model.width'"):
        run_config_from_dict({**compose_dict(), "model": {**compose_dict()["model"], "width": 3}})
    with pytest.raises(ConfigError, match="unknown encoder 'bogus'"):
        run_config_from_dict({**compose_dict(), "encoder": {"name": "bogus"}})


# --- every default written once: the yaml files say what the code's defaults say ------------------------

CONF_DIR = Path(posenc.conf.__file__).parent


def _yaml(group: str, name: str) -> dict:
    return yaml.safe_load((CONF_DIR / group / f"{name}.yaml").read_text())


@pytest.mark.parametrize("group, registry", [("encoder", ENCODERS), ("task", TASKS)])
def test_registry_yaml_options_are_the_code_defaults(group, registry):
    for name in registry.builtins():  # a plugin has no conf/ file: its config is made from the code
        cls = registry[name]
        options = {
            k: v
            for k, v in _yaml(group, name).items()
            if k not in ("name", "length", "min_length", "variable_length", "length_draw")
        }
        assert options == keyword_options(cls), f"conf/{group}/{name}.yaml"


@pytest.mark.parametrize(
    "group, name, cls, skip",
    [("model", "small", ModelConfig, {"vocab_size"}), ("train", "default", TrainConfig, set())],
)
def test_preset_yaml_is_the_dataclass_defaults(group, name, cls, skip):
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.name not in skip}
    assert _yaml(group, name) == defaults
