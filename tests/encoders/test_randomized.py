"""The randomized encoder (Ruoss et al. 2023): sampled positions in training, fixed ones at evaluation."""

import math

import pytest
import torch
from conftest import learned_run

from posenc import functional as pf
from posenc.encoders import ENCODERS, AttentionShape, Randomized, build_encoder
from posenc.errors import ConfigError, PositionRangeError
from posenc.nn.model import ModelConfig, Transformer
from posenc.running import runs as run_dirs

SHAPE = AttentionShape(d_model=32, n_heads=4)


def test_registered_without_score_bias_or_score_mod():
    assert ENCODERS["randomized"] is Randomized
    encoder = build_encoder("randomized", SHAPE, 16)
    assert not encoder.has_score_bias and encoder.score_mod(8) is None
    assert (encoder.base, encoder.max_position) == ("sinusoidal", 8192)


def test_training_positions_are_sorted_unique_in_range_and_fresh_every_forward():
    encoder = build_encoder("randomized", SHAPE, 16, {"max_position": 100}).train()
    draws = [encoder.sample_positions(torch.arange(16)) for _ in range(5)]
    for pos in draws:
        assert pos.shape == (16,) and pos.dtype == torch.long
        assert (pos[1:] > pos[:-1]).all() and pos.min() >= 0 and pos.max() < 100
    assert len({tuple(p.tolist()) for p in draws}) == 5


def test_training_positions_follow_the_global_seed():
    encoder = build_encoder("randomized", SHAPE, 16).train()
    torch.manual_seed(3)
    a = encoder.sample_positions(torch.arange(16))
    torch.manual_seed(3)
    assert torch.equal(encoder.sample_positions(torch.arange(16)), a)


def test_evaluation_positions_are_deterministic_per_length():
    a = build_encoder("randomized", SHAPE, 16).eval()
    torch.manual_seed(0)
    first = a.sample_positions(torch.arange(40))
    assert a.sample_positions(torch.arange(40)) is first  # the same tensor: rotary tables stay cached
    torch.manual_seed(1)
    b = build_encoder("randomized", SHAPE, 16).eval()
    assert torch.equal(b.sample_positions(torch.arange(40)), first)  # any global seed, any instance
    assert (first[1:] > first[:-1]).all() and first.max() < 8192
    assert not torch.equal(first, torch.arange(40))
    assert not torch.equal(b.sample_positions(torch.arange(41))[:40], first)  # drawn afresh per length
    with torch.no_grad():  # a no-grad forward in training mode is an evaluation, not a training step
        assert torch.equal(b.train().sample_positions(torch.arange(40)), first)


def test_lengths_beyond_max_position_raise_position_range_error():
    encoder = build_encoder("randomized", SHAPE, 16, {"max_position": 64})
    encoder.check_positions(64)
    with pytest.raises(PositionRangeError, match="max_position=64"):
        encoder.check_positions(65)
    for mode in (encoder.train(), encoder.eval()):
        with pytest.raises(PositionRangeError):
            mode.sample_positions(torch.arange(65))


def test_options_are_checked():
    build_encoder("randomized", SHAPE, 16, {"base": "rope", "max_position": 4096})
    with pytest.raises(ConfigError, match="sinusoidal, rope"):
        build_encoder("randomized", SHAPE, 16, {"base": "alibi"})
    with pytest.raises(ConfigError, match="training length"):
        build_encoder("randomized", SHAPE, 16, {"max_position": 8})
    with pytest.raises(ConfigError, match="must be of type int"):
        build_encoder("randomized", SHAPE, 16, {"max_position": "big"})
    with pytest.raises(ConfigError, match="even head dimension"):  # rope's own check
        build_encoder("randomized", AttentionShape(d_model=36, n_heads=4), 16, {"base": "rope"})


def test_the_base_encoding_is_read_at_the_sampled_positions():
    pos = torch.tensor([3, 50, 51, 900])
    sinusoidal = build_encoder("randomized", SHAPE, 16, {"base": "sinusoidal"})
    x = torch.randn(2, 4, 32)
    torch.testing.assert_close(sinusoidal.embed(x, pos), x + pf.sinusoidal_table(pos, 32))  # model scales x
    rope = build_encoder("randomized", SHAPE, 16, {"base": "rope"})
    q, k = torch.randn(2, 4, 4, 8), torch.randn(2, 4, 4, 8)
    q2, k2 = rope.rotate(q, k, pos)
    inv_freq = pf.rope_inv_freq(8)
    torch.testing.assert_close(q2, pf.apply_rope(q, pos, inv_freq))
    torch.testing.assert_close(k2, pf.apply_rope(k, pos, inv_freq))
    assert torch.equal(sinusoidal.rotate(q, k, pos)[0], q) and torch.equal(rope.embed(x, pos), x)


@pytest.mark.parametrize("base", ["sinusoidal", "rope"])
def test_model_training_forwards_differ_and_evaluation_is_deterministic(base):
    cfg = ModelConfig(vocab_size=12, d_model=32, n_layers=2, n_heads=4, d_mlp=64)
    torch.manual_seed(0)
    model = Transformer(cfg, build_encoder("randomized", cfg.shape, 16, {"base": base, "max_position": 512}))
    tokens = torch.randint(0, 12, (2, 16))
    model.train()
    assert not torch.allclose(model(tokens), model(tokens))
    model.eval()
    torch.testing.assert_close(model(tokens), model(tokens))


def test_full_tiny_training_run_then_evaluation_with_a_nan_row_past_max_position(tmp_path, always_learns):
    from posenc.running.extrapolate import extrapolate

    overrides = ("encoder=randomized", "encoder.base=rope", "encoder.max_position=32")
    metrics = learned_run(tmp_path, *overrides)  # learned: evaluated past its training length
    assert 0 <= metrics["token_accuracy"] <= 1
    _, _, model = run_dirs.load_run(tmp_path)
    assert isinstance(model.encoder, Randomized) and model.encoder.max_position == 32
    results, skipped = extrapolate([tmp_path], [16, 32, 64], sequences=4, device="cpu", progress=False)
    assert not skipped
    rows = {int(r.eval_length): r for r in results.evaluations.itertuples()}
    assert not math.isnan(rows[32].token_accuracy) and rows[32].note == ""
    assert math.isnan(rows[64].exact_match) and "max_position=32" in rows[64].note
    assert set(results.sequences["eval_length"]) == {16, 32}  # the NaN row has no sequences
