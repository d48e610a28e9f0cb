"""Training: a plain ``train(cfg, run_dir)``; ``posenc train``'s Hydra entry point around it is
:mod:`posenc.cli.hydra_entry`."""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch

from posenc import files as run_files
from posenc.analysis.store import run_identity
from posenc.errors import PosencError
from posenc.progress import live_bars, make_progress, task_status
from posenc.running.checkpoint import (
    StopSignals,
    TrainingInterrupted,
    load_training_state,
    rng_states,
    save_training_state,
    set_rng_states,
)
from posenc.running.config import RunConfig
from posenc.running.evaluate import Scores, answer_loss, default_sequences, evaluate, resolve_device
from posenc.running.runs import check_mastery_snapshot, check_training_folder, read_checkpoint
from posenc.running.tracking import check_logger, open_tracker
from posenc.task_facts import converged, has_mastery_criterion, loss_fall

log = logging.getLogger("posenc.running.train")


def lr_factor(step: int, warmup: int, total: int, final: float = 0.1) -> float:
    """Learning-rate multiplier: linear warmup to 1, then cosine decay to ``final`` at ``total`` steps."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: torch.nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on norms, biases), as in nanoGPT.

    The fused implementation (one kernel for all parameters) on CUDA; on CPU the default multi-tensor one,
    which scripts/bench.py measures as fast as the fused CPU kernel for this model.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.train.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = bool(params) and params[0].device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.train.lr, betas=(0.9, 0.98), fused=fused or None)


def step_settings(cfg: RunConfig, device: torch.device) -> tuple[bool, torch.dtype | None]:
    """Whether to torch.compile the training model, and the autocast dtype (None: fp32)."""
    compiled = cfg.train.compile is True or (cfg.train.compile == "auto" and device.type == "cuda")
    precision = cfg.train.precision
    if precision == "auto":
        precision = "bf16" if device.type == "cuda" else "fp32"
    return compiled, (torch.bfloat16 if precision == "bf16" else None)


def train(
    cfg: RunConfig, run_dir: Path, config_dict: dict[str, Any], overrides: list[str] | None = None
) -> dict[str, Any]:
    """Train the model ``cfg`` describes into ``run_dir``, resuming from its checkpoint if there is one.

    Writes ``config.yaml``, ``checkpoint.pt`` (every ``train.checkpoint_every`` steps and at the end, on
    SIGINT/SIGTERM too), ``history.csv`` and, when finished, ``metrics.json``. A finished run is not
    retrained: its metrics are returned as they are. One training at a time writes a run folder (its lock,
    :func:`posenc.files.train_lock`), and only into a folder whose run files are this run's
    (:func:`posenc.running.runs.check_training_folder`); a refused start leaves no folder it made behind.

    Args:
        cfg: the checked run configuration; run_dir: output folder (created if needed).
        config_dict: the resolved config as a plain mapping, stored with the checkpoint.
        overrides: the command-line overrides, kept in ``overrides.yaml`` for the record.

    Returns the final metrics (also written to ``metrics.json``).
    """
    run_dir = Path(run_dir)
    check_logger(cfg.logger)  # a missing tracking package: refused before anything is written
    with run_files.train_lock(run_dir):  # held until training ends; another training here is refused
        try:
            state = _state_to_resume(cfg, run_dir, config_dict)
        except PosencError:
            _remove_if_empty(run_dir, config_dict)
            raise
        if (done := _finished_metrics(cfg, run_dir, state)) is not None:
            return done
        _write_run_files(run_dir, config_dict, overrides)
        return _train(cfg, run_dir, config_dict, state)


def _train(cfg: RunConfig, run_dir: Path, config_dict: dict[str, Any], state: dict | None) -> dict[str, Any]:
    """:func:`train`'s loop, from ``state`` (None: from the start), with the run folder's lock held."""
    device = resolve_device(cfg.device)
    task, model, step_model, optimizer, scheduler, autocast_dtype = setup_training(cfg, device)
    t = cfg.train
    data = torch.Generator().manual_seed(cfg.seed)  # the training stream: deterministic from the seed
    # checks: [step, held-out exact match (lm: loss)] of every check; learned_at: the first that met the criterion
    first, history, elapsed, checks, learned_at = _restore(state, model, optimizer, scheduler, data, run_dir)
    _warn_threads(state, device)
    _restore_mastery_snapshot(cfg, run_dir, state)

    def checkpoint(step: int, names: tuple[str, ...] = (run_files.CHECKPOINT_FILE,)) -> None:
        _check_finite(finite, step)  # never a checkpoint of weights a non-finite loss has touched
        payload = {
            "model": model.state_dict(), "config": config_dict, "step": step, "checks": checks,
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "learned_at": learned_at,
            "rng": rng_states(data), "history": history, "elapsed": elapsed + time.perf_counter() - start,
            "threads": torch.get_num_threads(),
        }  # fmt: skip
        for name in names:
            save_training_state(run_dir, payload, name)

    lo, hi = cfg.training_lengths(task)
    check_at = check_lengths(lo, hi)  # mastery is judged over the training distribution, not at L alone
    n_params = _log_start(cfg, task, model, device, run_dir)
    tracker = open_tracker(cfg.logger, run_dir, config_dict)
    start = time.perf_counter()
    finite = torch.ones((), dtype=torch.bool, device=device)  # all losses so far; read only when needed

    with tracker:  # closed (flushed, the tracked run ended) however training stops
        with StopSignals() as stop, make_progress(cfg.progress) as progress:
            bar = progress.add_task(f"{cfg.encoder.name}/{cfg.task.name}", total=t.steps, completed=first - 1,
                                    loss=math.nan, acc=math.nan)  # fmt: skip
            step = first - 1
            for step in range(first, t.steps + 1):
                if learned_at is not None and t.stop_at_mastery:
                    break  # resumed after the criterion was met: nothing left to train
                batch, length = draw_batch(task, t.batch_size, lo, hi, cfg.task.length_draw, data)
                batch = batch.to(device)
                logits, loss = optimizer_step(
                    batch, model, step_model, optimizer, scheduler, autocast_dtype, t.grad_clip
                )
                finite &= torch.isfinite(loss)
                if step % t.log_every == 0 or step == t.steps:
                    _check_finite(finite, step)
                    history.append(_log_row(step, length, logits, batch, scheduler.get_last_lr()[0]))
                    _report_row(cfg, history[-1], tracker, progress, bar)
                progress.update(bar, completed=step)
                if (
                    t.check_every
                    and step % t.check_every == 0
                    and _check(cfg, model, task, check_at, step, checks, tracker)
                ):
                    if t.stop_at_mastery:
                        learned_at = step if learned_at is None else learned_at  # steps-to-learn: the first
                        progress.update(bar, completed=t.steps)
                        break
                    if learned_at is None:  # steps-to-learn: the first; and the run as stopping would end it,
                        learned_at = step  # the checkpoint first: a kill between the two, and resuming copies it
                        checkpoint(step, (run_files.CHECKPOINT_FILE, run_files.MASTERY_FILE))
                if stop.received is not None:  # after the step's check: a resumed run never skips one
                    checkpoint(step)
                    raise _interrupted(stop.received, step, t.steps, run_dir)
                if t.checkpoint_every and step % t.checkpoint_every == 0 and step < t.steps:
                    checkpoint(step)
        seconds = elapsed + time.perf_counter() - start
        # a learned checkpoint resumed trains nothing (stopping at mastery), else the loop ran to `step`
        trained = learned_at if learned_at is not None and t.stop_at_mastery else step
        scores = evaluate(model, task, cfg.task.length, t.eval_sequences)
        span = (lo, hi)
        metrics = _final_metrics(cfg, scores, trained, seconds, device, n_params, learned_at, checks, span, check_at)
        metrics.update(_identity_of(config_dict))
        checkpoint(trained)
        _record(run_dir, history, metrics, tracker)
        _log_outcome(cfg, metrics, seconds, (lo, hi), task)
        return metrics


def _restore_mastery_snapshot(cfg: RunConfig, run_dir: Path, state: dict | None) -> None:
    """A run trained past mastery, resumed from the checkpoint of its first check that met the target, without
    its ``mastery.pt`` (killed between the two writes; or resume=PATH of a run that stopped there): that
    checkpoint is the snapshot."""
    snapshot = run_dir / run_files.MASTERY_FILE
    if cfg.train.stop_at_mastery or state is None or snapshot.exists():
        return
    if state.get("learned_at") is not None and state["learned_at"] == state["step"]:
        save_training_state(run_dir, state, run_files.MASTERY_FILE)


def _finished_metrics(cfg: RunConfig, run_dir: Path, state: dict | None) -> dict[str, Any] | None:
    """A finished run's metrics (it is not retrained), else None."""
    if state is not None and _finished(state, cfg) and (run_dir / run_files.METRICS_FILE).is_file():
        log.info("%s is finished (step %d); not retraining", run_dir, state["step"])
        return run_files.read_metrics(run_dir)
    return None


