"""The GPU path (issue 42): tests marked ``gpu``, skipped without a CUDA device (``pytest -m gpu`` where one
is; scripts/gpu_check.py runs them first).

- Every attention path a CUDA model takes (fused causal SDPA, query blocks, compiled FlexAttention, FoX's key
  bias, CoPE's own attention, xPos's relative scores), for every encoder, in fp32 and under bf16 autocast,
  with and without autograd (evaluation, training): output and gradients equal the float64 reference within
  a tolerance derived from the dtype and the size (:func:`allowed_error`).
- A run resumed on CUDA starts from exactly the state its checkpoint saved: model, fused AdamW, schedule and
  every RNG, CUDA's included; CUDA's RNG state round-trips through a checkpoint file.
- With the CUDA defaults (``train.compile=auto``, ``train.precision=auto``: torch.compile, bf16 autocast,
  fused AdamW) the default run learns its task.

The tolerance itself is checked on CPU (unmarked, in the unit suite): it passes the real path and fails
planted errors, so it can neither drift loose nor tight without a test saying so. Two CPU analogues of what
the GPU runs past FLEX_MIN_LENGTH stand beside it: FlexAttention's arithmetic (bf16 operands, fp32 scores, the
score_mod's bias in fp32) within the same tolerance, and torch's own check of a score_mod's backward graph (on
the H200, FIRE's training case failed that check, not the tolerance: results/gpu/h200-full).
"""

from __future__ import annotations

import copy
import functools
import math
import random
import types
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

from posenc import files as run_files
from posenc.encoders import ENCODERS, AttentionShape, build_encoder
from posenc.nn.attention import FLEX_MIN_LENGTH, CausalAttention

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
SHAPE = AttentionShape(128, 4)  # the default model's: 4 heads of 32
BATCH = 2
# Lengths: below FLEX_MIN_LENGTH (score-bias encoders take query blocks) and past it, not a multiple of
# FlexAttention's block (compiled FlexAttention; CoPE, FoX and xPos over several query blocks).
SHORT, LONG = 300, FLEX_MIN_LENGTH + 76
FACTOR = 4  # a path may be this many times as far from float64 as the plain formula in its dtype


