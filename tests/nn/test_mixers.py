"""model.mixer: Zoology's BaseConv beside attention. Causal, right-padding invariant, its filter past its
length zero; a config check for its encoder; and the identity of every run recorded before the key existed
unchanged (run_id, config_id, resuming its checkpoint)."""

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import committed, compose_dict, tiny_config, tiny_dict

from posenc.analysis.store import run_identity
from posenc.encoders import build_encoder
from posenc.errors import ConfigError, PosencError
from posenc.nn.mixers import DEFAULT_MIXER, FFT_MIN_TAPS, MIXERS, SHORT_TAPS, BaseConv, base_conv_taps, causal_conv
from posenc.nn.model import CausalSelfAttention, ModelConfig, Transformer
from posenc.running.checkpoint import comparable, config_difference, load_training_state, save_training_state
from posenc.running.config import run_config_from_dict

CFG = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, d_mlp=64, mixer="base_conv")
TRAIN_LENGTH = 24


def conv_model(seed: int = 0, n_layers: int = 2, train_length: int = TRAIN_LENGTH) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(**{**CFG.__dict__, "n_layers": n_layers})
    return Transformer(cfg, build_encoder("nope", cfg.shape, train_length)).eval()


# --- the mixer --------------------------------------------------------------------------------------------


def naive_conv(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """y_t = sum_{j <= t, j < taps} h[:, j] * x_{t-j}, by loops."""
    b, s, d = x.shape
    y = torch.zeros_like(x)
    for t in range(s):
        for j in range(min(t + 1, h.shape[1])):
            y[:, t] += h[:, j] * x[:, t - j]
    return y


@pytest.mark.parametrize(
    "taps, length", [(1, 5), (3, 9), (8, 8), (8, 20), (24, 10), (FFT_MIN_TAPS + 8, 90), (FFT_MIN_TAPS + 8, 40)]
)
def test_causal_conv_is_the_causal_convolution_with_a_filter_zero_past_its_length(taps, length):
    """Direct (at most FFT_MIN_TAPS taps) and FFT paths alike: the formula, by loops; a sequence shorter than
    the filter uses its first taps, a longer one sees zero past the filter's end."""
    g = torch.Generator().manual_seed(taps * 100 + length)
    x, h = (
        torch.randn(2, length, 5, generator=g, dtype=torch.float64),
        torch.randn(5, taps, generator=g, dtype=torch.float64),
    )
    torch.testing.assert_close(causal_conv(x, h), naive_conv(x, h))


def test_base_conv_is_the_gated_convolution():
    torch.manual_seed(0)
    mixer = BaseConv(6, 4)
    with torch.no_grad():
        mixer.bias.normal_()
        mixer.gate.bias.normal_()
    x = torch.randn(3, 11, 6)
    want = (x @ mixer.gate.weight.T + mixer.gate.bias) * (naive_conv(x, mixer.filter) + mixer.bias)
    torch.testing.assert_close(mixer(x), want)
    assert mixer.taps == 4 and mixer.filter.std().item() == pytest.approx(4**-0.5, rel=0.5)


def test_layers_alternate_short_and_long_filters_as_in_zoology():
    assert [base_conv_taps(i, 4, 32) for i in range(4)] == [SHORT_TAPS, 32, SHORT_TAPS, 32]  # [3, -1, 3, -1]
    assert base_conv_taps(0, 1, 32) == 32  # one layer: the long one
    model = conv_model()
    assert [block.attn.taps for block in model.blocks] == [SHORT_TAPS, TRAIN_LENGTH]
    assert all(isinstance(block.attn, BaseConv) for block in model.blocks)


@pytest.mark.parametrize("length", [TRAIN_LENGTH, 3 * TRAIN_LENGTH, 2 * FFT_MIN_TAPS + 10])
@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_output_at_t_never_depends_on_inputs_after_t(length, n_layers):
    """At, and past, the training length (where the long filter is zero past its taps), and through the FFT
    path (a filter of more than FFT_MIN_TAPS taps; there up to float32 rounding): changing tokens from position
    p on changes no output before p, and does change later ones."""
    fft = length > 2 * FFT_MIN_TAPS
    model = conv_model(n_layers=n_layers, train_length=length if fft else TRAIN_LENGTH)
    idx = torch.randint(20, (2, length), generator=torch.Generator().manual_seed(length))
    exact = copy.deepcopy(model).double()  # the same model in float64: the exact outputs, to fp32's eye
    for p in (1, length // 2, length - 1):
        changed = idx.clone()
        changed[:, p:] = (changed[:, p:] + 1) % 20
        with torch.no_grad():
            a, b = model(idx), model(changed)
            a64, b64 = exact(idx)[:, :p], exact(changed)[:, :p]
        # Through the FFT every output carries rounding from every input; each fp32 output before p is within
        # its own rounding error of the exact (causal) value, so the two differ by at most the sum of those
        # errors (the float64 model's distance is that error to 1e-16); the direct path is causal exactly.
        bound = float((a[:, :p] - a64).abs().max() + (b[:, :p] - b64).abs().max()) if fft else 0.0
        assert (a[:, :p] - b[:, :p]).abs().max() <= bound
        assert not torch.allclose(a[:, p:], b[:, p:])


def test_past_its_filter_an_output_reads_a_window():
    """Past the training length, the last layer's output t reads tokens t-(taps-1)-2..t only (the short layer
    below reaches 2 further back); a change further back leaves it as it was."""
    model = conv_model(n_layers=2)
    idx = torch.randint(20, (1, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(5))
    reach = TRAIN_LENGTH - 1 + SHORT_TAPS - 1
    t = 3 * TRAIN_LENGTH
    far, near = idx.clone(), idx.clone()
    far[0, t - reach - 1] = (far[0, t - reach - 1] + 1) % 20
    near[0, t - reach] = (near[0, t - reach] + 1) % 20
    with torch.no_grad():
        base, moved_far, moved_near = model(idx)[0, t], model(far)[0, t], model(near)[0, t]
    torch.testing.assert_close(moved_far, base, atol=0, rtol=0)
    assert not torch.allclose(moved_near, base)


# Right padding: tests/running/test_train.py::test_right_padding_leaves_every_real_position_unchanged covers base_conv.


def test_parameter_counts_at_the_headline_retrieval_width():
    """conf/experiment/headline_retrieval.yaml (d_model 64, 2 layers, 32 tokens): BaseConv's mixers have
    about a third of attention's parameters (the counts the Zoology mixers claim's caveat quotes)."""
    counts = {}
    for encoder, mixer in (("rope", "attention"), ("nope", "base_conv")):
        cfg = run_config_from_dict(
            compose_dict(
                ["experiment=headline_retrieval", "task=retrieval", f"encoder={encoder}", f"model.mixer={mixer}"]
            )
        )
        model = cfg.build()[2]
        mixers = sum(p.numel() for block in model.blocks for p in block.attn.parameters())
        counts[mixer] = (mixers, sum(p.numel() for p in model.parameters()))
    d, length = 64, 32
    assert counts["attention"][0] == 2 * 4 * d * d == 32768
    assert counts["base_conv"][0] == 2 * (d * d + 2 * d) + d * SHORT_TAPS + d * length == 10688
    assert counts == {"attention": (32768, 104832), "base_conv": (10688, 82752)}


def test_attention_stays_the_default_and_builds_what_it_built():
    assert DEFAULT_MIXER == "attention" and MIXERS == ("attention", "base_conv")
    assert ModelConfig().mixer == "attention" and compose_dict()["model"]["mixer"] == "attention"
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, d_mlp=64)
    model = Transformer(cfg, build_encoder("rope", cfg.shape, 16))
    assert all(isinstance(block.attn, CausalSelfAttention) for block in model.blocks)


def test_a_base_conv_run_trains_and_loads(tmp_path):
    from posenc.running import runs as run_dirs
    from posenc.running.train import train

    overrides = ("encoder=nope", "model.mixer=base_conv", "model.n_layers=2", "task=retrieval")
    metrics = train(tiny_config(*overrides), tmp_path, tiny_dict(*overrides))
    assert 0 <= metrics["exact_match"] <= 1
    cfg, _, model = run_dirs.load_run(tmp_path)
    assert cfg.model.mixer == "base_conv" and isinstance(model.blocks[1].attn, BaseConv)


# --- configuration ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoder", ["rope", "alibi", "schedule"])
def test_base_conv_takes_nope_only(encoder):
    with pytest.raises(ConfigError) as err:
        tiny_config(f"encoder={encoder}", "model.mixer=base_conv")
    message = str(err.value)
    assert (
        message == "model.mixer=base_conv takes encoder=nope (a convolution reads no positional encoding), got "
        f"encoder={encoder}"
    )
    assert "\n" not in message


def test_an_unknown_mixer_is_one_line():
    with pytest.raises(ConfigError, match="model.mixer must be one of attention, base_conv; got 'mamba'"):
        tiny_config("model.mixer=mamba")
    with pytest.raises(ConfigError, match="model.mixer must be one of"):
        ModelConfig(mixer="mamba").validate()


def test_precheck_refuses_base_conv_with_an_encoder_before_hydra_starts():
    from posenc.cli.precheck import precheck

    with pytest.raises(ConfigError, match="model.mixer=base_conv takes encoder=nope"):
        precheck(["-m", "experiment=headline_retrieval", "model.mixer=base_conv", "encoder=nope,rope", "seed=0"])
    precheck(
        [
            "experiment=headline_retrieval",
            "task=retrieval",
            "encoder=nope",
            "model.mixer=base_conv",
            "hydra.run.dir=/tmp/posenc-test-mixers-unused",
        ]
    )


def test_the_run_folder_names_a_non_default_mixer():
    """Hydra names a run's folder after its overrides but for exclude_keys: model.mixer must not be one."""
    import yaml

    config = yaml.safe_load((Path(__file__).parents[2] / "conf" / "config.yaml").read_text())
    excluded = config["hydra"]["job"]["config"]["override_dirname"]["exclude_keys"]
    assert "model.mixer" not in excluded and "model.attention" in excluded


# --- identity of runs recorded before model.mixer existed ---------------------------------------------------


def without_mixer(config: dict) -> dict:
    old = copy.deepcopy(config)
    del old["model"]["mixer"]
    return old


def test_identity_ignores_the_default_mixer_so_earlier_runs_keep_their_ids():
    new = compose_dict(["task=retrieval", "encoder=alibi", "seed=2"])
    assert new["model"]["mixer"] == "attention"
    old = without_mixer(new)
    assert run_identity(old) == run_identity(new)  # run_id, config_id and the config JSON alike
    assert "mixer" not in run_identity(new).config
    conv = run_identity(compose_dict(["task=retrieval", "encoder=nope", "model.mixer=base_conv"]))
    nope = run_identity(compose_dict(["task=retrieval", "encoder=nope"]))
    assert conv.config_id != nope.config_id and conv.run_id != nope.run_id
    assert json.loads(conv.config)["model"]["mixer"] == "base_conv"


def test_every_committed_run_id_is_what_its_config_gives_with_the_default_mixer():
    """The committed tables' run_id and config_id, recomputed from each run's configuration with
    model.mixer=attention added where it has none, as training writes it now."""
    tables = committed("extrapolation.parquet")
    assert tables
    checked = 0
    for table in tables:
        ev = pd.read_parquet(table, columns=["run_id", "config_id", "seed", "config"]).drop_duplicates("run_id")
        for run_id, config_id, seed, config in ev.itertuples(index=False):
            full = {**json.loads(config), "seed": int(seed)}
            full["model"] = {"mixer": "attention", **full["model"]}  # BaseConv runs keep their own mixer
            identity = run_identity(full)
            assert (identity.run_id, identity.config_id) == (run_id, config_id), table
            checked += 1
    assert checked > 100


def test_a_checkpoint_recorded_before_the_mixer_key_resumes_and_a_base_conv_one_does_not(tmp_path):
    new = tiny_dict("task=retrieval")
    old = without_mixer(new)
    assert config_difference(comparable(old), comparable(new)) is None
    save_training_state(tmp_path, {"config": old, "optimizer": {}, "model": {}})
    assert load_training_state(tmp_path / "checkpoint.pt", new)["config"] == old
    conv = tiny_dict("task=retrieval", "encoder=nope", "model.mixer=base_conv")
    with pytest.raises(PosencError, match="model.mixer"):
        load_training_state(tmp_path / "checkpoint.pt", {**conv, "encoder": new["encoder"]})


def test_the_memory_bound_counts_attention_scores_only_where_a_model_attends():
    from posenc.running.config import training_bytes

    attention, conv = ModelConfig(vocab_size=20), ModelConfig(vocab_size=20, mixer="base_conv")
    d, f, layers, heads = attention.d_model, attention.d_mlp, attention.n_layers, attention.n_heads
    params = 20 * d + layers * (4 * d * d + 2 * d * f)
    assert training_bytes(attention, 8, 63) == 4 * (4 * params + 8 * 64 * layers * (16 * d + 2 * f) + 8 * heads * 64**2)
    assert training_bytes(conv, 8, 63) < training_bytes(attention, 8, 63)
