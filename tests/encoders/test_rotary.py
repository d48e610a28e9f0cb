"""The rotary encoders of posenc.encoders.rotary (scaling and rope_partial: test_rotary_scaling.py)."""

import torch
from rounding import unit_roundoff

from posenc import functional as pf
from posenc.encoders import AttentionShape, build_encoder

SHAPE = AttentionShape(d_model=32, n_heads=4)


def test_rope_ntk_is_rope_up_to_train_length_and_ntk_beyond():
    rope = build_encoder("rope", SHAPE, train_length=16)
    ntk = build_encoder("rope_ntk", SHAPE, train_length=16)
    q, k = torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)
    for a, b in zip(rope.rotate(q, k, torch.arange(16)), ntk.rotate(q, k, torch.arange(16))):
        torch.testing.assert_close(a, b)
    expected = pf.rope_inv_freq(8, pf.ntk_base(10000.0, 8, 64 / 16))
    torch.testing.assert_close(ntk.scaling_for(64)[0], expected)
    q, k = torch.randn(1, 4, 64, 8), torch.randn(1, 4, 64, 8)
    torch.testing.assert_close(ntk.rotate(q, k, torch.arange(64))[0], pf.apply_rope(q, torch.arange(64), expected))


def test_p_rope_keeps_ropes_highest_frequencies_and_leaves_the_lowest_pairs_unrotated():
    """Barbero et al. 2025: the lowest `removed` fraction of RoPE's spectrum set to zero (head_dim 8: 4
    pairs, 0.25 removes 1; 0.5 removes 2), the kept pairs rotated exactly as RoPE rotates them."""
    rope = build_encoder("rope", SHAPE, train_length=16)
    for removed, kept_pairs in ((0.25, 3), (0.5, 2), (0.0, 4)):
        p = build_encoder("p_rope", SHAPE, train_length=16, options={"removed": removed})
        assert p.rotary_dim == 2 * kept_pairs
        torch.testing.assert_close(p.inv_freq, pf.rope_inv_freq(8)[:kept_pairs])
        q, k = torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
        (pq, pk), (rq, _) = p.rotate(q, k, torch.arange(16)), rope.rotate(q, k, torch.arange(16))
        r = 2 * kept_pairs
        torch.testing.assert_close(pq[..., :r], rq[..., :r])  # kept pairs: RoPE's rotation
        assert torch.equal(pq[..., r:], q[..., r:]) and torch.equal(pk[..., r:], k[..., r:])  # removed: as is


def test_p_rope_removed_pairs_carry_no_position_and_scaling_acts_on_the_whole_spectrum():
    from posenc.functional.rope_scaling_spec import RopeScaling

    p = build_encoder("p_rope", SHAPE, train_length=16, options={"removed": 0.5})
    q = torch.randn(1, 1, 1, 8).expand(1, 4, 40, 8)
    rq, rk = p.rotate(q, q, torch.arange(40))
    scores = (rq[..., 4:] @ rk[..., 4:].transpose(-1, -2))[0, 0]  # the removed (unrotated) pairs alone
    torch.testing.assert_close(scores, torch.full_like(scores, float(scores[0, 0])))  # the same at any distance
    p.set_rope_scaling(RopeScaling("linear", 4.0))
    torch.testing.assert_close(p.scaling_for(64)[0], pf.rope_inv_freq(8)[:2] / 4)
    p.set_rope_scaling(RopeScaling("ntk", 4.0))
    torch.testing.assert_close(p.scaling_for(64)[0], pf.rope_inv_freq(8, pf.ntk_base(10000.0, 8, 4.0))[:2])


def test_p_rope_refuses_a_fraction_outside_zero_to_one():
    import pytest

    from posenc.errors import ConfigError

    for removed in (-0.1, 1.0, 1.5):
        with pytest.raises(ConfigError, match="encoder.removed must be in"):
            build_encoder("p_rope", SHAPE, train_length=16, options={"removed": removed})


# Hugging Face transformers 5.23.0, modeling_rope_utils._compute_proportional_rope_parameters of a LlamaConfig
# with head_dim 16, rope_theta 10000 and rope_parameters {rope_type: proportional, partial_rotary_factor: p}
# (p-RoPE's p = 1 - removed): the inverse frequencies, zero for the pairs left unrotated.
HF_PROPORTIONAL = {
    0.75: [1, 0.3162277639, 0.1000000015, 0.03162277862, 0.009999999776, 0.003162277862, 0, 0],
    0.5: [1, 0.3162277639, 0.1000000015, 0.03162277862, 0, 0, 0, 0],
}


def test_p_rope_frequencies_are_hugging_faces_proportional_rope():
    shape = AttentionShape(d_model=64, n_heads=4)  # head_dim 16: 8 pairs
    for p, reference in HF_PROPORTIONAL.items():
        encoder = build_encoder("p_rope", shape, train_length=16, options={"removed": 1 - p})
        full = torch.zeros(8, dtype=torch.float64)
        full[: encoder.rotary_dim // 2] = encoder.inv_freq
        # both float32: Hugging Face's powf (1 ulp: 2 u) and reciprocal (u), posenc's float64 pow rounded once
        # (u), 10 printed digits (1e-10): at most 5 u of float32 apart
        want = torch.tensor(reference, dtype=torch.float64)
        torch.testing.assert_close(full, want, rtol=5 * unit_roundoff(torch.float32), atol=0)


def test_p_rope_that_would_rotate_nothing_is_refused():
    import pytest

    from posenc.errors import ConfigError

    with pytest.raises(ConfigError, match="leaves no rotated pair"):
        build_encoder("p_rope", AttentionShape(d_model=8, n_heads=4), train_length=16, options={"removed": 0.6})
