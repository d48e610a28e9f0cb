"""CoPE, FoX and PoPE formulas (posenc.functional.data_dependent): against naive sums of the papers' equations,
and PoPE against its reference implementation's numbers."""

import math

import pytest
import torch
from rounding import gamma, unit_roundoff

from posenc import functional as pf

torch.manual_seed(0)


def test_cope_positions_count_the_gates_between_key_and_query():
    """p_ij = sum_{t=j..i} sigmoid(logit_it) (Golovneva et al. 2024, eq. 3); future keys gate nothing."""
    logits = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    got = pf.cope_positions(logits.masked_fill(future, float("-inf")))
    for i in range(6):
        for j in range(i + 1):
            want = torch.sigmoid(logits[..., i, j : i + 1]).sum(-1)
            torch.testing.assert_close(got[..., i, j], want)
    assert (got.masked_select(future.expand_as(got)) == 0).all()
    assert (got[..., :, :-1] >= got[..., :, 1:]).all()  # fewer keys counted from later keys


def test_cope_bias_interpolates_between_integer_positions_and_clamps_past_the_last():
    query = torch.randn(2, 5, 4, dtype=torch.float64)  # [b, s_q, h_d]
    pos_emb = torch.randn(4, 3, dtype=torch.float64)  # positions 0, 1, 2
    positions = torch.tensor([0.0, 0.25, 1.0, 1.5, 2.0, 7.0], dtype=torch.float64).expand(2, 5, 6)
    got = pf.cope_bias(query, pos_emb, positions)
    e = pos_emb.T  # e[p]
    table = [e[0], 0.75 * e[0] + 0.25 * e[1], e[1], 0.5 * e[1] + 0.5 * e[2], e[2], e[2]]  # eq. 4, clamped
    want = torch.stack([query @ row for row in table], dim=-1)
    torch.testing.assert_close(got, want)


def _cope_dense(q, k, v, pos_emb):
    """CoPE attention as the paper's code: whole logits, gates, counts, the interpolated bias, softmax."""
    s = q.shape[-2]
    logits = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    logits = logits.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (logits + pf.cope_bias(q, pos_emb, pf.cope_positions(logits))).softmax(-1) @ v


@pytest.mark.parametrize(
    ("length", "n_pos", "block_elements"), [(1, 4, 1 << 22), (37, 8, 600), (130, 16, 1 << 22), (130, 200, 3000)]
)
@pytest.mark.parametrize("grad", [False, True])
def test_cope_attention_equals_the_papers_computation(length, n_pos, block_elements, grad):
    """One block or several (2 x 3 heads x length keys x rows per block), counts past ``n_pos`` clamped or not,
    with autograd (its gradients too) and without (in place): the dense float64 computation's numbers."""
    gen = torch.Generator().manual_seed(length + n_pos)
    inputs = [torch.randn(2, 3, length, 8, generator=gen, dtype=torch.float64) for _ in range(3)]
    inputs.append(torch.randn(8, n_pos, generator=gen, dtype=torch.float64))
    results = []
    for fn in (lambda q, k, v, e: pf.cope_attention(q, k, v, e, block_elements=block_elements), _cope_dense):
        leaves = [t.clone().requires_grad_(grad) for t in inputs]
        with torch.set_grad_enabled(grad):
            out = fn(*leaves)
        if grad:
            (out * torch.linspace(-1, 1, 8, dtype=torch.float64)).sum().backward()
        results.append([out, *(t.grad for t in leaves if grad)])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)


