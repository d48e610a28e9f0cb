#!/usr/bin/env bash
# What attention sees by relative distance, in results/kernels/: every encoder's fixed kernel (RoPE and its
# NTK/YaRN-scaled variants, xPos, partial RoPE, ALiBi, sinusoidal, randomized) plus the learned kernels
# (T5 buckets, KERPLE, FIRE, the learned table) read from the lm runs that scripts/lm.sh trains.
#
#   bash scripts/kernels.sh            # after bash scripts/lm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
runs=()
for encoder in learned t5 kerple fire; do runs+=(--runs "results/multirun/lm/lm/$encoder/seed0"); done
"$posenc" kernels "${runs[@]}" --max-distance 1024 --rope-scaling none,ntk,yarn --factor 4 --out results/kernels
