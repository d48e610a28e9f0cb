"""Evaluation-time RoPE scaling of rotary encoders; rope_ntk as RoPE + NTK; the rope_partial encoder."""

import math

import pytest
import torch
from rounding import gamma, rotation_bound, unit_roundoff

from posenc import functional as pf
from posenc.encoders import AttentionShape, RotaryEncoder, build_encoder
from posenc.errors import ConfigError
from posenc.functional.rope_scaling import ROPE_SCALING
from posenc.functional.rope_scaling_spec import RopeScaling
from posenc.nn.model import ModelConfig, Transformer

SHAPE = AttentionShape(d_model=64, n_heads=4)  # head_dim 16
TRAIN = 16
ROTARY = ["rope", "rope_ntk", "xpos", "rope_partial"]


def qk(length: int, seed: int = 0, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys ``[2, 4, length, 16]``."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, length, 16, generator=g, dtype=dtype)
    return q, torch.randn(2, 4, length, 16, generator=g, dtype=dtype)


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-1, -2)


@pytest.mark.parametrize("name", ROTARY)
@pytest.mark.parametrize("length", [8, TRAIN, 4 * TRAIN])
def test_none_scaling_is_plain_rotation_and_none_restores_the_trained_encoder(name, length):
    encoder = build_encoder(name, SHAPE, TRAIN)
    assert isinstance(encoder, RotaryEncoder) and encoder.rope_scaling == type(encoder).default_scaling
    q, k = qk(length)
    positions = torch.arange(length)
    trained = encoder.rotate(q, k, positions)
    encoder.set_rope_scaling(RopeScaling("none"))
    plain = build_encoder("rope" if name == "rope_ntk" else name, SHAPE, TRAIN).rotate(q, k, positions)
    for got, want in zip(encoder.rotate(q, k, positions), plain):
        assert torch.equal(got, want)  # bit for bit
    encoder.set_rope_scaling(None)
    assert encoder.rope_scaling == type(encoder).default_scaling
    for got, want in zip(encoder.rotate(q, k, positions), trained):
        assert torch.equal(got, want)


@pytest.mark.parametrize("factor", [2.0, 4.0, 3.0])
def test_linear_scaling_is_position_interpolation(factor):
    """Scores under linear scaling by s at (m, n) equal unscaled RoPE's at (m/s, n/s) (Chen et al. 2023)."""
    encoder = build_encoder("rope", SHAPE, TRAIN)
    encoder.set_rope_scaling(RopeScaling("linear", factor))
    q, k = qk(48, dtype=torch.float64)
    positions = torch.arange(48)
    got = scores(*encoder.rotate(q, k, positions))
    inv_freq = pf.rope_inv_freq(16, 10000.0)
    interpolated = positions.double() / factor
    want = scores(pf.apply_rope(q, interpolated, inv_freq), pf.apply_rope(k, interpolated, inv_freq))
    # float32 frequencies divided by s and rounded (u32 relative) against float64 positions / s: angles at most
    # 47 rad apart by 47 u32, so each rotated pair moves by that much of its |x0| + |x1|; the float64 rotation
    # and 16-term dot product add a few u64. Per score: 2 (47 u32 + gamma(20)) sum over pairs of (|q0| + |q1|)
    # (|k0| + |k1|)
    reach = 2 * (47 * unit_roundoff(torch.float32) + gamma(20, torch.float64))
    pairs = [x.abs().unflatten(-1, (-1, 2)).sum(-1) for x in (q, k)]
    assert ((got - want).abs() <= reach * scores(*pairs)).all()
    if factor in (2.0, 4.0):  # powers of two: the rounding commutes, so it is exact
        assert torch.equal(got, want)


