"""Aggregation across seeds (numbers computed by hand), the literature checks, and `posenc compare` end to end."""

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import TINY, posenc_cli

from posenc.compare import aggregate, mean_std_ci, pivot, t_quantile_975, with_depth_means
from posenc.extrapolate import COLUMNS, doubling_lengths
from posenc.report import literature_checks, perplexity_checks


@pytest.mark.parametrize(
    "df, expected",  # scipy.stats.t.ppf(0.975, df)
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423), (40, 2.0211), (60, 2.0003),
     (120, 1.9799), (10**6, 1.9600)],
)
def test_t_quantile(df, expected):
    assert t_quantile_975(df) == pytest.approx(expected, abs=2e-4)


def test_mean_std_ci_by_hand():
    # mean 0.5; deviations -0.3, -0.1, 0.4 -> variance 0.26 / 2 = 0.13; half-width t_{0.975,2} sqrt(0.13/3)
    n, mean, std, half = mean_std_ci(pd.Series([0.2, 0.4, 0.9]))
    assert (n, mean) == (3, pytest.approx(0.5))
    assert std == pytest.approx(math.sqrt(0.13))
    assert half == pytest.approx(4.302653 * math.sqrt(0.13) / math.sqrt(3), rel=1e-4)
    assert half == pytest.approx(0.8957, abs=1e-4)
    n, mean, std, half = mean_std_ci(pd.Series([0.7, math.nan]))  # NaN (no value) is not a seed
    assert (n, mean) == (1, 0.7) and math.isnan(std) and math.isnan(half)
    assert mean_std_ci(pd.Series([math.nan]))[0] == 0


def _rows(encoder, task, length, values, note="", scaling="none", depth=math.nan):
    return [{"run": f"r/{encoder}/{seed}", "encoder": encoder, "task": task, "train_length": 64,
             "eval_length": length, "scaling": scaling, "scaling_factor": math.nan, "depth": depth,
             "seed": seed, "loss": 1.0 - v, "perplexity": math.exp(1.0 - v), "token_accuracy": v,
             "exact_match": v, "n_sequences": 4, "seconds": 0.1, "note": note}
            for seed, v in enumerate(values)]


def test_aggregate_groups_by_encoder_task_and_lengths():
    table = pd.DataFrame(
        _rows("rope", "copy", 64, [1.0, 0.8, 0.9]) + _rows("rope", "copy", 128, [0.0, 0.1, 0.2])
        + _rows("learned", "copy", 128, [math.nan] * 3, note="learned position table has 64 positions")
    )
    out = aggregate(table).set_index(["encoder", "eval_length"])
    rope = out.loc[("rope", 64)]
    assert rope["n_seeds"] == 3 and rope["seeds"] == "0,1,2"
    assert rope["exact_match_mean"] == pytest.approx(0.9)
    assert rope["exact_match_std"] == pytest.approx(0.1)
    assert rope["exact_match_ci95"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-4)
    assert rope["exact_match_ci95_low"] == pytest.approx(0.9 - rope["exact_match_ci95"])
    assert rope["loss_mean"] == pytest.approx(0.1)
    learned = out.loc[("learned", 128)]
    assert learned["n_seeds"] == 0 and math.isnan(learned["exact_match_mean"])
    assert "64 positions" in learned["note"]
    cells = pivot(aggregate(table), "exact_match").set_index("encoder")
    assert cells.loc["rope", "64"] == f"0.900 ± {rope['exact_match_ci95']:.3f}"
    assert cells.loc["learned", "128"] == "—"


def _comparison(values: dict[tuple[str, int], float]) -> pd.DataFrame:
    rows = []
    for (encoder, factor), v in values.items():
        rows += _rows(encoder, "copy", 64 * factor, [v])
    return aggregate(pd.DataFrame(rows))


def test_literature_checks_say_whether_we_agree():
    agree = _comparison({("sinusoidal", 1): 0.9, ("sinusoidal", 2): 0.0, ("alibi", 1): 1.0, ("alibi", 2): 0.9,
                         ("alibi", 4): 0.8, ("rope", 1): 1.0, ("rope", 2): 0.0, ("rope", 4): 0.1})
    lines = literature_checks(agree)
    assert len(lines) == 3 and all("**agrees**" in line for line in lines)
    assert "sinusoidal 0.90 at 1× → 0.00 at 2×" in lines[0]
    differ = _comparison({("rope", 1): 1.0, ("rope", 2): 0.9, ("alibi", 1): 1.0, ("alibi", 2): 0.1,
                          ("alibi", 4): 0.0, ("rope", 4): 0.5})
    assert all("**differs**" in line for line in literature_checks(differ))


def test_a_finding_on_encoders_that_never_learned_the_task_is_not_testable():
    lines = literature_checks(_comparison({("sinusoidal", 1): 0.0, ("sinusoidal", 2): 0.0}))
    assert len(lines) == 1 and "**not testable here**" in lines[0] and "agrees" not in lines[0]


