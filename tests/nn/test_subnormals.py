"""Subnormals flushed at CPU inference (posenc/nn/subnormals.py): the setting is scoped, taken only at inference,
and changes no number of the fused attention paths."""

from __future__ import annotations

import pytest
import torch

from posenc.encoders import build_encoder
from posenc.functional import alibi_slopes
from posenc.nn import fused_bias
from posenc.nn.attention import CausalAttention
from posenc.nn.model import ModelConfig
from posenc.nn.subnormals import flush_subnormals, flushing

FLUSHES_HERE = torch.set_flush_denormal(False)  # False where the CPU cannot flush (the setting then does nothing)
needs_flushing = pytest.mark.skipif(not FLUSHES_HERE, reason="this CPU cannot flush subnormals")


@needs_flushing
def test_the_setting_is_scoped_and_restored():
    assert not flushing()
    with flush_subnormals():
        assert flushing()
        with flush_subnormals():  # nested: the inner block leaves the outer one's setting on
            assert flushing()
        assert flushing()
    assert not flushing()


@needs_flushing
def test_a_setting_made_by_the_caller_is_kept():
    torch.set_flush_denormal(True)
    try:
        with flush_subnormals():
            assert flushing()
        assert flushing()
    finally:
        torch.set_flush_denormal(False)


def _alibi_inputs(s: int = 1024, heads: int = 4, width: int = 32):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (3 * torch.randn(1, heads, s, width, generator=gen) for _ in range(3))
    return q, k, v, alibi_slopes(heads)


def test_the_alibi_inputs_reach_the_subnormal_range():
    """Otherwise the bitwise checks below would hold trivially: some ``exp(s_ij - max_i)`` must be subnormal."""
    q, k, v, slopes = _alibi_inputs()
    s = q.shape[-2]
    i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 - slopes.view(-1, 1, 1) * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    p = (scores - scores.amax(-1, keepdim=True)).double().exp()
    tiny = torch.finfo(torch.float32).tiny
    assert ((p > 0) & (p < tiny)).sum() > 1000


@needs_flushing
@pytest.mark.parametrize("path", ["linear_bias", "key_bias", "distance_table"])
def test_flushing_changes_no_number_of_a_fused_path(path):
    q, k, v, slopes = _alibi_inputs()
    s = q.shape[-2]
    positions = torch.arange(s)
    key_bias = (slopes.view(1, -1, 1) * positions).expand(1, -1, -1)  # m_h j: ALiBi as a bias of the key
    table = -slopes.view(-1, 1) * positions.float()

    def attend() -> torch.Tensor:
        if path == "linear_bias":
            return fused_bias.linear_bias_attention(q, k, v, positions, slopes)
        if path == "key_bias":
            return fused_bias.key_bias_attention(q, k, v, key_bias)
        return fused_bias.distance_table_attention(q, k, v, table, 256)

    with torch.no_grad():
        plain = attend()
        with flush_subnormals():
            flushed = attend()
    assert torch.equal(plain, flushed)


@needs_flushing
@pytest.mark.parametrize("grad", [False, True])
def test_the_backend_flushes_at_inference_only(monkeypatch, grad):
    seen = []
    real = fused_bias.key_bias_attention

    def spy(*args, **kwargs):
        seen.append(flushing())
        return real(*args, **kwargs)

    monkeypatch.setattr(fused_bias, "key_bias_attention", spy)
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, d_mlp=32)
    encoder = build_encoder("fox", cfg.shape, 64).make_layer()  # one layer's FoX: its forget gates
    q, k, v = (torch.randn(1, 2, 32, 8, requires_grad=grad) for _ in range(3))
    positions = torch.arange(32)
    with torch.set_grad_enabled(grad):
        x = torch.randn(1, 32, 16)
        data_bias = encoder.data_bias(x, q, k)  # FoX: a KeyBias, attended by fused_bias.key_bias_attention
        CausalAttention()(q, k, v, positions, encoder, data_bias=data_bias)
    assert seen == [not grad]
    assert not flushing()  # restored after the call
