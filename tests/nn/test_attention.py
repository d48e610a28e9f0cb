"""Causal attention backends (posenc/nn/attention.py): fused SDPA, query blocks and FlexAttention give the
same numbers as a dense reference, and a backend owns its state (each test makes its own)."""

import copy
import itertools

import pytest
import torch

from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.errors import ConfigError
from posenc.nn.attention import CausalAttention, _causal


def test_chunked_bias_attention_equals_dense_reference():
    causal_attention = CausalAttention(query_block=16)  # 50 queries: four blocks, the last one partial
    encoder = build_encoder("alibi", AttentionShape(32, 4), 64)
    q, k, v = (torch.randn(2, 4, 50, 8, dtype=torch.float64) for _ in range(3))
    positions = torch.arange(50)
    out = causal_attention(q, k, v, positions, encoder)
    bias = encoder.score_bias(positions, positions).to(torch.float64)
    scores = q @ k.transpose(-1, -2) / 8**0.5 + bias
    scores = scores.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(out, scores.softmax(-1) @ v)


BIAS_ENCODERS = [n for n in ENCODERS.builtins() if ENCODERS[n].has_score_bias]


def _dense_reference(q, k, v, encoder, positions=None):
    """Causal attention with the whole [s, s] bias, computed in q's dtype (the encoder too)."""
    s = q.shape[-2]
    positions = torch.arange(s) if positions is None else positions
    bias = copy.deepcopy(encoder).to(q.dtype).score_bias(positions, positions)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias.to(q.dtype)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


# Every built-in bias encoder has a FlexAttention form (a plugin may have none: the contract checks one that is
# declared). So the tests below run over all of them, and a score_mod lost by accident fails here instead of
# shrinking their list.
FLEX_ENCODERS = BIAS_ENCODERS


def test_every_bias_encoder_has_a_flexattention_form():
    without = [n for n in BIAS_ENCODERS if build_encoder(n, AttentionShape(32, 4), 64).score_mod(40) is None]
    assert BIAS_ENCODERS and not without


@pytest.mark.parametrize("name", FLEX_ENCODERS)
def test_score_mod_is_the_score_bias(name):
    encoder = build_encoder(name, AttentionShape(32, 4), 64)
    score_mod = encoder.score_mod(40)
    positions = torch.arange(40)
    q_idx, kv_idx = positions[:, None].expand(40, 40), positions[None, :].expand(40, 40)
    causal = torch.ones(40, 40, dtype=torch.bool).tril()  # the entries attention keeps
    for h in range(4):
        got = score_mod(torch.zeros(40, 40), torch.tensor(0), torch.tensor(h), q_idx, kv_idx)
        torch.testing.assert_close(got[causal], encoder.score_bias(positions, positions)[h].float()[causal])


