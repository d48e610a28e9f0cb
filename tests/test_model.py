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


BIAS_ENCODERS = [n for n, c in ENCODERS.items() if c.has_score_bias]


def _dense_reference(q, k, v, encoder):
    s = q.shape[-2]
    positions = torch.arange(s)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + encoder.score_bias(positions, positions).to(q.dtype)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_score_mod_is_the_score_bias(name):
    encoder = build_encoder(name, AttentionShape(32, 4), 64)
    score_mod = encoder.score_mod()
    if score_mod is None:
        pytest.skip(f"{name} has no FlexAttention form")
    positions = torch.arange(40)
    q_idx, kv_idx = positions[:, None].expand(40, 40), positions[None, :].expand(40, 40)
    for h in range(4):
        got = score_mod(torch.zeros(40, 40), torch.tensor(0), torch.tensor(h), q_idx, kv_idx)
        torch.testing.assert_close(got, encoder.score_bias(positions, positions)[h].float())


def test_causal_block_mask_equals_flex_attentions_own():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    for seq in (1, 127, 128, 300, 1000):
        ours = model_module.causal_block_mask(seq, torch.device("cpu"))
        theirs = flex.create_block_mask(model_module._causal, None, None, seq, seq, device="cpu")
        assert ours.to_dense().tolist() == theirs.to_dense().tolist(), seq


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_flex_attention_equals_query_blocks_and_the_dense_reference(name):
    """The fast path (compiled FlexAttention) and the fallback give the same numbers (fp32 tolerance)."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    encoder = build_encoder(name, AttentionShape(128, 4), 64)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1100, 32) for _ in range(3))  # > FLEX_MIN_LENGTH, not a multiple of 128
    positions = torch.arange(1100)
    flex = causal_attention(q, k, v, positions, encoder, kind="flex")
    blocked = causal_attention(q, k, v, positions, encoder, kind="blocked")
    auto = causal_attention(q, k, v, positions, encoder, kind="auto")
    dense = _dense_reference(q.double(), k.double(), v.double(), encoder).float()
    torch.testing.assert_close(flex, dense, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(blocked, dense, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(auto, flex)


def test_generic_flex_kernels_of_different_score_mods_compile_side_by_side(monkeypatch):
    """Regression: T5's then KERPLE's score_mod through one shared shape-generic compiled frame generated C++
    that did not compile (torch 2.13 CPU), which marked flex broken for the whole process."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    monkeypatch.setattr(model_module, "STATIC_FLEX_KERNELS", 0)  # every length: the shape-generic kernel
    monkeypatch.setattr(model_module, "_flex", model_module.FlexState())
    for name in ("t5", "kerple"):
        encoder = build_encoder(name, AttentionShape(32, 2), 64)
        q, k, v = (torch.randn(1, 2, 300, 16) for _ in range(3))
        flex = model_module.flex_causal_attention(q, k, v, encoder.score_mod())
        blocked = model_module.blocked_causal_attention(q, k, v, torch.arange(300), encoder)
        torch.testing.assert_close(flex, blocked, atol=2e-5, rtol=1e-4)
    assert model_module._flex.broken is None and len(model_module._flex.kernels) == 2


def test_auto_attention_falls_back_to_query_blocks_when_flex_cannot_run(monkeypatch, caplog):
    encoder = build_encoder("alibi", AttentionShape(32, 4), 64)

    def broken(*args, **kwargs):
        raise RuntimeError("no C compiler here")

    monkeypatch.setattr(model_module, "flex_causal_attention", broken)
    monkeypatch.setattr(model_module, "_flex", model_module.FlexState())
    q, k, v = (torch.randn(1, 4, 1024, 8, dtype=torch.float64) for _ in range(3))
    out = causal_attention(q, k, v, torch.arange(1024), encoder, kind="auto")
    torch.testing.assert_close(out, _dense_reference(q, k, v, encoder))
    assert "no C compiler here" in caplog.text
    with pytest.raises(ConfigError, match="model.attention=flex does not run here"):
        causal_attention(q, k, v, torch.arange(1024), encoder, kind="flex")


@pytest.mark.parametrize("name", [n for n, cls in ENCODERS.items() if cls.has_score_bias])
def test_a_cpu_training_step_past_flex_length_uses_query_blocks_and_trains_the_bias(monkeypatch, name):
    """FlexAttention has no backward on CPU: a long training step must not try it (and mark it broken)."""
    def never(*args, **kwargs):
        raise AssertionError("FlexAttention called in a CPU training step")

    monkeypatch.setattr(model_module, "flex_causal_attention", never)
    monkeypatch.setattr(model_module, "_flex", model_module.FlexState())
    encoder = build_encoder(name, AttentionShape(32, 2), 64)
    q, k, v = (torch.randn(1, 2, 1100, 16, requires_grad=True) for _ in range(3))
    causal_attention(q, k, v, torch.arange(1100), encoder).sum().backward()
    assert model_module._flex.broken is None and q.grad is not None
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


@pytest.mark.parametrize("name", ENCODERS)
def test_model_outputs_agree_across_attention_kinds(name):
    cfg = ModelConfig(vocab_size=18)
    torch.manual_seed(0)
    blocked = Transformer(ModelConfig(vocab_size=18, attention="blocked"), build_encoder(name, cfg.shape, 1100))
    auto = Transformer(cfg, build_encoder(name, cfg.shape, 1100))
    auto.load_state_dict(blocked.state_dict())
    tokens = torch.randint(0, 18, (1, 1100))
    with torch.no_grad():
        torch.testing.assert_close(auto(tokens), blocked(tokens), atol=1e-4, rtol=1e-4)


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
