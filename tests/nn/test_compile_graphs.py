"""A compiled training step's graphs, per registry encoder: after warm-up no step recompiles, and no hook breaks
the graph except where it says so (``torch.compiler.disable``). Dynamo alone decides both (the ``eager``
backend: no inductor, so seconds per encoder). The GPU check found compiled training slower than eager for
pope (20x), schedule, p_rope, rope, rope_partial and fire: graph breaks in every layer (``storage_offset``,
``torch.equal``, ``out=`` writes, ...), and complex operators, for which inductor generates no code."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters

from posenc.encoders import ENCODERS, build_encoder
from posenc.nn.model import ModelConfig, Transformer

BATCH, LENGTH, VOCAB = 2, 32, 16
WARM_UP, STEPS = 2, 3
# A graph break where a hook is deliberately run eagerly (xPos' data_bias: its docstring says why).
DISABLED = "torch.compiler.disable"


def compiled_steps(name: str) -> tuple[list[str], Exception | None]:
    """``name``'s graph breaks over warm-up and steps (their reasons), and the error a recompilation after
    warm-up raised (None: none)."""
    cfg = ModelConfig(vocab_size=VOCAB, d_model=32, n_heads=4, n_layers=2, d_mlp=64)
    torch.manual_seed(0)
    model = Transformer(cfg, build_encoder(name, cfg.shape, LENGTH))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend="eager")
    data = torch.randint(0, VOCAB, (BATCH, LENGTH + 1))

    def step() -> None:
        loss = F.cross_entropy(forward(data[:, :-1]).reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    torch._dynamo.reset()
    counters.clear()
    try:
        for _ in range(WARM_UP):
            step()
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(STEPS):
                step()
        error = None
    except torch._dynamo.exc.RecompileError as err:
        error = err
    finally:
        breaks = [reason for reason, n in counters["graph_break"].items() for _ in range(n)]
        torch._dynamo.reset()
    return breaks, error


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_compiled_training_step_neither_recompiles_nor_breaks_its_graph(name):
    breaks, recompiled = compiled_steps(name)
    assert recompiled is None, f"{name} recompiles after warm-up: {recompiled}"
    undocumented = [reason.splitlines()[0] for reason in breaks if DISABLED not in reason]
    assert not undocumented, f"{name}: {len(undocumented)} graph breaks: {sorted(set(undocumented))}"
