"""Per-layer schedules (posenc.encoders.schedule): layer i attends with layers[i % len(layers)]."""

import pytest
import torch

from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.encoders.schedule import acts_inside_attention
from posenc.errors import ConfigError
from posenc.functional.rope_scaling_spec import RopeScaling
from posenc.nn.model import ModelConfig, Transformer

SHAPE = AttentionShape(d_model=32, n_heads=4)
CFG = ModelConfig(vocab_size=18, d_model=32, n_heads=4, n_layers=5, d_mlp=64)


def schedule(*layers):
    return build_encoder("schedule", SHAPE, 16, {"layers": list(layers)})


def test_each_layer_attends_with_its_entry_of_the_repeated_pattern():
    encoder = schedule("rope", "t5", "nope")
    model = Transformer(CFG, encoder)
    kinds = [type(block.attn.encoder).__name__ for block in model.blocks]
    assert kinds == ["RoPE", "T5Bias", "NoPE", "RoPE", "T5Bias"]
    assert model.blocks[1].attn.encoder is model.blocks[4].attn.encoder  # one T5 table, shared by its layers
    assert [k for k in model.state_dict() if k.startswith("encoder.")] == ["encoder.encoders.t5.table"]


def test_a_one_entry_schedule_is_that_encoder():
    tokens = torch.randint(0, 18, (2, 24), generator=torch.Generator().manual_seed(0))
    outputs = []
    for encoder in (build_encoder("alibi", SHAPE, 16), schedule("alibi")):
        torch.manual_seed(0)
        outputs.append(Transformer(CFG, encoder).eval()(tokens))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)


def test_a_nope_layer_changes_the_model_and_rope_layers_keep_their_position_signal():
    tokens = torch.randint(0, 18, (1, 24), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    rope = Transformer(CFG, schedule("rope")).eval()
    torch.manual_seed(0)
    mixed = Transformer(CFG, schedule("rope", "rope", "nope")).eval()
    assert not torch.allclose(rope(tokens), mixed(tokens))
    torch.manual_seed(0)
    nope = Transformer(CFG, schedule("nope")).eval()
    assert not torch.allclose(mixed(tokens), nope(tokens))


def test_rope_scaling_reaches_the_rotary_layers_only():
    encoder = schedule("rope", "alibi")
    assert encoder.takes_rope_scaling and not schedule("nope", "alibi").takes_rope_scaling
    encoder.set_rope_scaling(RopeScaling("linear", 2.0))
    assert encoder.for_layer(0).rope_scaling == RopeScaling("linear", 2.0)


@pytest.mark.parametrize("name", ENCODERS)
def test_model_wide_encoders_cannot_be_scheduled(name):
    model_wide = name in {"sinusoidal", "learned", "randomized"}
    assert acts_inside_attention(ENCODERS[name]) == (not model_wide)
    if model_wide:
        with pytest.raises(ConfigError, match=f"'{name}' acts on the input embeddings"):
            schedule("rope", name)
    elif name == "schedule":
        with pytest.raises(ConfigError, match="cannot hold another schedule"):
            schedule("rope", name)
    else:
        schedule(name, "nope")


@pytest.mark.parametrize("layers", [[], ["rope", "bogus"], [1, 2]])
def test_a_bad_pattern_is_refused_in_one_line(layers):
    with pytest.raises(ConfigError) as err:
        build_encoder("schedule", SHAPE, 16, {"layers": layers})
    assert len(str(err.value).splitlines()) == 1


def test_a_schedule_needs_an_even_head_dimension_only_for_its_rotary_layers():
    odd = AttentionShape(d_model=36, n_heads=4)  # head_dim 9
    build_encoder("schedule", odd, 16, {"layers": ["nope", "alibi", "t5"]})
    with pytest.raises(ConfigError, match="even head dimension"):
        build_encoder("schedule", odd, 16, {"layers": ["nope", "rope"]})


def test_evaluation_plans_rope_scaling_for_a_schedule_with_rotary_layers_only():
    from posenc.encoders.schedule import Schedule
    from posenc.running.extrapolate import scalings_for

    scalings = [RopeScaling("none"), RopeScaling("yarn")]
    assert Schedule.takes_rope_scaling_with({}) and not Schedule.takes_rope_scaling_with({"layers": ["nope", "t5"]})
    config = {"encoder": {"name": "schedule", "layers": ["rope", "nope"]}}
    assert scalings_for(config, scalings) == scalings
    assert scalings_for({"encoder": {"name": "schedule", "layers": ["alibi"]}}, scalings) == [RopeScaling("none")]


def test_a_pattern_longer_than_the_model_says_which_layers_the_model_has(caplog):
    from conftest import tiny_config

    tiny_config("encoder=schedule", "model.n_layers=3").build()  # iRoPE's pattern in 3 layers: no NoPE layer
    assert (
        "encoder.layers has 4 entries but model.n_layers is 3: the model's layers are rope, rope, rope" in caplog.text
    )
    caplog.clear()
    tiny_config("encoder=schedule", "encoder.layers=[rope,nope]", "model.n_layers=3").build()
    assert "encoder.layers" not in caplog.text
