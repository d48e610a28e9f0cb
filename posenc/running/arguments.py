"""Command-line values, parsed and checked: each bad value is one :class:`PosencError` line naming its option.

Shared by ``posenc extrapolate``, ``compare``, ``report``, ``kernels`` and ``runs`` so that the same option
means the same thing everywhere; the commands themselves live in :mod:`posenc.cli.app`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from posenc.analysis.store import NO_SCALING  # noqa: F401  (a value of --rope-scaling; re-exported)
from posenc.errors import PosencError

if TYPE_CHECKING:
    from posenc.functional.rope_scaling_spec import RopeScaling

MAX_DISTANCE = 1 << 16  # longest `posenc kernels --max-distance`: the kernel is computed at every distance
DEVICES = ("auto", "cpu", "cuda")


def parse_lengths(text: str) -> list[int]:
    """``"512,2048,8192"`` -> ``[512, 2048, 8192]`` (sorted, each once); anything else raises."""
    from posenc.encoders.base import MAX_LENGTH  # the longest sequence posenc accepts anywhere

    lengths = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part):  # ASCII digits only: str.isdigit accepts "²"
            raise PosencError(f"--lengths: {part!r} is not a positive integer (expected e.g. 512,2048,8192)")
        value = int(part)
        if not 1 <= value <= MAX_LENGTH:
            raise PosencError(f"--lengths: {value} is out of range; lengths must be in 1..{MAX_LENGTH}")
        lengths.append(value)
    return sorted(set(lengths))


def parse_scalings(text: str, factor: float | None = None) -> list[RopeScaling]:
    """``"none,yarn"`` -> RoPE scalings (each with ``factor``; None: it follows the evaluation length).

    A method may carry options after a colon, e.g. ``"none,yarn:beta_fast=16,beta_slow=1,llama3"``: a part
    with ``=`` belongs to the method before it. Option values take the type of the method's default
    (numbers; ``true``/``false``). Unknown methods or options, bad values or a non-positive factor raise a
    one-line :class:`PosencError` naming the known ones, as Hugging Face validates ``rope_scaling``.
    """
    from posenc.functional.rope_scaling import ROPE_SCALING
    from posenc.functional.rope_scaling_spec import RopeScaling, method_options

    if factor is not None and not (math.isfinite(factor) and factor > 0):
        raise PosencError(f"--rope-factor must be a positive number, got {factor}")
    parsed: list[tuple[str, dict[str, object]]] = []
    for part in (p.strip() for p in text.split(",")):
        method, colon, option = part.partition(":")
        if "=" in part and not colon:  # an option of the method before it
            if not parsed or parsed[-1][0] == NO_SCALING:
                raise PosencError(f"--rope-scaling: option {part!r} follows no method (e.g. yarn:beta_fast=16)")
            method, option = parsed[-1][0], part
        else:
            if method not in ROPE_SCALING:
                raise PosencError(
                    f"--rope-scaling: unknown method {method!r}; known methods: {', '.join(ROPE_SCALING)}"
                )
            parsed.append((method, {}))
        if option:
            name, equals, value = (t.strip() for t in option.partition("="))
            allowed = method_options(method)
            if name not in allowed:
                raise PosencError(
                    f"--rope-scaling: {method} has no option {name!r}; its options: "
                    f"{', '.join(f'{k}=' for k in allowed)}"
                )
            if not equals:
                raise PosencError(f"--rope-scaling: {method}: option {name} needs a value ({name}=...)")
            if name in parsed[-1][1]:
                raise PosencError(f"--rope-scaling: {method}: option {name} given twice")
            parsed[-1][1][name] = _option_value(method, name, value, allowed[name])
    if factor is not None and all(method == NO_SCALING for method, _ in parsed):
        raise PosencError(
            f"--rope-factor {factor:g} sets the factor of a RoPE scaling method, and --rope-scaling "
            f"names none ({text!r}); add one, e.g. --rope-scaling none,yarn --rope-factor {factor:g}"
        )
    scalings = []
    for method, options in parsed:
        defaults = method_options(method)
        # one label per setting: a default given explicitly is left out, options in name order
        given = tuple(
            sorted((k, v) for k, v in options.items() if v != defaults[k] or type(v) is not type(defaults[k]))
        )
        scaling = RopeScaling(method, None if method == NO_SCALING else factor, given)
        try:
            scaling.validate().resolve(64, 10000.0, 64, 64)  # the method's own range checks (beta_fast > beta_slow)
        except ValueError as err:
            raise PosencError(f"--rope-scaling: {err}") from err
        if scaling not in scalings:
            scalings.append(scaling)
    return scalings


def _option_value(method: str, name: str, text: str, default: object) -> object:
    """``text`` as the type of the option's default (None: an int, a length)."""
    want = type(default) if default is not None else int
    try:
        if want is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        return want(text)
    except ValueError:
        raise PosencError(
            f"--rope-scaling: {method}: {name} must be "
            f"{'true or false' if want is bool else f'a number ({want.__name__})'}, "
            f"got {text!r}"
        ) from None


