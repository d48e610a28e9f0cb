"""The transformer with every encoder: shapes, causality, determinism, chunked bias attention."""

import pytest
import torch

from posenc import model as model_module
from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.errors import ConfigError
from posenc.model import ModelConfig, Transformer, causal_attention

CFG = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, d_mlp=64)


def make_model(name: str, seed: int = 0, train_length: int = 64) -> Transformer:
    torch.manual_seed(seed)
    encoder = build_encoder(name, AttentionShape(CFG.d_model, CFG.n_heads), train_length)
    return Transformer(CFG, encoder).eval()


@pytest.mark.parametrize("name", ENCODERS)
def test_logits_shape(name):
    idx = torch.randint(20, (3, 40))
    assert make_model(name)(idx).shape == (3, 40, 20)


@pytest.mark.parametrize("name", ENCODERS)
def test_causality_later_tokens_never_change_earlier_outputs(name):
    model = make_model(name)
    idx = torch.randint(20, (2, 30))
    changed = idx.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % 20
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :20], b[:, :20])
    assert not torch.allclose(a[:, 20:], b[:, 20:])


@pytest.mark.parametrize("name", ENCODERS)
def test_same_seed_same_model_different_seed_different_model(name):
    idx = torch.randint(20, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(make_model(name, seed=3)(idx), make_model(name, seed=3)(idx))
        assert not torch.allclose(make_model(name, seed=3)(idx), make_model(name, seed=4)(idx))


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_parameters_appear_once_in_state_dict(name):
    model = make_model(name)
    keys = [k for k in model.state_dict() if "encoder" in k]
    assert all(k.startswith("encoder.") for k in keys)


def test_chunked_bias_attention_equals_dense_reference(monkeypatch):
    monkeypatch.setattr(model_module, "BIAS_QUERY_BLOCK", 16)
    encoder = build_encoder("alibi", AttentionShape(32, 4), 64)
    q, k, v = (torch.randn(2, 4, 50, 8, dtype=torch.float64) for _ in range(3))
    positions = torch.arange(50)
    out = causal_attention(q, k, v, positions, encoder)
    bias = encoder.score_bias(positions, positions).to(torch.float64)
    scores = q @ k.transpose(-1, -2) / 8**0.5 + bias
    scores = scores.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(out, scores.softmax(-1) @ v)


def test_model_config_is_validated():
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4).validate()
    with pytest.raises(ConfigError, match="n_layers"):
        ModelConfig(n_layers=0).validate()