def _remove_if_empty(run_dir: Path, config: dict[str, Any]) -> None:
    """After a refused start (the folder's lock held: no other training writes it): remove the empty
    ``train.log`` Hydra opened for this start, then ``run_dir`` if nothing but its lock is left, and its parents
    left empty below the results folder (``paths.results``): a refusal leaves the folder as it found it."""
    try:
        log_file = run_dir / run_files.LOG_FILE
        if log_file.is_file() and not log_file.is_symlink() and log_file.stat().st_size == 0:
            log_file.unlink()  # nothing was logged into it
        if set(os.listdir(run_dir)) - {run_files.TRAIN_LOCK}:
            return
        (run_dir / run_files.TRAIN_LOCK).unlink(missing_ok=True)
        run_dir.rmdir()
        paths = config.get("paths")
        root = Path(os.path.abspath(paths["results"])) if isinstance(paths, dict) and paths.get("results") else None
        parent = Path(os.path.abspath(run_dir)).parent
        while root is not None and root in parent.parents:
            parent.rmdir()  # an empty one only: anything in it stops here (OSError)
            parent = parent.parent
    except OSError:
        pass


def _warn_threads(state: dict | None, device: torch.device) -> None:
    """One warning line when a CPU run resumes under another thread count than it last trained with: the
    order of floating-point sums changes, and with it the result (no longer bit-identical to one unbroken run)."""
    before, now = (state or {}).get("threads"), torch.get_num_threads()
    if device.type == "cpu" and isinstance(before, int) and before != now:
        log.warning(
            "resuming under %d threads, where this run trained under %d until step %d: its result will "
            "differ from an uninterrupted run's in the last bits (set OMP_NUM_THREADS=%d to match)",
            now,
            before,
            state["step"],
            before,
        )


