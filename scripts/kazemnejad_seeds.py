"""Every seed's outcome in the matched Kazemnejad experiment (conf/experiment/kazemnejad_matched.yaml), and its
arms paired by seed: what scripts/kazemnejad.sh runs after each run.

Reads ``results/kazemnejad/<arm>/extrapolation.csv`` (the arms of :data:`ARMS`, whichever exist;
the runs the arm's comparison covers, :func:`compared_rows`) and writes, per arm, ``seeds.csv`` / ``seeds.md`` (one
row per task, encoder and seed: learned, steps, exact match at the training length, over the paper's test range and
beyond) and ``distribution.md`` with ``seeds.png`` / ``seeds.svg`` (per task and encoder: seeds, learned, mean, SD,
median, min, max over seeds - the maximum for parity with papers that report it - and the share of seeds that
generalize). Paired by seed (:data:`PAIRED`): ``results/kazemnejad/stopping_rule.md`` (schedule minus
schedule_at_mastery: each run trained over its whole schedule against the same run stopped at its first check that
met the target, with the claims' verdicts on both sides), ``schedule_continued/stopping_rule.md`` (the first
schedule runs, each continued from its mastery-arm run's stop, minus that run) and ``budget.md`` (long minus
mastery: 40000 steps against 10000, the same seeds, initialisations and data stream): on the test range, mean
difference, Student-t 95% interval over the seeds both arms have, how many seeds rose, fell, tied, and how many
learned in each arm.

Windows, in symbols n (lengths 2n + 2 with the end token, Copy.symbols_at): ``test`` n = 21..40 (lengths
44, 46, ..., 82: the paper's test range, each n weighted equally as its test set does), ``beyond`` n = 60 and 80
(lengths 122, 162). A seed *generalizes* when its test-range exact match is at least 0.5, and *fully* at 0.9:
thresholds set with the experiment, before its results.

    python scripts/kazemnejad_seeds.py [--root results/kazemnejad]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from posenc.analysis.pipeline import compared_run_ids
from posenc.analysis.stats import t_quantile
from posenc.files import atomic_write, atomic_write_text

TRAIN_LENGTH = 43
TEST = tuple(range(44, 83, 2))  # 21..40 symbols
BEYOND = (122, 162)  # 60 and 80 symbols
GENERALIZES, FULLY = 0.5, 0.9
ARMS = ("mastery", "schedule", "schedule_at_mastery", "long", "schedule_continued")
# each arm paired by seed with its base arm: (base, file, title, what the difference is)
PAIRED = {
    "schedule": ("schedule_at_mastery", "stopping_rule.md", "The stopping rule, paired by run",
                 "Schedule (each run trained over its whole 10000-step schedule) minus schedule_at_mastery (the "
                 "same run stopped at its first check with held-out exact match >= 0.99: its mastery.pt)"),
    "long": ("mastery", "budget.md", "The budget, paired by seed",
             "Long (the paper's 40000 steps, stopped at mastery) minus mastery (10000 steps, stopped at mastery)"),
    "schedule_continued": ("mastery", "schedule_continued/stopping_rule.md",
                           "The stopping rule on the first schedule runs, paired by seed",
                           "Schedule_continued (each mastery-arm run continued from its stop over the rest of its "
                           "10000-step schedule, on the machine that held it) minus mastery (that run)"),
}  # fmt: skip
CLAIMS = ("kazemnejad2023_mean_rank", "kazemnejad2023_copy", "kazemnejad2023_reverse")  # the verdicts compared
ENCODERS = ("nope", "t5", "alibi", "rope", "sinusoidal")  # the claim's order


def per_seed(table: pd.DataFrame) -> pd.DataFrame:
    """One row per task, encoder and seed: the test-range and beyond means over their lengths (each length
    once, as the paper's bins), exact match at the training length, learned and steps."""
    table = table[table["scaling"].fillna("none") == "none"]
    rows = []
    for (task, encoder, seed), runs in table.groupby(["task", "encoder", "seed"]):
        by_length = runs.groupby("eval_length")["exact_match"].mean()
        test = [by_length[n] for n in TEST if n in by_length]
        beyond = [by_length[n] for n in BEYOND if n in by_length]
        rows.append(
            {
                "task": task,
                "encoder": encoder,
                "seed": int(seed),
                "learned": bool(runs["learned"].iloc[0]),
                "steps_to_learn": runs["steps_to_learn"].iloc[0],
                "train_exact_match": by_length.get(TRAIN_LENGTH, math.nan),
                "test_exact_match": sum(test) / len(test) if len(test) == len(TEST) else math.nan,
                "beyond_exact_match": sum(beyond) / len(beyond) if len(beyond) == len(BEYOND) else math.nan,
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["encoder"] = pd.Categorical(
        out["encoder"], [e for e in ENCODERS if e in set(out["encoder"])] + sorted(set(out["encoder"]) - set(ENCODERS))
    )
    return out.sort_values(["task", "encoder", "seed"]).reset_index(drop=True)


def distribution(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per task and encoder, the spread of the test-range exact match over seeds."""
    rows = []
    for (task, encoder), group in seeds.groupby(["task", "encoder"], observed=True):
        test = group["test_exact_match"].dropna()
        rows.append(
            {
                "task": task,
                "encoder": encoder,
                "seeds": len(group),
                "learned": int(group["learned"].sum()),
                "mean": test.mean(),
                "sd": test.std(ddof=1) if len(test) > 1 else math.nan,
                "median": test.median(),
                "min": test.min(),
                "max": test.max(),
                f"share>={GENERALIZES}": (test >= GENERALIZES).mean() if len(test) else math.nan,
                f"share>={FULLY}": (test >= FULLY).mean() if len(test) else math.nan,
                "beyond_mean": group["beyond_exact_match"].mean(),
            }
        )
    return pd.DataFrame(rows)


def paired(base: pd.DataFrame, other: pd.DataFrame, arm: str = "schedule", base_arm: str = "mastery") -> pd.DataFrame:
    """``arm`` minus ``base_arm`` on the test range, paired by seed, per task and encoder, with the seeds that
    learned in each arm (of those paired)."""
    keys = ["task", "encoder", "seed"]
    both = (
        base[keys + ["test_exact_match", "learned"]]
        .merge(other[keys + ["test_exact_match", "learned"]], on=keys, suffixes=(f"_{base_arm}", f"_{arm}"))
        .dropna(subset=[f"test_exact_match_{base_arm}", f"test_exact_match_{arm}"])
    )
    both["difference"] = both[f"test_exact_match_{arm}"] - both[f"test_exact_match_{base_arm}"]
    rows = []
    for (task, encoder), group in both.groupby(["task", "encoder"], observed=True):
        d = group["difference"]
        n = len(d)
        half = t_quantile(n - 1) * d.std(ddof=1) / math.sqrt(n) if n > 1 else math.nan
        rows.append(
            {
                "task": task,
                "encoder": encoder,
                "seeds": n,
                f"learned_{base_arm}": int(group[f"learned_{base_arm}"].sum()),
                f"learned_{arm}": int(group[f"learned_{arm}"].sum()),
                base_arm: group[f"test_exact_match_{base_arm}"].mean(),
                arm: group[f"test_exact_match_{arm}"].mean(),
                "difference": d.mean(),
                "low": d.mean() - half,
                "high": d.mean() + half,
                "rose": int((d > 0).sum()),
                "fell": int((d < 0).sum()),
                "tied": int((d == 0).sum()),
            }
        )
    return pd.DataFrame(rows)


def verdicts(folders: dict[str, Path]) -> pd.DataFrame:
    """Each claim of :data:`CLAIMS`, its verdict in each folder (``posenc.analysis.claims.check``), judged on the
    runs (task, encoder, seed) every folder has, and whether they agree: whether what differs between the arms
    decides the outcome. ``runs_<arm>``: how many of the arm's runs the check read (its verdicts.md reads all of
    its own, which may be more)."""
    from posenc.analysis.claims import check
    from posenc.analysis.compare import with_depth_means
    from posenc.analysis.evidence import TableEvidence
    from posenc.analysis.literature import CLAIMS as KNOWN
    from posenc.analysis.pipeline import compared_results
    from posenc.analysis.store import Results

    keys = ["task", "encoder", "seed"]
    read = {f: compared_results(f) for f in {Path(f).resolve() for f in folders.values()}}  # each folder once
    shared = set.intersection(*(set(map(tuple, r.evaluations[keys].to_numpy().tolist())) for r in read.values()))
    claims, judged, counted = {c.key: c for c in KNOWN}, {}, {}
    for folder, results in read.items():
        ev = results.evaluations
        ev = ev[[tuple(row) in shared for row in ev[keys].to_numpy().tolist()]]
        ids = set(ev["run_id"])
        kept = Results(ev, *(t[t["run_id"].isin(ids)] for t in (results.sequences, results.positions)))
        evidence = TableEvidence(with_depth_means(kept))
        judged[folder] = {key: check(claims[key], evidence).outcome for key in CLAIMS}
        counted[folder] = len(ids)
    rows = []
    for key in CLAIMS:
        outcome = {arm: judged[Path(folder).resolve()][key] for arm, folder in folders.items()}
        runs = {f"runs_{arm}": counted[Path(folder).resolve()] for arm, folder in folders.items()}
        rows.append({"claim": key, **runs, **outcome, "same": len(set(outcome.values())) == 1})
    return pd.DataFrame(rows)


def figure(seeds: pd.DataFrame, path: Path, title: str) -> None:
    """Every seed's test-range exact match, per task and encoder (a dot per seed, hollow: not learned)."""
    from posenc.analysis.plots import pyplot

    plt = pyplot()  # Agg, and fixed SVG ids
    tasks = sorted(seeds["task"].unique())
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False, sharey=True)
    for ax, task in zip(axes[0], tasks):
        part = seeds[seeds["task"] == task]
        encoders = [e for e in part["encoder"].cat.categories if e in set(part["encoder"])]
        for i, encoder in enumerate(encoders):
            runs = part[part["encoder"] == encoder].reset_index(drop=True)
            x = i + (runs.index - (len(runs) - 1) / 2) * min(0.04, 0.6 / max(len(runs), 1))
            learned = runs["learned"].to_numpy()
            ax.scatter(x[learned], runs["test_exact_match"][learned], s=18, color="C0")
            ax.scatter(x[~learned], runs["test_exact_match"][~learned], s=18, facecolors="none", edgecolors="C3")
            ax.hlines(runs["test_exact_match"].mean(), i - 0.3, i + 0.3, color="k", lw=1)
        ax.set_xticks(range(len(encoders)), encoders)
        ax.set_title(task)
        ax.set_ylim(-0.03, 1.03)
        ax.axhline(GENERALIZES, color="0.7", lw=0.8, ls="--")
    axes[0][0].set_ylabel("exact match, 21-40 symbols")
    fig.suptitle(title, fontsize=10)
    from matplotlib.lines import Line2D

    key = [
        Line2D([], [], ls="", marker="o", ms=5, color="C0", label="a seed that learned"),
        Line2D([], [], ls="", marker="o", ms=5, mfc="none", mec="C3", label="a seed that did not learn"),
        Line2D([], [], color="k", lw=1, label="mean over seeds"),
        Line2D([], [], color="0.7", lw=0.8, ls="--", label=f"generalizes ({GENERALIZES})"),
    ]
    rows = 1 if len(tasks) > 1 else 2  # one panel is too narrow for the key on one line
    fig.legend(handles=key, loc="lower center", ncol=len(key) // rows, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08 * rows, 1, 1))  # room for the key below the panels
    for suffix in (".png", ".svg"):  # atomically: two arms' workers may write these at once (as below)
        metadata = {"Date": None} if suffix == ".svg" else None  # the same seeds give the same file
        atomic_write(
            path.with_suffix(suffix), lambda f, k=suffix[1:], m=metadata: fig.savefig(f, format=k, dpi=120, metadata=m)
        )
    plt.close(fig)


def markdown(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, floatfmt=".3f") + "\n"


def compared_rows(folder: Path) -> pd.DataFrame:
    """``folder``'s extrapolation.csv, only the runs its comparison covers where it has one: the table keeps every
    run ever evaluated there, a run that has since left the sweep too (issue 39: the matched arms' T5 and RoPE
    runs trained before they took the paper's layouts)."""
    table = pd.read_csv(folder / "extrapolation.csv")
    run_ids = compared_run_ids(folder)
    return table if run_ids is None else table[table["run_id"].isin(run_ids)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("results/kazemnejad"))
    args = parser.parse_args()
    found = {}
    for arm in ARMS:
        table_path = args.root / arm / "extrapolation.csv"
        if not table_path.exists():
            continue
        seeds = per_seed(compared_rows(args.root / arm))
        if seeds.empty:
            continue
        found[arm] = seeds
        # every file atomically: kazemnejad.sh's workers for two arms rewrite them all, and commit, at any time
        atomic_write_text(args.root / arm / "seeds.csv", seeds.to_csv(index=False))
        atomic_write_text(args.root / arm / "seeds.md", f"# Every seed, arm {arm}\n\n" + markdown(seeds))
        spread = distribution(seeds)
        atomic_write_text(
            args.root / arm / "distribution.md",
            f"# Exact match over 21-40 symbols across seeds, arm {arm}\n\n"
            f"Per seed: the mean over lengths {TEST[0]}, {TEST[1]}, ..., {TEST[-1]} (one per symbol count); "
            f"share>=x: the share of seeds at or above x; beyond_mean: 60 and 80 symbols. Source: "
            f"extrapolation.csv here, the runs comparison.csv covers; scripts/kazemnejad_seeds.py.\n\n"
            + markdown(spread),
        )
        figure(seeds, args.root / arm / "seeds", f"Kazemnejad matched, arm {arm}: every seed")
        print(f"wrote {args.root / arm}/seeds.csv, seeds.md, distribution.md, seeds.png/svg")
    for arm, (base, name, title, what) in PAIRED.items():
        if base in found and arm in found:
            text = (
                f"# {title}\n\n{what}, exact match over 21-40 symbols, over the seeds both arms have (every "
                "seed, learned or not; learned_*: how many of them learned in each arm); low/high: Student-t 95% "
                "interval of the mean difference. Source: scripts/kazemnejad_seeds.py.\n\n"
                + markdown(paired(found[base], found[arm], arm, base))
            )
            if arm == "schedule":  # the same runs on both sides: does the stopping rule change a verdict?
                text += (
                    "\n## The claims' verdicts on both sides\n\nEach claim checked as each arm's verdicts.md "
                    "checks it, on the runs both arms have (runs_*: how many each side read): where the verdicts "
                    "differ, the stopping rule decides the outcome.\n\n"
                    + markdown(verdicts({base: args.root / base, arm: args.root / arm}))
                )
            atomic_write_text(args.root / name, text)
            print(f"wrote {args.root / name}")


if __name__ == "__main__":
    main()
