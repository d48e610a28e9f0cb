"""How a task's statistics change with length under the length-generalization protocol (issue 23): what a
model trained on lengths drawn from [lo, L] has seen, and what an evaluation length asks of it.

For each task and length the numbers are measured on sequences drawn by the task's own sampler (not read off
its docstring): the symbols per sequence, the answer tokens, and the *source distance* of each answer token -
how many positions back the token it must reproduce sits, found as the one distance at which every sampled
sequence holds the answer token (copy: one distance per length, n + 1; reverse: 2, 4, ..., 2n). A distance
longer than any in the training range was never seen in training: a relative encoding meets it first at
evaluation. The last column is the share of training sequences long enough to reach the length's last
position, i.e. how often a learned position table's row for it is trained (per-sequence lengths from U[lo, L]).

    python scripts/length_statistics.py                       # copy and reverse, [9, 32] (the protocol's)
    python scripts/length_statistics.py --out results/length_generalization/length_statistics.md \
        --positions results/length_generalization

With ``--positions DIR`` it also measures whether those rarely trained rows were learned: the learned position
table's answer-token accuracy at the training length L, by position, from DIR's ``positions.parquet`` (every
seed and evaluated sequence pooled), the last quarter of the positions against the rest.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from posenc.files import atomic_write_text
from posenc.tasks import build_task

SAMPLES = 256  # sequences per length: with 16 symbols, a wrong distance survives all of them with odds 16^-256


def source_distances(task, length: int, generator: torch.Generator) -> list[int]:
    """Per answer token of a length-``length`` sequence, the distance back to the token it reproduces."""
    tokens, answer = task.sequences(SAMPLES, length, generator)  # [b, length + 1] each
    distances = []
    for position in answer[0].nonzero().squeeze(1).tolist():
        found = [d for d in range(1, position + 1) if bool((tokens[:, position - d] == tokens[:, position]).all())]
        if len(found) != 1:
            raise SystemExit(f"{task.key} at {length}: answer position {position} has sources {found}")
        distances.append(found[0])
    return distances


def table(task_name: str, low: int, high: int, lengths: list[int]) -> pd.DataFrame:
    task = build_task(task_name)
    generator = torch.Generator().manual_seed(0)
    trained = {d for n in range(low, high + 1) for d in source_distances(task, n, generator)}
    rows = []
    for length in lengths:
        distances = source_distances(task, length, generator)
        unseen = sum(d > max(trained) for d in distances)
        reach = sum(n >= length for n in range(low, high + 1)) / (high - low + 1)
        rows.append({
            "task": task_name, "length": length, "times_L": round(length / high, 3),
            "answer_tokens": len(distances), "source_distance": f"{min(distances)}-{max(distances)}"
            if min(distances) != max(distances) else str(distances[0]),
            "answer_tokens_at_unseen_distance": unseen, "share_unseen": round(unseen / len(distances), 3),
            "training_sequences_reaching_last_position": round(reach, 3),
        })  # fmt: skip
    return pd.DataFrame(rows)


def learned_rows(folder: Path, high: int) -> pd.DataFrame:
    """Answer-token accuracy of the ``learned`` encoder at length ``high`` by position, from ``folder``'s
    tables: the rows before the last quarter of the positions, and the last quarter (the least trained)."""
    positions = pd.read_parquet(folder / "positions.parquet")
    runs = pd.read_parquet(folder / "extrapolation.parquet", columns=["run_id", "encoder", "task"])
    rows = positions.merge(runs.drop_duplicates("run_id"), on="run_id")
    rows = rows[(rows["encoder"] == "learned") & (rows["eval_length"] == high) & (rows["scaling"] == "none")]
    rows = rows.assign(
        rows=(rows["position"] >= high * 3 // 4).map({False: f"< {high * 3 // 4}", True: f">= {high * 3 // 4}"})
    )
    out = rows.groupby(["task", "rows"])[["correct", "total"]].sum().reset_index()
    return out.assign(accuracy=(out["correct"] / out["total"]).round(4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="copy,reverse")
    parser.add_argument("--low", type=int, default=9, help="shortest training length")
    parser.add_argument("--high", type=int, default=32, help="longest training length L")
    parser.add_argument("--lengths", default="9,16,24,32,36,40,48,56,64,128", help="lengths to describe")
    parser.add_argument("--out", type=Path, default=None, help="also write this Markdown file")
    parser.add_argument(
        "--positions",
        type=Path,
        default=None,
        help="a comparison folder: the learned table's accuracy by position at L",
    )
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    frames = [table(name, args.low, args.high, lengths) for name in args.tasks.split(",")]
    result = pd.concat(frames, ignore_index=True)
    text = (
        f"Training lengths drawn per sequence from [{args.low}, {args.high}]; measured by "
        f"`python scripts/length_statistics.py --low {args.low} --high {args.high}`.\n\n"
        + result.to_markdown(index=False)
        + "\n"
    )
    if args.positions is not None:
        text += (
            f"\nThe learned position table at L = {args.high}, answer-token accuracy by position ({args.positions}"
            "/positions.parquet, every seed and sequence pooled):\n\n"
            + learned_rows(args.positions, args.high).to_markdown(index=False)
            + "\n"
        )
    print(text)
    if args.out is not None:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
