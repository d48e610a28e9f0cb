"""Typed run configuration: Hydra's DictConfig is converted to these dataclasses at the boundary.

Every value is type- and range-checked here, so the rest of the code can trust its inputs, and a bad
override becomes one :class:`~posenc.errors.ConfigError` line naming the key.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from posenc.encoders import ENCODERS, AttentionShape, build_encoder, check_encoder_name
from posenc.encoders.base import MAX_LENGTH
from posenc.errors import ConfigError
from posenc.nn.mixers import DEFAULT_MIXER, MIXERS
from posenc.nn.model import ModelConfig
from posenc.options import checked_value, keyword_options
from posenc.running.tracking import TRACKERS, LoggerConfig
from posenc.tasks import TASKS, build_task, check_task_name

MAX_SEED = 2**63 - 1  # torch.manual_seed takes a signed 64-bit integer
MAX_LAYERS = 256  # deeper than any model posenc is for; deeper ones would stall in construction


@dataclass
class EncoderConfig:
    name: str = "rope"  # registry key, see posenc.encoders.ENCODERS
    options: dict[str, Any] = field(default_factory=dict)  # encoder-specific keywords (e.g. base)


@dataclass
class TaskConfig:
    name: str = "copy"  # registry key, see posenc.tasks.TASKS
    length: int = 64  # training length: the positions the model reads
    # Training lengths. False: every sequence at exactly `length`. True: lengths drawn uniformly from
    # [min_length, length], per sequence (`length_draw: example`, Kazemnejad et al. 2023's U(1, L): a batch
    # mixes lengths, right-padded) or one per batch (`batch`, Ruoss et al. 2023 / Deletang et al. 2023).
    variable_length: bool = False
    min_length: int | None = None  # shortest training length; None: the shortest the task allows
    length_draw: str = "example"  # example | batch: what one draw of a length covers
    options: dict[str, Any] = field(default_factory=dict)  # task-specific keywords (e.g. n_symbols)


@dataclass
class TrainConfig:
    steps: int = 2000  # the budget: most optimizer steps (training stops earlier once the task is learned)
    batch_size: int = 64  # sequences per step
    lr: float = 1e-3  # peak AdamW learning rate, reached after warmup (why 1e-3: conf/train/default.yaml)
    final_lr_ratio: float = 0.0  # cosine decay ends at lr * final_lr_ratio
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    warmup_steps: int = 100  # linear warmup from 0
    grad_clip: float = 1.0  # max global gradient norm
    eval_sequences: int = 256  # sequences for the final in-distribution evaluation
    # Mastery criterion (tasks scored by exact match): every `check_every` steps the model is scored on
    # `check_sequences` held-out sequences at the training length; training stops once exact match reaches
    # `target_exact_match`, and that step is the run's steps-to-learn. A run whose final exact match stays
    # below the target is marked not learned. 0 checks nothing: the whole budget is trained.
    target_exact_match: float = 0.99
    check_every: int = 100
    check_sequences: int = 512
    # false: train the whole budget after the target is met (a fixed schedule, e.g. the Kazemnejad stopping-rule
    # arm); steps-to-learn is still the first check that met it, and the state there is saved as mastery.pt
    stop_at_mastery: bool = True
    log_every: int = 50  # steps between progress/log updates
    checkpoint_every: int = 250  # steps between checkpoints (0: only at the end)
    # torch.compile the training step's model: "auto" = on CUDA only (on a 2-core CPU it is slower for this
    # model size, see scripts/bench.py), or true / false.
    compile: bool | str = "auto"
    precision: str = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU | fp32 | bf16


@dataclass
class RunConfig:
    encoder: EncoderConfig
    task: TaskConfig
    model: ModelConfig
    train: TrainConfig
    seed: int = 0  # seeds model init and the data stream
    device: str = "auto"  # auto (cuda when present) | cpu | cuda
    progress: bool = True  # live progress bar (switched off for parallel and cluster launchers)
    resume: bool | str = True  # continue from the run dir's checkpoint; false: refuse one; a path: resume it
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # experiment tracking (posenc.running.tracking)

    def build(self):
        """The task, the encoder and the model this config describes (checks all cross-field rules)."""
        from posenc.nn.model import Transformer

        task, encoder, model_cfg = self.check()
        return task, encoder, Transformer(model_cfg, encoder)

    def check(self):
        """``(task, encoder, model config)``: every cross-field rule of :meth:`build` checked without building
        the model, so that ``posenc train``'s precheck does not build each model a second time."""
        task = build_task(self.task.name, self.task.options)
        model_cfg = dataclasses.replace(self.model, vocab_size=task.vocab_size)
        model_cfg.validate()
        if model_cfg.n_layers > MAX_LAYERS:
            raise ConfigError(f"model.n_layers must be at most {MAX_LAYERS}, got {model_cfg.n_layers}")
        check_fits_in_memory(model_cfg, self.train.batch_size, self.task.length)  # before allocating any
        encoder = build_encoder(
            self.encoder.name,
            AttentionShape(model_cfg.d_model, model_cfg.n_heads),
            self.task.length,
            self.encoder.options,
        )
        encoder.check_depth(model_cfg.n_layers)
        task.check_length(self.task.length)
        shortest = self.training_lengths(task)[0]
        if shortest < task.min_length:
            raise ConfigError(
                f"task '{task.key}' needs sequences of at least {task.min_length} tokens, "
                f"but task.{'min_length' if self.task.variable_length else 'length'} is {shortest}"
            )
        return task, encoder, model_cfg

    def training_lengths(self, task) -> tuple[int, int]:
        """The shortest and longest training length: ``(length, length)`` unless ``task.variable_length``;
        then ``task.min_length``, or by default the shortest length ``task`` allows (its ``min_length``)."""
        if not self.task.variable_length:
            return self.task.length, self.task.length
        lo = task.min_length if self.task.min_length is None else self.task.min_length
        return min(lo, self.task.length), self.task.length


