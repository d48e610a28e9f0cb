#!/usr/bin/env bash
# Regenerates results/extrapolation.{md,csv,parquet} and results/training.{md,csv}: all seven encoders
# x copy and retrieval, seed 0, trained with the defaults (a sweep of 14 runs, ~30 minutes on a 2-core
# CPU), then evaluated from the training length (64) up to 8192 tokens.
#
#   bash scripts/default_comparison.sh                 # as committed
#   bash scripts/default_comparison.sh seed=1          # extra Hydra overrides go to the sweep
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
sweep=results/multirun/default-comparison

"$posenc" train -m encoder=nope,sinusoidal,learned,alibi,rope,rope_ntk,xpos task=copy,retrieval seed=0 \
    "hydra.sweep.dir=$sweep" "$@"
"$posenc" runs --runs "$sweep" --out results
"$posenc" extrapolate --runs "$sweep" --lengths 64,128,256,512,1024,2048,4096,8192 --out results
