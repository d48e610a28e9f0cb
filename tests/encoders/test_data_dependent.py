"""CoPE, FoX and PoPE as encoders (posenc.encoders.data_dependent): per-layer parts, the data-dependent bias
through the attention backend's query blocks against a dense reference, and what each reduces to."""

import math

import pytest
import torch
from rounding import gamma

from posenc import functional as pf
from posenc.encoders import AttentionShape, build_encoder
from posenc.nn.attention import CausalAttention
from posenc.nn.model import ModelConfig, Transformer

SHAPE = AttentionShape(d_model=32, n_heads=4)
CFG = ModelConfig(vocab_size=18, d_model=32, n_heads=4, n_layers=3, d_mlp=64)


def _dense(q, k, v, bias):
    """Softmax attention with the whole [b, n_h, s, s] bias, causal."""
    s = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("name", ["cope", "fox"])
def test_query_blocks_equal_the_dense_reference(name):
    """The backend's blocks (3 of 16, 16, 5 queries here) give the dense computation's numbers."""
    torch.manual_seed(0)
    layer = build_encoder(name, SHAPE, 16).for_layer(0).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.5)  # not the zero init: the bias must matter
    x = torch.randn(2, 37, 32, dtype=torch.float64)
    q, k, v = (torch.randn(2, 4, 37, 8, dtype=torch.float64) for _ in range(3))
    data_bias = layer.data_bias(x, q, k)
    got = CausalAttention(query_block=16)(q, k, v, torch.arange(37), layer, data_bias=data_bias)
    torch.testing.assert_close(got, _dense(q, k, v, data_bias(0, 37)))
    if name == "fox":
        log_f = torch.nn.functional.logsigmoid(layer.gate(x)).transpose(1, 2)  # [b, n_h, s]
        want = torch.stack(
            [torch.stack([log_f[..., j + 1 : i + 1].sum(-1) for j in range(37)], -1) for i in range(37)], -2
        )
        torch.testing.assert_close(data_bias(0, 37).tril(), want.tril())
    else:
        logits = (q @ k.transpose(-1, -2)) / 8**0.5
        logits = logits.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), float("-inf"))
        want = pf.cope_bias(q, layer.pos_emb, pf.cope_positions(logits))
        torch.testing.assert_close(data_bias(0, 37), want)


@pytest.mark.parametrize("name", ["cope", "fox"])
def test_each_layer_has_parts_of_its_own(name):
    model = Transformer(CFG, build_encoder(name, SHAPE, 16))
    parts = [block.attn.encoder for block in model.blocks]
    assert len({id(p) for p in parts}) == 3 and all(p is model.encoder.layers[str(i)] for i, p in enumerate(parts))
    scheduled = Transformer(CFG, build_encoder("schedule", SHAPE, 16, {"layers": ["nope", name]}))
    assert list(scheduled.encoder.encoders[name].layers) == ["1"]  # only the layer that uses it


def test_cope_at_its_zero_init_is_nope():
    """The paper initialises the position embeddings at zero: the bias is 0, attention is NoPE's."""
    tokens = torch.randint(0, 18, (2, 40), generator=torch.Generator().manual_seed(0))
    out = []
    for name in ("cope", "nope"):
        torch.manual_seed(0)
        out.append(Transformer(CFG, build_encoder(name, SHAPE, 16)).eval()(tokens))
    torch.testing.assert_close(out[0], out[1])


