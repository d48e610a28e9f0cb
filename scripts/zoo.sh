#!/usr/bin/env bash
# The 2026 encoders on copy (conf/experiment/zoo.yaml): p-RoPE, CoPE, FoX, PoPE and a RoPE/NoPE schedule beside
# RoPE and NoPE, one seed each, trained as the headline trains (3 layers, 32 tokens, until held-out exact
# match reaches 0.99, at most 8000 steps), evaluated at 1x ... 8192 tokens into results/zoo/.
#
#   bash scripts/zoo.sh
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
sweep=results/multirun/zoo
train() {  # two single-thread jobs at a time
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m experiment=zoo "hydra.sweep.dir=$sweep" \
    hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
}
start=$(date +%s)
train
train encoder=schedule 'encoder.layers=[rope,rope,nope]'  # NoPE in the last of the 3 layers (iRoPE-style)
trained=$(date +%s)
"$posenc" runs --runs "$sweep" --out results/zoo
"$posenc" compare --runs "$sweep" --out results/zoo --lengths 32,64,128,256,512,1024,2048,4096,8192  # as recorded (doubling)
echo "zoo: training $((trained - start)) s, runs + compare $(($(date +%s) - trained)) s" >&2
