#!/usr/bin/env bash
# Perplexity vs length in results/lm/: every encoder as a byte-level language model on Python's standard
# library (conf/experiment/lm.yaml: 128 bytes, 5000 steps, 3 seeds; 5 for the
# encoders the literature checks compare), evaluated at 1x ... 8x on the same
# held-out text; rope's checkpoints also under every RoPE extension method (Peng et al.'s comparison); tables
# (comparison.*), figures (*.png, *.svg) and report.md.
#
#   bash scripts/lm.sh                          # as committed
#   bash scripts/lm.sh hydra/launcher=joblib    # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
# Training takes about 80 minutes on a 2-core CPU (41 runs, two single-thread jobs at a time, 3-4 minutes each).
set -euo pipefail
cd "$(dirname "$0")/.."
lengths=128,256,512,1024
posenc=$(command -v posenc || echo .venv/bin/posenc)
# Seeds 3 and 4 for the four encoders Press et al.'s and Peng et al.'s checks compare (alibi, t5, rope,
# sinusoidal), decided before any result of this sweep: with 3 seeds the seed term of an interval uses
# Student's t on 2 degrees of freedom (4.30, against 2.78 on 4), which decided the 512-byte verdicts (issue 28).
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m experiment=lm hydra.sweep.dir=results/multirun/lm \
  encoder=alibi,t5,rope,sinusoidal seed=3,4 hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
bash scripts/experiment.sh lm --lengths $lengths -- "$@"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --runs results/multirun/lm/lm/rope --out results/lm \
  --lengths $lengths --rope-scaling none,linear,ntk,dynamic_ntk,yarn,llama3 --extend
