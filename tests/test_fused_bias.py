"""Biases of the distance alone through fused SDPA with a strided view of their table as the mask
(posenc/fused_bias.py: distance_table_attention), and when the backend takes that path."""

import copy

import pytest
import torch

from posenc import fused_bias
from posenc.attention import TABLE_QUERY_BLOCK, CausalAttention
from posenc.encoders import ENCODERS, AttentionShape, build_encoder

TABLE_ENCODERS = ["alibi", "t5", "kerple"]  # stated: a distance_table lost by accident fails here


def _float64_reference(q, k, v, encoder, rows=None):
    """The float64 causal softmax with the whole bias, at query ``rows`` (all by default)."""
    s = q.shape[-2]
    rows = torch.arange(s) if rows is None else rows
    bias = copy.deepcopy(encoder).double().score_bias(rows, torch.arange(s))  # [n_h, rows, s]
    scores = q[..., rows, :].double() @ k.double().transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
    scores = scores.masked_fill(torch.arange(s)[None, :] > rows[:, None], float("-inf"))
    return scores.softmax(-1) @ v.double()


def _spread(encoder, seed):
    """Learned tables and scales drawn far from their initial values, so that every distance matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in encoder.parameters():
            p.copy_(p.abs() * torch.empty_like(p).uniform_(0.5, 3.0, generator=gen))
    return encoder


def test_the_encoders_with_a_distance_table_are_known():
    with_table = [n for n, c in ENCODERS.items()
                  if c.has_score_bias and build_encoder(n, AttentionShape(32, 4), 64).distance_table(8) is not None]
    assert with_table == TABLE_ENCODERS


@pytest.mark.parametrize("name", TABLE_ENCODERS)
@pytest.mark.parametrize("n_heads", [1, 3, 4, 12])
@pytest.mark.parametrize(("length", "block"), [(1, 16), (50, 16), (64, 16), (77, 1024), (300, 128), (1300, 512)])
def test_a_distance_table_through_fused_sdpa_equals_the_float64_reference(name, n_heads, length, block):
    """fp32, lengths that are and are not multiples of the block, one head and head counts that are not powers
    of two (ALiBi's interleaved slopes): as close to the float64 reference as the query-block path."""
    encoder = _spread(build_encoder(name, AttentionShape(8 * n_heads, n_heads), 64), length)
    gen = torch.Generator().manual_seed(length + n_heads)
    q, k, v = (torch.randn(2, n_heads, length, 8, generator=gen) for _ in range(3))
    with torch.no_grad():
        got = fused_bias.distance_table_attention(q, k, v, encoder.distance_table(length), block)
        blocked = CausalAttention(query_block=block).blocked(q, k, v, torch.arange(length), encoder)
    want = _float64_reference(q, k, v, encoder)
    assert got.dtype == q.dtype and got.shape == q.shape
    assert (got.double() - want).abs().max() <= max(2e-6, 2 * (blocked.double() - want).abs().max())


def test_kerple_at_8192_tokens_stays_within_fp32_accuracy():
    """Long enough for several whole query blocks and a 8192-entry table (the reference in float64)."""
    encoder = _spread(build_encoder("kerple", AttentionShape(16, 2), 64), 0)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8192, 8, generator=gen) for _ in range(3))
    with torch.no_grad():
        got = fused_bias.distance_table_attention(q, k, v, encoder.distance_table(8192), TABLE_QUERY_BLOCK)
    rows = torch.cat([torch.arange(0, 300), torch.arange(4000, 4300), torch.arange(7892, 8192)])
    assert (got[..., rows, :].double() - _float64_reference(q, k, v, encoder, rows)).abs().max() < 2e-6


class _Spy(CausalAttention):
    """Records the backend each call took, and the storage of every mask SDPA was given."""

    def __init__(self):
        super().__init__()
        self.paths, self.mask_bytes = [], []

    def distance_table(self, q, k, v, encoder):
        out = super().distance_table(q, k, v, encoder)
        self.paths.append("table" if out is not None else "none")
        return out

    def far_constant(self, *args, **kwargs):
        self.paths.append("far")
        return super().far_constant(*args, **kwargs)

    def blocked(self, *args, **kwargs):
        self.paths.append("blocked")
        return super().blocked(*args, **kwargs)

    def flex(self, *args, **kwargs):
        self.paths.append("flex")
        return super().flex(*args, **kwargs)


def test_auto_inference_takes_the_table_where_no_cheaper_structure_applies(monkeypatch):
    real = fused_bias.F.scaled_dot_product_attention
    masks = []  # the storage behind each mask given to SDPA

    def sdpa(q, k, v, attn_mask=None, **kwargs):
        masks.append(attn_mask.untyped_storage().nbytes() if attn_mask is not None else 0)
        return real(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(fused_bias.F, "scaled_dot_product_attention", sdpa)
    q, k, v = (torch.randn(1, 12, 1100, 8) for _ in range(3))  # 1100: two query blocks, past far_constant's start
    taken, mask_bytes = {}, {}
    for name, heads, lengths in (("kerple", 4, (500, 1100)), ("alibi", 12, (500, 1100)), ("alibi", 4, (500, 1100)),
                                 ("t5", 4, (500, 1100)), ("fire", 4, (500,))):
        encoder, attend = build_encoder(name, AttentionShape(8 * heads, heads), 64), _Spy()
        masks.clear()
        with torch.no_grad():
            for s in lengths:
                attend(q[:, :heads, :s], k[:, :heads, :s], v[:, :heads, :s], torch.arange(s), encoder)
        taken[(name, heads)], mask_bytes[(name, heads)] = attend.paths, max(masks)
    assert taken[("kerple", 4)] == ["table", "table"]
    assert taken[("alibi", 12)] == ["table", "table"]  # slopes not powers of two: no exact linear_bias
    assert taken[("alibi", 4)] == [] and mask_bytes[("alibi", 4)] == 0  # linear_bias: no mask at all
    assert taken[("t5", 4)] == ["table", "far"]  # long enough for the constant far bias
    assert taken[("fire", 4)] == ["none", "blocked"]  # its bias is not of i - j alone
    for table_user in (("kerple", 4), ("alibi", 12)):  # a view of the table, never a [n_h, block, s] mask
        assert mask_bytes[table_user] <= 4 * table_user[1] * (1100 + TABLE_QUERY_BLOCK)


def test_a_training_step_and_other_positions_do_not_take_the_table():
    encoder, attend = build_encoder("kerple", AttentionShape(32, 4), 64), _Spy()
    q, k, v = (torch.randn(1, 4, 300, 8, requires_grad=True) for _ in range(3))
    attend(q, k, v, torch.arange(300), encoder).sum().backward()  # a training step: differentiable blocks
    assert attend.paths == ["blocked"] and encoder.r1.grad is not None
    with torch.no_grad():
        attend(q, k, v, torch.arange(300) + 7, encoder)  # positions not 0..s-1: the bias formula
    assert attend.paths == ["blocked", "blocked"]
