"""The generic registry behind ENCODERS and TASKS (posenc/registry.py)."""

from __future__ import annotations

import pytest

from posenc.encoders import ENCODERS, AttentionShape
from posenc.errors import ConfigError
from posenc.registry import Registry
from posenc.tasks import TASKS

REGISTRIES = {"encoder": ENCODERS, "task": TASKS}
ARGS = {"encoder": (AttentionShape(32, 4), 16), "task": ()}


@pytest.mark.parametrize("group", REGISTRIES)
def test_registries_are_one_kind(group):
    registry = REGISTRIES[group]
    assert isinstance(registry, Registry) and registry.group == group


@pytest.mark.parametrize("group", REGISTRIES)
def test_unknown_key_names_the_known_ones(group):
    registry = REGISTRIES[group]
    with pytest.raises(ConfigError, match=rf"unknown {group} 'nosuch'; known {group}s: {', '.join(registry)}$"):
        registry.check("nosuch")
    with pytest.raises(ConfigError, match=f"unknown {group} 'nosuch'"):
        registry.build("nosuch", *ARGS[group])


@pytest.mark.parametrize("group", REGISTRIES)
def test_build_checks_options_against_the_constructor(group):
    registry = REGISTRIES[group]
    name = next(iter(registry))
    assert isinstance(registry.build(name, *ARGS[group]), registry[name])
    with pytest.raises(ConfigError, match=f"{group} '{name}' has no option 'bogus'"):
        registry.build(name, *ARGS[group], options={"bogus": 1})


def test_build_converts_option_types():
    encoder = ENCODERS.build("rope", AttentionShape(32, 4), 16, options={"base": 500})  # int for a float
    assert encoder.base == 500.0 and type(encoder.base) is float
    with pytest.raises(ConfigError, match="encoder.base must be a finite number"):
        ENCODERS.build("rope", AttentionShape(32, 4), 16, options={"base": float("nan")})


@pytest.mark.parametrize("group", REGISTRIES)
def test_parse_keeps_order_drops_repeats_and_refuses_unknown_or_empty(group):
    registry = REGISTRIES[group]
    first, second = list(registry)[:2]
    assert registry.parse(None, "--x") == list(registry)
    assert registry.parse(f" {second},{first} ,{second},", "--x") == [second, first]
    with pytest.raises(ConfigError, match=f"--x needs at least one {group}"):
        registry.parse(" , ", "--x")
    with pytest.raises(ConfigError, match=f"unknown {group} 'nosuch'"):
        registry.parse(f"{first},nosuch", "--x")


@pytest.mark.parametrize("group", REGISTRIES)
def test_builtins_are_posens_own_keys_whatever_is_installed(group):
    """Tests and experiments that mean posenc's own encoders and tasks compare against ``builtins()``, which
    an installed plugin (entry point) or POSENC_PLUGINS never extends."""
    registry = REGISTRIES[group]
    builtins = registry.builtins()
    assert builtins == [key for key in registry if registry.origin(key) is None]
    assert all(registry[key].__module__.startswith(f"posenc.{group}s.") for key in builtins)