def test_fox_with_open_gates_forgets_nothing_and_with_closed_gates_attends_to_the_last_key():
    layer = build_encoder("fox", SHAPE, 16).for_layer(0)
    x = torch.randn(1, 9, 32)
    q, k, v = (torch.randn(1, 4, 9, 8) for _ in range(3))
    with torch.no_grad():
        layer.gate.weight.zero_()
        layer.gate.bias.fill_(40.0)  # f = sigmoid(40) = 1: no decay
        open_ = CausalAttention()(q, k, v, torch.arange(9), layer, data_bias=layer.data_bias(x, q, k))
        layer.gate.bias.fill_(-40.0)  # f ~ 0: every step back costs 40 nats
        closed = CausalAttention()(q, k, v, torch.arange(9), layer, data_bias=layer.data_bias(x, q, k))
    torch.testing.assert_close(open_, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    # closed: every other key is at least 40 nats down (less at most twice the largest |q.k| / sqrt(8)), so it
    # weighs at most e**(-40 + 2 max) each; the softmax's sums over 9 keys round at gamma(3 * 9 + 4) of |v|
    score = float((q @ k.transpose(-1, -2)).abs().max()) / 8**0.5
    leak = 8 * math.exp(-40 + 2 * score)
    torch.testing.assert_close(closed, v, atol=(gamma(31, torch.float32) + leak) * float(v.abs().max()), rtol=0)


def test_pope_widens_queries_and_keys_and_its_phase_stays_clamped():
    encoder = build_encoder("pope", SHAPE, 16)
    q, k = torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8)
    q2, k2 = encoder.rotate(q, k, torch.arange(10))
    assert q2.shape == k2.shape == (2, 4, 10, 16) and encoder.rotated_width == 2
    with torch.no_grad():
        encoder.phase.fill_(5.0)  # clamped to 0
    torch.testing.assert_close(encoder.rotate(q, k, torch.arange(10)), (q2, k2))
    model = Transformer(CFG, encoder)
    assert model(torch.randint(0, 18, (1, 64))).shape == (1, 64, 18)  # past the training length: any length


def test_cope_counts_in_float32_under_bfloat16():
    """bfloat16 has 8 significant bits: a count of 300 gated keys would round to 296 or 304."""
    layer = build_encoder("cope", SHAPE, 512, {"n_pos": 512}).for_layer(0)
    with torch.no_grad():
        layer.pos_emb.copy_(torch.arange(512.0).expand(8, 512) / 8)  # q . e(p) = p for an all-ones query
    q = torch.ones(1, 4, 400, 8, dtype=torch.bfloat16)
    k = torch.full((1, 4, 400, 8), 20.0, dtype=torch.bfloat16)  # every gate open: p_ij = i - j + 1
    bias = layer.data_bias(None, q, k)(399, 400)  # the last query against every key
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias[0, 0, 0, :100], torch.arange(400.0, 300.0, -1.0))


@pytest.mark.parametrize(("gate_shift", "banded"), [(1.0, True), (-3.0, False)])
def test_cope_inference_takes_the_band_where_the_counts_allow(gate_shift, banded, monkeypatch):
    """A long sequence at inference takes the band path (or, where it says no, the whole rows); training never."""
    layer = build_encoder("cope", AttentionShape(24, 3), 16).for_layer(0).double()
    with torch.no_grad():
        layer.pos_emb.normal_()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 2 * layer.band(), 8, generator=gen, dtype=torch.float64) for _ in range(3))
    q, k = q.abs(), k + gate_shift  # positive queries: shifted keys open (or close) every gate
    calls = []
    band = pf.cope_band_attention
    monkeypatch.setattr(pf, "cope_band_attention", lambda *a: calls.append(a[-2]) or band(*a))
    with torch.no_grad():
        got = CausalAttention()(q, k, v, torch.arange(q.shape[-2]), layer, data_bias=layer.data_bias(None, q, k))
    torch.testing.assert_close(got, pf.cope_attention(q, k, v, layer.pos_emb))
    assert calls == [256] and layer.band() == 256  # tried (4 n_pos, at least 256); did it apply:
    assert (band(q, k, v, layer.pos_emb, 256, 64) is not None) == banded
    calls.clear()
    CausalAttention()(q, k, v, torch.arange(q.shape[-2]), layer, data_bias=layer.data_bias(None, q, k))
    assert calls == []  # with autograd (pos_emb trains): the whole rows
