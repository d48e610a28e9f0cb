"""Every registered encoder: config file, construction, and the hooks' contracts.

Parametrized over the registry, so a new encoder is tested here for free.
"""

from pathlib import Path

import pytest
import torch
import yaml

from importlib.resources import files
from posenc import functional as F
from posenc.encoders import ENCODERS, AttentionShape, RotaryEncoder, build_encoder
from posenc.errors import ConfigError, PositionRangeError

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
    assert q2.shape == q.shape and k2.shape == k.shape
    if encoder.has_score_bias:
        assert encoder.score_bias(positions[3:7], positions).shape == (4, 4, 10)


@pytest.mark.parametrize("name", [n for n, c in ENCODERS.items() if issubclass(c, RotaryEncoder)])
def test_rotary_encoders_refuse_odd_head_dim(name):
    with pytest.raises(ConfigError, match="even head dimension"):
        build_encoder(name, AttentionShape(d_model=36, n_heads=4), train_length=16)


@pytest.mark.parametrize("name", [n for n, c in ENCODERS.items() if not issubclass(c, RotaryEncoder)])
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
    assert [t.shape for t in outputs[:3]] == [x.shape, q.shape, k.shape]
    assert all(torch.isfinite(t).all() for t in outputs)


def test_unknown_encoder_and_option_are_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match="known encoders: nope, sinusoidal, learned, alibi, rope"):
        build_encoder("bogus", SHAPE, 16)
    with pytest.raises(ConfigError, match="has no option 'gama'.*gamma"):
        build_encoder("xpos", SHAPE, 16, {"gama": 0.4})
    with pytest.raises(ConfigError, match="encoder.base must be of type float"):
        build_encoder("rope", SHAPE, 16, {"base": "big"})


def test_learned_table_reports_positions_it_does_not_have():
    encoder = build_encoder("learned", SHAPE, train_length=16)
    encoder.check_positions(16)
    with pytest.raises(PositionRangeError, match="has 16 positions"):
        encoder.check_positions(17)
    with pytest.raises(PositionRangeError):
        encoder.embed(torch.randn(1, 17, 32), torch.arange(17))


def test_rope_ntk_is_rope_up_to_train_length_and_ntk_beyond():
    rope = build_encoder("rope", SHAPE, train_length=16)
    ntk = build_encoder("rope_ntk", SHAPE, train_length=16)
    q, k = torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)
    for a, b in zip(rope.rotate(q, k, torch.arange(16)), ntk.rotate(q, k, torch.arange(16))):
        torch.testing.assert_close(a, b)
    expected = F.rope_inv_freq(8, F.ntk_base(10000.0, 8, 64 / 16))
    torch.testing.assert_close(ntk.scaling_for(64)[0], expected)
    q, k = torch.randn(1, 4, 64, 8), torch.randn(1, 4, 64, 8)
    torch.testing.assert_close(ntk.rotate(q, k, torch.arange(64))[0], F.apply_rope(q, torch.arange(64), expected))


def test_alibi_bias_uses_the_paper_slopes():
    encoder = build_encoder("alibi", SHAPE, 16)
    bias = encoder.score_bias(torch.arange(5), torch.arange(5))
    torch.testing.assert_close(bias[:, 4, 0], -4 * F.alibi_slopes(4))


def test_sinusoidal_adds_the_table_to_the_embeddings():
    # The sqrt(d_model) scale of the paper (§3.4) is applied by the model for every encoder (test_model.py),
    # so the encoder itself only adds its table.
    encoder = build_encoder("sinusoidal", SHAPE, 16)
    x = torch.randn(1, 6, 32)
    expected = x + F.sinusoidal_table(torch.arange(6), 32)
    torch.testing.assert_close(encoder.embed(x, torch.arange(6)), expected)


@pytest.mark.parametrize("name", ENCODERS)
def test_one_capability_says_which_encoders_take_rope_scaling(name):
    """`takes_rope_scaling` is the one answer (extrapolate, kernels ask it): exactly the encoders with a
    working set_rope_scaling."""
    from posenc.functional.rope_scaling import RopeScaling

    encoder = build_encoder(name, SHAPE, train_length=16)
    assert encoder.takes_rope_scaling == (name in {"rope", "rope_ntk", "xpos", "rope_partial"})
    if encoder.takes_rope_scaling:
        encoder.set_rope_scaling(RopeScaling("linear", 2.0))
        q = torch.ones(1, SHAPE.n_heads, 8, SHAPE.head_dim)
        assert torch.isfinite(encoder.rotate(q, q, torch.arange(8))[0]).all()
