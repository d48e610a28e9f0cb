#!/usr/bin/env bash
# Perplexity vs length in results/lm/: every encoder as a byte-level language model on Python's standard
# library (conf/experiment/lm.yaml: 128 bytes, 5000 steps, 3 seeds), evaluated at 1x ... 8x on the same
# held-out text; rope's checkpoints also under every RoPE extension method (Peng et al.'s comparison); tables
# (comparison.*), figures (*.png, *.svg) and report.md.
#
#   bash scripts/lm.sh                          # as committed
#   bash scripts/lm.sh hydra/launcher=joblib    # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
# Training takes about an hour on a 2-core CPU (two single-thread jobs at a time, 3-4 minutes per run).
set -euo pipefail
cd "$(dirname "$0")/.."
lengths=128,256,512,1024
bash scripts/experiment.sh lm --lengths $lengths -- "$@"
posenc=$(command -v posenc || echo .venv/bin/posenc)
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --runs results/multirun/lm/lm/rope --out results/lm \
  --lengths $lengths --rope-scaling none,linear,ntk,dynamic_ntk,yarn,llama3 --extend
