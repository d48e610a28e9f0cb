"""``report.md``: the comparison's tables and figures, and how they stand against published findings."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from posenc.compare import pivot


def _value(comparison: pd.DataFrame, task: str, encoder: str, factor: int, metric: str) -> float:
    """``metric``'s mean for (task, encoder) at ``factor`` x its training length; NaN if not evaluated."""
    rows = comparison[(comparison["task"] == task) & (comparison["encoder"] == encoder)]
    rows = rows[rows["eval_length"] == rows["train_length"] * factor]
    return float(rows[f"{metric}_mean"].iloc[0]) if len(rows) else math.nan


def literature_checks(comparison: pd.DataFrame, task: str = "copy") -> list[str]:
    """Published qualitative findings on length extrapolation, each checked against this comparison.

    Every line gives the numbers it rests on and says plainly whether ours agree; a finding whose encoders
    or lengths were not evaluated is left out.
    """
    def v(encoder: str, factor: int, metric: str = "exact_match") -> float:
        return _value(comparison, task, encoder, factor, metric)

    lines = []
    absolute = {e: (v(e, 1), v(e, 2)) for e in ("sinusoidal", "learned")}
    if any(not math.isnan(a) for a, _ in absolute.values()):
        parts, agrees = [], True
        for encoder, (inside, twice) in absolute.items():
            if math.isnan(inside):
                continue
            if math.isnan(twice):
                parts.append(f"{encoder} has no value at 2× (no positions past its table)")
            else:
                parts.append(f"{encoder} {inside:.2f} at 1× → {twice:.2f} at 2×")
                agrees &= twice <= max(0.05, 0.5 * inside)
        learned_in = [a for a, _ in absolute.values() if not math.isnan(a)]
        weak = max(learned_in) < 0.5
        verdict = "**agrees**" if agrees else "**differs**"
        caveat = (" Caveat: here the absolute encodings do not learn the task well even at the training "
                  "length, so their collapse says less than in the paper." if weak else "")
        lines.append(f"Kazemnejad et al. 2023 (absolute encodings collapse past the training length on "
                     f"{task}): {verdict} — exact match {'; '.join(parts)}.{caveat}")
    def untestable(name: str, encoders: tuple[str, ...]) -> str | None:
        """Why a finding about ``encoders`` cannot be checked: one of them did not learn the task."""
        weak = [f"{e} {v(e, 1):.2f}" for e in encoders if not v(e, 1) >= 0.5]
        if weak:
            return (f"{name}: **not testable here** — exact match at the training length is only "
                    f"{', '.join(weak)}, so there is nothing to extrapolate.")
        return None

    alibi, rope = (v("alibi", 4, "token_accuracy"), v("rope", 4, "token_accuracy"))
    alibi1, alibi2 = v("alibi", 1), v("alibi", 2)
    press = "Press et al. 2022 (ALiBi degrades gracefully past the training length, RoPE does not)"
    if not (math.isnan(alibi) or math.isnan(rope)) and untestable(press, ("alibi", "rope")):
        lines.append(untestable(press, ("alibi", "rope")))
    elif not (math.isnan(alibi) or math.isnan(rope)):
        agrees = alibi > rope and alibi2 >= 0.5 * alibi1
        lines.append(f"{press}: {'**agrees**' if agrees else '**differs**'} — ALiBi exact match {alibi1:.2f} at 1×, "
                     f"{alibi2:.2f} at 2×; token accuracy at 4×: ALiBi {alibi:.2f}, RoPE {rope:.2f}.")
    rope1, rope2 = v("rope", 1), v("rope", 2)
    fails = "Press et al. 2022, Kazemnejad et al. 2023 (RoPE fails beyond its training length)"
    if not (math.isnan(rope1) or math.isnan(rope2)) and untestable(fails, ("rope",)):
        lines.append(untestable(fails, ("rope",)))
    elif not (math.isnan(rope1) or math.isnan(rope2)):
        agrees = rope2 <= 0.5 * rope1
        lines.append(f"{fails}: {'**agrees**' if agrees else '**differs**'} — RoPE exact match {rope1:.2f} at 1×, "
                     f"{rope2:.2f} at 2×.")
    ntk, plain = v("rope_ntk", 2, "token_accuracy"), v("rope", 2, "token_accuracy")
    if not (math.isnan(ntk) or math.isnan(plain)):
        lines.append(f"NTK-aware scaling (bloc97 2023; Peng et al. 2023) extends RoPE without training: "
                     f"{'**agrees**' if ntk > plain else '**differs**'} — token accuracy at 2×: rope_ntk "
                     f"{ntk:.2f}, rope {plain:.2f} (exact match {v('rope_ntk', 2):.2f} vs {v('rope', 2):.2f}).")
    xpos, plain2 = v("xpos", 2, "token_accuracy"), v("rope", 2, "token_accuracy")
    if not (math.isnan(xpos) or math.isnan(plain2)):
        agrees = xpos > plain2 + 0.02
        lines.append(f"Sun et al. 2023 (xPos extrapolates better than RoPE; the paper pairs it with blockwise "
                     f"causal attention, which posenc does not use): {'**agrees**' if agrees else '**differs**'}"
                     f" — token accuracy at 2×: xpos {xpos:.2f}, rope {plain2:.2f}.")
    return lines


def write_report(
    comparison: pd.DataFrame, figures: dict[tuple[str, str], Path], out_dir: Path, command: str,
    runs: int, skipped: list[str],
) -> str:
    """The Markdown text of ``report.md`` (figures linked relative to ``out_dir``)."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    seeds = sorted({s for cell in comparison["seeds"] for s in str(cell).split(",") if s})
    parts = [
        "# posenc comparison\n",
        f"Generated by `{command}` on {when} from {runs} runs (seeds {', '.join(seeds)}). Cells are the mean "
        "over seeds ± the half-width of a 95% Student-t confidence interval; '—' means not evaluated or not "
        "representable (a learned table has no rows past its training length). Full numbers: "
        "`comparison.csv` / `.parquet` / `.md`; one row per run and length: `extrapolation.*`.\n",
    ]
    for task in sorted(comparison["task"].unique()):
        parts.append(f"## {task}\n")
        for metric in ("exact_match", "token_accuracy"):
            table = pivot(comparison, metric, task).drop(columns="task")
            parts.append(f"**{metric.replace('_', ' ')}** by evaluation length\n\n"
                         + table.to_markdown(index=False, disable_numparse=True) + "\n")
        for metric in ("exact_match", "token_accuracy", "loss"):
            if (task, metric) in figures:
                name = figures[(task, metric)].name
                parts.append(f"![{task}: {metric.replace('_', ' ')}]({name})\n")
    checks = literature_checks(comparison)
    if checks:
        parts.append("## Against the literature (copy)\n")
        parts.append("\n".join(f"- {line}" for line in checks) + "\n")
    if skipped:
        parts.append("## Skipped runs\n")
        parts.append("\n".join(f"- {line}" for line in skipped) + "\n")
    return "\n".join(parts)
