"""Where CoPE's copy runs look, in counts, and what the clamp does to the same weights (scripts/cope_npos.sh).

For every finished run of results/multirun/cope_npos (control: n_pos = L = 32; treatment: n_pos = 129), on the
first evaluation sequences at each length (posenc.running.evaluate.evaluation_batches, the stream `posenc compare`
scores; drawn here in other batch sizes):

1. counts.md: per layer, over the answer queries and heads, the attention mass on keys whose count p_ij exceeds
   L - 1 = 31 (the control clamps those counts; the treatment's embeddings past 32 are never trained), the
   attention-weighted mean count, the count at the key the answer copies, and which embedding columns training
   moved from their zero init.
2. swap.md: the same weights evaluated with the clamp moved, no retraining: the control's table padded with zero
   columns to 129 (no clamp; counts past 32 read zero embeddings, as the treatment's untrained columns are) and the
   treatment's cut to its first 32 columns (clamped at 31, as the control). Paired by checkpoint, so a change is
   the clamp's alone.

    python scripts/cope_npos_counts.py [--runs results/multirun/cope_npos] [--out results/cope_npos]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from posenc import functional as pf
from posenc.encoders.data_dependent import _CoPELayer
from posenc.running.evaluate import evaluate, evaluation_batches
from posenc.running.runs import load_run

LENGTHS = (32, 36, 40, 48, 64, 128)
SEQUENCES = 256  # per length for swap.md; counts.md reads the first 64


def runs(root: Path) -> list[tuple[str, int, Path]]:
    found = []
    for metrics in sorted(root.glob("copy/cope/seed*/**/metrics.json")):
        run = metrics.parent
        seed = int(next(p for p in run.relative_to(root).parts if p.startswith("seed"))[4:])
        found.append(("treatment" if "n_pos" in run.name else "control", seed, run))
    return found


def layers(model) -> list[_CoPELayer]:
    return [m for m in model.modules() if isinstance(m, _CoPELayer)]


@torch.no_grad()
def count_rows(model, task, length: int, train_length: int) -> list[dict]:
    captured: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = _CoPELayer.data_bias

    def spy(self, x, q, k):
        captured.append((q, k))
        return original(self, x, q, k)

    batch = next(evaluation_batches(task, length, 64, batch_tokens=64 * length))
    _CoPELayer.data_bias = spy
    try:
        model(batch.inputs)
    finally:
        _CoPELayer.data_bias = original
    n = task.symbols_at(length)  # the source of the answer read at query t is key t - n
    t = batch.mask[0].nonzero().flatten()
    assert batch.mask.all(0).eq(batch.mask.any(0)).all() and bool((batch.inputs[:, t - n] == batch.targets[:, t]).all())
    rows = []
    for index, ((q, k), layer) in enumerate(zip(captured, layers(model), strict=True)):
        s = q.shape[-2]
        logits = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        logits = logits.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        counts = pf.cope_positions(logits)  # [b, h, s, s], unclamped
        attn = (logits + pf.cope_bias(q, layer.pos_emb, counts)).softmax(-1)
        attn, counts = attn[:, :, t], counts[:, :, t]  # the answer queries: [b, h, answers, s]
        far = (attn * (counts > train_length - 1)).sum(-1)  # [b, h, answers]
        mean = (attn * counts).sum(-1)
        source = (t - n)[None, None, :, None].expand(*attn.shape[:3], 1)
        source_count = counts.gather(-1, source)[..., 0]
        for head in range(q.shape[1]):
            rows.append(
                {
                    "layer": index,
                    "head": head,
                    "mass_past_L_1": float(far[:, head].mean()),
                    "mean_count": float(mean[:, head].mean()),
                    "source_count": float(source_count[:, head].mean()),
                    "source_count_max": float(source_count[:, head].max()),
                }
            )
    return rows


def resize(model, columns: int) -> None:
    """Every layer's table to ``columns`` columns: cut, or padded with zero columns."""
    for layer in layers(model):
        emb = layer.pos_emb.data
        if columns <= emb.shape[-1]:
            layer.pos_emb = torch.nn.Parameter(emb[:, :columns].clone())
        else:
            layer.pos_emb = torch.nn.Parameter(
                torch.cat([emb, emb.new_zeros(emb.shape[0], columns - emb.shape[-1])], -1)
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("results/multirun/cope_npos"))
    parser.add_argument("--out", type=Path, default=Path("results/cope_npos"))
    args = parser.parse_args()
    torch.manual_seed(0)
    count_table, swap_table, columns = [], [], []
    for arm, seed, run in runs(args.runs):
        cfg, task, model = load_run(run)
        train_length = cfg.task.length
        for i, layer in enumerate(layers(model)):
            norms = layer.pos_emb.norm(dim=0)
            trained = [int(c) for c in torch.nonzero(norms > 0).flatten()]
            columns.append({"arm": arm, "seed": seed, "layer": i, "n_pos": norms.numel(), "last_nonzero": max(trained)})
        for length in LENGTHS:
            for row in count_rows(model, task, length, train_length):
                count_table.append({"arm": arm, "seed": seed, "length": length, **row})
        n_pos = layers(model)[0].pos_emb.shape[-1]
        for label, width in (("as trained", n_pos), ("swapped", 129 if arm == "control" else train_length)):
            resize(model, width)
            for length in LENGTHS:
                scores = evaluate(model, task, length, SEQUENCES)
                swap_table.append(
                    {
                        "arm": arm,
                        "seed": seed,
                        "eval": f"{label}: n_pos {width}",
                        "length": length,
                        "exact_match": scores["exact_match"],
                        "token_accuracy": scores["token_accuracy"],
                    }
                )
        print(f"{arm} seed {seed}: done", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = pd.DataFrame(count_table)
    layer_means = counts.groupby(["arm", "seed", "layer", "length"], as_index=False)[["mass_past_L_1", "mean_count"]]
    layer_means = layer_means.mean()
    source = counts.groupby(["arm", "seed", "layer", "length"]).agg(
        mean=("source_count", "mean"), top=("source_count_max", "max")
    )
    source = (source["mean"].round(1).astype(str) + " [" + source["top"].round(1).astype(str) + "]").unstack("length")
    wide = layer_means.pivot_table(index=["arm", "seed", "layer"], columns="length", values="mass_past_L_1")
    mean = layer_means.pivot_table(index=["arm", "seed", "layer"], columns="length", values="mean_count")
    text = [
        "# CoPE's counts on copy (scripts/cope_npos_counts.py)\n",
        f"First 64 evaluation sequences per length; answer queries. L = {train_length}.\n",
        "## Attention mass on keys with count > L - 1 (clamped in the control), mean over heads\n",
        wide.round(3).to_markdown(),
        "\n## Attention-weighted mean count, mean over heads\n",
        mean.round(1).to_markdown(),
        "\n## Count at the answer's source key, mean over heads and answers (largest over both in brackets)\n",
        "The source of the answer read at query t is key t - n (n symbols: 15 at L); its count is the sum of the",
        "gates from it to the query, n + 1 with every gate open. In training n is at most 15.\n",
        source.to_markdown(),
        "\n## Trained embedding columns (the last non-zero one; the rest are exactly zero)\n",
        pd.DataFrame(columns).sort_values(["arm", "seed", "layer"]).to_markdown(index=False),
        "",
    ]
    (args.out / "counts.md").write_text("\n".join(text))
    swap = pd.DataFrame(swap_table)
    text = ["# The clamp moved on the same weights (scripts/cope_npos_counts.py)\n"]
    text.append(
        f"{SEQUENCES} evaluation sequences per length (posenc.running.evaluate's stream, as `posenc compare`).\n"
    )
    for metric in ("exact_match", "token_accuracy"):
        table = swap.pivot_table(index=["arm", "seed", "eval"], columns="length", values=metric)
        text += [f"## {metric.replace('_', ' ')}\n", table.round(3).to_markdown(), ""]
    (args.out / "swap.md").write_text("\n".join(text))
    print(f"wrote {args.out / 'counts.md'} and {args.out / 'swap.md'}")


if __name__ == "__main__":
    main()
