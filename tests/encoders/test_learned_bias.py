"""The learned-bias encoders t5, kerple and fire: wrappers of the formulas, learned through the model."""

import math

import pytest
import torch

from posenc import functional as pf
from posenc.encoders import ENCODERS, FIRE, AttentionShape, KerpleLog, T5Bias, build_encoder
from posenc.errors import ConfigError
from posenc.nn.model import ModelConfig, Transformer

SHAPE = AttentionShape(d_model=32, n_heads=4)
LEARNED_BIAS = ["t5", "kerple", "fire"]


def test_registered_as_score_bias_encoders():
    assert (ENCODERS["t5"], ENCODERS["kerple"], ENCODERS["fire"]) == (T5Bias, KerpleLog, FIRE)
    for name in LEARNED_BIAS:
        encoder = build_encoder(name, SHAPE, 16)
        assert encoder.has_score_bias
        assert any(p.requires_grad for p in encoder.parameters())


@pytest.mark.parametrize("name", LEARNED_BIAS)
def test_score_bias_has_the_parameters_dtype(name):
    encoder = build_encoder(name, SHAPE, 16)
    pos = torch.arange(12)
    assert encoder.score_bias(pos[4:], pos).dtype == torch.float32
    assert encoder.double().score_bias(pos[4:], pos).dtype == torch.float64
    assert encoder.score_bias(pos[4:], pos).shape == (4, 8, 12)


def test_every_learned_bias_has_a_flex_attention_form():
    for name in ("t5", "kerple", "fire"):
        assert build_encoder(name, SHAPE, 16).score_mod(16) is not None


# --- t5 ------------------------------------------------------------------------------------------------


def test_t5_bias_is_the_table_at_the_causal_bucket_and_depends_only_on_i_minus_j():
    encoder = build_encoder("t5", SHAPE, 16, {"num_buckets": 16, "max_distance": 64})
    assert encoder.table.shape == (16, 4)
    pos = torch.arange(300)
    bias = encoder.score_bias(pos[200:], pos)
    torch.testing.assert_close(bias, pf.t5_bias(encoder.table, pos[200:], pos, max_distance=64))
    torch.testing.assert_close(encoder.score_bias(pos[200:] + 50, pos + 50), bias)
    torch.testing.assert_close(bias[:, 99, 299 - 64], encoder.table[15])  # beyond max_distance: last bucket


def test_t5_options_are_checked():
    with pytest.raises(ConfigError, match="max_distance"):
        build_encoder("t5", SHAPE, 16, {"num_buckets": 32, "max_distance": 8})
    with pytest.raises(ConfigError, match="must be of type int"):
        build_encoder("t5", SHAPE, 16, {"num_buckets": 32.5})


# --- kerple --------------------------------------------------------------------------------------------


def test_kerple_initialisation_follows_the_reference_code():
    torch.manual_seed(0)
    encoder = build_encoder("kerple", AttentionShape(d_model=512, n_heads=256), 16)
    assert encoder.r1.shape == encoder.r2.shape == (256,)
    assert 0 <= encoder.r1.min() and encoder.r1.max() <= 2 and encoder.r1.max() > 1.5  # U(0, 2)
    assert 0 <= encoder.r2.min() and encoder.r2.max() <= 1 and encoder.r2.max() > 0.9  # U(0, 1)


def test_kerple_bias_by_hand_and_monotone_in_distance():
    encoder = build_encoder("kerple", AttentionShape(d_model=8, n_heads=2), 16)
    with torch.no_grad():
        encoder.r1.copy_(torch.tensor([1.0, 0.5]))
        encoder.r2.copy_(torch.tensor([2.0, 0.25]))
    bias = encoder.score_bias(torch.tensor([5]), torch.arange(6))  # distances 5, 4, ..., 0
    expected = torch.stack([-torch.log1p(2.0 * torch.arange(5.0, -1, -1)),
                            -0.5 * torch.log1p(0.25 * torch.arange(5.0, -1, -1))])  # fmt: skip
    torch.testing.assert_close(bias[:, 0], expected)
    assert (bias[:, 0, 1:] >= bias[:, 0, :-1]).all()  # closer keys never get a smaller bias


def test_kerple_keeps_its_parameters_positive_by_clamping_like_the_reference():
    encoder = build_encoder("kerple", AttentionShape(d_model=8, n_heads=2), 16)
    with torch.no_grad():
        encoder.r1.copy_(torch.tensor([-1.0, 0.5]))
        encoder.r2.copy_(torch.tensor([0.3, -2.0]))
    bias = encoder.score_bias(torch.arange(10), torch.arange(10))
    assert torch.equal(encoder.r1.detach(), torch.tensor([0.01, 0.5]))  # projected in place
    assert torch.equal(encoder.r2.detach(), torch.tensor([0.3, 0.01]))
    torch.testing.assert_close(bias, pf.kerple_log_bias(encoder.r1.detach(), encoder.r2.detach(),
                                                       torch.arange(10), torch.arange(10)))  # fmt: skip
    bias.sum().backward()
    assert (encoder.r1.grad != 0).all() and (encoder.r2.grad != 0).all()  # also at the bound


