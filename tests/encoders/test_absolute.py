"""The absolute encoders of posenc.encoders.absolute: sinusoidal and learned."""

import pytest
import torch

from posenc import functional as pf
from posenc.encoders import AttentionShape, build_encoder
from posenc.errors import PositionRangeError

SHAPE = AttentionShape(d_model=32, n_heads=4)


def test_learned_table_reports_positions_it_does_not_have():
    encoder = build_encoder("learned", SHAPE, train_length=16)
    encoder.check_positions(16)
    with pytest.raises(PositionRangeError, match="has 16 positions"):
        encoder.check_positions(17)
    with pytest.raises(PositionRangeError):
        encoder.embed(torch.randn(1, 17, 32), torch.arange(17))


def test_sinusoidal_adds_the_table_to_the_embeddings():
    # The sqrt(d_model) scale of the paper (§3.4) is applied by the model for every encoder (test_model.py),
    # so the encoder itself only adds its table.
    encoder = build_encoder("sinusoidal", SHAPE, 16)
    x = torch.randn(1, 6, 32)
    expected = x + pf.sinusoidal_table(torch.arange(6), 32)
    torch.testing.assert_close(encoder.embed(x, torch.arange(6)), expected)