def test_rope_scaling_rows_are_compared_with_the_rope_runs_as_trained():
    rows = _rows("rope", "copy", 64, [1.0]) + _rows("rope", "copy", 128, [0.3])
    rows += _rows("rope", "copy", 128, [0.6], scaling="yarn") + _rows("rope", "copy", 128, [0.2], scaling="linear")
    comparison = aggregate(pd.DataFrame(rows))
    assert len(comparison) == 4  # scalings are groups of their own
    line = [x for x in literature_checks(comparison) if x.startswith("Peng et al. 2023")][0]
    assert "**agrees**" in line and "as trained 0.30, linear 0.20, yarn 0.60" in line
    cells = pivot(comparison, "exact_match").set_index("encoder")
    assert cells.loc["rope +yarn", "128"] == "0.600" and cells.loc["rope", "128"] == "0.300"


def test_perplexity_check_follows_press_et_al():
    def lm(values):
        rows = []
        for (encoder, factor), ppl in values.items():
            row = _rows(encoder, "lm", 64 * factor, [0.0])[0]
            rows.append({**row, "perplexity": ppl, "loss": math.log(ppl)})
        return aggregate(pd.DataFrame(rows))

    flat = lm({("alibi", 1): 3.0, ("alibi", 4): 2.9, ("rope", 1): 3.0, ("rope", 4): 9.0})
    (line,) = perplexity_checks(flat)
    assert "**agrees**" in line and "alibi 3.00 → 2.90; rope 3.00 → 9.00" in line
    (line,) = perplexity_checks(lm({("alibi", 1): 3.0, ("alibi", 4): 6.0, ("rope", 1): 3.0, ("rope", 4): 4.0}))
    assert "**differs**" in line
    assert perplexity_checks(lm({("rope", 1): 3.0, ("rope", 4): 4.0})) == []  # no ALiBi: nothing to say


def test_perplexity_check_compares_rope_scalings_with_rope_as_trained_and_linear():
    def lm(values):
        rows = []
        for scaling, ppl in values.items():
            row = _rows("rope", "lm", 256, [0.0], scaling=scaling)[0]
            rows.append({**row, "train_length": 64, "perplexity": ppl, "loss": math.log(ppl)})
        return aggregate(pd.DataFrame(rows))

    (line,) = perplexity_checks(lm({"none": 9.0, "linear": 12.0, "ntk": 6.0, "yarn": 4.0}))
    assert line.startswith("Peng et al. 2023") and "**agrees**" in line
    assert "perplexity of the rope runs on lm at 4×: as trained 9.00, linear 12.00, ntk 6.00, yarn 4.00." in line
    (line,) = perplexity_checks(lm({"none": 9.0, "linear": 3.0, "yarn": 4.0}))  # linear beats yarn
    assert "**differs**" in line
    (line,) = perplexity_checks(lm({"none": 3.0, "linear": 12.0, "yarn": 4.0}))  # nothing beats as trained
    assert "**differs**" in line
    assert perplexity_checks(lm({"none": 9.0, "yarn": 4.0})) == []  # no linear: the finding is not checked


def test_depth_rows_get_a_mean_over_depths_per_run_length_and_scaling():
    rows = _rows("rope", "passkey", 64, [1.0, 0.5], depth=0.0) + _rows("rope", "passkey", 64, [0.0, 0.5], depth=1.0)
    rows += _rows("rope", "copy", 64, [0.7])
    table = with_depth_means(pd.DataFrame(rows))
    means = table[(table["task"] == "passkey") & table["depth"].isna()].set_index("seed")
    assert len(table) == 7 and list(means["exact_match"]) == [0.5, 0.5]
    assert means.loc[0, "loss"] == pytest.approx(0.5) and means.loc[0, "perplexity"] == pytest.approx(math.exp(0.5))
    assert means.loc[0, "n_sequences"] == 8
    comparison = aggregate(pd.DataFrame(rows))
    overall = comparison[(comparison["task"] == "passkey") & comparison["depth"].isna()]
    assert len(overall) == 1 and overall["exact_match_mean"].iloc[0] == 0.5 and overall["n_seeds"].iloc[0] == 2


