"""The rotary encoders of posenc.encoders.rotary (scaling and rope_partial: test_rotary_scaling.py)."""

import torch

from posenc import functional as F
from posenc.encoders import AttentionShape, build_encoder

SHAPE = AttentionShape(d_model=32, n_heads=4)


def test_rope_ntk_is_rope_up_to_train_length_and_ntk_beyond():
    rope = build_encoder("rope", SHAPE, train_length=16)
    ntk = build_encoder("rope_ntk", SHAPE, train_length=16)
    q, k = torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)
    for a, b in zip(rope.rotate(q, k, torch.arange(16)), ntk.rotate(q, k, torch.arange(16))):
        torch.testing.assert_close(a, b)
    expected = F.rope_inv_freq(8, F.ntk_base(10000.0, 8, 64 / 16))
    torch.testing.assert_close(ntk.scaling_for(64)[0], expected)
    q, k = torch.randn(1, 4, 64, 8), torch.randn(1, 4, 64, 8)
    torch.testing.assert_close(ntk.rotate(q, k, torch.arange(64))[0], F.apply_rope(q, torch.arange(64), expected))
