"""Does each pairwise ordering of encoders hold at a second scale? (issue 23 item 5: encoder or size?)

For every pair of encoders both comparisons hold, on each task, this judges "A beats B" on exact match at
each scale with posenc's own paired difference (:func:`posenc.analysis.claims.check`: sequences paired, seeds by t,
Bonferroni over the windows), in windows relative to each scale's own training length L: (1×, 2×], the
lengths Kazemnejad et al.'s test set covers, and (2×, 32×], as far as the second scale was evaluated. Each
pair, window and metric (exact match; token accuracy, which still separates encoders past 2× where
copy's exact match is 0 for all) gets one outcome (:func:`classify`):

- **holds**: the same encoder is ahead at both scales (both intervals exclude 0, same sign);
- **reverses**: each scale puts a different encoder ahead;
- **not confirmed**: ordered at the first scale, open at the second (the interval covers 0);
- **new**: open at the first scale, ordered at the second;
- **open at both**; **not testable**: a side did not learn the task in distribution, or both are at chance.

Writes a Markdown table per task to ``--out`` (default: ``<second>/scale_check.md``).

    python scripts/scale_check.py --task copy=results/length_generalization:results/scale \\
        --task retrieval=results/headline:results/scale --encoders nope,t5,alibi,rope,sinusoidal
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import pandas as pd

from posenc.analysis.claims import Claim, Comparison, Side, Window, check
from posenc.analysis.compare import with_depth_means
from posenc.analysis.evidence import TableEvidence
from posenc.analysis.pipeline import compared_results
from posenc.errors import PosencError

WINDOWS = (Window(1, 2), Window(2, 32))
METRICS = ("exact_match", "token_accuracy")  # the second says something past 2×, where copy's exact match is 0
OUTCOMES = ("holds", "reverses", "not confirmed", "new", "open at both", "not testable")


def classify(first: int | None, second: int | None) -> str:
    """One pair's outcome from its state at each scale: 1 (A ahead), -1 (B ahead), 0 (open), None (not
    testable), as :class:`posenc.analysis.claims.Check` gives them."""
    if first is None or second is None:
        return "not testable"
    if first and second:
        return "holds" if first == second else "reverses"
    if first:
        return "not confirmed"
    return "new" if second else "open at both"


def _states(evidence: TableEvidence, task: str, metric: str, a: str, b: str) -> tuple[list[int | None], list[str], str]:
    """Per window: the state of "a beats b", its detail line; and why nothing was checked ("" if it was)."""
    claim = Claim(
        key=f"scale_{task}_{a}_{b}",
        source="posenc scale check",
        statement=f"{a} beats {b}",
        task=task,
        metric=metric,
        windows=WINDOWS,
        expect=(Comparison(Side(a), Side(b)),),
    )
    verdict = check(claim, evidence)
    if not verdict.checks:
        return [None] * len(WINDOWS), ["—"] * len(WINDOWS), "; ".join(verdict.details)
    return [c.state for c in verdict.checks], [c.line for c in verdict.checks], ""


def _difference(line: str) -> str:
    """``"+0.337 [0.114, 0.560]"`` out of a check's detail line (the text after the window's lengths)."""
    head = line.split(":", 1)[-1].strip()
    for words in (" exact match", " token accuracy"):
        head = head.split(words)[0]
    return head


def pair_table(first: Path, second: Path, task: str, encoders: list[str]) -> pd.DataFrame:
    """A row per encoder pair, window and metric: the difference at each scale and the outcome."""
    evidence = [TableEvidence(with_depth_means(compared_results(folder))) for folder in (first, second)]
    rows = []
    for (a, b), metric in itertools.product(itertools.combinations(encoders, 2), METRICS):
        (s1, l1, why1), (s2, l2, why2) = (_states(e, task, metric, a, b) for e in evidence)
        for i, window in enumerate(WINDOWS):
            rows.append(
                {
                    "task": task,
                    "pair": f"{a} − {b}",
                    "metric": metric.replace("_", " "),
                    "window": window.label(),
                    "first scale": _difference(l1[i]) if not why1 else f"not testable: {why1}",
                    "second scale": _difference(l2[i]) if not why2 else f"not testable: {why2}",
                    "outcome": classify(s1[i], s2[i]),
                }
            )
    return pd.DataFrame(rows)


RUN_BY = "bash scripts/scale.sh"  # the report's provenance unless --by names another (t5_layout.sh)


def markdown(tables: dict[str, pd.DataFrame], sources: dict[str, tuple[Path, Path]], by: str = RUN_BY) -> str:
    """The report; ``by`` names the command that ran this script (its provenance line)."""
    parts = [
        "# Scale check: do the pairwise orderings hold at twice the length and width?\n",
        f"Generated by `python scripts/scale_check.py` (run by `{by}`). Each cell is A − B "
        "in exact match or token accuracy, paired on shared sequences, seeds by t "
        "(posenc.analysis.stats.paired_difference), at 97.5% "
        "(Bonferroni over the two windows); windows are relative to each scale's own training length L. "
        "Outcomes: " + ", ".join(OUTCOMES) + " (scripts/scale_check.py says what each means).\n",
    ]
    for task, table in tables.items():
        first, second = sources[task]
        counts = table["outcome"].value_counts()
        tally = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if o in counts)
        parts.append(
            f"## {task}\n\nFirst scale: `{first}`; second scale: `{second}`. {tally}.\n\n"
            + table.drop(columns="task").to_markdown(index=False)
            + "\n"
        )
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task", action="append", required=True, help="TASK=FIRST:SECOND, two comparison folders (repeatable)"
    )
    parser.add_argument("--encoders", default="nope,t5,alibi,rope,sinusoidal")
    parser.add_argument("--out", type=Path, default=None)
    # the report names what regenerates it: scale.sh and t5_layout.sh both run this script
    parser.add_argument("--by", default=RUN_BY, help="the command that runs this script")
    args = parser.parse_args(argv)
    try:
        sources = {}
        for spec in args.task:
            task, _, folders = spec.partition("=")
            first, _, second = folders.partition(":")
            if not (task and first and second):
                raise PosencError(f"--task {spec}: expected TASK=FIRST:SECOND")
            sources[task] = (Path(first), Path(second))
        encoders = [e for e in args.encoders.split(",") if e]
        tables = {task: pair_table(first, second, task, encoders) for task, (first, second) in sources.items()}
    except PosencError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.out or next(iter(sources.values()))[1] / "scale_check.md"
    out.write_text(markdown(tables, sources, args.by))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