# --- fire ----------------------------------------------------------------------------------------------


def test_fire_defaults_follow_the_paper_with_the_threshold_scaled_to_the_training_length():
    encoder = build_encoder("fire", SHAPE, 16)
    assert encoder.c.item() == pytest.approx(0.1)
    assert encoder.threshold.item() == pytest.approx(4.0)  # a quarter of the training length
    assert encoder.w1.shape == (32, 1) and encoder.w2.shape == (4, 32)
    assert build_encoder("fire", SHAPE, 64).threshold.item() == pytest.approx(16.0)
    assert build_encoder("fire", SHAPE, 2).threshold.item() == pytest.approx(1.0)  # at least 1
    paper = build_encoder("fire", SHAPE, 16, {"init_threshold": 512})  # the reference code's value (an int works)
    assert paper.threshold.item() == pytest.approx(512.0) and paper.init_threshold == 512.0
    assert build_encoder("fire", SHAPE, 16, {"init_threshold": None}).threshold.item() == pytest.approx(4.0)


def test_t5_max_distance_defaults_to_half_the_training_length_and_at_least_num_buckets():
    assert build_encoder("t5", SHAPE, 512).max_distance == 256
    assert build_encoder("t5", SHAPE, 64).max_distance == 32  # max(num_buckets, 32)
    assert build_encoder("t5", SHAPE, 16).max_distance == 32
    assert build_encoder("t5", SHAPE, 16, {"num_buckets": 8}).max_distance == 8
    assert build_encoder("t5", SHAPE, 64, {"max_distance": 128}).max_distance == 128  # the paper's value
    # at the default, the training window's longest distance reaches the last bucket (so it is trained)
    encoder = build_encoder("t5", SHAPE, 64)
    last = pf.t5_relative_bucket(torch.tensor([-63]), encoder.num_buckets, encoder.max_distance)
    assert last.item() == encoder.num_buckets - 1
    with pytest.raises(ConfigError, match="must be of type int"):
        build_encoder("t5", SHAPE, 64, {"max_distance": 12.5})


def test_fire_bias_is_the_formula_and_normalises_by_max_of_threshold_and_query():
    encoder = build_encoder("fire", SHAPE, 16, {"init_threshold": 8.0, "init_c": 1.0}).double()
    pos = torch.arange(40)
    bias = encoder.score_bias(pos, pos)
    params = (encoder.c, encoder.threshold, encoder.w1, encoder.b1, encoder.w2, encoder.b2)
    torch.testing.assert_close(bias, pf.fire_bias(pos, pos, *params))
    # below L = 8 the same distance gives the same bias (normaliser psi(L)); beyond, it depends on i
    torch.testing.assert_close(bias[:, 3, 1], bias[:, 7, 5])
    assert not torch.allclose(bias[:, 20, 18], bias[:, 30, 28])
    x = pf.fire_normalized_distance(torch.tensor([3, 30]), torch.tensor([0, 0]), encoder.c, encoder.threshold)
    assert x[0, 0].item() == pytest.approx(math.log1p(3.0) / math.log1p(8.0))
    assert x[1, 1].item() == pytest.approx(1.0)


def test_fire_chunks_long_sequences_without_changing_the_bias(monkeypatch):
    encoder = build_encoder("fire", SHAPE, 16, {"init_threshold": 4.0})
    pos = torch.arange(100)
    whole = encoder.score_bias(pos[37:], pos)
    monkeypatch.setattr(FIRE, "FIRE_CHUNK_ELEMENTS", 100 * 32 * 5)  # 5 query rows at a time
    torch.testing.assert_close(encoder.score_bias(pos[37:], pos), whole)


def _closure_tensors(score_mod) -> list[torch.Tensor]:
    """Every tensor a score_mod closes over, in closure cells or in tuples in them (FIRE's per-unit ones)."""
    leaves = torch.utils._pytree.tree_leaves([c.cell_contents for c in score_mod.__closure__ or ()])
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def test_fire_score_mod_captures_one_tensor_per_unit_each_through_capture():
    """FlexAttention's compiled backward takes one index of a captured tensor that requires grad, so FIRE's
    score_mod closes over each unit's w1, b1, w2 separately (``[n_h]`` each, indexed by head), and every one
    goes through ``capture`` (the backend detaches them on CPU). Each has a storage of its own: inductor's CPU
    template failed to lower captured views of one storage (test_attention's fire flex test)."""
    torch.manual_seed(0)
    encoder = build_encoder("fire", SHAPE, 64)
    attached = encoder.score_mod(80)
    assert attached.variant > 0  # some units bend in [0, 1]: there are per-unit tensors to check
    tensors = _closure_tensors(attached)
    assert len(tensors) == 4 + 3 * attached.variant  # psi, 1/psi(max(L, i)), slope, intercept; the units
    assert all(t.requires_grad for t in tensors)
    assert sum(t.shape == (SHAPE.n_heads,) for t in tensors) == 2 + 3 * attached.variant  # slope, intercept
    detached = _closure_tensors(encoder.score_mod(80, torch.Tensor.detach))
    assert len(detached) == len(tensors) and not any(t.requires_grad for t in detached)
    assert len({t.untyped_storage().data_ptr() for t in detached}) == len(detached)