def _tensors_in(value) -> list:
    """The tensors in ``value``: itself, or those in a tuple or list of them (FIRE closes over one per unit)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors_in(item)]
    return []


def _closed_over_tensors(score_mod):
    return [t for c in score_mod.__closure__ or () for t in _tensors_in(c.cell_contents)]


@pytest.mark.parametrize("name", FLEX_ENCODERS)
def test_backend_decides_how_a_score_mod_captures_parameters(name):
    """Encoders know no FlexAttention rule: on CPU the backend detaches every tensor a score_mod closes over
    (compiling a CPU kernel with captured tensors that require grad fails), the encoder just applies it."""
    encoder = build_encoder(name, AttentionShape(32, 4), 64)
    learned = any(p.requires_grad for p in encoder.parameters())
    with torch.enable_grad():
        as_given = _closed_over_tensors(encoder.score_mod(8))
        by_backend = _closed_over_tensors(CausalAttention.score_mod(encoder, torch.randn(1, 4, 8, 8)))
    assert as_given and len(by_backend) == len(as_given)
    assert any(t.requires_grad for t in as_given) == learned  # the encoder's own tensors, attached
    assert not any(t.requires_grad for t in by_backend)


def test_causal_block_mask_equals_flex_attentions_own():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    for seq in (1, 127, 128, 300, 1000):
        ours = CausalAttention().block_mask(seq, torch.device("cpu"))
        theirs = flex.create_block_mask(_causal, None, None, seq, seq, device="cpu")
        assert ours.to_dense().tolist() == theirs.to_dense().tolist(), seq


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_flex_attention_equals_query_blocks_and_the_dense_reference(name):
    """The fast path (compiled FlexAttention) and the fallback give the same numbers (fp32 tolerance)."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    encoder = build_encoder(name, AttentionShape(128, 4), 64)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1100, 32) for _ in range(3))  # > FLEX_MIN_LENGTH, not a multiple of 128
    positions = torch.arange(1100)
    causal_attention = CausalAttention()
    flex = causal_attention(q, k, v, positions, encoder, kind="flex")
    blocked = causal_attention(q, k, v, positions, encoder, kind="blocked")
    auto = causal_attention(q, k, v, positions, encoder, kind="auto")
    dense = _dense_reference(q.double(), k.double(), v.double(), encoder).float()
    torch.testing.assert_close(flex, dense, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(blocked, dense, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(auto, flex)


def test_generic_flex_kernels_of_different_score_mods_compile_side_by_side():
    """Regression: T5's then KERPLE's score_mod through one shared shape-generic compiled frame generated C++
    that did not compile (torch 2.13 CPU), which marked flex broken for the whole process."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    attend = CausalAttention(static_kernels=0)  # every length: the shape-generic kernel
    for name in ("t5", "kerple"):
        encoder = build_encoder(name, AttentionShape(32, 2), 64)
        q, k, v = (torch.randn(1, 2, 300, 16) for _ in range(3))
        flex = attend.flex(q, k, v, attend.score_mod(encoder, q))
        blocked = attend.blocked(q, k, v, torch.arange(300), encoder)
        torch.testing.assert_close(flex, blocked, atol=2e-5, rtol=1e-4)
    assert attend.broken is None and len(attend.kernels) == 2


def test_auto_attention_falls_back_to_query_blocks_when_flex_cannot_run(caplog):
    encoder = build_encoder("t5", AttentionShape(32, 4), 64)

    class NoCompiler(CausalAttention):
        def flex(self, *args, **kwargs):
            raise RuntimeError("no C compiler here")

    causal_attention = NoCompiler()
    q, k, v = (torch.randn(1, 4, 1024, 8, dtype=torch.float64) for _ in range(3))
    out = causal_attention(q, k, v, torch.arange(1024), encoder, kind="auto")
    torch.testing.assert_close(out, _dense_reference(q, k, v, encoder))
    assert "no C compiler here" in caplog.text
    with pytest.raises(ConfigError, match="model.attention=flex does not run here"):
        causal_attention(q, k, v, torch.arange(1024), encoder, kind="flex")


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_a_cpu_training_step_past_flex_length_uses_query_blocks_and_trains_the_bias(name):
    """FlexAttention has no backward on CPU: a long training step must not try it (and mark it broken)."""

    class NoFlex(CausalAttention):
        def flex(self, *args, **kwargs):
            raise AssertionError("FlexAttention called in a CPU training step")

    causal_attention = NoFlex()
    encoder = build_encoder(name, AttentionShape(32, 2), 64)
    q, k, v = (torch.randn(1, 2, 1100, 16, requires_grad=True) for _ in range(3))
    causal_attention(q, k, v, torch.arange(1100), encoder).sum().backward()
    assert causal_attention.broken is None and q.grad is not None
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


def test_a_model_attends_through_the_backend_it_is_given():
    from posenc.nn.attention import SHARED
    from posenc.nn.model import ModelConfig, Transformer

    calls = []

    class Counting(CausalAttention):
        def __call__(self, *args, **kwargs):
            calls.append(type(args[4]).__name__)
            return super().__call__(*args, **kwargs)

    cfg = ModelConfig(vocab_size=18, d_model=32, n_layers=2)
    model = Transformer(cfg, build_encoder("alibi", cfg.shape, 64), Counting())
    model(torch.randint(0, 18, (1, 20)))
    assert calls == ["ALiBi", "ALiBi"]  # once per layer
    default = Transformer(cfg, build_encoder("rope", cfg.shape, 64))
    assert all(block.attn.attend is SHARED for block in default.blocks)


class _OnlyLinearBias(CausalAttention):
    def blocked(self, *args, **kwargs):
        raise AssertionError("query blocks used")

    def flex(self, *args, **kwargs):
        raise AssertionError("FlexAttention used")


@pytest.mark.parametrize("n_heads", [1, 3, 4, 6, 8])
@pytest.mark.parametrize("length", [1, 77, 1300])
def test_alibi_through_fused_sdpa_equals_the_float64_reference(n_heads, length):
    """ALiBi's bias carried by two leading query/key dimensions (CausalAttention.linear_bias) in fp32 is as
    close to the float64 reference as the query-block path; every slope of up to 8 heads is a power of two."""
    encoder = build_encoder("alibi", AttentionShape(8 * n_heads, n_heads), 64)
    gen = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, n_heads, length, 8, generator=gen) for _ in range(3))
    positions = torch.arange(length)
    with torch.no_grad():
        fused = _OnlyLinearBias()(q, k, v, positions, encoder)
        blocked = CausalAttention().blocked(q, k, v, positions, encoder)
    want = _dense_reference(q.double(), k.double(), v.double(), encoder)
    assert (fused.double() - want).abs().max() <= max(2e-6, 2 * (blocked.double() - want).abs().max())


def test_alibi_far_from_position_zero_stays_exact():
    """Positions near 2**20 (m_h j ~ 2**19): exact only because the bias dimensions cancel before q.k is added."""
    encoder = build_encoder("alibi", AttentionShape(32, 4), 64)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 300, 8, generator=gen) for _ in range(3))
    positions = torch.arange(2**20 - 300, 2**20)
    with torch.no_grad():
        fused = _OnlyLinearBias()(q, k, v, positions, encoder)
    want = _dense_reference(q.double(), k.double(), v.double(), encoder, positions)
    torch.testing.assert_close(fused.double(), want, atol=2e-6, rtol=0)


def test_linear_bias_is_used_only_where_it_is_exact():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 12, 200, 8, generator=gen) for _ in range(3))
    twelve = build_encoder("alibi", AttentionShape(96, 12), 64)  # slopes 2**-0.5, 2**-1.5, ...: not exact
    attend = CausalAttention()
    assert attend.linear_bias(q, k, v, torch.arange(200), twelve.slopes) is None
    with torch.no_grad():
        out = attend(q, k, v, torch.arange(200), twelve)  # falls back to its distance table
    torch.testing.assert_close(
        out.double(), _dense_reference(q.double(), k.double(), v.double(), twelve), atol=2e-6, rtol=0
    )
    four = build_encoder("alibi", AttentionShape(32, 4), 64)
    assert attend.linear_bias(q[:, :4], k[:, :4], v[:, :4], torch.arange(200), four.slopes) is not None
    assert attend.linear_bias_exact is True  # this machine's fused SDPA sums the leading dimensions first
    assert attend.linear_bias(*(x[:, :4].bfloat16() for x in (q, k, v)), torch.arange(200), four.slopes) is None
    attend.linear_bias_exact = False  # as on a kernel that does not
    assert attend.linear_bias(q[:, :4], k[:, :4], v[:, :4], torch.arange(200), four.slopes) is None


def test_the_exactness_check_can_say_no(monkeypatch):
    """A fused kernel that summed the bias dimensions last would round m j at its magnitude: the check sees it."""
    from posenc.nn import attention

    real = attention.F.scaled_dot_product_attention

    def bias_dims_last(q, k, v, **kwargs):
        return real(q.roll(-2, -1), k.roll(-2, -1), v, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", bias_dims_last)
    assert CausalAttention()._exact_linear_bias() is False


@pytest.mark.parametrize("length", [33, 600, 1300, 2100])
@pytest.mark.parametrize("max_distance", [20, 128])
def test_t5_far_keys_through_one_fused_causal_call_equal_the_float64_reference(length, max_distance):
    """T5's bias is its last bucket from max_distance on: the far keys need no bias tensor (fused causal call,
    log-sum-exp shifted), the near band gets query blocks; lengths around block and reach edges."""
    encoder = build_encoder("t5", AttentionShape(24, 3), 64, {"max_distance": max_distance})
    with torch.no_grad():
        encoder.table.normal_(0, 2, generator=torch.Generator().manual_seed(3))  # far from a flat bias
    gen = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, 3, length, 8, generator=gen) for _ in range(3))
    positions = torch.arange(length)
    attend = CausalAttention()  # band blocks of FAR_BAND_BLOCK = 128: lengths above cut through several
    with torch.no_grad():
        reach, far = encoder.far_bias()
        got = attend.far_constant(q, k, v, positions, encoder, reach, far) if length > reach else None
        blocked = attend.blocked(q, k, v, positions, encoder)
    want = _dense_reference(q.double(), k.double(), v.double(), encoder)
    if got is None:
        return
    assert (got.double() - want).abs().max() <= max(2e-6, 2 * (blocked.double() - want).abs().max())


def test_t5_far_bias_is_its_score_bias_beyond_reach():
    encoder = build_encoder("t5", AttentionShape(32, 4), 64, {"max_distance": 40})
    reach, far = encoder.far_bias()
    bias = encoder.score_bias(torch.arange(500), torch.arange(500))  # [n_h, s, s]
    i, j = torch.arange(500)[:, None], torch.arange(500)[None, :]
    assert reach == 40 and torch.equal(bias[:, (i - j) >= reach], far[:, None].expand(4, int(((i - j) >= reach).sum())))
    assert not torch.equal(bias[:, 0, 0], far)  # nearer keys have buckets of their own


def test_auto_uses_the_far_constant_path_for_long_t5_inference_only():
    calls = []

    class Spy(CausalAttention):
        def far_constant(self, *args, **kwargs):
            calls.append(args[0].shape[-2])
            return super().far_constant(*args, **kwargs)

    encoder = build_encoder("t5", AttentionShape(32, 4), 64)
    q, k, v = (torch.randn(1, 4, 1100, 8) for _ in range(3))
    attend = Spy()
    with torch.no_grad():
        attend(q, k, v, torch.arange(1100), encoder)
        attend(q[..., :500, :], k[..., :500, :], v[..., :500, :], torch.arange(500), encoder)  # short: blocks
    assert calls == [1100]
    q.requires_grad_()
    attend(q, k, v, torch.arange(1100), encoder).sum().backward()  # a training step: not the fused path
    assert calls == [1100] and encoder.table.grad is not None


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_a_bias_of_the_distance_alone_comes_with_its_distance_table(name):
    """Query blocks and FlexAttention gather a bias of i - j alone (T5, KERPLE, ALiBi) from its distance table:
    every built-in whose bias depends on the distance alone gives one, equal to score_bias on every causal entry;
    one whose bias depends on more gives none (FIRE: its normaliser depends on i past L = 4 here)."""
    torch.manual_seed(0)
    encoder = build_encoder(name, AttentionShape(32, 4), 16)
    table = encoder.distance_table(50)
    positions = torch.arange(50)
    distance = (positions[:, None] - positions[None, :]).clamp(min=0)
    causal = torch.ones(50, 50, dtype=torch.bool).tril()
    bias = encoder.score_bias(positions, positions)
    by_distance = torch.allclose(bias[:, :, 0][:, distance][:, causal], bias[:, causal])  # row i - j, column 0
    assert (table is not None) == by_distance
    if table is not None:
        torch.testing.assert_close(table[:, distance][:, causal], bias[:, causal])


def test_fire_models_with_different_units_share_padded_kernel_variants():
    """FIRE's kernel unrolls its bending units; padded to multiples of 8, a sweep's models share a few kernels
    (each variant its own compiled frame and recompile budget) instead of one per model."""
    torch.manual_seed(0)
    widths = set()
    for seed in range(6):
        torch.manual_seed(seed)
        encoder = build_encoder("fire", AttentionShape(32, 4), 64)
        score_mod = encoder.score_mod(40)
        widths.add(score_mod.variant)
        causal = torch.ones(40, 40, dtype=torch.bool).tril()
        positions = torch.arange(40)
        q_idx, kv_idx = positions[:, None].expand(40, 40), positions[None, :].expand(40, 40)
        got = score_mod(torch.zeros(40, 40), torch.tensor(0), torch.tensor(1), q_idx, kv_idx)
        torch.testing.assert_close(got[causal], encoder.score_bias(positions, positions)[1][causal])
    assert widths <= {0, 8, 16, 24, 32}


@pytest.mark.parametrize("name", ENCODERS)
def test_fused_attention_gets_one_head_width(name, monkeypatch):
    """PyTorch's fused CPU kernels need queries, keys and values of one head dimension; with PoPE's doubled
    queries and keys SDPA would fall back to its math path, which holds the [b, h, s, s] scores (out of memory
    at 32768 tokens). Every SDPA call a model makes gets one width, and PoPE's padded values change nothing."""
    from posenc.nn import attention
    from posenc.nn.model import ModelConfig, Transformer

    sdpa = attention.F.scaled_dot_product_attention
    widths = []

    def checked(q, k, v, *args, **kwargs):
        widths.append((q.shape[-1], k.shape[-1], v.shape[-1]))
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", checked)
    cfg = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, d_mlp=64)
    torch.manual_seed(0)
    model = Transformer(cfg, build_encoder(name, AttentionShape(32, 4), 40)).eval()
    with torch.no_grad():
        model(torch.randint(20, (1, 40)))
    assert all(len(set(w)) == 1 for w in widths), widths