def _write_run_files(run_dir: Path, config_dict: dict[str, Any], overrides: list[str] | None) -> None:
    """``config.yaml`` (and ``overrides.yaml``, when given) into ``run_dir``, created if needed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    run_files.atomic_write_text(run_dir / run_files.CONFIG_FILE, run_files.dump_yaml(config_dict))
    if overrides is not None:
        run_files.atomic_write_text(run_dir / run_files.OVERRIDES_FILE, run_files.dump_yaml(overrides))


def _report_row(cfg: RunConfig, row: dict[str, float], tracker, progress, bar) -> None:
    """A history row to the tracker, the progress bar and (every tenth, or without live bars) the log."""
    step, every = row["step"], cfg.train.log_every
    tracker.log_metrics(step, {k: v for k, v in row.items() if k != "step"})
    progress.update(bar, loss=row["loss"], acc=row["token_accuracy"])
    if not live_bars(cfg.progress) or step % (every * 10) == 0 or step == cfg.train.steps:
        done, clock = task_status(progress, bar, step)  # without a bar on screen, the line says how far and how long
        log.info("step %s  loss %.4f  token acc %.4f  %s", done, row["loss"], row["token_accuracy"], clock)


def _check(cfg: RunConfig, model, task, check_at: list[int], step: int, checks: list, tracker) -> bool:
    """One held-out check at ``step``, appended to ``checks``; whether the mastery criterion is met. Tasks
    with an exact-match criterion score :func:`mastery_check`; lm records its held-out loss for the
    convergence rule (:func:`posenc.task_facts.converged`) and never stops early."""
    t = cfg.train
    if not has_mastery_criterion(cfg.task.name):
        checks.append([step, heldout_loss(model, task, cfg.task.length, t.check_sequences)])
        tracker.log_metrics(step, {"heldout_loss": checks[-1][1]})
        log.info("step %d  held-out loss %.4f", step, checks[-1][1])
        return False
    score = mastery_check(model, task, check_at, t.check_sequences)
    checks.append([step, score])
    tracker.log_metrics(step, {"heldout_exact_match": score})
    log.info("step %d  held-out exact match %.4f (target %.2f)", step, score, t.target_exact_match)
    return score >= t.target_exact_match


def _record(run_dir: Path, history: list[dict], metrics: dict[str, Any], tracker) -> None:
    """A finished run's ``history.csv`` and ``metrics.json``, and the tracker's final record."""
    run_files.atomic_write_text(run_dir / run_files.HISTORY_FILE, run_files.history_csv(history))
    run_files.write_json(run_dir / run_files.METRICS_FILE, metrics)
    tracker.log_final(
        metrics, [run_dir / name for name in (run_files.CONFIG_FILE, run_files.HISTORY_FILE, run_files.METRICS_FILE)]
    )


def _identity_of(config_dict: dict[str, Any]) -> dict[str, str]:
    """metrics.json names its run and configuration: checked against the folder's other files."""
    identity = run_identity(config_dict)
    return {"run_id": identity.run_id, "config_id": identity.config_id}


