#!/usr/bin/env bash
# Copy and reverse under Kazemnejad et al. 2023's protocol (conf/experiment/length_generalization.yaml): training
# lengths drawn per sequence from [9, 32], mastery (held-out exact match >= 0.99) judged over that range, at most
# 10000 steps at lr 3e-3, 3 seeds; evaluated at 8, 16, 24, then every 4 tokens from 32 to 64, then 128 ... 8192.
#   1. nope, t5, alibi, rope, sinusoidal, learned on copy and reverse (Kazemnejad's ordering);
#   2. kerple, fire, xpos and fox on copy;
#   3. randomized positions (Ruoss et al.'s max_position 2048) on both tasks at lr 3e-3 and 1e-3 (the headline's
#      lr grid; `--choose train.lr` compares the better one);
#   4. T5's bucket layout: the scaled max_distance (32 = L) against the paper's 128, into results/t5_buckets;
#   5. the rest of the registry (issue 23 item 2): kerple, fire, xpos and fox on reverse; rope_partial, p_rope,
#      cope and pope on copy and reverse, into their own sweep folder, added to the comparison with
#      `compare --extend` and evaluated up to 2048 (CoPE's and FoX's long-length forward is the slow part on CPU).
# Output: results/length_generalization/ and results/t5_buckets/ (tables, figures, report.md).
#
#   bash scripts/length_generalization.sh
# On CPU it trains two single-thread jobs at a time (many hours on 2 cores); the committed runs were trained on an
# NVIDIA H100 (fp32, many processes at once, the same configs) and evaluated on the CPU; step 5's on an NVIDIA
# H200 (scripts/train_parallel.py, 46 processes at once under CUDA MPS), evaluated on the CPU. Running it again resumes
# an interrupted sweep and re-evaluates nothing that is already evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
sweep=results/multirun/length_generalization
buckets=results/multirun/t5_buckets
rest=results/multirun/length_generalization_rest
train() {  # two single-thread jobs at a time: faster than one two-thread job for this model on 2 cores
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m experiment=length_generalization \
    hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
}
start=$(date +%s)
train "hydra.sweep.dir=$sweep"
train "hydra.sweep.dir=$sweep" task=copy encoder=kerple,fire,xpos,fox
train "hydra.sweep.dir=$sweep" encoder=randomized encoder.max_position=2048
train "hydra.sweep.dir=$sweep" encoder=randomized encoder.max_position=2048 train.lr=0.001
train "hydra.sweep.dir=$buckets" encoder=t5
train "hydra.sweep.dir=$buckets" encoder=t5 encoder.max_distance=128
train "hydra.sweep.dir=$rest" task=reverse encoder=kerple,fire,xpos,fox
train "hydra.sweep.dir=$rest" encoder=rope_partial,p_rope,cope,pope
trained=$(date +%s)
"$posenc" runs --runs "$sweep" --out results/length_generalization
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --runs "$sweep" --out results/length_generalization \
  --up-to 8192 --choose train.lr
"$posenc" runs --extend --runs "$rest" --out results/length_generalization
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --extend --runs "$rest" --out results/length_generalization \
  --up-to 2048
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --runs "$buckets" --out results/t5_buckets --up-to 512
echo "length_generalization: training $((trained - start)) s, runs + compare $(($(date +%s) - trained)) s" >&2