def test_a_factor_of_none_follows_the_evaluation_length():
    follow, fixed = build_encoder("rope", SHAPE, TRAIN), build_encoder("rope", SHAPE, TRAIN)
    follow.set_rope_scaling(RopeScaling("yarn"))
    q, k = qk(3 * TRAIN)
    for length, factor in ((3 * TRAIN, 3.0), (TRAIN, 1.0), (TRAIN // 2, 1.0)):
        fixed.set_rope_scaling(RopeScaling("yarn", factor))
        positions = torch.arange(length)
        a = follow.rotate(q[..., :length, :], k[..., :length, :], positions)
        b = fixed.rotate(q[..., :length, :], k[..., :length, :], positions)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("name", ROTARY)
def test_yarn_scales_q_and_k_by_mscale_so_logits_by_its_square(name):
    encoder = build_encoder(name, SHAPE, TRAIN)
    length, factor = 4 * TRAIN, 4.0
    q, k = qk(length, dtype=torch.float64)
    positions = torch.arange(length)
    r = encoder.rotary_dim
    inv_freq, mscale = pf.yarn_scaling(r, 10000.0, factor, TRAIN, length)
    assert mscale == pytest.approx(0.1 * math.log(4) + 1)
    # the same encoder with YaRN's frequencies swapped in and no attention scale
    unscaled_tables = encoder.rotations(positions, inv_freq.float(), torch.complex128)
    encoder.set_rope_scaling(RopeScaling("yarn", factor))
    rq, rk = encoder.rotation_tables(positions, length, torch.complex128)
    torch.testing.assert_close(rq, unscaled_tables[0] * mscale, rtol=1e-12, atol=0)
    torch.testing.assert_close(rk, unscaled_tables[1] * mscale, rtol=1e-12, atol=0)
    q2, k2 = encoder.rotate(q, k, positions)
    want_q = pf.apply_rotation(q[..., :r], unscaled_tables[0])
    want_k = pf.apply_rotation(k[..., :r], unscaled_tables[1])
    torch.testing.assert_close(scores(q2[..., :r], k2[..., :r]), scores(want_q, want_k) * mscale**2)


def test_xpos_keeps_its_decay_under_scaling():
    encoder = build_encoder("xpos", SHAPE, TRAIN)
    encoder.set_rope_scaling(RopeScaling("linear", 2.0))
    positions = torch.arange(40)
    rq, rk = encoder.rotation_tables(positions, 40, torch.complex128)
    plain_q, plain_k = build_encoder("xpos", SHAPE, TRAIN).rotation_tables(positions, 40, torch.complex128)
    torch.testing.assert_close(rq.abs(), plain_q.abs())  # the decay: magnitudes unchanged
    torch.testing.assert_close(rk.abs(), plain_k.abs())
    assert encoder.scale_base == TRAIN / 2  # the default: half the training length
    want = pf.xpos_rotations(positions, encoder.inv_freq / 2, 16, 0.4, TRAIN / 2, torch.complex128)
    torch.testing.assert_close(rq, want[0])


def test_xpos_scale_base_defaults_to_half_the_training_length():
    assert build_encoder("xpos", SHAPE, 1024).scale_base == 512.0  # the paper: 512 for 1024-token training
    assert build_encoder("xpos", SHAPE, 64).scale_base == 32.0
    assert build_encoder("xpos", SHAPE, 1).scale_base == 1.0  # at least 1
    assert build_encoder("xpos", SHAPE, 64, {"scale_base": 512}).scale_base == 512.0  # the paper's value
    assert build_encoder("xpos", SHAPE, 64, {"scale_base": None}).scale_base == 32.0
    with pytest.raises(ConfigError, match="must be of type float"):
        build_encoder("xpos", SHAPE, 64, {"scale_base": "long"})


def test_xpos_centred_factors_stay_in_float32_and_longer_sequences_take_the_relative_path():
    encoder = build_encoder("xpos", SHAPE, TRAIN)  # head_dim 16, gamma 0.4, scale_base 8
    zeta_min = (0.4) / 1.4
    longest = int(2 * 60 * 8 / -math.log(zeta_min)) + 1
    assert longest == 767
    for length, ok in ((longest, True), (longest + 1, False)):
        rq, rk = pf.xpos_rotations(torch.arange(length), encoder.inv_freq, 16, 0.4, 8.0, torch.complex128)
        biggest = max(rq.abs().max().item(), rk.abs().max().item())
        assert (math.log(biggest) <= encoder.MAX_LOG_SCALE) is ok  # where the centred factors stop
        assert encoder.relative(torch.arange(length)) is not ok  # ... the relative path takes over
        rq, rk = encoder.rotation_tables(torch.arange(length), length, torch.complex64)
        assert max(rq.abs().max(), rk.abs().max()) < math.exp(encoder.MAX_LOG_SCALE)
    encoder.check_positions(8192)  # no length is refused (tests/encoders/test_xpos.py: exact at any length)


def test_setting_a_scaling_clears_the_table_cache():
    encoder = build_encoder("rope", SHAPE, TRAIN)
    q, k = qk(4 * TRAIN)
    positions = torch.arange(4 * TRAIN)
    before = encoder.rotate(q, k, positions)
    assert len(encoder._tables) == 1
    encoder.set_rope_scaling(RopeScaling("ntk"))
    assert not encoder._tables
    after = encoder.rotate(q, k, positions)  # same positions tensor: must not reuse the old table
    assert not torch.allclose(before[0], after[0])
    assert len(encoder._tables) == 1
    ((_, tables),) = encoder._tables.values()
    ntk = encoder._scaled_rotations(positions, 4 * TRAIN, torch.complex64)
    assert torch.equal(tables[0], ntk[0]) and torch.equal(tables[1], ntk[1])  # the table cached is ntk's
    assert encoder.rotation_tables(positions, 4 * TRAIN, torch.complex64) is tables  # reused, not recomputed
    assert torch.equal(encoder.rotate(q, k, positions)[0], after[0])
    encoder.set_rope_scaling(None)
    assert not encoder._tables and torch.equal(encoder.rotate(q, k, positions)[0], before[0])


def test_compiled_path_computes_the_same_scaled_tables(monkeypatch):
    """The same tables bit for bit; the rotated queries and keys within two roundings of a two-term dot product:
    traced, the product is real arithmetic (inductor has no complex kernels), and eager's complex multiply
    itself rounds differently by memory layout (fused on a strided slice such as rope_partial's, not on a
    contiguous tensor)."""
    encoder = build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": 0.5})
    encoder.set_rope_scaling(RopeScaling("yarn"))
    q, k = qk(3 * TRAIN)
    positions = torch.arange(3 * TRAIN)
    cached = encoder.rotate(q, k, positions)
    tables = encoder.rotation_tables(positions, 3 * TRAIN, torch.complex64)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    encoder._tables.clear()
    compiled = encoder.rotate(q, k, positions)
    assert not encoder._tables  # bypassed
    traced_tables = encoder.rotation_tables(positions, 3 * TRAIN, torch.complex64)
    assert all(torch.equal(a, b) for a, b in zip(tables, traced_tables, strict=True))
    r = encoder.rotary_dim
    for x, table, eager, traced in zip((q, k), tables, cached, compiled, strict=True):
        assert torch.equal(eager[..., r:], traced[..., r:])  # the dimensions left as they are
        assert ((eager - traced)[..., :r].abs() <= rotation_bound(x[..., :r], table)).all()


@pytest.mark.parametrize("length", [TRAIN // 2, TRAIN, 3 * TRAIN, 64 * TRAIN + 5])
def test_rope_ntk_is_bit_identical_to_its_reference_computation(length):
    encoder = build_encoder("rope_ntk", SHAPE, TRAIN)
    assert encoder.rope_scaling == RopeScaling("ntk") and not encoder.state_dict()  # old checkpoints load
    q, k = qk(length)
    positions = torch.arange(length)
    base = 10000.0 if length <= TRAIN else pf.ntk_base(10000.0, 16, length / TRAIN)
    rotation = pf.rope_rotation(positions, pf.rope_inv_freq(16, base), torch.complex64)  # the pre-refactor code
    q2, k2 = encoder.rotate(q, k, positions)
    assert torch.equal(q2, pf.apply_rotation(q, rotation)) and torch.equal(k2, pf.apply_rotation(k, rotation))
    assert torch.equal(encoder.scaling_for(length)[0], pf.rope_inv_freq(16, base))


def test_another_scaling_replaces_rope_ntks_default():
    ntk, rope = build_encoder("rope_ntk", SHAPE, TRAIN), build_encoder("rope", SHAPE, TRAIN)
    for encoder in (ntk, rope):
        encoder.set_rope_scaling(RopeScaling("yarn"))
    q, k = qk(4 * TRAIN)
    positions = torch.arange(4 * TRAIN)
    assert torch.equal(ntk.rotate(q, k, positions)[0], rope.rotate(q, k, positions)[0])
    ntk.set_rope_scaling(None)
    assert ntk.rope_scaling == RopeScaling("ntk")


def test_bad_scalings_are_config_errors():
    encoder = build_encoder("rope", SHAPE, TRAIN)
    with pytest.raises(ConfigError, match="unknown rope scaling method 'bogus'; known methods: none, linear"):
        encoder.set_rope_scaling(RopeScaling("bogus"))
    with pytest.raises(ConfigError, match="factor must be a number > 0"):
        encoder.set_rope_scaling(RopeScaling("linear", -2.0))
    narrow = build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": 0.125})  # 2 rotated dims
    with pytest.raises(ConfigError, match="head_dim must be > 2"):
        narrow.set_rope_scaling(RopeScaling("ntk"))
    assert encoder.rope_scaling is None and narrow.rope_scaling is None  # unchanged after a refusal


@pytest.mark.parametrize("method", ROPE_SCALING)
def test_every_method_runs_through_a_model(method):
    cfg = ModelConfig(vocab_size=20, d_model=64, n_layers=1, n_heads=4, d_mlp=64)
    torch.manual_seed(0)
    model = Transformer(cfg, build_encoder("rope", cfg.shape, TRAIN)).eval()
    tokens = torch.randint(0, 20, (2, 4 * TRAIN))
    with torch.no_grad():
        plain = model(tokens)
        model.encoder.set_rope_scaling(RopeScaling(method))
        scaled = model(tokens)
    assert scaled.shape == plain.shape and torch.isfinite(scaled).all()
    assert torch.equal(scaled, plain) == (method == "none")


# -- rope_partial ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction, rotated", [(0.25, 4), (0.5, 8), (0.125, 2), (1.0, 16), (0.3, 4)])
def test_rope_partial_rotates_the_first_fraction_and_leaves_the_rest(fraction, rotated):
    encoder = build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": fraction})
    assert encoder.rotary_dim == rotated and encoder.inv_freq.shape == (rotated // 2,)
    q, k = qk(20)
    positions = torch.arange(20)
    q2, k2 = encoder.rotate(q, k, positions)
    assert torch.equal(q2[..., rotated:], q[..., rotated:])
    assert torch.equal(k2[..., rotated:], k[..., rotated:])
    torch.testing.assert_close(q2.norm(dim=-1), q.norm(dim=-1))  # rotations keep norms
    want = pf.apply_rope(q[..., :rotated], positions, pf.rope_inv_freq(rotated))  # GPT-NeoX frequencies
    torch.testing.assert_close(q2[..., :rotated], want)
    if rotated == 16:
        rope = build_encoder("rope", SHAPE, TRAIN)
        assert torch.equal(q2, rope.rotate(q, k, positions)[0])


def test_rope_partial_scores_depend_on_relative_positions_only():
    encoder = build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": 0.5})
    q, k = qk(12, dtype=torch.float64)
    at0 = scores(*encoder.rotate(q, k, torch.arange(12)))
    at100 = scores(*encoder.rotate(q, k, torch.arange(100, 112)))
    torch.testing.assert_close(at0, at100)


def test_rope_partial_works_on_strided_views_of_a_fused_projection():
    encoder = build_encoder("rope_partial", SHAPE, TRAIN)
    fused = torch.randn(2, 10, 3 * 64)
    q, k, _ = (t.unflatten(-1, (4, 16)).transpose(1, 2) for t in fused.split(64, dim=-1))  # [b, h, s, hd]
    assert not q.is_contiguous()
    got = encoder.rotate(q, k, torch.arange(10))
    want = encoder.rotate(q.contiguous(), k.contiguous(), torch.arange(10))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_rope_partial_scaling_acts_on_the_rotated_dims():
    encoder = build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": 0.5})
    encoder.set_rope_scaling(RopeScaling("linear", 2.0))
    q, k = qk(32)
    positions = torch.arange(32)
    q2, _ = encoder.rotate(q, k, positions)
    assert torch.equal(q2[..., 8:], q[..., 8:])
    torch.testing.assert_close(q2[..., :8], pf.apply_rope(q[..., :8], positions / 2, pf.rope_inv_freq(8)))


@pytest.mark.parametrize("fraction, rotated", [(0.1875, 3), (0.05, 0), (0.1, 1)])
def test_rope_partial_refuses_odd_or_too_few_rotated_dims(fraction, rotated):
    message = rf"encoder.fraction={fraction} rotates .* = {rotated} dimensions; rope_partial needs an even"
    with pytest.raises(ConfigError, match=message):
        build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": fraction})


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_rope_partial_refuses_a_fraction_outside_zero_one(fraction):
    with pytest.raises(ConfigError, match=r"encoder.fraction must be in \(0, 1\]"):
        build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": fraction})


def test_rope_partial_is_rope_shaped_for_the_registry_checks():
    with pytest.raises(ConfigError, match="even head dimension"):  # checked before the fraction
        build_encoder("rope_partial", AttentionShape(d_model=36, n_heads=4), TRAIN)
    assert build_encoder("rope_partial", AttentionShape(d_model=128, n_heads=4), TRAIN).rotary_dim == 8
    assert build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": 0.375}).rotary_dim == 6


# -- rope with a fraction: a paper's RoPE that rotates part of each head ---------------------------------


def rotate_part_every_two(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Kazemnejad et al. 2023's rotary written from its formula (McGill-NLP/length-generalization @ 40f8a445,
    src/models/custom_t5_decoder_only.py L194-198, L380-392): pair ``(x[2j], x[2j+1])`` of the first
    ``rotary_dim`` dims turned by ``m * 10000**(-2j / rotary_dim)`` (GPT-J's rotate_every_two), the rest as is."""
    out = x.clone()
    for j in range(rotary_dim // 2):
        angle = positions.to(x.dtype)[:, None] * 10000.0 ** (-2 * j / rotary_dim)  # [s, 1]
        a, b = x[..., 2 * j : 2 * j + 1], x[..., 2 * j + 1 : 2 * j + 2]
        out[..., 2 * j : 2 * j + 1] = a * angle.cos() - b * angle.sin()
        out[..., 2 * j + 1 : 2 * j + 2] = b * angle.cos() + a * angle.sin()
    return out


def test_rope_with_a_fraction_is_the_papers_partial_rotary_and_rope_partials_rule():
    """``rope`` with ``fraction`` 0.25 rotates what Kazemnejad et al.'s rotary rotates (int(0.25 * d_head)
    dims, frequencies over them), which is rope_partial's rule; fraction 1 (the default) is RoPE itself."""
    q, k = qk(40, dtype=torch.float64)
    positions = torch.arange(40)
    quarter = build_encoder("rope", SHAPE, TRAIN, {"fraction": 0.25})
    assert quarter.rotary_dim == 4 and quarter.fraction == 0.25
    # posenc keeps inverse frequencies in float32 (pf.rope_inv_freq): angle m * theta_j is off by m times that
    # rounding, which moves a pair by its norm times the angle's error; float64 arithmetic adds a few u64
    theta = 10000.0 ** (-2 * torch.arange(2, dtype=torch.float64) / 4)  # [2]: the rotated pairs' frequencies
    u64 = unit_roundoff(torch.float64)
    stored = (quarter.inv_freq.double() - theta).abs()  # <= theta * u32
    for x, got in zip((q, k), quarter.rotate(q, k, positions)):
        want = rotate_part_every_two(x, positions, 4)
        assert torch.equal(got[..., 4:], x[..., 4:])  # the other 12 dims pass through
        pair_error = (got - want)[..., :4].unflatten(-1, (2, 2)).norm(dim=-1)  # [b, h, s, 2]
        norms = x[..., :4].unflatten(-1, (2, 2)).norm(dim=-1)
        bound = norms * (positions[:, None] * (stored + 2 * theta * u64) + 8 * u64)
        assert (pair_error <= bound).all()
    partial = build_encoder("rope_partial", SHAPE, TRAIN, {"fraction": 0.25})
    assert all(torch.equal(a, b) for a, b in zip(quarter.rotate(q, k, positions), partial.rotate(q, k, positions)))
    whole, plain = build_encoder("rope", SHAPE, TRAIN, {"fraction": 1.0}), build_encoder("rope", SHAPE, TRAIN)
    assert all(torch.equal(a, b) for a, b in zip(whole.rotate(q, k, positions), plain.rotate(q, k, positions)))


@pytest.mark.parametrize("fraction, message", [(0.05, "rope needs an even number"), (1.5, r"must be in \(0, 1\]")])
def test_rope_refuses_a_fraction_it_cannot_rotate(fraction, message):
    with pytest.raises(ConfigError, match=message):
        build_encoder("rope", SHAPE, TRAIN, {"fraction": fraction})