def _final_metrics(
    cfg: RunConfig,
    final: dict,
    trained: int,
    seconds: float,
    device,
    n_params: int,
    learned_at: int | None,
    checks: list,
    lengths: tuple[int, int],
    check_at: list[int],
) -> dict[str, Any]:
    """metrics.json: the run, its final scores at L (``final``), steps and time, and whether it learned."""
    t = cfg.train
    mastery = t.check_every > 0 and has_mastery_criterion(cfg.task.name)  # lm: no criterion
    return {
        "encoder": cfg.encoder.name, "task": cfg.task.name, "train_length": cfg.task.length,
        "seed": cfg.seed, "steps": trained, "budget": t.steps, "train_seconds": round(seconds, 2),
        "device": str(device), "parameters": n_params, "eval_length": cfg.task.length, **final,
        "steps_to_learn": learned_at, "checks": checks, "train_lengths": list(lengths), "check_lengths": check_at,
        # Mastery: a check on held-out (validation) sequences reached the target; the final metrics above are
        # an independent test sample, reported as they are. Without checks (check_every=0) the final exact
        # match decides. Tasks without an exact-match criterion (lm) are learned once converged (the held-out
        # loss checks flattened, task_facts.converged); without checks they count as learned.
        "learned": _learned(cfg, final, learned_at, checks, mastery),
        "check_metric": ("exact_match" if mastery else "loss") if checks else None,
        "heldout_loss_fall": None if mastery else loss_fall(checks, t.steps),
    }  # fmt: skip


def _learned(cfg: RunConfig, final: dict, learned_at: int | None, checks: list, mastery: bool) -> bool:
    """metrics.json's ``learned``: the mastery check met; without checks the final exact match; lm: converged."""
    if mastery:
        return learned_at is not None
    if has_mastery_criterion(cfg.task.name):
        return final["exact_match"] >= cfg.train.target_exact_match
    return converged(checks, cfg.train.steps) if checks else True


def _log_outcome(cfg: RunConfig, metrics: dict, seconds: float, lengths: tuple[int, int], task) -> None:
    t = cfg.train
    if not metrics["learned"] and not has_mastery_criterion(cfg.task.name):
        log.warning(
            "NOT CONVERGED: the held-out loss fell by %s over the last quarter of the budget (%d steps)",
            "an unmeasured share" if metrics["heldout_loss_fall"] is None else f"{metrics['heldout_loss_fall']:.1%}",
            t.steps,
        )
    elif not metrics["learned"]:
        log.warning(
            "NOT LEARNED: held-out exact match stayed below %.2f at lengths %d-%d for the whole budget (%d steps)",
            t.target_exact_match,
            *lengths,
            t.steps,
        )
    # extrapolate's own sample at this length is larger (issue 38): say so, or its exact match at 1x looks
    # like a different result from the one printed here
    extrapolated = task.for_evaluation().evaluation_sequences(cfg.task.length, default_sequences(cfg.task.length))
    log.info(
        "done in %.1f s: exact match %.4f, token accuracy %.4f, loss %.4f at length %d on %d held-out sequences "
        "(train.eval_sequences; posenc extrapolate scores %d at this length, so its numbers differ by sampling)",
        seconds,
        metrics["exact_match"],
        metrics["token_accuracy"],
        metrics["loss"],
        cfg.task.length,
        metrics["n_sequences"],
        extrapolated,
    )


