#!/usr/bin/env bash
# Perplexity vs length in results/lm/: every encoder as a byte-level language model on Python's standard
# library (conf/experiment/lm.yaml), evaluated at 1x ... 32x its training length of 128 bytes, rotary runs
# also under every RoPE extension method; tables (comparison.*), figures (*.png, *.svg) and report.md.
#
#   bash scripts/lm.sh                          # as committed
#   bash scripts/lm.sh hydra/launcher=joblib    # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
sweep=results/multirun/lm
out=results/lm

start=$(date +%s)
"$posenc" train -m experiment=lm "hydra.sweep.dir=$sweep" "$@"
trained=$(date +%s)
"$posenc" runs --runs "$sweep" --out "$out"
"$posenc" compare --runs "$sweep" --out "$out" --lengths 128,256,512,1024,2048,4096 \
  --rope-scaling none,linear,ntk,dynamic_ntk,yarn,llama3
echo "sweep: $((trained - start)) s, runs + compare: $(($(date +%s) - trained)) s" >&2