# --- the attention harness ---------------------------------------------------------------------------------
def spread(encoder: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Learned parameters moved away from their initial values (zeros, ones), so that every term of a bias
    matters; then projected back where an encoder constrains them (KERPLE's r1, r2 >= eps)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in encoder.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            p.add_(0.3 * (1 + p.abs().mean()) * noise)
    encoder.project_parameters()
    return encoder


def _future(seq: int, device, leak: int = 0) -> torch.Tensor:
    """The causal mask's hidden entries (``leak``: that many future keys wrongly visible, a planted error)."""
    i = torch.arange(seq, device=device)
    return i[None, :] > i[:, None] + leak


def _hooks(layer, x, q0, k0, positions):
    """What the model hands attention (posenc/nn/model.py): rotated queries and keys, and any data bias."""
    q, k = layer.rotate(q0, k0, positions)
    return q, k, layer.data_bias(x, q, k)


def dense_attention(
    layer,
    x,
    q0,
    k0,
    v,
    dtype: torch.dtype,
    *,
    drop_bias: bool = False,
    leak: int = 0,
    scale: float | None = None,
    bias_sign: float = 1.0,
) -> torch.Tensor:
    """The formula: ``softmax(q.k / sqrt(h_qk) + bias) v`` with the whole ``[s, s]`` bias (the encoder's
    ``score_bias``, or its data bias over every query), products in ``dtype`` and softmax in float32 at least
    (as fused kernels do). ``drop_bias``, ``leak``, ``scale`` and ``bias_sign`` plant errors (the tolerance's
    own test)."""
    seq = q0.shape[-2]
    positions = torch.arange(seq, device=q0.device)
    q, k, data_bias = _hooks(layer, x, q0, k0, positions)
    if data_bias is not None:
        bias = data_bias(0, seq)  # [b, n_h, s, s]
    elif layer.has_score_bias:
        bias = layer.score_bias(positions, positions)  # [n_h, s, s]
    else:
        bias = None
    acc = torch.promote_types(dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)).to(acc) * scale
    if bias is not None and not drop_bias:
        scores = scores + bias_sign * bias.to(dtype).to(acc)
    scores = scores.masked_fill(_future(seq, q.device, leak), float("-inf"))
    return scores.softmax(-1).to(dtype) @ v.to(dtype)


def backend_attention(kind: str) -> Callable:
    """The path under test: what :class:`posenc.nn.model.CausalSelfAttention` does, with a backend of its own."""
    backend = CausalAttention()

    def attend(layer, x, q0, k0, v, dtype):
        positions = torch.arange(q0.shape[-2], device=q0.device)
        q, k, data_bias = _hooks(layer, x, q0, k0, positions)
        out = backend(q, k, v, positions, layer, 0.0, kind, data_bias)
        attend.broken = backend.broken  # FlexAttention failed here and the backend fell back (a finding)
        return out

    attend.broken = None
    return attend


def flex_arithmetic(layer, x, q0, k0, v, dtype: torch.dtype, *, bias_sign: float = 1.0) -> torch.Tensor:
    """FlexAttention's arithmetic, on any device, for an encoder with a ``score_mod``: operands in ``dtype``,
    ``q.k`` summed in fp32 (the product of two bf16 values is exact in fp32), the ``score_mod`` applied to
    the fp32 score over the whole ``[s, s]`` grid (its captured tensors made under the caller's autocast, as
    in the GPU's training step: FIRE's folded slope comes from a bf16 matmul), softmax in fp32, the
    probabilities rounded to ``dtype`` for ``P v`` summed in fp32, normalised, then rounded to ``dtype`` (the
    Triton template's order). Every posenc ``score_mod`` returns ``score + bias``; ``bias_sign=-1`` plants a
    wrong sign."""
    seq = q0.shape[-2]
    positions = torch.arange(seq, device=q0.device)
    q, k, _ = _hooks(layer, x, q0, k0, positions)
    score_mod = layer.score_mod(seq)  # captures attached to autograd, as CausalAttention does on a GPU
    acc = torch.promote_types(dtype, torch.float32)
    with torch.autocast(q.device.type, enabled=False):
        scores = (q.to(dtype).to(acc) @ k.to(dtype).to(acc).transpose(-1, -2)) * q.shape[-1] ** -0.5
        heads = torch.arange(layer.shape.n_heads, device=q.device)[:, None, None]
        bias = score_mod(torch.zeros_like(scores), 0, heads, positions[:, None], positions)
        scores = (scores + bias_sign * bias).masked_fill(_future(seq, q.device), float("-inf"))
        probs = (scores - scores.amax(-1, keepdim=True)).exp()
        out = (probs.to(dtype).to(acc) @ v.to(dtype).to(acc)) / probs.sum(-1, keepdim=True)
    return out.to(dtype)


def attention_results(
    name: str,
    device: str,
    dtype: torch.dtype,
    grad: bool,
    seq: int,
    paths: dict[str, Callable] | None = None,
    seed: int = 0,
) -> dict[str, list[torch.Tensor]]:
    """Output (and, with ``grad``, the gradients of q, k, v before the encoder's rotation) of computations on
    the same inputs: ``float64`` (the formula in float64), ``formula`` (the formula in ``dtype``) and each of
    ``paths`` (default ``{"path": the backend}``), all but the first under autocast for 16-bit ``dtype`` as in
    training. All as float64 on the CPU."""
    torch.manual_seed(seed)
    encoder = build_encoder(name, SHAPE, seq)
    encoder.for_layer(0)  # a per-layer part (CoPE, FoX) exists before the copies below are cast
    spread(encoder)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, seq, SHAPE.d_model, generator=gen, dtype=torch.float64)
    q0, k0, v, cotangent = (
        torch.randn(BATCH, SHAPE.n_heads, seq, SHAPE.head_dim, generator=gen, dtype=torch.float64) for _ in range(4)
    )
    computations = {
        "float64": dense_attention,
        "formula": dense_attention,
        **(paths or {"path": backend_attention("auto")}),
    }
    results = {}
    for which, compute in computations.items():
        work = torch.float64 if which == "float64" else dtype
        params = torch.float64 if which == "float64" else torch.float32
        layer = copy.deepcopy(encoder).to(device=device, dtype=params).for_layer(0)
        leaves = [t.to(device=device, dtype=work, copy=True).requires_grad_(grad) for t in (q0, k0, v)]
        low = work in (torch.float16, torch.bfloat16)
        with torch.set_grad_enabled(grad), torch.autocast(device, dtype=work, enabled=low):
            out = compute(layer, x.to(device=device, dtype=work), *leaves, work)
        outputs = [out]
        if grad:
            (out.to(torch.float64) * cotangent.to(device)).sum().backward()
            outputs += [t.grad for t in leaves]
        results[which] = [t.detach().to("cpu", torch.float64) for t in outputs]
    return results


