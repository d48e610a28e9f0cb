#!/usr/bin/env bash
# Ruoss et al. 2023's claim under the paper's length draw (conf/experiment/randomized_positions.yaml): randomized
# positions (max_position 2048, the paper's) and their base encoding, sinusoidal, on copy and reverse, one training
# length per batch from [9, 32], until held-out exact match over that range reaches 0.99 (at most 15000 steps),
# 3 seeds; evaluated at 8, 16, 24, every 4 tokens from 32 to 64, then 128 ... 2048 (randomized positions have no
# position past max_position; the claim's windows end at 16x = 512).
# Output: results/randomized_positions/ (tables, figures, report.md with the Ruoss verdicts).
#
#   bash scripts/randomized_positions.sh
# Two single-thread jobs at a time. Running it again resumes an interrupted sweep and re-evaluates nothing that is
# already evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
sweep=results/multirun/randomized_positions
out=results/randomized_positions
train() {  # two single-thread jobs at a time: faster than one two-thread job for this model on 2 cores
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m experiment=randomized_positions \
    "hydra.sweep.dir=$sweep" hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
}
start=$(date +%s)
train encoder=randomized encoder.max_position=2048
train encoder=sinusoidal
trained=$(date +%s)
"$posenc" runs --runs "$sweep" --out "$out"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --runs "$sweep" --out "$out" --up-to 2048
echo "randomized_positions: training $((trained - start)) s, runs + compare $(($(date +%s) - trained)) s" >&2