def test_doubling_lengths():
    assert doubling_lengths(64, 8192) == [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    assert doubling_lengths(100, 50) == [100]


def test_compare_evaluates_once_then_reuses(trained_runs: Path, tmp_path):
    out = tmp_path / "cmp"
    first = posenc_cli("compare", "--runs", str(trained_runs), "--up-to", "64", "--out", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "6 new evaluations, 0 reused" in first.stderr  # 2 runs x lengths 16, 32, 64
    for name in ["comparison.csv", "comparison.parquet", "comparison.md", "extrapolation.parquet", "report.md",
                 "copy_exact_match.png", "copy_exact_match.svg", "copy_token_accuracy.png", "copy_loss.svg"]:
        assert (out / name).stat().st_size > 0, name
    comparison = pd.read_parquet(out / "comparison.parquet")
    assert sorted(set(comparison["encoder"])) == ["learned", "rope"]
    assert sorted(set(comparison["eval_length"])) == [16, 32, 64]
    assert (comparison["n_seeds"] <= 1).all()
    report = (out / "report.md").read_text()
    assert "![copy: exact match](copy_exact_match.png)" in report and "| encoder" in report
    before = (out / "extrapolation.parquet").read_bytes()
    again = posenc_cli("compare", "--runs", str(trained_runs), "--up-to", "64", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 new evaluations, 6 reused" in again.stderr
    assert pd.read_parquet(out / "extrapolation.parquet").equals(pd.read_parquet(pd.io.common.BytesIO(before)))
    more = posenc_cli("compare", "--runs", str(trained_runs), "--lengths", "16,128", "--out", str(out), cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert "2 new evaluations, 2 reused" in more.stderr  # only 128 is new
    assert sorted(set(pd.read_parquet(out / "comparison.parquet")["eval_length"])) == [16, 128]


def test_compare_refuses_bad_input_in_one_line(tmp_path):
    for args, needle in [(["--runs", str(tmp_path / "missing")], "missing"),
                         (["--lengths", "0,64"], "--lengths"), (["--up-to", "-5"], "--lengths")]:
        result = posenc_cli("compare", *args, "--out", str(tmp_path / "o"), cwd=tmp_path)
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_two_compares_writing_at_once_lose_nothing(trained_runs: Path, tmp_path):
    out = tmp_path / "shared"
    env_args = [("--lengths", "16,32"), ("--lengths", "64,128")]
    procs = [subprocess.Popen([sys.executable, "-m", "posenc", "compare", "--runs", str(trained_runs), *args,
                               "--out", str(out)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for args in env_args]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
    table = pd.read_parquet(out / "extrapolation.parquet")
    assert sorted(set(table["eval_length"])) == [16, 32, 64, 128]  # both commands' rows are there
    assert len(table) == 8 and not table.duplicated(["run", "eval_length"]).any()


def test_compare_with_rope_scaling_passkey_depths_and_lm_perplexity(tmp_path):
    """End to end through the CLI: the extension methods on a rotary checkpoint, passkey rows per depth,
    lm perplexity figures and the corpus named in the report; non-rotary runs evaluated as trained."""
    corpus = tmp_path / "texts"
    corpus.mkdir()
    for i in range(20):
        (corpus / f"t{i}.txt").write_text(f"def f{i}(x):\n    return x * {i}\n" * 40)
    sweep = tmp_path / "sweep"
    common = [*TINY, f"hydra.sweep.dir={sweep}"]
    for args in (["encoder=rope,alibi", "task=passkey", "task.min_length=12"],
                 ["encoder=rope", "task=lm", f"task.corpus={corpus}", "task.pattern=*.txt"]):
        result = posenc_cli("train", "-m", *common, *args, cwd=tmp_path)  # args override TINY
        assert result.returncode == 0, result.stderr
    out = tmp_path / "cmp"
    result = posenc_cli("compare", "--runs", str(sweep), "--lengths", "16,32", "--rope-scaling", "none,yarn",
                        "--sequences", "4", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "note: --rope-scaling applies to rotary encoders only; evaluated as trained: alibi" in result.stderr
    table = pd.read_parquet(out / "extrapolation.parquet")
    passkey = table[table["task"] == "passkey"]
    # rope: 2 scalings x 2 lengths x 5 depths; alibi: as trained only
    assert len(passkey[passkey["encoder"] == "rope"]) == 20 and len(passkey[passkey["encoder"] == "alibi"]) == 10
    assert sorted(set(passkey["depth"])) == [0.0, 0.25, 0.5, 0.75, 1.0]
    yarn = table[table["scaling"] == "yarn"]
    assert set(yarn["encoder"]) == {"rope"} and list(yarn.groupby("eval_length")["scaling_factor"].first()) == [1, 2]
    lm = table[table["task"] == "lm"]
    assert lm["depth"].isna().all() and (lm["perplexity"] > 1).all()
    comparison = pd.read_parquet(out / "comparison.parquet")
    rope = comparison[(comparison["task"] == "passkey") & (comparison["encoder"] == "rope")
                      & (comparison["scaling"] == "none") & (comparison["eval_length"] == 32)]
    overall = rope[rope["depth"].isna()]  # the score over all depths, next to one row per depth
    assert len(rope) == 6 and len(overall) == 1
    by_depth = rope.loc[rope["depth"].notna(), "token_accuracy_mean"]
    assert overall["token_accuracy_mean"].iloc[0] == pytest.approx(by_depth.mean())
    for name in ["lm_perplexity.png", "lm_rope_scaling_perplexity.svg", "passkey_exact_match.png",
                 "passkey_rope_scaling_exact_match.png", "passkey_exact_match_by_depth.png"]:
        assert (out / name).stat().st_size > 0, name
    report = (out / "report.md").read_text()
    assert "### lm: RoPE context extension at evaluation" in report and "rope +yarn" in report
    assert "rope @depth 0.5" in report and "Data: " in report and str(corpus) in report