def allowed_error(formula_error: float, reference: torch.Tensor, seq: int) -> float:
    """How far a path may be from float64: ``FACTOR`` times the plain formula's own error in the same dtype
    (its products and softmax rounded as the dtype rounds them, at this size), plus fp32 accumulation over
    ``seq`` keys (every kernel sums in fp32 at least): a random walk of ``sqrt(seq)`` roundings of the largest
    value.

    Past FLEX_MIN_LENGTH the bias is not the formula's: FlexAttention evaluates the encoder's ``score_mod``
    inside the kernel, in fp32, on tensors autocast made (FIRE: ``slope_h x + intercept_h + sum_k w2 relu(w1
    x + b1)`` with ``slope`` from a bf16 matmul), and adds it to the fp32 score. Its error is at most one bf16
    rounding of each folded term, ``u_bf16 (|slope_h| + |w2 . b1|)``, plus fp32 roundings; the formula
    rounds q, k, the probabilities, the output and the whole bias to bf16, each of which moves an output by
    up to ``u_bf16`` times ``max|v|``. So the kernel's bias adds less than one of the formula's roundings and
    the bound needs no term for it; :func:`flex_arithmetic` checks that on CPU, and that a wrong sign
    fails."""
    u32 = torch.finfo(torch.float32).eps / 2
    return FACTOR * formula_error + 8 * u32 * math.sqrt(seq) * float(reference.abs().max())


def attention_errors(
    results: dict[str, list[torch.Tensor]], seq: int, path: str = "path"
) -> list[tuple[str, float, float]]:
    """``(what, error of the path, allowed)`` for the output and each gradient."""
    rows = []
    for what, ref, formula, got in zip(
        ("output", "grad q", "grad k", "grad v"), results["float64"], results["formula"], results[path]
    ):
        formula_error = float((formula - ref).abs().max())
        rows.append((what, float((got - ref).abs().max()), allowed_error(formula_error, ref, seq)))
    return rows


def assert_attention_matches(results, seq: int, path: str = "path") -> None:
    rows = attention_errors(results, seq, path)
    failing = [
        f"{what}: error {error:.3g} > allowed {allowed:.3g}" for what, error, allowed in rows if not error <= allowed
    ]  # a NaN fails too
    assert not failing, "; ".join(failing)


