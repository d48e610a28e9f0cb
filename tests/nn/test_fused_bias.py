"""Biases of the distance alone through fused SDPA with a strided view of their table as the mask
(posenc/nn/fused_bias.py: distance_table_attention), FoX's bias of the key alone as two more dimensions
(key_bias_attention), and when the backend takes each path; the data-dependent paths under autocast and on CUDA."""

import copy

import pytest
import torch
from rounding import attention_bound, gamma

from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.functional import data_dependent as F_dd
from posenc.nn import fused_bias
from posenc.nn.attention import TABLE_QUERY_BLOCK, CausalAttention

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
    with_table = [
        n
        for n in ENCODERS.builtins()
        if ENCODERS[n].has_score_bias and build_encoder(n, AttentionShape(32, 4), 64).distance_table(8) is not None
    ]
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
    bound = _table_bound(q, k, v, encoder, length)
    assert ((got.double() - want).abs() <= bound).all() and ((blocked.double() - want).abs() <= bound).all()


def _table_bound(q, k, v, encoder, length, rows=None):
    """tests/rounding.py's bound on fp32 attention with a distance table, whose entries the fp32 table computes
    in a few roundings (ALiBi a product, T5 none, KERPLE softplus, a product, log1p and a product; each of
    condition <= 1) against the float64 reference's: at most gamma(8) |b| off."""
    with torch.no_grad():
        table = encoder.distance_table(length).double().abs()  # [n_h, s]: |b| at each distance
    rows = torch.arange(length) if rows is None else rows
    distance = (rows[:, None] - torch.arange(length)[None, :]).clamp(min=0)
    bias = table[:, distance]  # [n_h, rows, s]
    return attention_bound(q, k, v, rows, bias_abs=bias, bias_error=gamma(8, q.dtype) * bias)


def test_kerple_at_8192_tokens_stays_within_fp32_accuracy():
    """Long enough for several whole query blocks and a 8192-entry table (the reference in float64)."""
    encoder = _spread(build_encoder("kerple", AttentionShape(16, 2), 64), 0)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8192, 8, generator=gen) for _ in range(3))
    with torch.no_grad():
        got = fused_bias.distance_table_attention(q, k, v, encoder.distance_table(8192), TABLE_QUERY_BLOCK)
    rows = torch.cat([torch.arange(0, 300), torch.arange(4000, 4300), torch.arange(7892, 8192)])
    error = (got[..., rows, :].double() - _float64_reference(q, k, v, encoder, rows)).abs()
    assert (error <= _table_bound(q, k, v, encoder, 8192, rows)).all()


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
    for name, heads, lengths in (
        ("kerple", 4, (500, 1100)),
        ("alibi", 12, (500, 1100)),
        ("alibi", 4, (500, 1100)),
        ("t5", 4, (500, 1100)),
        ("fire", 4, (500,)),
    ):
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


def _fox(n_heads, seed, gate_bias):
    """A FoX layer with weights drawn away from their init, its gate biases at ``gate_bias`` (0: every step back
    costs about log 2; -3: about 3 nats)."""
    torch.manual_seed(seed)
    layer = build_encoder("fox", AttentionShape(8 * n_heads, n_heads), 64).for_layer(0)
    with torch.no_grad():
        layer.gate.weight.normal_(0, 0.5)
        layer.gate.bias.fill_(gate_bias)
    return layer


def _fox_float64_reference(q, k, v, x, layer, rows=None, key=None):
    """FoX attention in float64 from the paper's formula: scores q.k / sqrt(h_d) + sum_{l=j+1..i} log f_l, at
    query ``rows`` (all by default); with ``key`` (the fp32 key bias, ``-c``), from that bias instead of the
    gates: the exact attention of the fp32 path's own inputs, so that only the attention's rounding is left."""
    s = q.shape[-2]
    rows = torch.arange(s) if rows is None else rows
    if key is None:
        gate = torch.nn.functional.linear(x.double(), layer.gate.weight.double(), layer.gate.bias.double())
        c = torch.nn.functional.logsigmoid(gate).transpose(1, 2).cumsum(-1)  # [b, n_h, s]
    else:
        c = -key.double()
    scores = q[..., rows, :].double() @ k.double().transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores + c[..., rows, None] - c[..., None, :]
    future = torch.arange(s)[None, :] > rows[:, None]
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v.double()


