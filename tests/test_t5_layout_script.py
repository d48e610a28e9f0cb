"""scripts/t5_layout.sh: the scale check's T5 arm with T5's bucket layout in the same relation to L at both scales."""

from pathlib import Path

import pytest
import torch
import yaml
from conftest import compose_dict, listed_runs, posenc_cli

SCRIPT = Path("scripts/t5_layout.sh")
SCALES = {"first": ("length_generalization", 32), "second": ("scale_copy", 64)}


def listed(results: Path, **env: str) -> list[str]:
    return listed_runs(SCRIPT, results, **env)


def expected(results: Path, seeds=(0, 1, 2), scales=tuple(SCALES)) -> list[str]:
    lines = []
    for seed in seeds:
        for scale in scales:
            experiment, length = SCALES[scale]
            head = f"experiment={experiment} hydra.sweep.dir={results}/multirun/t5_layout/{scale} seed={seed} task=copy"
            lines.append(f"{head} encoder=nope")
            for n in (length, length // 2):  # layout L, then layout half
                lines.append(f"{head} encoder=t5 encoder.num_buckets={n} encoder.max_distance={n}")
    return lines


def overrides(line: str) -> list[str]:
    return [o for o in line.split() if not o.startswith("hydra.sweep.dir=")]


@pytest.mark.integration  # runs the script (bash)
def test_list_prints_every_run_seed_by_seed(tmp_path):
    lines = listed(tmp_path)
    assert len(lines) == 18 and lines == expected(tmp_path)
    assert listed(tmp_path, SEEDS="1") == expected(tmp_path, seeds=(1,))
    assert listed(tmp_path, SCALES="first") == expected(tmp_path, scales=("first",))


@pytest.mark.integration
def test_a_finished_run_is_not_listed_again(tmp_path):
    """The folder the script checks is the one Hydra gives the run (its override_dirname)."""
    line = expected(tmp_path)[2]  # first scale, seed 0, layout half
    result = posenc_cli("train", *overrides(line), "--cfg", "hydra", cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    subdir = yaml.safe_load(result.stdout)["hydra"]["job"]["override_dirname"]
    run = tmp_path / "multirun/t5_layout/first/copy/t5/seed0" / subdir
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    assert listed(tmp_path) == [x for x in expected(tmp_path) if x != line]


def last_bucket_start(encoder) -> int:
    """The shortest distance that falls in the last bucket (posenc.functional.t5_relative_bucket)."""
    from posenc import functional as pf

    distances = torch.arange(0, 4 * encoder.max_distance)
    buckets = pf.t5_relative_bucket(-distances, encoder.num_buckets, encoder.max_distance)
    return int(distances[buckets == encoder.num_buckets - 1].min())


@pytest.mark.integration  # runs the script (bash)
@pytest.mark.parametrize("scale", SCALES)
def test_every_run_composes_and_each_layout_keeps_its_relation_to_l(tmp_path, scale):
    """Each line composes into a valid run; layout L puts the last bucket at L - 1 and layout half at L/2 - 1 at
    both scales; and the committed runs (max_distance null) are layout L at the first scale, half at the second:
    the confound this experiment removes."""
    from posenc.running.config import run_config_from_dict

    experiment, length = SCALES[scale]
    starts = {}
    for line in (x for x in listed(tmp_path, SEEDS="0") if f"experiment={experiment} " in x):
        cfg = compose_dict(overrides(line))
        assert cfg["task"]["length"] == length and cfg["task"]["name"] == "copy"
        _, encoder, _ = run_config_from_dict(cfg).check()
        if cfg["encoder"]["name"] == "t5":
            assert encoder.num_buckets == encoder.max_distance
            starts[encoder.num_buckets] = last_bucket_start(encoder)
    assert starts == {length: length - 1, length // 2: length // 2 - 1}
    _, committed, _ = run_config_from_dict(compose_dict([f"experiment={experiment}", "encoder=t5"])).check()
    assert (committed.num_buckets, committed.max_distance) == (32, 32)
    assert (length if scale == "first" else length // 2) == 32