# --- on CUDA ----------------------------------------------------------------------------------------------
@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("seq", [SHORT, LONG])
@pytest.mark.parametrize(
    ("dtype", "grad"),
    [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False), (torch.bfloat16, True)],
    ids=["fp32-eval", "fp32-train", "bf16-eval", "bf16-train"],
)
@pytest.mark.parametrize("name", list(ENCODERS))
def test_every_attention_path_on_cuda_equals_the_float64_reference(name, dtype, grad, seq):
    """fp32 without autograd: evaluation; with it: training at train.precision=fp32; bf16 autocast with
    autograd: CUDA's default training; without: the bench's forward. Past FLEX_MIN_LENGTH the score-bias
    encoders go through compiled FlexAttention (its failure to run there fails this test, not a silent
    fallback)."""
    path = backend_attention("auto")
    results = attention_results(name, "cuda", dtype, grad, seq, paths={"path": path})
    assert path.broken is None, f"FlexAttention does not run on this GPU: {path.broken}"
    assert_attention_matches(results, seq)


@pytest.mark.gpu
@CUDA
def test_cuda_rng_state_round_trips_through_a_checkpoint(tmp_path):
    from posenc.running.checkpoint import rng_states, save_training_state, set_rng_states
    from posenc.running.runs import read_checkpoint

    data = torch.Generator().manual_seed(3)
    torch.cuda.manual_seed_all(11)
    torch.rand(5, device="cuda")  # a state that no seed call gives
    save_training_state(tmp_path, {"config": {}, "rng": rng_states(data)})
    expected = (torch.rand(8, device="cuda"), torch.randn(8, device="cuda"))
    torch.cuda.manual_seed_all(99)  # elsewhere now
    state = read_checkpoint(tmp_path / run_files.CHECKPOINT_FILE)
    assert len(state["rng"]["cuda"]) == torch.cuda.device_count() >= 1
    set_rng_states(state["rng"], data)
    got = (torch.rand(8, device="cuda"), torch.randn(8, device="cuda"))
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


class _Killed(Exception):
    """A planted crash mid-training (what SIGKILL leaves: the last checkpoint, nothing after it)."""


