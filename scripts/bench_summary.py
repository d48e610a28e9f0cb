"""docs/performance.md's speed table from the tables of one bench run (scripts/bench.py): ratios to rope.

    python scripts/bench_summary.py                    # results/bench, forward at 8192 and 32768
    python scripts/bench_summary.py results/bench --lengths 2048,8192 --growth 512,8192

Prints Markdown. Rope's row gives its own figures (tokens/s, seconds, MiB), the other rows ratios to them;
"vs SDPA" is the ratio to the same model with plain fused causal SDPA (nope). The "Speed and memory"
table of docs/performance.md is this output for the committed results/bench (tests/test_bench_script.py
checks that it still is).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

LLAMA = "llama (HF transformers, sdpa)"


def _ratio(value: float) -> str:
    return f"{value:.2f}×"


def _range(row: pd.Series, column: str) -> str:
    """``median [low, high]`` of a ratio measured in several rounds."""
    return f"{_ratio(row[column])} [{row[f'{column}_low']:.2f}, {row[f'{column}_high']:.2f}]"


def summary(folder: Path, lengths: tuple[int, int] = (8192, 32768), growth: tuple[int, int] = (2048, 32768)) -> str:
    """The Markdown table (and the lines under it) for the bench tables in ``folder``.

    Raises ValueError (one line) when a table or a length it needs is missing.
    """
    missing = [name for name in ("training.csv", "forward.csv") if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{folder} has no {', '.join(missing)}: run scripts/bench.py with those sections")
    training = pd.read_csv(folder / "training.csv").set_index("model")
    forward = pd.read_csv(folder / "forward.csv").set_index(["encoder", "length"])
    have = set(forward.index.get_level_values("length"))
    if not set(lengths) | set(growth) <= have:
        wanted = sorted(set(lengths) | set(growth))
        raise ValueError(f"forward.csv has lengths {sorted(have)}, not all of {wanted}: pass --lengths, --growth")
    encoders = list(dict.fromkeys(forward.index.get_level_values("encoder")))
    small, large = growth

    def grows(name: str) -> float:
        return forward.loc[(name, large), "rise_mib"] - forward.loc[(name, small), "rise_mib"]

    head = ["encoder", "training vs rope, median [range] of rounds"]
    for n in lengths:
        head += [f"forward {n} vs rope", f"{n} vs SDPA", f"{n} first call"]
    head.append(f"memory growth {small} → {large} vs rope")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rope = training.loc["posenc rope"]
    for name in encoders:
        if name == "rope":
            cells = [f"rope (reference) | {rope['tokens_per_s'] / 1e3:.1f}k (MFU {rope['mfu']:.2f})"]
        else:
            cells = [
                f"{name} | "
                + (_range(training.loc[f"posenc {name}"], "vs_rope") if f"posenc {name}" in training.index else "")
            ]
        for n in lengths:
            row = forward.loc[(name, n)]
            time = f"{row['seconds']:.2f} s" if name == "rope" else _ratio(row["time_vs_rope"])
            cells += [time, _ratio(row["time_vs_sdpa"]), f"{row['first_s']:.2f} s"]
        change = grows(name)
        cells.append(f"{change:+.0f} MiB" if name == "rope" else _ratio(change / grows("rope")))
        lines.append("| " + " | ".join(cells) + " |")
    if LLAMA in training.index:
        llama = training.loc[LLAMA]
        lines.append(
            f"\nposenc rope trains {_range(rope, 'vs_llama')} as fast as a Hugging Face `LlamaForCausalLM`"
            f" of the same shape ({llama['tokens_per_s'] / 1e3:.1f}k tokens/s, MFU {llama['mfu']:.2f})."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=Path("results/bench"))
    parser.add_argument("--lengths", default="8192,32768", help="two forward lengths for the table")
    parser.add_argument("--growth", default="2048,32768", help="memory growth from one length to the other")
    args = parser.parse_args()
    try:
        lengths, growth = (tuple(int(x) for x in text.split(",")) for text in (args.lengths, args.growth))
        assert len(lengths) == 2 and len(growth) == 2
    except (ValueError, AssertionError):
        print(
            f"error: --lengths and --growth take two lengths each, like 8192,32768; got {args.lengths!r}, "
            f"{args.growth!r}",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        print(summary(args.folder, lengths, growth), end="")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