def test_values_narrower_than_queries_equal_the_math_reference():
    from posenc.nn.attention import _fused_causal

    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 3, 37, 16, dtype=torch.float64)
    v = torch.randn(2, 3, 37, 8, dtype=torch.float64)
    causal = torch.ones(37, 37, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-1, -2) / 16**0.5).masked_fill(~causal, float("-inf"))
    torch.testing.assert_close(_fused_causal(q, k, v, 0.0), scores.softmax(-1) @ v)


# The columns of posenc/nn/attention.py's table of the paths each built-in takes: (sequence length, training)
DOCUMENTED_SETTINGS = {
    "CPU training": (2048, True),
    "CPU inference, 512": (512, False),
    "CPU inference, 2048": (2048, False),
}


def _documented_paths() -> dict[str, dict[str, tuple[str, ...]]]:
    """posenc/nn/attention.py's docstring table ``| encoder | CPU training | ... |``: encoder, column -> paths."""
    from posenc.nn import attention

    lines = attention.__doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| encoder |"))
    header = [cell.strip() for cell in lines[start].strip("|").split("|")][1:]
    assert header == list(DOCUMENTED_SETTINGS)
    table = {}
    for line in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2 :]):
        names, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        for name in names.split(", "):
            table[name] = {col: tuple(cell.split(" > ")) for col, cell in zip(header, cells, strict=True)}
    return table


@pytest.mark.parametrize("name", ENCODERS.builtins())
def test_the_chooser_takes_the_documented_paths(name):
    """choose_paths, given what the model's hooks (rotate, data_bias) give it, answers what the module
    docstring says for every built-in encoder: a new encoder, or a changed rule, fails here until the table
    says it."""
    from posenc.nn.attention import PATHS, Call, Setting, choose_paths

    documented = _documented_paths()
    expected = documented.get(name, documented["the others"])
    torch.manual_seed(0)
    layer = build_encoder(name, AttentionShape(32, 4), 512).for_layer(0)
    for column, (length, training) in DOCUMENTED_SETTINGS.items():
        x = torch.randn(1, length, 32)
        q0, k0, v = (torch.randn(1, 4, length, 8, requires_grad=training) for _ in range(3))
        positions = torch.arange(length)
        with torch.set_grad_enabled(training):
            q, k = layer.rotate(q0, k0, positions)
            data_bias = layer.data_bias(x, q, k)
            setting = Setting.of(Call(q, k, v, positions, layer, 0.0, "auto", data_bias))
            paths = choose_paths(layer, data_bias, setting)
        assert paths == expected[column], column
        assert set(paths) <= set(PATHS)