def parse_encoders(text: str | None) -> list[str]:
    """Registry keys from ``--encoders`` (None: all); an unknown key raises with the known ones."""
    from posenc.encoders import ENCODERS

    return ENCODERS.parse(text, "--encoders")


def check_eval_options(sequences: int | None, device: str) -> None:
    """``--sequences`` (None: the default count) and ``--device``."""
    if sequences is not None and sequences < 1:
        raise PosencError(f"--sequences must be >= 1, got {sequences}")
    if device not in DEVICES:
        raise PosencError(f"--device must be auto, cpu or cuda; got {device!r}")


def check_max_distance(max_distance: int) -> None:
    if not 1 <= max_distance <= MAX_DISTANCE:
        raise PosencError(f"--max-distance must be between 1 and {MAX_DISTANCE}, got {max_distance}")


def check_factor(factor: float) -> None:
    if not (math.isfinite(factor) and factor >= 1):
        raise PosencError(f"--factor must be a finite number >= 1, got {factor}")


DEFAULT_MAX_HOURS = 24.0  # longer estimated evaluations are refused unless --max-hours raises the limit


def check_max_hours(max_hours: float) -> None:
    """Refuse a time limit that cannot mean anything (zero, negative, NaN)."""
    if not max_hours > 0:
        raise PosencError(f"--max-hours must be a positive number of hours (inf: no limit), got {max_hours}")


def experiment_single_run(args: list[str]) -> str | None:
    """``posenc train experiment=NAME`` without ``-m``, where NAME's file sweeps keys (``hydra.sweeper.params``):
    Hydra then trains one run, the defaults standing in for every swept key not given. Refused in one line where
    that run is none of the experiment's (``experiment=headline_retrieval`` sweeps ``task=retrieval`` but would
    train copy, without a word); else a note naming the one run it trains (None: nothing to say). Hydra's own
    modes (``-m``, ``--cfg``, ``--help``) and compositions that fail (reported by the precheck) are left alone."""
    if any(a.startswith("-") for a in args):
        return None
    named = [a.partition("=")[2] for a in args if a.partition("=")[0].lstrip("+") == "experiment"]
    if len(named) != 1 or "," in named[0]:
        return None
    from hydra import compose, initialize_config_module
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    try:
        with initialize_config_module(config_module="posenc.conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=args, return_hydra_config=True)
        params = OmegaConf.to_container(cfg.hydra.sweeper.params) or {}
        parsed = {key: OverridesParser.create().parse_override(f"{key}={sweep}") for key, sweep in params.items()}
        swept = {
            key: list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
            for key, o in parsed.items()
        }
    except Exception:  # whatever fails here fails in the precheck or in Hydra, in its own words
        return None
    given = {a.partition("=")[0].lstrip("+~") for a in args if "=" in a}
    choices = cfg.hydra.runtime.choices
    chosen = {
        key: str(choices[key] if key in choices else OmegaConf.select(cfg, key)) for key in swept if key not in given
    }
    outside = [key for key, value in chosen.items() if value not in swept[key]]
    runs = math.prod(len(values) for values in swept.values())
    if outside:
        key = outside[0]
        raise PosencError(
            f"experiment={named[0]} is a sweep of {runs} runs ({key}={params[key]}): without -m this "
            f"would train one run with {key}={chosen[key]}, which is none of them; add -m to train the "
            f"sweep, or name one of its runs ({' '.join(f'{k}=...' for k in swept)})"
        )
    if not chosen:
        return None
    return (
        f"experiment={named[0]} is a sweep of {runs} runs (-m trains them all); without -m this trains one of "
        f"them: {' '.join(f'{k}={v}' for k, v in chosen.items())}"
    )