def _same(a, b) -> bool:
    """Exact equality of nested checkpoint contents (tensors compared on the CPU, bit for bit)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.cpu(), b.cpu())
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.gpu
@CUDA
def test_resume_on_cuda_restores_the_exact_training_state(tmp_path, monkeypatch):
    """CUDA's defaults (compiled, bf16 autocast, fused AdamW): killed after its step-4 checkpoint, the run
    resumes with the model, optimizer, schedule and every RNG (CUDA's, the CPU's, numpy's, Python's, the data
    stream's) exactly as saved, although each was moved in between; then it trains to its budget."""
    from conftest import tiny_config, tiny_dict

    import posenc.running.train
    from posenc.running.checkpoint import rng_states
    from posenc.running.runs import read_checkpoint

    overrides = (
        "device=cuda",
        "train.steps=12",
        "train.checkpoint_every=4",
        "train.check_every=0",
        "train.log_every=1",
    )
    cfg, config = tiny_config(*overrides), tiny_dict(*overrides)
    assert posenc.running.train.step_settings(cfg, torch.device("cuda")) == (True, torch.bfloat16)
    real_step, calls = posenc.running.train.optimizer_step, []

    def step_then_crash(*args, **kwargs):
        out = real_step(*args, **kwargs)
        torch.rand(1, device="cuda")  # the CUDA RNG moves every step, so a stale state would show
        calls.append(1)
        if len(calls) == 6:
            raise _Killed
        return out

    monkeypatch.setattr(posenc.running.train, "optimizer_step", step_then_crash)
    with pytest.raises(_Killed):
        posenc.running.train.train(cfg, tmp_path, config)
    saved = read_checkpoint(tmp_path / run_files.CHECKPOINT_FILE)
    assert saved["step"] == 4 and saved["rng"]["cuda"]
    assert saved["optimizer"]["param_groups"][0]["fused"] is True

    torch.manual_seed(1234)  # every RNG elsewhere, as in a fresh process
    torch.cuda.manual_seed_all(1234)
    np.random.seed(1234)
    random.seed(1234)
    real_restore, restored = posenc.running.train._restore, {}

    def restore_and_look(state, model, optimizer, scheduler, data, run_dir):
        out = real_restore(state, model, optimizer, scheduler, data, run_dir)
        restored.update(
            model=copy.deepcopy(model.state_dict()),
            optimizer=copy.deepcopy(optimizer.state_dict()),
            scheduler=scheduler.state_dict(),
            rng=rng_states(data),
            on_cuda=all(p.is_cuda for p in model.parameters()),
        )
        return out

    monkeypatch.setattr(posenc.running.train, "_restore", restore_and_look)
    monkeypatch.setattr(posenc.running.train, "optimizer_step", real_step)
    metrics = posenc.running.train.train(cfg, tmp_path, config)
    assert restored, "the second run did not resume"
    assert restored["on_cuda"]
    for part in ("model", "optimizer", "scheduler"):
        assert _same(restored[part], saved[part]), part
    for generator in ("torch", "cuda", "numpy", "python", "data"):
        assert _same(restored["rng"][generator], saved["rng"][generator]), generator
    assert metrics["steps"] == 12 and metrics["device"].startswith("cuda")


@pytest.mark.gpu
@CUDA
def test_compiled_bf16_training_on_cuda_learns_the_default_task(tmp_path):
    """The README's default run (rope on copy) with CUDA's defaults: compiled, bf16 autocast, fused AdamW."""
    from conftest import compose_dict

    import posenc.running.train
    from posenc.running.config import run_config_from_dict
    from posenc.running.runs import read_checkpoint

    config = compose_dict(["progress=false"])
    cfg = run_config_from_dict(config)
    assert (cfg.train.compile, cfg.train.precision, cfg.device) == ("auto", "auto", "auto")
    assert posenc.running.train.step_settings(cfg, torch.device("cuda")) == (True, torch.bfloat16)
    metrics = posenc.running.train.train(cfg, tmp_path, config)
    assert metrics["device"].startswith("cuda")
    assert metrics["learned"] and metrics["exact_match"] >= 0.99, metrics
    state = read_checkpoint(tmp_path / run_files.CHECKPOINT_FILE)
    assert state["optimizer"]["param_groups"][0]["fused"] is True


# --- the tolerance, on CPU (unit suite) -------------------------------------------------------------------
def _planted(**error) -> Callable:
    def broken(layer, x, q0, k0, v, work):
        return dense_attention(layer, x, q0, k0, v, work, **error)

    return broken


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("alibi", torch.float32),
        ("alibi", torch.bfloat16),
        ("t5", torch.bfloat16),
        ("fire", torch.bfloat16),
        ("fox", torch.float32),
        ("fox", torch.bfloat16),
        ("rope", torch.bfloat16),
    ],
)
def test_the_attention_tolerance_passes_the_real_path_and_fails_planted_errors(name, dtype):
    """On CPU (query blocks, FoX's key bias, fused SDPA; with autograd): the real path is within the
    tolerance; a dropped bias, a bias of the wrong sign, one future key let through, or the wrong scale are
    not."""
    seq = 96
    planted = {"one future key": _planted(leak=1), "scale 1/h_d": _planted(scale=1 / SHAPE.head_dim)}
    if name != "rope":
        planted["no bias"] = _planted(drop_bias=True)
        planted["bias sign"] = _planted(bias_sign=-1.0)
    results = attention_results(name, "cpu", dtype, True, seq, paths={"path": backend_attention("blocked"), **planted})
    assert_attention_matches(results, seq)
    for what in planted:
        rows = attention_errors(results, seq, what)
        assert any(error > allowed for _, error, allowed in rows), f"{what} passed the tolerance: {rows}"