def _key_bound(q, k, v, key, rows=None):
    """tests/rounding.py's bound for the key bias: FoX's two bias columns ``[1, -key_i]`` . ``[key_j, 1]`` are
    two more terms of each score's dot product (the dense path's ``c_i - c_j`` is no larger), so a kernel
    that does not sum them first rounds the score at the scale of ``|key_i| + |key_j|``."""
    rows = torch.arange(q.shape[-2]) if rows is None else rows
    magnitude = key.double().abs()
    return attention_bound(q, k, v, rows, bias_abs=magnitude[..., rows, None] + magnitude[..., None, :], extra_terms=2)


@pytest.mark.parametrize("n_heads", [1, 3, 4])
@pytest.mark.parametrize("length", [1, 37, 64, 300, 1300])
@pytest.mark.parametrize("gate_bias", [0.0, -3.0])
def test_a_key_bias_through_fused_sdpa_equals_the_float64_reference(n_heads, length, gate_bias):
    """FoX in fp32 against the float64 softmax of the same fp32 bias, fused and as a dense bias in query blocks:
    both within fp32 attention's rounding (tests/rounding.py); the bias against the paper's formula is
    tests/functional/test_data_dependent_formulas.py's."""
    block = 16
    layer = _fox(n_heads, length + n_heads, gate_bias)
    gen = torch.Generator().manual_seed(length)
    x = torch.randn(2, length, 8 * n_heads, generator=gen)
    q, k, v = (torch.randn(2, n_heads, length, 8, generator=gen) for _ in range(3))
    with torch.no_grad():
        data_bias = layer.data_bias(x, q, k)
        got = fused_bias.key_bias_attention(q, k, v, data_bias.key)
        dense = CausalAttention(query_block=block).data_blocked(q, k, v, data_bias)
    want = _fox_float64_reference(q, k, v, x, layer, key=data_bias.key)
    assert got.dtype == q.dtype and got.shape == q.shape
    bound = _key_bound(q, k, v, data_bias.key)
    assert ((got.double() - want).abs() <= bound).all() and ((dense.double() - want).abs() <= bound).all()


def test_a_key_bias_at_8192_tokens_stays_within_fp32_accuracy():
    """Cumulative log gates reaching about -5700 (the float64 softmax of the same bias)."""
    layer = _fox(2, 0, 0.0)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 8192, 16, generator=gen)
    q, k, v = (torch.randn(1, 2, 8192, 8, generator=gen) for _ in range(3))
    with torch.no_grad():
        key = layer.data_bias(x, q, k).key
        got = fused_bias.key_bias_attention(q, k, v, key)
    rows = torch.cat((torch.arange(64), torch.arange(4096, 4160), torch.arange(8192 - 64, 8192)))
    error = (got[..., rows, :].double() - _fox_float64_reference(q, k, v, x, layer, rows, key)).abs()
    assert (error <= _key_bound(q, k, v, key, rows)).all()


def test_a_fox_training_step_through_the_key_bias_has_the_dense_gradients():
    """The key bias is differentiable: its output and the gradients of the
    queries, keys, values and forget-gate weights equal the dense bias's in query blocks (float64)."""
    layer = _fox(3, 0, 0.0).double()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 45, 24, generator=gen, dtype=torch.float64)
    inputs = [torch.randn(2, 3, 45, 8, generator=gen, dtype=torch.float64) for _ in range(3)]
    results = []
    for fused in (True, False):
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        layer.zero_grad()
        data_bias = layer.data_bias(x, q, k)
        if fused:
            out = CausalAttention()(q, k, v, torch.arange(45), layer, data_bias=data_bias)
        else:
            out = CausalAttention(query_block=16).data_blocked(q, k, v, data_bias)
        (out * torch.linspace(-1, 1, 8, dtype=torch.float64)).sum().backward()
        results.append((out, q.grad, k.grad, v.grad, layer.gate.weight.grad.clone(), layer.gate.bias.grad.clone()))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("head_dim", [6, 8, 32])