def check_plugin_key(check, name: str, plugins: Any, group: str) -> None:
    """``check(name)``; for a run recorded with a plugin that is not loaded here, a line saying where its code
    was (``config.yaml``'s ``plugins``) and how to load it."""
    try:
        check(name)
    except ConfigError as err:
        origin = plugins.get(group) if isinstance(plugins, dict) else None
        if not isinstance(origin, dict) or "unknown" not in str(err):
            raise
        raise ConfigError(
            f"{group} '{name}' is a plugin ({origin.get('object')} from {origin.get('origin')} "
            f"{origin.get('source')}) that is not loaded here: {how_to_load(origin)}"
        ) from None


def how_to_load(origin: dict[str, Any]) -> str:
    """How to load again the plugin a run recorded (``config.yaml``'s ``plugins`` entry, a
    :class:`posenc.plugins.Origin` as a mapping): install its package, or name its file or module."""
    if origin.get("origin") == "entry point":
        return f"install {origin.get('source')}"
    return f"POSENC_PLUGINS={origin.get('source')}"


def check_mixer(mixer: str, encoder: str) -> None:
    """``model.mixer`` is known, and a mixer other than attention comes with ``encoder=nope``: a convolution
    mixes tokens by their index, so a positional encoding would have nothing to act on."""
    if mixer not in MIXERS:
        raise ConfigError(f"model.mixer must be one of {', '.join(MIXERS)}; got {mixer!r}")
    if mixer != DEFAULT_MIXER and encoder != "nope":
        raise ConfigError(
            f"model.mixer={mixer} takes encoder=nope (a convolution reads no positional "
            f"encoding), got encoder={encoder}"
        )


def check_no_ignored_settings(cfg: RunConfig) -> None:
    """Refuse, before training, a setting that the rest of the configuration would silently ignore (issue 38):
    the user meant it to matter, and a run recorded with it would say it had an effect it never had. Checked
    where a run is trained (posenc.cli.precheck, posenc.cli.hydra_entry), not where a recorded run is read."""
    task, model, encoder = cfg.task, cfg.model, cfg.encoder.name
    fixed = "" if task.variable_length else " (task.variable_length is false: every sequence has task.length tokens)"
    if fixed and task.min_length is not None:
        raise ConfigError(f"task.min_length={task.min_length} applies only with task.variable_length=true{fixed}")
    if fixed and task.length_draw != "example":
        raise ConfigError(f"task.length_draw={task.length_draw} applies only with task.variable_length=true{fixed}")
    if model.attention == "auto":
        return
    if model.mixer != DEFAULT_MIXER:
        raise ConfigError(
            f"model.attention={model.attention} has nothing to choose: model.mixer={model.mixer} does not attend"
        )
    if not ENCODERS[encoder].has_score_bias:  # FoX and CoPE attend through their own paths, rope through SDPA
        raise ConfigError(
            f"model.attention={model.attention} chooses how a score bias is added, and "
            f"encoder={encoder} has none (leave it at auto)"
        )


def training_bytes(model: ModelConfig, batch_size: int, length: int) -> int:
    """A lower bound on the memory training needs, in bytes: fp32 weights with their gradients and AdamW's
    two moments (4 copies), and the activations autograd keeps (about 16 floats per token, layer and
    residual width, plus the attention scores of one layer, if it attends)."""
    d, f = model.d_model, model.d_mlp
    mixer = 4 * d * d if model.mixer == DEFAULT_MIXER else d * d  # attention: qkv and out; BaseConv: its gate
    params = model.vocab_size * d + model.n_layers * (mixer + 2 * d * f)
    tokens = batch_size * (length + 1)
    scores = batch_size * model.n_heads * (length + 1) ** 2 if model.mixer == DEFAULT_MIXER else 0
    activations = tokens * model.n_layers * (16 * d + 2 * f) + scores
    return 4 * (4 * params + activations)


