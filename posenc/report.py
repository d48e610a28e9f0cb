"""``report.md``: the comparison's tables and figures, and how they stand against published findings."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from posenc.compare import pivot, report_metrics
from posenc.extrapolate import NO_SCALING


def _value(
    comparison: pd.DataFrame, task: str, encoder: str, factor: int, metric: str, scaling: str = NO_SCALING
) -> float:
    """``metric``'s mean for (task, encoder) as trained (or under a RoPE ``scaling``) at ``factor`` x its
    training length, over all depths; NaN if not evaluated."""
    rows = comparison[(comparison["task"] == task) & (comparison["encoder"] == encoder)
                      & (comparison["scaling"] == scaling) & comparison["depth"].isna()]
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
        kazemnejad = (f"Kazemnejad et al. 2023 (absolute encodings collapse past the training length on "
                      f"{task})")
        if max(learned_in) < 0.5:  # nothing learned, nothing to collapse: the finding cannot be checked
            lines.append(f"{kazemnejad}: **not testable here** — the absolute encodings do not learn the task "
                         f"even at the training length (exact match {'; '.join(parts)}).")
        else:
            lines.append(f"{kazemnejad}: {'**agrees**' if agrees else '**differs**'} — exact match "
                         f"{'; '.join(parts)}.")
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
    line = scaling_check(comparison, task, "token_accuracy", 2)
    if line:
        lines.append(line)
    return lines


SCALINGS_CHECKED = (NO_SCALING, "linear", "ntk", "dynamic_ntk", "yarn", "llama3")


def scaling_check(comparison: pd.DataFrame, task: str, metric: str, factor: int) -> str | None:
    """Peng et al. 2023 (YaRN, §2-3; bloc97 2023): without fine-tuning, NTK-aware scaling and YaRN extend a
    RoPE model past its training length, while linear position interpolation needs fine-tuning to work
    (Chen et al. 2023 fine-tune after interpolating). Checked on the ``rope`` runs at ``factor`` x the
    training length: agrees when the better of ntk and yarn beats both the model as trained and linear
    interpolation on ``metric`` (perplexity: lower is better). None when those rows are missing."""
    values = {m: _value(comparison, task, "rope", factor, metric, m) for m in SCALINGS_CHECKED}
    values = {m: x for m, x in values.items() if not math.isnan(x)}
    if not {NO_SCALING, "linear"} <= set(values) or not {"ntk", "yarn"} & set(values):
        return None
    sign = -1 if metric in ("perplexity", "loss") else 1  # compare as "higher is better"
    best = max((m for m in ("ntk", "yarn") if m in values), key=lambda m: sign * values[m])
    agrees = sign * values[best] > sign * values[NO_SCALING] and sign * values[best] > sign * values["linear"]
    numbers = ", ".join(f"{'as trained' if m == NO_SCALING else m} {x:.2f}" for m, x in values.items())
    return (f"Peng et al. 2023 (without fine-tuning, NTK-aware scaling and YaRN extend a RoPE model past its "
            f"training length; linear interpolation needs fine-tuning, Chen et al. 2023): "
            f"{'**agrees**' if agrees else '**differs**'} — {metric.replace('_', ' ')} of the rope runs on "
            f"{task} at {factor}×: {numbers}.")


def perplexity_checks(comparison: pd.DataFrame, task: str = "lm") -> list[str]:
    """Perplexity past the training length (Press et al. 2022's measurement): ALiBi vs sinusoidal and RoPE,
    and the RoPE extension methods against the rope run as trained. A finding without its runs is left out."""
    def ppl(encoder: str, factor: int) -> float:
        return _value(comparison, task, encoder, factor, "perplexity")

    lines = []
    have = {e: (ppl(e, 1), ppl(e, 4)) for e in ("alibi", "sinusoidal", "rope")}
    have = {e: x for e, x in have.items() if not any(math.isnan(v) for v in x)}
    if "alibi" in have and len(have) >= 2:
        rise = {e: b / a for e, (a, b) in have.items()}
        agrees = all(rise["alibi"] < rise[e] for e in have if e != "alibi") and rise["alibi"] < 1.1
        numbers = "; ".join(f"{e} {a:.2f} → {b:.2f}" for e, (a, b) in have.items())
        lines.append(f"Press et al. 2022 (ALiBi's perplexity stays flat past the training length, sinusoidal "
                     f"and RoPE rise): {'**agrees**' if agrees else '**differs**'} — perplexity per byte at "
                     f"1× → 4×: {numbers}.")
    line = scaling_check(comparison, task, "perplexity", 4)
    if line:
        lines.append(line)
    return lines


def write_report(
    comparison: pd.DataFrame, figures: dict[tuple, Path], out_dir: Path, command: str,
    runs: int, skipped: list[str], data: dict[str, list[str]] | None = None,
) -> str:
    """The Markdown text of ``report.md`` (figures linked relative to ``out_dir``); ``data``: per task, the
    lines naming the data it read (see :func:`posenc.compare.data_descriptions`)."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    seeds = sorted({s for cell in comparison["seeds"] for s in str(cell).split(",") if s})
    parts = [
        "# posenc comparison\n",
        f"Generated by `{command}` on {when} from {runs} runs (seeds {', '.join(seeds)}). Cells are the mean "
        "over seeds ± the half-width of a 95% Student-t confidence interval; '—' means not evaluated or not "
        "representable (a learned table has no rows past its training length). Full numbers: "
        "`comparison.csv` / `.parquet` / `.md`; one row per run and length: `extrapolation.*`.\n",
    ]
    trained = comparison[comparison["scaling"] == NO_SCALING]
    scaled_encoders = set(comparison.loc[comparison["scaling"] != NO_SCALING, "encoder"])
    scaled = comparison[comparison["encoder"].isin(scaled_encoders)]
    for task in sorted(comparison["task"].unique()):
        parts.append(f"## {task}\n")
        parts += [f"Data: {line}\n" for line in (data or {}).get(task, [])]
        metrics = report_metrics(task)
        for metric in metrics[:2]:
            table = pivot(trained, metric, task).drop(columns="task")
            parts.append(f"**{metric.replace('_', ' ')}** by evaluation length\n\n"
                         + table.to_markdown(index=False, disable_numparse=True) + "\n")
        parts += [f"![{task}: {m.replace('_', ' ')}]({figures[(task, m)].name})\n"
                  for m in metrics if (task, m) in figures]
        parts += [f"![{task}: {m.replace('_', ' ')} by depth]({figures[(task, m, 'depth')].name})\n"
                  for m in metrics if (task, m, "depth") in figures]
        if task in set(scaled["task"]):
            depths = scaled[(scaled["task"] == task) & scaled["depth"].notna()]
            parts.append(f"### {task}: RoPE context extension at evaluation\n\n"
                         "The same rotary checkpoints evaluated under each `--rope-scaling` method, no "
                         "retraining; the factor follows the evaluation length (s = L'/L) unless a label "
                         "says `:<factor>` (so `dynamic_ntk`, Hugging Face's formula with factor 1, equals "
                         "`ntk` here; they differ only with a fixed `--rope-factor`)." + (" Scores over all depths; by depth in the figure above."
                                                if len(depths) else "") + "\n")
            for metric in metrics[:2]:
                view = scaled[(scaled["task"] == task) & scaled["depth"].isna()]
                table = pivot(view, metric, task).drop(columns="task")
                parts.append(f"**{metric.replace('_', ' ')}** by evaluation length\n\n"
                             + table.to_markdown(index=False, disable_numparse=True) + "\n")
            parts += [f"![{task}: {m.replace('_', ' ')} under RoPE scaling]"
                      f"({figures[(task, m, 'rope_scaling')].name})\n"
                      for m in metrics if (task, m, "rope_scaling") in figures]
    checks = literature_checks(comparison) + perplexity_checks(comparison)
    for task in sorted(set(comparison["task"]) - {"copy", "lm"}):  # those two: in the checks above
        line = scaling_check(comparison, task, report_metrics(task)[0], 2)
        checks += [line] if line else []
    if checks:
        parts.append("## Against the literature\n")
        parts.append("\n".join(f"- {line}" for line in checks) + "\n")
    if skipped:
        parts.append("## Skipped runs\n")
        parts.append("\n".join(f"- {line}" for line in skipped) + "\n")
    return "\n".join(parts)
