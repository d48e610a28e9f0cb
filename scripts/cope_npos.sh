#!/usr/bin/env bash
# Does CoPE's count clamp at n_pos = L explain its exact match of 0.000 past L on copy (issue 39, item 5)?
# CoPE adds q_i . e(p_ij) with p_ij = the sum of the gates sigmoid(q_i . k_j) from key j to query i, clamped to
# n_pos - 1 (posenc/functional/data_dependent.py: cope_bias, cope_attention, _add_cope_bias_); conf/encoder/cope.yaml
# leaves n_pos null = the training length, 32 here. The contrast: copy in exactly the committed
# length_generalization configuration (experiment=length_generalization task=copy encoder=cope: lengths 9..32,
# 3 layers, d_model 64, lr 3e-3, stop at held-out exact match >= 0.99, at most 10000 steps, fp32), seeds 0, 1, 2,
#   control    encoder.n_pos as committed (null: 32, counts clamped at 31)
#   treatment  encoder.n_pos=129 (a count at evaluation length N is a sum of at most N gates, each <= 1, so at
#              most N; 129 - 1 = 128 >= every count at every evaluated length: nothing is clamped)
# evaluated at the committed experiment's lengths up to 4L: 8, 16, 24, 32, 36, 40, ..., 64, 128.
# The committed runs' folders (results/multirun/length_generalization_rest) are not on this machine, so the control
# is trained again here, beside the treatment, the same way.
#
#   bash scripts/cope_npos.sh              # trains (resumably), evaluates, writes results/cope_npos/
#   UNTIL=01:30 bash scripts/cope_npos.sh  # starts no training run after 01:30 UTC (same day); tabulates the rest
# Then scripts/cope_npos_counts.py reads the finished runs' attention: the mass on keys whose count the control
# clamps (counts.md), and the same weights evaluated with the clamp moved, no retraining (swap.md).
#
# Runs: results/multirun/cope_npos/copy/cope/seed<S>/ (control) and .../seed<S>/encoder.n_pos=129/ (treatment),
# git-ignored. One single-thread job at a time, seed by seed, control then treatment (balanced at every point).
# Running it again skips finished runs, resumes a killed one from its checkpoint and evaluates nothing already
# evaluated.
# Timing (one thread of a shared 2-core CPU, 2026-11-28): 7-12 ms per step with the machine's load; the six runs
# learned in 3000-7800 steps, 210-877 s each, 62 min in all (a run that used its whole 10000-step budget: about
# 20 min); then about 2 min for the tables, evaluation and cope_npos_counts.py.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=${POSENC:-$(command -v posenc || echo .venv/bin/posenc)}
python=${PYTHON:-$(dirname "$posenc")/python}  # the interpreter posenc is installed in
sweep=results/multirun/cope_npos
out=results/cope_npos
npos=129  # longest evaluated length (128 = 4L) + 1: tests/test_cope_npos_experiment.py checks it covers them
lengths=8,16,24,32,36,40,44,48,52,56,60,64,128
export OMP_NUM_THREADS=1  # one core: the machine is shared
finished() {  # whether the run for seed $1 with extra overrides $2 has written its metrics.json
  local dir=$sweep/copy/cope/seed$1
  [ -n "$2" ] && dir=$dir/$2
  [ -f "$dir/metrics.json" ]
}
for seed in 0 1 2; do
  for arm in "" "encoder.n_pos=$npos"; do  # "": the control, as committed
    if finished "$seed" "$arm"; then continue; fi
    if [ -n "${UNTIL:-}" ] && [ "$(date -u +%H:%M)" \> "$UNTIL" ]; then
      echo "cope_npos: past $UNTIL UTC, not starting seed $seed ${arm:-control}" >&2
      continue
    fi
    start=$(date +%s)
    "$posenc" train -m experiment=length_generalization task=copy encoder=cope "seed=$seed" ${arm:+"$arm"} \
      "hydra.sweep.dir=$sweep" hydra/launcher=basic progress=false ||
      echo "cope_npos: seed $seed ${arm:-control} failed" >&2
    echo "cope_npos: seed $seed ${arm:-control}: training $(($(date +%s) - start)) s" >&2
  done
done
"$posenc" runs --runs "$sweep" --out "$out"
"$posenc" compare --runs "$sweep" --out "$out" --lengths "$lengths"
"$python" scripts/cope_npos_counts.py --runs "$sweep" --out "$out"