def _check_finite(finite: torch.Tensor, step: int) -> None:
    """Stop on a non-finite loss (one host-device sync, at log and checkpoint steps only)."""
    if not bool(finite):
        raise PosencError(
            f"the loss became non-finite by step {step}; stopped, the last checkpoint is kept (try a lower train.lr)"
        )


def _interrupted(signum: int, step: int, steps: int, run_dir: Path) -> TrainingInterrupted:
    name = signal.Signals(signum).name
    return TrainingInterrupted(
        f"{name} at step {step}/{steps}: checkpoint saved in {run_dir}; run the same command again to resume",
        128 + signum,
    )


def _log_start(cfg: RunConfig, task, model, device: torch.device, run_dir: Path) -> int:
    """Log what is trained where; the model's parameter count."""
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "training %s on %s (length %d), %d steps, %s parameters, device %s -> %s",
        cfg.encoder.name,
        cfg.task.name,
        cfg.task.length,
        cfg.train.steps,
        f"{n_params:,}",
        device,
        run_dir,
    )
    if task.describe_data():
        log.info("data: %s", task.describe_data())
    return n_params


def setup_training(cfg: RunConfig, device: torch.device) -> tuple:
    """``(task, model, step_model, optimizer, scheduler, autocast dtype)`` for training ``cfg`` on ``device``,
    the model initialised from the seed; ``step_model`` is the compiled model where compilation is on (the same
    parameters)."""
    torch.manual_seed(cfg.seed)
    task, _, model = cfg.build()
    model.to(device).train()
    optimizer = make_optimizer(model, cfg)
    compiled, autocast_dtype = step_settings(cfg, device)
    step_model = torch.compile(model, dynamic=True) if compiled else model  # same parameters as `model`
    t = cfg.train
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, t.warmup_steps, t.steps, t.final_lr_ratio)
    )
    return task, model, step_model, optimizer, scheduler, autocast_dtype


