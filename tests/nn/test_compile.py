"""Training under torch.compile (CUDA's default, train.compile=auto), here on the CPU: slow (inductor compiles
C++), so marked ``slow``; the GPU check (scripts/gpu_check.py) runs the same on CUDA."""

from __future__ import annotations

import pytest
from conftest import TINY, posenc_cli


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["xpos"])
def test_an_encoder_that_carries_keys_between_hooks_trains_compiled(encoder, tmp_path):
    """xPos hands its relative path's keys from rotate to data_bias in a tensor's __dict__, which torch.compile
    cannot trace: those hooks run outside the compiled graph (the first GPU check found
    InternalTorchDynamoError on CUDA; the same failed here before the fix)."""
    result = posenc_cli(
        "train",
        f"encoder={encoder}",
        "train.compile=true",
        *TINY,
        f"hydra.run.dir={tmp_path / 'r'}",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
