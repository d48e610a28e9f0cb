#!/usr/bin/env bash
# RoPE context-extension methods compared on the same checkpoints, in results/rope_scaling/: RoPE trained on
# passkey at 128 tokens (conf/experiment/rope_scaling.yaml, 3 seeds; seeds that miss mastery at lr 3e-3 are
# trained again at 1e-3 and compare --choose train.lr keeps the lr whose seeds learned best), evaluated at
# 128 ... 2048 tokens as trained and under linear interpolation, NTK, dynamic NTK, YaRN and Llama-3 scaling
# (by key depth too).
#
#   bash scripts/rope_scaling.sh                       # as committed
#   bash scripts/rope_scaling.sh hydra/launcher=basic  # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated. On this
# 2-core CPU training takes about 1 s per step (hours); the committed runs were trained on one H200
# (scripts/train_parallel.py, bf16 autocast, under 3 minutes) and evaluated here.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=$(command -v posenc || echo .venv/bin/posenc)
python=${PYTHON:-$(dirname "$posenc")/python}
sweep=results/multirun/rope_scaling
out=results/rope_scaling
train() {
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m experiment=rope_scaling "hydra.sweep.dir=$sweep" \
    hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
}
train "$@"
if [ -n "$("$python" scripts/retry_not_learned.py "$sweep" --lr 0.003)" ]; then
  train seed=0,1,2 train.lr=0.001 "$@"
fi
"$posenc" runs --runs "$sweep" --out "$out"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --runs "$sweep" --out "$out" \
  --lengths 128,256,512,1024,2048 --choose train.lr --rope-scaling none,linear,ntk,dynamic_ntk,yarn,llama3
