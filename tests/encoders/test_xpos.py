"""The xpos encoder at every length: the centred factors up to MAX_LOG_SCALE, the relative path past it
(rotate + data_bias), through the model's attention, against float64 references of the formula."""

import math
import time

import pytest
import torch
from rounding import attention_bound, xpos_score_bound

from posenc import functional as pf
from posenc.encoders import AttentionShape, build_encoder
from posenc.encoders.base import MAX_LENGTH
from posenc.nn.attention import CausalAttention
from posenc.nn.model import ModelConfig, Transformer

SHAPE = AttentionShape(d_model=32, n_heads=2)  # head_dim 16
TRAIN = 32  # scale_base 16, the headline's: centred factors fit up to 1533 tokens


def qk(length: int, shape: AttentionShape = SHAPE, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys ``[1, n_heads, length, head_dim]``."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, shape.n_heads, length, shape.head_dim, generator=g) for _ in range(2))


def attention_scores(encoder, q, k, positions, start: int, stop: int) -> torch.Tensor:
    """The scores attention uses for queries ``start:stop`` against keys ``:stop``, undoing SDPA's
    ``1/sqrt(head_dim)``: ``rotate``'s ``q . k`` plus ``data_bias`` where the encoder gives one."""
    qr, kr = encoder.rotate(q, k, positions)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = qr[..., start:stop, :] @ kr[..., :stop, :].transpose(-1, -2) * scale
    bias = encoder.data_bias(None, qr, kr)
    if bias is not None:
        scores = scores + bias(start, stop)
    return scores / scale


def reference(q, k, positions, start: int, stop: int, scale_base: float, absolute: bool = False):
    """float64 xPos scores of queries ``start:stop`` against keys ``:stop``: RoPE pairs weighted by
    ``zeta**((m-n)/scale_base)`` from the distance, or (``absolute``) the old factorisation, queries times
    ``zeta**(m/scale_base)`` and keys times ``zeta**(-n/scale_base)`` from absolute positions."""
    d = q.shape[-1]
    inv = pf.rope_inv_freq(d).double()  # the encoder's float32 frequencies: the formula at what it rotates by
    rq = pf.apply_rope(q.double()[..., start:stop, :], positions[start:stop], inv)
    rk = pf.apply_rope(k.double()[..., :stop, :], positions[:stop], inv)
    zeta = pf.xpos_zeta(d, 0.4)
    if absolute:
        power = positions.double() / scale_base
        factor = (zeta[None, :] ** power[:, None]).repeat_interleave(2, dim=-1)  # [s, d]
        return (rq * factor[start:stop]) @ (rk / factor[:stop]).transpose(-1, -2)
    distance = (positions[start:stop, None] - positions[None, :stop]).double().clamp(min=0) / scale_base
    out = 0
    for j in range(d // 2):
        pair = rq[..., 2 * j : 2 * j + 2] @ rk[..., 2 * j : 2 * j + 2].transpose(-1, -2)
        out = out + pair * torch.exp(distance * math.log(zeta[j]))
    return out


def bound(q, k, positions, start: int, stop: int, log_scale: float = pf.XPOS_QUERY_LOG_SCALE) -> torch.Tensor:
    """tests/rounding.py's xPos bound for the encoder's fp32 scores of queries ``start:stop`` (each side rotated
    by fp32 tables: a complex product and its entry, 3 roundings), factors up to e**log_scale."""
    return xpos_score_bound(
        q[..., start:stop, :], k[..., :stop, :], positions[start:stop], positions[:stop], 16.0, log_scale, inputs=6
    )


def causal(start: int, stop: int) -> torch.Tensor:
    return torch.arange(stop)[None, :] <= torch.arange(start, stop)[:, None]


def relative_everywhere(shape: AttentionShape = SHAPE, train: int = TRAIN):
    """An xpos encoder that takes the relative path at every length (MAX_LOG_SCALE 0)."""
    encoder = build_encoder("xpos", shape, train)
    encoder.MAX_LOG_SCALE = 0.0
    return encoder


def test_the_path_changes_where_the_centred_factors_would_leave_float32():
    encoder = build_encoder("xpos", SHAPE, TRAIN)
    longest = int(2 * encoder.MAX_LOG_SCALE * 16 / -math.log(0.4 / 1.4)) + 1
    assert longest == 1533  # the old refusal: past this, `posenc extrapolate` wrote NaN rows
    assert not encoder.relative(torch.arange(longest)) and encoder.relative(torch.arange(longest + 1))
    encoder.check_positions(MAX_LENGTH)  # no refusal any more
    q, k = qk(longest)
    assert encoder.data_bias(None, *encoder.rotate(q, k, torch.arange(longest))) is None  # fused attention


@pytest.mark.parametrize(
    "make", [lambda: build_encoder("xpos", SHAPE, TRAIN), relative_everywhere], ids=["centred", "relative"]
)
def test_scores_equal_the_absolute_formula_at_short_lengths(make):
    """(a) Where the old factorisation from absolute positions is finite (700 tokens at scale_base 16:
    factors up to e**55), both paths give its scores to float32 accuracy."""
    encoder, length = make(), 700
    q, k = qk(length)
    positions = torch.arange(length)
    want = reference(q, k, positions, 0, length, 16.0, absolute=True)
    assert torch.isfinite(want).all()
    got = attention_scores(encoder, q, k, positions, 0, length)
    mask = causal(0, length)
    largest = max(encoder.MAX_LOG_SCALE, pf.XPOS_QUERY_LOG_SCALE)  # centred factors, or the relative path's
    assert ((got.double() - want).abs()[..., mask] <= bound(q, k, positions, 0, length, largest)[..., mask]).all()


def test_attention_is_finite_and_exact_at_8192_tokens():
    """(b) At 8192 tokens (scale_base 16), the scores attention sees equal the float64 formula of the
    distance, every bias entry is finite, and so is the attention output, which matches a float64 softmax."""
    encoder, length = build_encoder("xpos", SHAPE, TRAIN), 8192
    q, k = qk(length)
    v = torch.randn(1, 2, length, 16, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(length)
    assert encoder.relative(positions)
    qr, kr = encoder.rotate(q, k, positions)
    bias = encoder.data_bias(None, qr, kr)
    out = CausalAttention()(qr, kr, v, positions, encoder, data_bias=bias)
    assert torch.isfinite(out).all()
    for start in (0, 4096, length - 64):
        stop = start + 64
        assert torch.isfinite(bias(start, stop)).all()
        got = attention_scores(encoder, q, k, positions, start, stop)
        want = reference(q, k, positions, start, stop, 16.0)
        mask = causal(start, stop)
        off = bound(q, k, positions, start, stop)
        assert ((got.double() - want).abs()[..., mask] <= off[..., mask]).all()
        weights = (want / 4).masked_fill(~mask, -math.inf).softmax(-1)  # SDPA's 1/sqrt(16)
        # fp32 attention of scores each within off / 4 of the formula's; the bias SDPA adds (xPos's decay as a
        # correction of RoPE's q.k) is at most twice sum |q_t k_t| / 4 in magnitude
        rows, keys = torch.arange(start, stop), kr[..., :stop, :]
        magnitude = 2 * (qr[..., start:stop, :].double().abs() @ keys.double().abs().transpose(-1, -2)) / 4
        reach = attention_bound(qr, keys, v[..., :stop, :], rows, magnitude, off.masked_fill(~mask, 0) / 4)
        assert ((out[..., start:stop, :].double() - weights @ v[..., :stop, :].double()).abs() <= reach).all()
    # rotate alone scores the last query exactly (what `posenc kernels` reads), every factor at most 1
    last = qr[..., -1:, :] @ kr.transpose(-1, -2)
    error = (last.double() - reference(q, k, positions, length - 1, length, 16.0)).abs()
    assert (error <= bound(q, k, positions, length - 1, length, 0.0)).all()


def test_scores_are_finite_and_exact_at_posencs_longest_sequence():
    """(b) At MAX_LENGTH tokens (2**20): rotate's output and the biases of a few query blocks are finite, and
    the scores equal the float64 formula."""
    shape, length = AttentionShape(d_model=4, n_heads=1), MAX_LENGTH  # head_dim 4: 16 MiB per tensor
    encoder = build_encoder("xpos", shape, TRAIN)
    q, k = qk(length, shape)
    positions = torch.arange(length)
    qr, kr = encoder.rotate(q, k, positions)
    assert torch.isfinite(qr).all() and torch.isfinite(kr).all()
    bias = encoder.data_bias(None, qr, kr)
    for start in (0, length // 2, length - 4):
        stop = start + 4
        assert torch.isfinite(bias(start, stop)).all()
        got = attention_scores(encoder, q, k, positions, start, stop)
        want = reference(q, k, positions, start, stop, 16.0)
        mask = causal(start, stop)
        assert ((got.double() - want).abs()[..., mask] <= bound(q, k, positions, start, stop)[..., mask]).all()


@pytest.mark.parametrize("length", [300, 4096])
def test_scores_are_unchanged_by_shifting_every_position(length):
    """(c) The scores depend on the distance only: positions shifted by one constant give the same ones, on
    the centred path (300) and the relative one (4096)."""
    encoder = build_encoder("xpos", SHAPE, TRAIN)
    q, k = qk(length)
    start = length - 64
    base = attention_scores(encoder, q, k, torch.arange(length), start, length)
    mask = causal(start, length)
    positions = torch.arange(length)
    largest = max(encoder.MAX_LOG_SCALE, pf.XPOS_QUERY_LOG_SCALE)
    reach = 2 * bound(q, k, positions, start, length, largest)[..., mask]  # each side within it of the formula
    for shift in (1, 1000, 200_000):
        shifted = attention_scores(encoder, q, k, torch.arange(length) + shift, start, length)
        assert torch.isfinite(shifted).all()
        assert ((shifted[..., mask] - base[..., mask]).abs() <= reach).all()


def test_a_model_forward_at_8192_tokens_is_finite():
    """The model as evaluation runs it: untrained xpos at 8192 tokens (scale_base 16) gives finite logits; the
    time is printed (pytest -s) for the record."""
    cfg = ModelConfig(vocab_size=18, d_model=32, n_heads=2, n_layers=1, d_mlp=64)
    torch.manual_seed(0)
    model = Transformer(cfg, build_encoder("xpos", cfg.shape, TRAIN), attend=CausalAttention()).eval()
    tokens = torch.randint(0, 18, (1, 8192), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        begin = time.perf_counter()
        logits = model(tokens)
    print(f"xpos forward at 8192 tokens: {time.perf_counter() - begin:.2f} s")
    assert torch.isfinite(logits).all()


def test_inference_takes_fused_windows_and_training_the_bias_in_query_blocks(monkeypatch):
    """Past MAX_LOG_SCALE, inference on CPU attends window by window through fused attention; with autograd
    (training) the backend adds the bias in query blocks instead. Both give the same output."""
    encoder, length = relative_everywhere(), 300
    q, k = qk(length)
    v = torch.randn(1, 2, length, 16, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(length)
    calls = []
    window = pf.xpos_window_attention
    monkeypatch.setattr(pf, "xpos_window_attention", lambda *a: calls.append(1) or window(*a))
    outputs = []
    for grad in (False, True):
        q_in = q.clone().requires_grad_(grad)
        qr, kr = encoder.rotate(q_in, k, positions)
        outputs.append(CausalAttention()(qr, kr, v, positions, encoder, data_bias=encoder.data_bias(None, qr, kr)))
    assert calls == [1]  # the inference call only
    torch.testing.assert_close(outputs[0], outputs[1].detach())
    outputs[1].sum().backward()
