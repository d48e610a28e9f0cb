"""Golden numbers: each registry encoder's seeded tiny model, pinned (as torchtune pins its components'
outputs), so that a refactor that changes what a model computes fails here even when every property test
still passes. tests/golden/tiny_models.json holds them; after a deliberate change of results, rewrite it
with `python tests/test_golden.py` and say why in the commit.
"""

import json
import sys
from pathlib import Path

import pytest
import torch
from rounding import gamma

from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.nn.model import ModelConfig, Transformer

GOLDEN = Path(__file__).parent / "golden" / "tiny_models.json"
# The golden numbers were computed on one CPU (AMD EPYC), and each CPU type sums in its own order. Each fp32
# logit here is a chain through 4 blocks of about 10 operations whose longest sums (the MLP's) have 64 terms:
# at most gamma(4 * (10 + 64)) = 1.8e-5 off relative to the magnitudes summed, which the seeded noise keeps
# within about 5x the logits' scale (their std, at most 2.9 here; the mean and loss are no larger): so each
# number is within 5 * 3 * 1.8e-5 = 2.6e-4 of the exact one on any machine, and of another machine's.
TOLERANCE = 5 * 3 * gamma(4 * (10 + 64), torch.float32)
# 4 layers, so that the default schedule [rope, rope, rope, nope] reaches its NoPE layer
CFG = ModelConfig(vocab_size=18, d_model=32, n_layers=4, n_heads=4, d_mlp=64)
LENGTH, TRAIN_LENGTH = 24, 16  # past the training length too: extrapolation paths are pinned as well


def summary(name: str) -> dict[str, float | list[float]]:
    """Seeded model of encoder ``name`` on seeded tokens: logits' mean, std, a few values, and the loss.

    Every parameter is moved off its initialisation by seeded noise (std 0.3): at initialisation attention is
    nearly uniform and some encoders start as others (CoPE's and PoPE's zero init), so their numbers would not
    tell them apart (test_golden_entries_tell_every_encoder_apart)."""
    torch.manual_seed(0)
    encoder = build_encoder(name, AttentionShape(CFG.d_model, CFG.n_heads), 32 if name == "learned" else TRAIN_LENGTH)
    model = Transformer(CFG, encoder).eval()
    noise = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=noise))
    tokens = torch.randint(0, CFG.vocab_size, (2, LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(tokens).double()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    return {
        "mean": logits.mean().item(),
        "std": logits.std().item(),
        "loss": loss.item(),
        "first": logits[0, :3, :3].flatten().tolist(),
        "last": logits[1, -1, :4].tolist(),
    }


@pytest.mark.parametrize("name", ENCODERS.builtins())
def test_seeded_tiny_model_matches_its_golden_numbers(name):
    golden = json.loads(GOLDEN.read_text())
    assert name in golden, f"no golden numbers for {name}: run `python tests/test_golden.py`"
    got, want = summary(name), golden[name]
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=0, abs=TOLERANCE), key


def test_every_golden_entry_is_a_registry_encoder():
    assert set(json.loads(GOLDEN.read_text())) == set(ENCODERS.builtins())


def test_golden_entries_tell_every_encoder_apart():
    """Two encoders whose numbers agree within the tolerance above would let one turn into the other
    unnoticed (p_rope into rope, a schedule into its first entry, CoPE into NoPE)."""
    golden = json.loads(GOLDEN.read_text())
    names = list(golden)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert any(golden[a][key] != pytest.approx(golden[b][key], rel=0, abs=TOLERANCE) for key in golden[a]), (
                a,
                b,
            )


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({name: summary(name) for name in ENCODERS.builtins()}, indent=1) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