def test_flexattention_arithmetic_of_fires_training_case_is_within_the_bf16_tolerance():
    """The CPU analogue of ``fire-bf16-train-1100`` (FIRE's score_mod in FlexAttention, bf16 autocast, with
    autograd, past FLEX_MIN_LENGTH): FlexAttention's arithmetic (:func:`flex_arithmetic`) is within the
    tolerance :func:`allowed_error` derives, and the same arithmetic with the bias's sign flipped is not."""
    seq = LONG
    paths = {"path": flex_arithmetic, "bias sign": functools.partial(flex_arithmetic, bias_sign=-1.0)}
    results = attention_results("fire", "cpu", torch.bfloat16, True, seq, paths=paths)
    assert_attention_matches(results, seq)
    rows = attention_errors(results, seq, "bias sign")
    assert any(error > allowed for _, error, allowed in rows), f"a wrong bias sign passed: {rows}"


def _flex_backward_refusal(score_mod: Callable) -> str | None:
    """Why inductor's FlexAttention backward refuses ``score_mod`` with its captured tensors as they are
    (parameters requiring grad), or None. torch's own pre-lowering check on the joint graph FlexAttention
    traces; the trace needs no GPU (only the kernels do), so the CPU sees what a GPU's compile would say.
    The captured tensors (closure cells, or inside tuples in them: FIRE's per-unit tensors) are lifted into
    arguments, as torch.compile lifts them."""
    hop = pytest.importorskip("torch._higher_order_ops.flex_attention")
    wrapped = pytest.importorskip("torch._dynamo._trace_wrapped_higher_order_op")
    lowering = pytest.importorskip("torch._inductor.kernel.flex.flex_attention")
    if not all(
        hasattr(m, f)
        for m, f in (
            (hop, "create_fw_bw_graph"),
            (wrapped, "TransformGetItemToIndex"),
            (lowering, "validate_joint_graph"),
        )
    ):
        pytest.skip("this torch has no FlexAttention joint-graph check to run")
    leaves, spec = pytree.tree_flatten([cell.cell_contents for cell in score_mod.__closure__ or ()])
    lifted_at = [i for i, value in enumerate(leaves) if isinstance(value, torch.Tensor)]

    def lifted(score, b, h, q_idx, kv_idx, *captured):
        values = list(leaves)
        for i, tensor in zip(lifted_at, captured):
            values[i] = tensor
        cells = tuple(types.CellType(v) for v in pytree.tree_unflatten(values, spec))
        rebuilt = types.FunctionType(
            score_mod.__code__, score_mod.__globals__, score_mod.__name__, score_mod.__defaults__, cells
        )
        return rebuilt(score, b, h, q_idx, kv_idx)

    indices = (torch.zeros((), requires_grad=True), *(torch.zeros((), dtype=torch.int32) for _ in range(4)))
    with wrapped.TransformGetItemToIndex():
        _, joint = hop.create_fw_bw_graph(lifted, indices, tuple(leaves[i] for i in lifted_at))
    try:
        lowering.validate_joint_graph(joint.graph)
    except NotImplementedError as err:
        return str(err).splitlines()[0]
    return None


@pytest.mark.parametrize(
    "name",
    [
        "alibi",
        "t5",
        "kerple",
        "fire",  # regression, the H200's fire-bf16-train-1100: w1, b1, w2 indexed once per unit were refused
    ],
)
def test_flexattention_can_differentiate_each_score_mod_through_its_captured_tensors(name):
    """A training step past FLEX_MIN_LENGTH on a GPU differentiates the score_mod with respect to the learned
    tensors it captures; inductor refuses some score_mods there (at the first backward, outside
    CausalAttention's fallback to query blocks). On CPU: torch's own check of the same joint graph. It
    agrees with the H200 (alibi, t5, kerple trained there at 1100 tokens; fire's backward did not compile
    while its score_mod indexed each of w1, b1, w2 once per hidden unit: now one captured tensor per unit)."""
    encoder = spread(build_encoder(name, SHAPE, LONG))
    refusal = _flex_backward_refusal(encoder.score_mod(64))
    assert refusal is None, f"{name}: {refusal}"