def physical_memory() -> int | None:
    """This machine's RAM in bytes, where the OS says (POSIX ``sysconf``)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(model: ModelConfig, batch_size: int, length: int) -> None:
    """Refuse a model that cannot train in this machine's memory, before allocating anything."""
    need, have = training_bytes(model, batch_size, length), physical_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"this model needs at least {need / 2**30:.1f} GiB to train (vocabulary {model.vocab_size}, "
            f"d_model {model.d_model}, d_mlp {model.d_mlp}, {model.n_layers} layers, batch {batch_size} x "
            f"{length} tokens); this machine has {have / 2**30:.1f} GiB"
        )


def _typed(cls: type, values: dict[str, Any], where: str, extra_to: str | None = None):
    """Build dataclass ``cls`` from ``values``, checking each field's type.

    Keys that are not fields go into the field ``extra_to`` if given, else raise.
    """
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in values.items():
        if key not in hints or key == extra_to:
            if extra_to is None:
                raise ConfigError(f"unknown config key '{where}.{key}'")
            extra[key] = value
            continue
        want = hints[key]
        if want in (int, float, str, bool):
            value = checked_value(f"{where}.{key}", value, want)
        kwargs[key] = value
    if extra_to is not None:
        kwargs[extra_to] = extra
    return cls(**kwargs)