def test_cope_attention_counts_in_float32_under_bfloat16():
    """The result has the inputs' dtype; counts and scores are float32 (the float32 computation's numbers)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 300, 8, generator=gen).bfloat16() for _ in range(3))
    pos_emb = torch.randn(8, 300, generator=gen).bfloat16()
    got = pf.cope_attention(q, k, v, pos_emb)
    assert got.dtype == torch.bfloat16
    # the same float32 arithmetic on the same (bfloat16-exact) values, then one rounding to bfloat16: at most
    # u = 2**-8 of each value (an atol would be tuned to the values' magnitudes)
    want = pf.cope_attention(q.float(), k.float(), v.float(), pos_emb.float())
    torch.testing.assert_close(got.float(), want, atol=0, rtol=unit_roundoff(torch.bfloat16))


def _cope_inputs(length, n_pos, gate_shift, seed=0):
    """Queries, keys and values for CoPE, gates shifted open (``gate_shift`` > 0) or closed (< 0)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, length, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    q = q.abs()  # positive queries: a shift of the keys moves every logit the same way
    return q, k + gate_shift, v, torch.randn(8, n_pos, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize(
    ("length", "n_pos", "band", "block"), [(77, 4, 16, 16), (300, 16, 64, 32), (1000, 8, 40, 128), (513, 8, 512, 64)]
)
def test_cope_far_keys_through_one_fused_call_equal_the_papers_computation(length, n_pos, band, block):
    """Gates open enough for every count to reach n_pos - 1 within the band: float64 equals the whole computation
    (posenc.functional.cope_attention, itself tested against the paper's code); lengths that are and are not
    multiples of the block, bands shorter and longer than a block."""
    q, k, v, pos_emb = _cope_inputs(length, n_pos, 1.0)
    got = pf.cope_band_attention(q, k, v, pos_emb, band, block)
    assert got is not None
    torch.testing.assert_close(got, pf.cope_attention(q, k, v, pos_emb))


def test_cope_band_says_no_where_a_count_stays_below_the_last_position():
    """Closed gates: a query 300 keys on has counted about 15; its far keys' biases still differ."""
    q, k, v, pos_emb = _cope_inputs(300, 16, -3.0)
    assert pf.cope_band_attention(q, k, v, pos_emb, 64, 32) is None


def test_fox_bias_is_the_sum_of_log_forget_gates_after_the_key():
    """D_ij = sum_{l=j+1..i} log sigmoid(f_l) (Lin et al. 2025, eq. 4)."""
    logits = torch.randn(2, 7, 3, dtype=torch.float64)  # [b, s, n_h]
    log_lambda = pf.fox_log_lambda(logits)
    got = pf.fox_bias(log_lambda, 2, 7)  # queries 2..6 against keys 0..6
    assert got.shape == (2, 3, 5, 7)
    log_f = torch.nn.functional.logsigmoid(logits).transpose(1, 2)  # [b, n_h, s]
    for i in range(2, 7):
        for j in range(i + 1):
            torch.testing.assert_close(got[..., i - 2, j], log_f[..., j + 1 : i + 1].sum(-1))
    assert (got[..., range(5), range(2, 7)] == 0).all()  # a key is not forgotten by its own query


def test_pope_score_is_magnitudes_times_cosine_of_relative_phase():
    """Re(sum_c q_c conj(k_c)) = sum_c softplus(q_tc) softplus(k_sc) cos((t - s) theta_c - delta_c), scaled
    so that attention's 1/sqrt(2 h_d) is 1/sqrt(h_d)."""
    q, k = torch.randn(1, 2, 6, 4, dtype=torch.float64), torch.randn(1, 2, 6, 4, dtype=torch.float64)
    inv_freq = pf.pope_inv_freq(4).double()
    phase = torch.tensor([[-0.5, -1.0, -2.0, 0.0], [-3.0, -0.1, -6.0, -1.0]], dtype=torch.float64)
    q2, k2 = pf.pope_qk(q, k, torch.arange(6), inv_freq, phase)
    got = (q2 @ k2.transpose(-1, -2)) / math.sqrt(2 * 4)
    sp = torch.nn.functional.softplus
    for h in range(2):
        for t in range(6):
            for s in range(6):
                want = sum(
                    sp(q[0, h, t, c]) * sp(k[0, h, s, c]) * math.cos((t - s) * inv_freq[c] - phase[h, c])
                    for c in range(4)
                ) / math.sqrt(4)
                torch.testing.assert_close(got[0, h, t, s], want)


def test_pope_scores_depend_on_relative_position_only():
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64).expand(1, 1, 30, 8)
    inv_freq, phase = pf.pope_inv_freq(8).double(), torch.full((1, 8), -0.7, dtype=torch.float64)
    q2, k2 = pf.pope_qk(q, q, torch.arange(30), inv_freq, phase)
    scores = (q2 @ k2.transpose(-1, -2))[0, 0]
    for offset in range(-5, 6):
        diagonal = scores.diagonal(offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))


# Reference numbers: PoPE-pytorch 0.2.1 (lucidrains; the paper's reference implementation, as in
# x-transformers), float64: PoPE(4, heads=2, theta=10000) with bias [[-0.5, -1, -2, -7], [0.3, -0.25, -3, -6.5]]
# (0.3 and -7, -6.5 clamped to [-2 pi, 0]), q = 2 sin(0.37 i + 0.1), k = 1.5 cos(0.23 i - 0.4) over
# i = arange(40).reshape(1, 2, 5, 4); apply_pope_to_qk(pope(5), q, k), then q @ k^T (no scale).
REFERENCE_SCORES = {
    (0, 0): [4.3851511286, 3.3281177021, 1.0112912916, 0.3107730708, 0.5343006272],
    (0, 3): [0.1760118401, 0.081760872, 0.1092911144, 0.0902693868, 0.1065099638],
    (1, 1): [0.5478841205, 1.9538164111, 2.0582607309, -0.0028066627, -0.503402481],
    (1, 4): [0.6563677571, 0.5095323725, 1.5401236515, 3.1983313588, 1.9564628257],
}


