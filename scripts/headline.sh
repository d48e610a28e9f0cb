#!/usr/bin/env bash
# The headline comparison in results/headline/: every encoder x copy, reverse and retrieval (MQAR) x 3 seeds
# (conf/experiment/headline.yaml: copy and reverse, 3 layers; headline_retrieval.yaml: MQAR, 2 layers, with CoPE,
# PoPE and FoX, and Zoology's BaseConv gated convolution in place of attention), evaluated at
# 1x, 2x, 4x ... 8192 tokens, aggregated into tables (training.*, comparison.*, choices.*), figures (*.png, *.svg)
# and report.md. Protocol:
#   1. every configuration trains at lr 3e-3 until held-out exact match reaches 0.99 (at most 8000 steps);
#   2. a configuration where any seed missed that: all its seeds again at lr 1e-3 (a two-value lr grid, searched
#      only where the first value fails: scripts/retry_not_learned.py);
#   3. `posenc compare --choose train.lr` compares, per configuration, the lr whose seeds learned best at the
#      training length (most seeds, then fewest steps; posenc/analysis/selection.py) - nothing past 1x is looked at.
# Configurations that did not learn are evaluated at their training length only; the rest at every length to 8192
# (64 sequences there: most of the evaluation's time on a CPU). RoPE scaling methods are compared in
# scripts/rope_scaling.sh and lm.sh.
#
#   bash scripts/headline.sh                    # as committed
#   bash scripts/headline.sh seed=0             # extra Hydra overrides go to every sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
python=${PYTHON:-$(dirname "$posenc")/python}
sweep=results/multirun/headline
out=results/headline
lr=0.003       # conf/experiment/headline.yaml's train.lr
fallback=0.001

train() {  # two single-thread jobs at a time: faster than one two-thread job for this model on 2 cores
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m "hydra.sweep.dir=$sweep" \
    hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
}
experiment_of() {  # the experiment file that trains a task
  if [ "$1" = task=retrieval ]; then echo headline_retrieval; else echo headline; fi
}

start=$(date +%s)
train experiment=headline_retrieval "$@"
train experiment=headline_retrieval encoder=cope,pope,fox "$@"  # the 2026 encoders (copy: scripts/zoo.sh)
# Zoology's gated convolution beside attention (the zoology2023_retrieval_mixers claim): NoPE with BaseConv mixers
train experiment=headline_retrieval encoder=nope model.mixer=base_conv "$@"
train experiment=headline "$@"
retries=$("$python" scripts/retry_not_learned.py "$sweep" --lr "$lr")
while read -r task encoders mixer; do  # mixer: model.mixer=... on a mixer's own line, else empty
  [ -n "$task" ] && train "experiment=$(experiment_of "$task")" "$task" "$encoders" ${mixer:+"$mixer"} seed=0,1,2 \
    "train.lr=$fallback" "$@"
done <<< "$retries"
trained=$(date +%s)
"$posenc" runs --runs "$sweep" --out "$out"
"$posenc" compare --runs "$sweep" --out "$out" --lengths 32,64,128,256,512,1024,2048,4096,8192 --choose train.lr  # as recorded (doubling)
echo "headline: training $((trained - start)) s, runs + compare $(($(date +%s) - trained)) s" >&2