def _positive(where: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{where} must be > 0, got {value}")


def run_config_from_dict(cfg: dict[str, Any]) -> RunConfig:
    """Convert a resolved config mapping (as composed by Hydra) into a checked :class:`RunConfig`."""
    known = {
        "encoder",
        "task",
        "model",
        "train",
        "seed",
        "device",
        "progress",
        "resume",
        "paths",
        "hydra",
        "logger",
        "plugins",
    }
    for key in cfg:
        if key not in known:
            raise ConfigError(f"unknown config key '{key}'")
    for group in ("encoder", "task", "model", "train"):
        if not isinstance(cfg.get(group), dict):
            raise ConfigError(f"config group '{group}' is missing or not a mapping")
    encoder = _typed(EncoderConfig, cfg["encoder"], "encoder", extra_to="options")
    task = _typed(TaskConfig, cfg["task"], "task", extra_to="options")
    model = _typed(ModelConfig, cfg["model"], "model")
    train = _typed(TrainConfig, cfg["train"], "train")
    seed, device, progress = cfg.get("seed", 0), cfg.get("device", "auto"), cfg.get("progress", True)
    logger = _typed(LoggerConfig, cfg.get("logger") or {"name": "none"}, "logger", extra_to="options")
    resume = cfg.get("resume", True)
    _check_run_settings(seed, device, progress, resume, logger)
    check_plugin_key(check_encoder_name, encoder.name, cfg.get("plugins"), "encoder")
    check_plugin_key(check_task_name, task.name, cfg.get("plugins"), "task")
    check_mixer(model.mixer, encoder.name)
    _check_task(task)
    _check_train(train)
    return RunConfig(
        encoder, task, model, train, seed=seed, device=device, progress=progress, resume=resume, logger=logger
    )


def _check_run_settings(seed: object, device: object, progress: object, resume: object, logger: LoggerConfig) -> None:
    """The top-level keys of a run's configuration, each in its range (:class:`ConfigError` otherwise)."""
    if logger.name not in TRACKERS:
        raise ConfigError(f"unknown logger '{logger.name}'; known loggers: {', '.join(TRACKERS)}")
    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed must be an integer in 0..2**63-1, got {seed!r}")
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device must be one of auto, cpu, cuda; got {device!r}")
    if type(progress) is not bool:
        raise ConfigError(f"progress must be true or false, got {progress!r}")
    if type(resume) not in (bool, str) or resume == "":
        raise ConfigError(f"resume must be true, false or a run directory, got {resume!r}")


def _check_task(task: TaskConfig) -> None:
    """The task group's lengths and length draw, each in its range (:class:`ConfigError` otherwise)."""
    if not 1 <= task.length <= MAX_LENGTH:
        raise ConfigError(f"task.length must be between 1 and {MAX_LENGTH}, got {task.length}")
    if (
        task.variable_length
        and task.min_length is not None
        and (type(task.min_length) is not int or not 1 <= task.min_length <= task.length)
    ):
        raise ConfigError(
            f"task.min_length must be null or an integer in [1, task.length={task.length}], got {task.min_length!r}"
        )
    if task.length_draw not in ("example", "batch"):
        raise ConfigError(f"task.length_draw must be example or batch, got {task.length_draw!r}")


def _check_train(train: TrainConfig) -> None:
    """The train group's settings, each in its range and consistent (:class:`ConfigError` otherwise)."""
    if not 0 < train.target_exact_match <= 1:
        raise ConfigError(f"train.target_exact_match must be in (0, 1], got {train.target_exact_match}")
    if train.check_every < 0:
        raise ConfigError(f"train.check_every must be >= 0, got {train.check_every}")
    if type(train.stop_at_mastery) is not bool:
        raise ConfigError(f"train.stop_at_mastery must be true or false, got {train.stop_at_mastery!r}")
    if not train.stop_at_mastery and not train.check_every:
        raise ConfigError(
            "train.stop_at_mastery=false needs checks to record steps-to-learn; "
            "train.check_every=0 makes none (with no checks the whole budget is trained anyway)"
        )
    for key in ("steps", "batch_size", "eval_sequences", "log_every", "check_sequences"):
        _positive(f"train.{key}", getattr(train, key))
    if train.checkpoint_every < 0:
        raise ConfigError(f"train.checkpoint_every must be >= 0, got {train.checkpoint_every}")
    _positive("train.lr", train.lr)
    if not 0 <= train.final_lr_ratio <= 1:
        raise ConfigError(f"train.final_lr_ratio must be in [0, 1], got {train.final_lr_ratio}")
    if not (train.compile is True or train.compile is False or train.compile == "auto"):
        raise ConfigError(f"train.compile must be true, false or auto; got {train.compile!r}")
    if train.precision not in ("auto", "fp32", "bf16"):
        raise ConfigError(f"train.precision must be one of auto, fp32, bf16; got {train.precision!r}")
    if train.warmup_steps < 0 or train.weight_decay < 0 or train.grad_clip < 0:
        raise ConfigError("train.warmup_steps, train.weight_decay and train.grad_clip must be >= 0")


def plugin_config(registry, key: str) -> dict[str, Any]:
    """The Hydra config of plugin ``key`` of ``registry``: ``KEY.yaml`` beside its module if it ships one, else
    ``name`` and its constructor's keyword-only options with their defaults (a task's also the training-length
    keys of :class:`TaskConfig`), which :func:`run_config_from_dict` then checks as a built-in's."""
    cls = registry[key]
    shipped = Path(getattr(sys.modules.get(cls.__module__), "__file__", None) or ".").with_name(f"{key}.yaml")
    if shipped.is_file():
        node = yaml.safe_load(shipped.read_text()) or {}
        if not isinstance(node, dict) or node.get("name") != key:
            raise ConfigError(f"{shipped}: a plugin's config is a mapping whose name is {key!r}")
        return node
    base: dict[str, Any] = {"name": key}
    if registry.group == "task":
        base |= {f.name: f.default for f in dataclasses.fields(TaskConfig) if f.name not in ("name", "options")}
    return base | {k: list(v) if isinstance(v, tuple) else v for k, v in keyword_options(cls).items()}


def store_plugin_configs(args: list[str] | None = None) -> None:
    """Give Hydra a config for the plugin keys ``posenc train ARGS`` may compose (in its ConfigStore, which
    launchers hand to their workers), so that ``encoder=KEY`` composes like a built-in: the keys its
    ``encoder=``/``task=`` overrides name, or every plugin key where the choice is made elsewhere (an
    experiment file, a sweep function, a config folder of the user's) or ``args`` is None. An installed plugin
    that is not named is not imported. Broken plugins are left out: using one raises its own line from the
    registry's check."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    named = _named_choices(args)
    for registry in (ENCODERS, TASKS):
        registry.read_plugins()  # POSENC_PLUGINS imported (its paths made absolute for workers), entry points listed
    for registry in (ENCODERS, TASKS):
        keys = list(registry) if named is None else [k for k in named.get(registry.group, ()) if k in registry]
        for key in keys:
            if registry.origin(key) is None:
                continue
            try:
                store.store(group=registry.group, name=key, node=plugin_config(registry, key))
            except ConfigError:
                continue


def _named_choices(args: list[str] | None) -> dict[str, list[str]] | None:
    """``{"encoder": [...], "task": [...]}`` named by ``args``' overrides (comma lists split), or None where a
    choice may come from elsewhere: no ``args``, an ``experiment=``, a sweep function, ``hydra.searchpath``."""
    if args is None:
        return None
    named: dict[str, list[str]] = {"encoder": [], "task": []}
    for arg in args:
        key, equals, value = arg.lstrip("+~").partition("=")
        if not equals:
            continue
        if key in ("experiment", "hydra.searchpath") or "(" in value:
            return None
        if key in named:
            named[key] += [v.strip() for v in value.split(",") if v.strip()]
    return named
