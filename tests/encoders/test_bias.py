"""The alibi encoder of posenc.encoders.bias."""

import torch

from posenc import functional as pf
from posenc.encoders import AttentionShape, build_encoder

SHAPE = AttentionShape(d_model=32, n_heads=4)


def test_alibi_bias_uses_the_paper_slopes():
    encoder = build_encoder("alibi", SHAPE, 16)
    bias = encoder.score_bias(torch.arange(5), torch.arange(5))
    torch.testing.assert_close(bias[:, 4, 0], -4 * pf.alibi_slopes(4))
