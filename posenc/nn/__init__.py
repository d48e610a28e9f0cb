"""The model layer: the decoder-only transformer, its attention and mixers, the fused biases (torch; no file I/O,
no knowledge of runs)."""