@pytest.mark.parametrize("where", REFERENCE_SCORES)
def test_pope_matches_its_reference_implementation(where):
    index = torch.arange(40, dtype=torch.float64).reshape(1, 2, 5, 4)
    q, k = torch.sin(0.37 * index + 0.1) * 2.0, torch.cos(0.23 * index - 0.4) * 1.5
    phase = torch.tensor([[-0.5, -1.0, -2.0, -7.0], [0.3, -0.25, -3.0, -6.5]], dtype=torch.float64)
    q2, k2 = pf.pope_qk(q, k, torch.arange(5), pf.pope_inv_freq(4, 10000.0).double(), phase)
    head, row = where
    got = (q2 @ k2.transpose(-1, -2))[0, head, row] / math.sqrt(2)  # posenc scales q by sqrt(2)
    # the reference is float64 printed to 9-10 decimals (5e-10); posenc's frequencies are float32 (u32
    # relative), so each term's angle (t - s) theta_c is at most 4 u32 off, moving it by that much of its
    # magnitude softplus(q_c) softplus(k_c) (float64 rounding beside it: gamma(16, float64))
    sp = torch.nn.functional.softplus
    magnitude = (sp(q) @ sp(k).transpose(-1, -2))[0, head, row]
    tolerance = 5e-10 + (4 * unit_roundoff(torch.float32) + gamma(16, torch.float64)) * magnitude
    want = torch.tensor(REFERENCE_SCORES[where], dtype=torch.float64)
    assert ((got - want).abs() <= tolerance).all(), (got - want).abs() / tolerance


def _pope_stacked(q, k, positions, inv_freq, phase):
    """PoPE as the reference writes it (autograd through softplus, cos, sin and a stack per dimension)."""
    angle = positions.to(inv_freq.dtype)[:, None] * inv_freq
    key_angle = angle + phase.clamp(-2 * math.pi, 0.0)[:, None, :]
    sp = torch.nn.functional.softplus
    q2 = torch.stack((sp(q) * angle.cos(), sp(q) * angle.sin()), -1).flatten(-2) * math.sqrt(2.0)
    return q2, torch.stack((sp(k) * key_angle.cos(), sp(k) * key_angle.sin()), -1).flatten(-2)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("leaves", [("q",), ("k",), ("phase",), ("q", "k", "phase")])
