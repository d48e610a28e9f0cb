"""Every registered encoder: config file, construction, the encoder contract, and the built-ins' conventions.

Parametrized over the registry, so a new encoder is tested here for free, with no list to edit. The contract
(hook shapes, causality, determinism, every declared fast path against its reference, lengths past training, a
loss that falls) is posenc.conformance's, written once: `posenc encoders --check KEY` holds plugins to it, and
here every built-in is (tests/test_conformance.py shows each property failing on a broken toy).
"""

from importlib.resources import files
from pathlib import Path

import pytest
import torch
import yaml

from posenc.encoders import ENCODERS, AttentionShape, RotaryEncoder, build_encoder
from posenc.errors import ConfigError
from posenc.testing import assert_conforms

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


@pytest.mark.parametrize("name", ENCODERS.builtins())
def test_every_encoder_conforms(name):
    """The whole contract (posenc.conformance): every hook's shape at head dims 8, 4, 9 and a single head,
    batches 1 and 3, lengths 1 to 37, five layers' parts (embed keeps ``x``'s shape, rotate widens by
    ``rotated_width``, score_bias of a query range is ``[n_h, queries, keys]``, ...); no influence of later tokens
    in float32 and float64, at inference and in a training step; bitwise determinism; every fast path against its
    reference in float64 (at initial and trained-like parameters); lengths past training run or are refused by
    check_positions; 60 Adam steps lower the loss. Its failures print one line per property."""
    assert_conforms(name)


def holds_rotary(encoder) -> bool:
    """Whether ``encoder`` is, or holds, a rotary encoder (a schedule's pattern, a randomized base)."""
    return any(isinstance(module, RotaryEncoder) for module in encoder.modules())


# A schedule holds a rotary encoder exactly when its pattern does (its default does): tests/encoders/test_schedule.py.
@pytest.mark.parametrize("name", ENCODERS)
def test_an_encoder_refuses_an_odd_head_dim_exactly_when_it_holds_a_rotary_one(name):
    shape = AttentionShape(d_model=36, n_heads=4)  # head_dim 9
    if holds_rotary(build_encoder(name, SHAPE, train_length=16)):
        with pytest.raises(ConfigError, match="even head dimension"):
            build_encoder(name, shape, train_length=16)
        return
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
    """`takes_rope_scaling` is the one answer (extrapolate, kernels ask it): exactly the encoders that hold a
    rotary encoder and pass scaling on to it (set_rope_scaling: the rotary encoders, a schedule; not a randomized
    one, whose positions are its own), whose set_rope_scaling works; the class says the same unbuilt."""
    from posenc.functional.rope_scaling_spec import RopeScaling

    encoder = build_encoder(name, SHAPE, train_length=16)
    passes_on = callable(getattr(encoder, "set_rope_scaling", None))
    assert encoder.takes_rope_scaling == (passes_on and holds_rotary(encoder))
    assert ENCODERS[name].takes_rope_scaling_with({}) == encoder.takes_rope_scaling
    assert encoder.takes_rope_scaling or not isinstance(encoder, RotaryEncoder)
    if encoder.takes_rope_scaling:
        encoder.set_rope_scaling(RopeScaling("linear", 2.0))
        q = torch.ones(1, SHAPE.n_heads, 8, SHAPE.head_dim)
        assert torch.isfinite(encoder.rotate(q, q, torch.arange(8))[0]).all()
