"""README's first run learns on any CPU (issue 38): the default configuration, exactly as ``posenc train``
composes it, learns its task within half its budget, with one thread and with two.

The thread count and the CPU type set the order of floating-point sums, so each (seed, threads, CPU) is its own
trajectory; at the old lr 3e-3, seed 0 learned copy at step 600 with one thread on an Intel Xeon and never with
two (held-out exact match 0.0 at all 10 checks to step 1000: this test failed on it), while AMD EPYC learned at
800. What makes this test hold on a CPU it never ran on is the margin: at lr 1e-3 every run measured learned by
step 300 (results/first_run, 5 seeds x 1 and 2 threads), the bound is 1000, and seed 0 on one thread still
learns within it at lr 1e-4 and at 1e-2. scripts/first_run.py measures the whole table; this checks two of its
rows: the trajectory that failed, and the slowest. A run still short of the target at half its budget is
stopped there, so a failure costs no more than that. (tests/running/test_train.py's `slow` test trains the default
to its end.)
"""

import pytest
import torch
from conftest import compose_dict

import posenc.running.train
from posenc.running.config import run_config_from_dict
from posenc.running.train import train


class NotLearnedByHalfTheBudget(AssertionError):
    pass


def stop_at_half_the_budget(monkeypatch, cfg) -> list[float]:
    """Wrap the mastery check: record each score, and fail once half the budget is checked without the target."""
    real, scores = posenc.running.train.mastery_check, []
    half, target = cfg.train.steps // 2, cfg.train.target_exact_match

    def check(*args, **kwargs):
        scores.append(real(*args, **kwargs))
        if scores[-1] < target and len(scores) * cfg.train.check_every >= half:
            raise NotLearnedByHalfTheBudget(f"held-out exact match at each check: {scores} (target {target})")
        return scores[-1]

    monkeypatch.setattr(posenc.running.train, "mastery_check", check)
    return scores


@pytest.mark.integration  # trains the default model a few hundred steps: about a minute each on 2 cores
@pytest.mark.parametrize(("seed", "threads"), [(0, 2), (2, 1)])  # learned at 200 and at 300 (results/first_run)
def test_the_default_learns_within_half_its_budget(seed, threads, tmp_path, monkeypatch):
    config = compose_dict([f"seed={seed}", "progress=false"])
    cfg = run_config_from_dict(config)
    assert (cfg.encoder.name, cfg.task.name, cfg.task.length) == ("rope", "copy", 64)  # README's first run
    scores = stop_at_half_the_budget(monkeypatch, cfg)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        metrics = train(cfg, tmp_path, config)
    finally:
        torch.set_num_threads(previous)
    assert metrics["learned"] and metrics["steps_to_learn"] <= cfg.train.steps // 2, scores
