"""Subnormal floats flushed to zero while attention runs at inference on CPU.

Why: a score bias that falls steeply with distance (ALiBi's ``-m_h (i - j)``, FoX's cumulative log forget gates)
puts, in every softmax row, a band of keys whose ``exp(s_ij - max_i)`` lands in fp32's subnormal range
(``s_ij - max_i`` between about -104 and -87). x86 CPUs compute with subnormal operands or results through a
slow microcode path, which on some CPUs makes fused SDPA markedly slower (issue 38; the measurement is in
docs/performance.md, section "Measurements behind design choices"). With flush-to-zero and
denormals-are-zero set, the same call runs at the head width's own cost.

The numbers do not change in practice: a flushed term is below ``2**-126`` against the row's largest term,
``exp(0) = 1``, so it is far below the rounding of the row's sum and of ``p @ v``; tests/nn/test_subnormals.py
checks the fused paths bit for bit with and without flushing. Training is left alone (gradients and AdamW's
second moments may be legitimately tiny, and committed runs were trained without flushing).

The setting is per thread (the x86 MXCSR register). :func:`flush_subnormals` sets it for the calling thread and
restores it after; threads created inside it (PyTorch's intra-op pool, on the first parallel operation of a
process) inherit it and keep it. So a process that evaluates from its start (``posenc extrapolate``,
``posenc compare``, the bench's forward section) flushes on every thread; one that trained first flushes on
the calling thread only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# The smallest normal double: halving it gives a subnormal, or zero where this thread flushes. A module-level
# name keeps the product from being folded when the code is compiled.
_SMALLEST_NORMAL = sys.float_info.min


def flushing() -> bool:
    """Whether this thread flushes subnormal results to zero (Python's float arithmetic runs on the same SSE
    unit, under the same control register, as PyTorch's CPU kernels on x86-64)."""
    return _SMALLEST_NORMAL * 0.5 == 0.0


@contextmanager
def flush_subnormals() -> Iterator[None]:
    """Flush subnormal floats to zero on this thread (and threads it creates) inside the block; the thread's
    previous setting is restored after. Does nothing where the CPU cannot (``torch.set_flush_denormal``
    returns False: not x86, or no denormals-are-zero)."""
    if flushing():  # already on: by the caller, or an enclosing block
        yield
        return
    if not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
