"""The transformer with every encoder: shapes, causality, determinism, chunked bias attention."""

import pytest
import torch
from rounding import gamma

from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.errors import ConfigError
from posenc.nn.model import ModelConfig, Transformer

CFG = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, d_mlp=64)


def make_model(name: str, seed: int = 0, train_length: int = 64) -> Transformer:
    torch.manual_seed(seed)
    encoder = build_encoder(name, AttentionShape(CFG.d_model, CFG.n_heads), train_length)
    return Transformer(CFG, encoder).eval()


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_tensors_are_parameters_or_buffers(name):
    """A tensor an encoder keeps as a plain attribute is neither saved, trained nor moved by `.to(device)` (a
    parameter turned into one would silently leave the state dict): every tensor attribute of every module of
    the built model is registered."""
    model = make_model(name)
    model(torch.randint(20, (1, 8)))  # encoders that build per-layer parts build them here
    for path, module in model.named_modules():
        plain = [key for key, value in vars(module).items() if isinstance(value, torch.Tensor)]
        assert not plain, f"{name}: {path or 'model'} keeps {plain} as plain tensors"


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
    """Every layer shares the encoder, yet its tensors are stored once, under the model's `encoder.`: the
    state dict is the backbone's (NoPE's, which has no tensors) plus exactly the encoder's own entries."""
    model = make_model(name)
    state = model.state_dict()
    own = model.encoder.state_dict()
    backbone = make_model("nope")
    assert not backbone.encoder.state_dict()  # NoPE: the backbone alone
    assert {k for k in state if not k.startswith("encoder.")} == set(backbone.state_dict())  # none per layer
    assert {k for k in state if k.startswith("encoder.")} == {f"encoder.{k}" for k in own}
    for key, tensor in own.items():  # the very tensor, stored under one key only
        assert state[f"encoder.{key}"].data_ptr() == tensor.data_ptr()
        assert sum(t.data_ptr() == tensor.data_ptr() for t in state.values()) == 1, key
    n_backbone, n_encoder = (sum(p.numel() for p in m.parameters()) for m in (backbone, model.encoder))
    assert sum(p.numel() for p in model.parameters()) == n_backbone + n_encoder


def test_the_state_dict_test_covers_encoders_with_tensors_of_their_own():
    """Encoders with learned tensors are where "once" matters: the test above must see some."""
    with_state = {name for name in ENCODERS if make_model(name).encoder.state_dict()}
    assert {"learned", "t5", "kerple", "fire"} <= with_state


@pytest.mark.parametrize("name", ENCODERS)
def test_model_outputs_agree_across_attention_kinds(name):
    cfg = ModelConfig(vocab_size=18)
    torch.manual_seed(0)
    blocked = Transformer(ModelConfig(vocab_size=18, attention="blocked"), build_encoder(name, cfg.shape, 1100))
    auto = Transformer(cfg, build_encoder(name, cfg.shape, 1100))  # compiles: FlexAttention past 1024 tokens
    auto.load_state_dict(blocked.state_dict())
    tokens = torch.randint(0, 18, (1, 1100))
    # Two fp32 paths (FlexAttention, query blocks) sum in different orders: each logit is a chain through 2
    # blocks whose longest sums are attention's over 1100 keys (softmax normaliser, output, online rescaling:
    # 3300 terms) and the MLP's (128 + 512), about 4200 roundings a block, 8500 in all: gamma(8500) = 5e-4
    # relative to the magnitudes summed, at most about 5x the logits' scale (3): each path within 7.6e-3
    tolerance = 5 * 3 * gamma(8500, torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(auto(tokens), blocked(tokens), atol=2 * tolerance, rtol=0)


def test_positions_tensor_is_reused_per_length_so_rotary_tables_are_cached():
    model = make_model("rope")
    tokens = torch.randint(0, 18, (2, 30))
    first = model(tokens)
    tables = dict(model.encoder._tables)
    torch.testing.assert_close(model(tokens), first)
    assert len(tables) == 1 and list(model.encoder._tables) == list(tables)  # no new table for this length
    assert all(model.encoder._tables[key][1] is tables[key][1] for key in tables)
    model(torch.randint(0, 18, (2, 31)))
    assert len(model.encoder._tables) == 2


def test_model_config_is_validated():
    with pytest.raises(ConfigError, match="model.attention"):
        ModelConfig(attention="fast").validate()
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4).validate()
    with pytest.raises(ConfigError, match="n_layers"):
        ModelConfig(n_layers=0).validate()


@pytest.mark.parametrize("name", ["nope", "sinusoidal", "learned", "rope"])
def test_token_embeddings_enter_scaled_by_sqrt_d_model_for_every_encoder(name, monkeypatch):
    """Vaswani et al. §3.4, applied by the model for every encoder: the encoder's embed hook receives the token
    embeddings times sqrt(d_model); initialised with std d_model**-0.5, they enter at RMS about 1."""
    model = make_model(name)
    d = model.cfg.d_model
    std = model.tok_emb.weight.std().item()
    assert std == pytest.approx(d**-0.5, rel=0.05)
    assert model.lm_head.weight is model.tok_emb.weight  # tied: the head's initial logits have std ~1 too
    seen = []
    original = type(model.encoder).embed
    monkeypatch.setattr(type(model.encoder), "embed", lambda self, x, pos: (seen.append(x), original(self, x, pos))[1])
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 9))
    model(tokens)
    torch.testing.assert_close(seen[0], model.tok_emb(tokens) * d**0.5)
    assert seen[0].pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=0.2)