def test_fire_score_mod_gradients_equal_the_query_block_paths():
    """Training through FlexAttention differentiates the score_mod through its captured tensors (views of the
    parameters): its bias and the gradients reaching every parameter equal those of ``score_bias``, the bias
    query blocks train with. Past the threshold (L = 16) and the training length, both branches of
    ``max(L, i)``."""
    torch.manual_seed(0)
    encoder = build_encoder("fire", SHAPE, 64).double()
    seq = 80
    positions = torch.arange(seq)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    cotangent = torch.randn(SHAPE.n_heads, seq, seq, dtype=torch.float64)
    score_mod = encoder.score_mod(seq)  # as_is: attached, as CausalAttention captures on a GPU in training
    heads = torch.arange(SHAPE.n_heads)[:, None, None]
    by_score_mod = score_mod(torch.zeros((), dtype=torch.float64), 0, heads, positions[:, None], positions)
    by_blocks = encoder.score_bias(positions, positions)
    torch.testing.assert_close(by_score_mod[:, causal], by_blocks[:, causal])
    params = dict(encoder.named_parameters())

    def grads(bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad((bias * cotangent)[:, causal].sum(), list(params.values()))

    for name, got, expected in zip(params, grads(by_score_mod), grads(by_blocks), strict=True):
        assert expected.abs().sum() > 0, name
        torch.testing.assert_close(got, expected, msg=name)


def test_fire_options_are_checked():
    with pytest.raises(ConfigError, match="fire needs"):
        build_encoder("fire", SHAPE, 16, {"init_threshold": 0.0})


# --- through the model ---------------------------------------------------------------------------------


def _model(name: str, **cfg) -> Transformer:
    torch.manual_seed(0)
    model_cfg = ModelConfig(vocab_size=12, d_model=32, n_layers=2, n_heads=4, d_mlp=64, **cfg)
    return Transformer(model_cfg, build_encoder(name, model_cfg.shape, 32))


@pytest.mark.parametrize("name", LEARNED_BIAS)
def test_gradients_reach_every_encoder_parameter_through_the_model(name):
    model = _model(name, attention="blocked")
    tokens = torch.randint(0, 12, (3, 24))
    loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    loss.backward()
    for pname, p in model.encoder.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        if name == "t5":  # distances <= 23 reach some buckets only: exactly those get a gradient
            assert model.encoder.max_distance == 32  # max(num_buckets, train length 32 // 2)
            used = pf.t5_relative_bucket(-torch.arange(24), 32, 32).unique()
            assert used.tolist() == [*range(20), 21, 22, 23, 24]
            hit = torch.zeros(32, dtype=torch.bool)
            hit[used] = True
            assert (p.grad[hit] != 0).any(dim=1).all() and (p.grad[~hit] == 0).all()
        else:
            assert p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", LEARNED_BIAS)
def test_a_training_step_changes_the_encoder_and_keeps_initialisation_its_own(name):
    model = _model(name)
    encoder = build_encoder(name, SHAPE, 32)
    if name == "fire":  # the model's N(0, 0.02) init of nn.Linear must not touch the encoder's MLP
        assert model.encoder.w1.abs().max() > 0.1
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    assert set(before) == set(encoder.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.randint(0, 12, (4, 20))
    loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert any(not torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())


def test_training_projects_kerple_parameters_after_every_step(tmp_path, monkeypatch):
    """The projection must not depend on the forward pass running eagerly (compiled training skips it)."""
    from conftest import tiny_config, tiny_dict

    from posenc.encoders.learned_bias import KerpleLog
    from posenc.running.train import train

    calls = []
    monkeypatch.setattr(
        KerpleLog, "positive_parameters", lambda self: (self.r1.clamp(min=self.eps), self.r2.clamp(min=self.eps))
    )  # as compiled
    original = KerpleLog.project_parameters
    monkeypatch.setattr(KerpleLog, "project_parameters", lambda self: (calls.append(1), original(self)))
    train(tiny_config("encoder=kerple"), tmp_path, tiny_dict("encoder=kerple"))
    steps = tiny_config().train.steps
    assert len(calls) == steps
