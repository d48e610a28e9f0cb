"""Every registered encoder: config file, construction, and the hooks' contracts.

Parametrized over the registry, so a new encoder is tested here for free.
"""

from pathlib import Path

import pytest
import torch
import yaml

from importlib.resources import files
from posenc.encoders import ENCODERS, AttentionShape, RotaryEncoder, build_encoder
from posenc.errors import ConfigError

CONF = Path(str(files("posenc.conf") / "encoder"))
SHAPE = AttentionShape(d_model=32, n_heads=4)


def test_every_registry_key_has_a_config_file_and_vice_versa():
    stems = {p.stem for p in CONF.glob("*.yaml")}
    assert stems == set(ENCODERS)
    for stem in stems:
        assert yaml.safe_load((CONF / f"{stem}.yaml").read_text())["name"] == stem


@pytest.mark.parametrize("name", ENCODERS)
def test_config_file_options_build_the_encoder(name):
    options = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    options.pop("name")
    encoder = build_encoder(name, SHAPE, train_length=16, options=options)
    assert isinstance(encoder, ENCODERS[name])
    assert encoder.description


@pytest.mark.parametrize("name", ENCODERS)
def test_hooks_keep_shapes(name):
    encoder = build_encoder(name, SHAPE, train_length=16)
    positions = torch.arange(10)
    x = torch.randn(2, 10, 32)
    assert encoder.embed(x, positions).shape == x.shape
    q, k = torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8)
    q2, k2 = encoder.rotate(q, k, positions)
    wide = (*q.shape[:-1], q.shape[-1] * encoder.rotated_width)  # PoPE: cosine and sine parts
    assert q2.shape == k2.shape == wide
    if encoder.has_score_bias:
        assert encoder.score_bias(positions[3:7], positions).shape == (4, 4, 10)


@pytest.mark.parametrize("name", [n for n, c in ENCODERS.items() if issubclass(c, RotaryEncoder)])
def test_rotary_encoders_refuse_odd_head_dim(name):
    with pytest.raises(ConfigError, match="even head dimension"):
        build_encoder(name, AttentionShape(d_model=36, n_heads=4), train_length=16)


# A schedule refuses an odd head dimension exactly when its pattern holds a rotary encoder (its default
# does): tests/encoders/test_schedule.py.
@pytest.mark.parametrize("name", [n for n, c in ENCODERS.items() if not issubclass(c, RotaryEncoder) and n != "schedule"])
def test_other_encoders_accept_odd_head_dim(name):
    shape = AttentionShape(d_model=36, n_heads=4)  # head_dim 9
    encoder = build_encoder(name, shape, train_length=16)
    assert isinstance(encoder, ENCODERS[name]) and encoder.shape.head_dim == 9
    positions = torch.arange(10)
    x = torch.randn(2, 10, 36)
    q, k = torch.randn(2, 4, 10, 9), torch.randn(2, 4, 10, 9)
    outputs = [encoder.embed(x, positions), *encoder.rotate(q, k, positions)]  # the hooks run at head_dim 9
    if encoder.has_score_bias:
        outputs.append(encoder.score_bias(positions, positions))
        assert outputs[-1].shape == (4, 10, 10)
    wide = (*q.shape[:-1], 9 * encoder.rotated_width)
    assert [t.shape for t in outputs[:3]] == [x.shape, wide, wide]
    assert all(torch.isfinite(t).all() for t in outputs)


def test_unknown_encoder_and_option_are_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match="known encoders: nope, sinusoidal, learned, alibi, rope"):
        build_encoder("bogus", SHAPE, 16)
    with pytest.raises(ConfigError, match="has no option 'gama'.*gamma"):
        build_encoder("xpos", SHAPE, 16, {"gama": 0.4})
    with pytest.raises(ConfigError, match="encoder.base must be of type float"):
        build_encoder("rope", SHAPE, 16, {"base": "big"})


@pytest.mark.parametrize("name", ENCODERS)
def test_one_capability_says_which_encoders_take_rope_scaling(name):
    """`takes_rope_scaling` is the one answer (extrapolate, kernels ask it): exactly the encoders with a
    working set_rope_scaling."""
    from posenc.functional.rope_scaling_spec import RopeScaling

    encoder = build_encoder(name, SHAPE, train_length=16)
    rotary = {"rope", "rope_ntk", "xpos", "rope_partial", "p_rope", "schedule"}  # schedule: its default holds rope
    assert encoder.takes_rope_scaling == (name in rotary)
    if encoder.takes_rope_scaling:
        encoder.set_rope_scaling(RopeScaling("linear", 2.0))
        q = torch.ones(1, SHAPE.n_heads, 8, SHAPE.head_dim)
        assert torch.isfinite(encoder.rotate(q, q, torch.arange(8))[0]).all()