def test_pope_gradients_are_autograds_through_the_reference_formula(leaves, traced, monkeypatch):
    """PoPE's written-out backward (softplus' derivative, the phase's through both key parts, summed over the
    batch) against autograd through the stacked formula, float64, with a phase clamped at both ends; scores
    only (the order of the cosine and sine parts is free). ``traced``: the branch torch.compile takes (autograd
    through the concatenated parts), run eagerly."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: traced)
    gen = torch.Generator().manual_seed(5)
    inputs = {
        "q": torch.randn(2, 3, 9, 6, generator=gen, dtype=torch.float64) * 3,
        "k": torch.randn(2, 3, 9, 6, generator=gen, dtype=torch.float64) * 3,
        "phase": torch.tensor([-7.0, -1.0, 0.5, -2.0, -6.0, -0.3], dtype=torch.float64).repeat(3, 1),
    }
    weight = torch.randn(2, 3, 9, 9, generator=gen, dtype=torch.float64)
    got, want = [], []
    for fn, out in ((pf.pope_qk, got), (_pope_stacked, want)):
        leaf = {name: t.clone().requires_grad_(name in leaves) for name, t in inputs.items()}
        q2, k2 = fn(leaf["q"], leaf["k"], torch.arange(9), pf.pope_inv_freq(6).double(), leaf["phase"])
        ((q2 @ k2.transpose(-1, -2)) * weight).sum().backward()
        out.extend(leaf[name].grad for name in leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert got[-1].abs().sum() > 0


def test_pope_traced_is_eagers_forward_bit_for_bit(monkeypatch):
    """Traced (torch.compile's branch, run eagerly), PoPE's parts are the same fp32 products, only concatenated
    instead of written into a new tensor's halves; bfloat16 inputs keep their dtype there too."""
    gen = torch.Generator().manual_seed(7)
    q, k = (torch.randn(2, 3, 11, 8, generator=gen) for _ in range(2))
    phase = torch.randn(3, 8, generator=gen).clamp(max=0)
    args = (torch.arange(11), pf.pope_inv_freq(8), phase)
    eager = pf.pope_qk(q, k, *args)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    traced = pf.pope_qk(q, k, *args)
    assert all(torch.equal(a, b) for a, b in zip(eager, traced, strict=True))
    assert all(t.dtype == torch.bfloat16 for t in pf.pope_qk(q.bfloat16(), k.bfloat16(), *args))


def test_pope_gradients_pass_gradcheck_and_keep_bfloat16_inputs_dtype():
    q, k = (torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    phase = torch.full((2, 4), -0.4, dtype=torch.float64, requires_grad=True)
    inv_freq = pf.pope_inv_freq(4).double()
    assert torch.autograd.gradcheck(lambda *t: pf.pope_qk(t[0], t[1], torch.arange(5), inv_freq, t[2]), (q, k, phase))
    qb = torch.randn(1, 2, 5, 4, dtype=torch.bfloat16, requires_grad=True)
    q2, k2 = pf.pope_qk(qb, qb, torch.arange(5), pf.pope_inv_freq(4), torch.zeros(2, 4))
    assert q2.dtype == torch.bfloat16 and k2.shape == (1, 2, 5, 8)
    (q2.float() @ k2.float().transpose(-1, -2)).sum().backward()
    assert qb.grad.dtype == torch.bfloat16 and torch.isfinite(qb.grad.float()).all()


@pytest.mark.parametrize("leaves", ["q", "k", "v", "pos_emb"])
def test_cope_attention_gradient_of_each_input_alone_equals_the_papers_computation(leaves):
    """CoPE's written-out backward (``CopeAttention``) when one input alone wants a gradient: that gradient is the
    dense float64 computation's, at a length of several blocks with counts clamped."""
    gen = torch.Generator().manual_seed(3)
    inputs = dict(
        zip(("q", "k", "v"), (torch.randn(2, 3, 70, 8, generator=gen, dtype=torch.float64) * 2 for _ in range(3)))
    )
    inputs["pos_emb"] = torch.randn(8, 12, generator=gen, dtype=torch.float64)
    weight = torch.randn(2, 3, 70, 8, generator=gen, dtype=torch.float64)
    grads = []
    for fn in (pf.cope_attention, _cope_dense):
        leaf = inputs[leaves].clone().requires_grad_()
        (fn(**{**inputs, leaves: leaf}) * weight).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(*grads)


def test_cope_attention_float32_gradients_are_as_close_to_float64_as_autograds():
    """In float32 the written-out backward (its reversed cumulative sum as total minus prefix sums) stays as close
    to the float64 gradients as autograd through the dense computation does (within 2x its error)."""
    gen = torch.Generator().manual_seed(4)
    inputs = [torch.randn(2, 4, 300, 16, generator=gen, dtype=torch.float64) for _ in range(3)]
    inputs.append(torch.randn(16, 64, generator=gen, dtype=torch.float64))
    weight = torch.randn(2, 4, 300, 16, generator=gen, dtype=torch.float64)

    def gradients(fn, dtype):
        leaves = [t.to(dtype).clone().requires_grad_() for t in inputs]
        (fn(*leaves) * weight.to(dtype)).sum().backward()
        return [t.grad.double() for t in leaves]

    exact = gradients(_cope_dense, torch.float64)
    for got, reference, want in zip(
        gradients(pf.cope_attention, torch.float32), gradients(_cope_dense, torch.float32), exact
    ):
        assert (got - want).abs().max() <= 2 * (reference - want).abs().max() + 1e-6


def test_cope_attention_with_gates_that_round_to_one_counts_every_key():
    """Logits so large that every gate is exactly 1: a query's count back to the first key is the number of keys,
    the largest position any block looks up (its last column of ``q . e``); values and gradients as dense."""
    gen = torch.Generator().manual_seed(5)
    direction = torch.randn(8, generator=gen, dtype=torch.float64)
    base = direction.expand(1, 2, 45, 8) * 40 + 0.1 * torch.randn(1, 2, 45, 8, generator=gen, dtype=torch.float64)
    inputs = [
        base,
        base.clone(),
        torch.randn(1, 2, 45, 8, generator=gen, dtype=torch.float64),
        torch.randn(8, 64, generator=gen, dtype=torch.float64),
    ]
    results = []
    for fn in (pf.cope_attention, _cope_dense):
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = fn(*leaves)
        out.sum().backward()
        results.append([out, *(t.grad for t in leaves)])
    assert bool((torch.sigmoid(inputs[0] @ inputs[1].transpose(-1, -2) / 8**0.5) == 1).all())
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)