def test_a_key_bias_reaches_sdpa_at_a_width_cuda_attends_in_linear_memory(head_dim, monkeypatch):
    """CUDA's memory-efficient SDPA kernel takes head widths divisible by 4 in fp32 (8 in 16 bits); at any other,
    SDPA falls back to its math kernel, which builds every pair's score: the GPU check's FoX forward (width
    h_d + 2 = 34) peaked at 41 GiB at 32768 tokens and asked for 256 GiB at 131072. So the widths FoX hands
    SDPA, training included, are multiples of 8, and the result is the unpadded attention's."""
    widths = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, **kw):
        widths.append((q.shape[-1], k.shape[-1], v.shape[-1]))
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(fused_bias.F, "scaled_dot_product_attention", recording)
    layer = build_encoder("fox", AttentionShape(2 * head_dim, 2), 64).for_layer(0)
    gen = torch.Generator().manual_seed(head_dim)
    x = torch.randn(2, 40, 2 * head_dim, generator=gen)
    q, k, v = (torch.randn(2, 2, 40, head_dim, generator=gen, requires_grad=True) for _ in range(3))
    out = CausalAttention()(q, k, v, torch.arange(40), layer, data_bias=layer.data_bias(x, q, k))
    out.sum().backward()
    assert widths and all(w == (widths[0][0],) * 3 and w[0] % 8 == 0 and w[0] >= head_dim + 2 for w in widths)
    with torch.no_grad():
        dense = CausalAttention(query_block=16).data_blocked(q, k, v, layer.data_bias(x, q, k))
    assert out.shape == q.shape
    assert ((out.double() - dense.double()).abs() <= 2 * _key_bound(q, k, v, layer.data_bias(x, q, k).key)).all()


def test_fox_attention_builds_no_tensor_of_every_pair():
    """A FoX layer's training step (forward and backward) creates no tensor as large as its length squared: the
    bias is [b, n_h, s] and the kernel fused (every aten op's outputs are watched)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    Largest.numel = max(Largest.numel, t.numel())
            return out

    s = 512
    layer = build_encoder("fox", AttentionShape(16, 2), 64).for_layer(0)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(1, s, 16, generator=gen)
    q, k, v = (torch.randn(1, 2, s, 8, generator=gen, requires_grad=True) for _ in range(3))
    with Largest():
        out = CausalAttention()(q, k, v, torch.arange(s), layer, data_bias=layer.data_bias(x, q, k))
        out.sum().backward()
    assert 0 < Largest.numel < s * s  # [1, 2, s, 16] at most: a sixteenth of s * s


def test_a_key_bias_in_bfloat16_is_attended_in_float32():
    """bfloat16 has 8 significant bits: a bias column in it would round FoX's bias (up to 1 at 256 nats)."""
    layer = _fox(2, 0, 0.0)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 300, 16, generator=gen)
    q, k, v = (torch.randn(1, 2, 300, 8, generator=gen).bfloat16() for _ in range(3))
    with torch.no_grad():
        key = layer.data_bias(x, q, k).key
        got = CausalAttention()(q, k, v, torch.arange(300), layer, data_bias=layer.data_bias(x, q, k))
        want = fused_bias.key_bias_attention(q.float(), k.float(), v.float(), key)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want.bfloat16(), atol=0, rtol=0)


def test_the_data_dependent_paths_ignore_autocast():
    """Under autocast (bf16 on CUDA in training) FoX's bias column and CoPE's logits stay in the inputs' precision:
    the same numbers as without it."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 50, 8, generator=gen) for _ in range(3))
    pos_emb, key = torch.randn(8, 16, generator=gen), torch.randn(2, 3, 50, generator=gen).cumsum(-1)
    want = (F_dd.cope_attention(q, k, v, pos_emb), fused_bias.key_bias_attention(q, k, v, key))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = (F_dd.cope_attention(q, k, v, pos_emb), fused_bias.key_bias_attention(q, k, v, key))
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_fox_and_cope_on_cuda_equal_the_float64_reference():
    """The data-dependent paths on CUDA (fp32; forward and gradients): FoX's key bias through CUDA's SDPA at head
    width h_d + 2 padded to a multiple of 8, CoPE's own attention."""
    layer = _fox(2, 0, -1.0)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 700, 16, generator=gen)
    q, k, v = (torch.randn(2, 2, 700, 8, generator=gen) for _ in range(3))
    want = _fox_float64_reference(q, k, v, x, layer)
    cuda = [t.cuda().requires_grad_() for t in (q, k, v)]
    data_bias = layer.cuda().data_bias(x.cuda(), *cuda[:2])
    got = CausalAttention()(*cuda, torch.arange(700).cuda(), layer, data_bias=data_bias)
    torch.testing.assert_close(got.double().cpu(), want, atol=1e-4, rtol=0)
    got.sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in cuda)
    q, k, v = (torch.randn(2, 3, 300, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    pos_emb = torch.randn(8, 16, generator=gen, dtype=torch.float64)
    want = F_dd.cope_attention(q, k, v, pos_emb)
    torch.testing.assert_close(
        F_dd.cope_attention(*(t.float().cuda() for t in (q, k, v, pos_emb))).double().cpu(), want, atol=1e-4, rtol=0
    )