def optimizer_step(
    batch, model, step_model, optimizer, scheduler, autocast_dtype: torch.dtype | None, grad_clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on ``batch`` (already on the device); ``(logits, loss)``, neither read back here."""
    device_type = batch.inputs.device.type
    with torch.autocast(device_type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        logits = step_model(batch.inputs)
        loss = answer_loss(logits.float(), batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    model.encoder.project_parameters()  # e.g. KERPLE's r1, r2 >= eps, also when the step is compiled
    scheduler.step()
    return logits, loss


def _log_row(step: int, length: int, logits: torch.Tensor, batch, lr: float) -> dict[str, Any]:
    """history.csv's row for this step: the batch's own scores (read now, no per-step host syncs between)."""
    scores = Scores()
    scores.add(logits.detach().float(), batch)
    return {"step": step, "length": length, **scores.means(), "lr": lr}


def _restore(state: dict | None, model, optimizer, scheduler, data: torch.Generator, run_dir: Path) -> tuple:
    """Load a checkpoint's training state into the loop's objects; ``(first step, history, elapsed seconds,
    checks, learned_at)`` to go on from (a fresh run's without a state)."""
    if state is None:
        return 1, [], 0.0, [], None
    log.info("resuming %s from step %d", run_dir, state["step"])
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    set_rng_states(state["rng"], data)
    return state["step"] + 1, state["history"], state["elapsed"], state.get("checks", []), state.get("learned_at")


CHECK_SEED = 4321  # held-out sequences of the mastery checks: neither training data nor the final evaluation's
CHECK_LENGTHS = 8  # a mastery check scores at most this many lengths spread over the training range


def draw_batch(task, batch_size: int, lo: int, hi: int, draw: str, generator: torch.Generator):
    """One training batch with lengths uniform on ``[lo, hi]``: per sequence (``draw="example"``, a mixed,
    right-padded batch) or one length for the whole batch (``"batch"``); ``lo == hi``: all at ``hi``.
    Returns the batch and its width (the longest length in it)."""
    if lo == hi:
        return task.sample(batch_size, hi, generator), hi
    if draw == "batch":
        length = int(torch.randint(lo, hi + 1, (1,), generator=generator))
        return task.sample(batch_size, length, generator), length
    lengths = torch.randint(lo, hi + 1, (batch_size,), generator=generator)
    return task.sample_mixed(lengths, generator), int(lengths.max())


def check_lengths(lo: int, hi: int, most: int = CHECK_LENGTHS) -> list[int]:
    """The lengths a mastery check scores: ``hi`` alone for fixed-length training, else up to ``most``
    lengths evenly spaced over ``[lo, hi]`` (both ends included), so that the check samples the training
    distribution (uniform lengths) rather than its longest length alone."""
    if lo >= hi:
        return [hi]
    count = min(most, hi - lo + 1)
    return sorted({round(lo + (hi - lo) * k / (count - 1)) for k in range(count)})


def mastery_check(model: torch.nn.Module, task, lengths: int | list[int], sequences: int) -> float:
    """Exact match of ``model`` on ``sequences`` held-out sequences spread evenly over ``lengths`` (the
    training distribution; see :func:`check_lengths`): the mean over every sequence scored."""
    lengths = [lengths] if isinstance(lengths, int) else list(lengths)
    each = math.ceil(sequences / len(lengths))
    scores = [evaluate(model, task, n, each, seed=CHECK_SEED)["exact_match"] for n in lengths]
    return sum(scores) / len(scores)


def heldout_loss(model: torch.nn.Module, task, length: int, sequences: int) -> float:
    """Mean loss of ``model`` on ``sequences`` held-out sequences of ``length`` tokens (lm: windows of the
    held-out text), the same ones at every check: the record :func:`posenc.task_facts.converged` reads."""
    return evaluate(model, task, length, sequences, seed=CHECK_SEED)["loss"]


def _finished(state: dict[str, Any], cfg: RunConfig) -> bool:
    """Whether a checkpoint's training is over: its budget spent, or the mastery criterion met."""
    return state["step"] >= cfg.train.steps or (state.get("learned_at") is not None and cfg.train.stop_at_mastery)


def _state_to_resume(cfg: RunConfig, run_dir: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The training state to continue from, per ``cfg.resume``; None to start afresh. Refused (one line) where
    the folder holds files that are not this run's to go on from or write over (:func:`check_training_folder`)."""
    for name in run_files.RUN_FILES:
        run_files.check_regular(run_dir / name, "a run's " + name)  # a FIFO would block a reader forever
    source = _resume_source(cfg, run_dir)
    if source is not None:  # another folder's checkpoint starts this one
        state = load_training_state(source, config, source=str(cfg.resume))
        check_training_folder(run_dir, config, state, resumed_from=str(cfg.resume))
        return state
    existing, state = run_dir / run_files.CHECKPOINT_FILE, None
    if existing.is_file():
        if not cfg.resume:
            raise PosencError(f"{run_dir} already holds a checkpoint; use resume=true or another hydra.run.dir")
        state = load_training_state(existing, config)
    check_training_folder(run_dir, config, state)
    return state


def _resume_source(cfg: RunConfig, run_dir: Path) -> Path | None:
    """``resume=PATH``'s checkpoint, or None (``resume`` true or false, or PATH naming this folder's own)."""
    if not isinstance(cfg.resume, str):
        return None
    source = Path(cfg.resume)
    source = source / run_files.CHECKPOINT_FILE if source.is_dir() else source
    run_files.check_regular(source, f"resume={cfg.resume}")
    if not source.is_file():
        raise PosencError(f"resume={cfg.resume}: no checkpoint there")
    if os.path.realpath(source) == os.path.realpath(run_dir / run_files.CHECKPOINT_FILE):
        return None  # the folder's own checkpoint: resumed as resume=true does
    beside = source.parent / run_files.CHECKPOINT_FILE
    if source.name == run_files.MASTERY_FILE and beside.is_file():  # a snapshot of the run it lies in, or refused
        check_mastery_snapshot(source.parent, read_checkpoint(beside))
    return source
