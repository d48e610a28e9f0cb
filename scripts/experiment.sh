#!/usr/bin/env bash
# Train a recorded experiment (conf/experiment/NAME.yaml) as a sweep, then tabulate and compare it:
# results/multirun/NAME/ holds the runs, results/NAME/ the tables (training.*, comparison.*, extrapolation.*),
# figures (*.png, *.svg) and report.md.
#
#   bash scripts/experiment.sh NAME [COMPARE OPTIONS ...] [-- HYDRA OVERRIDES ...]
#   bash scripts/experiment.sh headline -- seed=0          # extra Hydra overrides go to the sweep
#
# COMPARE OPTIONS go to `posenc compare` (e.g. --lengths, --rope-scaling), HYDRA OVERRIDES to the sweep.
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ ! -f "conf/experiment/$1.yaml" ]; then
  echo "usage: bash scripts/experiment.sh NAME [COMPARE OPTIONS ...] [-- HYDRA OVERRIDES ...]" >&2
  echo "NAME: one of $(cd conf/experiment && ls *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
  exit 2
fi
name=$1
shift
compare=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do compare+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the "--"
posenc=$(command -v posenc || echo .venv/bin/posenc)
sweep=results/multirun/$name
out=results/$name

start=$(date +%s)
# Two single-thread jobs at a time (joblib): on a 2-core CPU they train these small models faster than one
# job with two threads. Later overrides win, e.g. `-- hydra/launcher=basic` or `hydra.launcher.n_jobs=4`.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m "experiment=$name" "hydra.sweep.dir=$sweep" \
  hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
trained=$(date +%s)
"$posenc" runs --runs "$sweep" --out "$out"
"$posenc" compare --runs "$sweep" --out "$out" ${compare[@]+"${compare[@]}"}  # empty-safe on bash 3
echo "$name: sweep $((trained - start)) s, runs + compare $(($(date +%s) - trained)) s" >&2
