#!/usr/bin/env bash
# Ruoss et al. 2023 on reverse with the paper's own recipe, beside posenc's current one (issue 39, item 5), and
# an ungated comparison beside each gated verdict. Two arms, each randomized positions (encoder.max_position=2048)
# against sinusoidal on reverse, one training length per batch from [9, 32], seeds 0, 1, 2:
#   current  experiment=randomized_positions (as committed in results/randomized_positions: 3 layers, 4 heads,
#            lr 3e-3, batch 64), trained again here because its run folders are not kept and the ungated line
#            needs its not-learned runs evaluated past L;
#   paper    experiment=ruoss_recipe (conf/experiment/ruoss_recipe.yaml: 5 layers, 8 heads, lr 1e-3, batch 128,
#            from google-deepmind/randomized_positional_encodings experiments/example.py).
# 12 runs, seed by seed (both arms and both encoders of seed 0 first), each until held-out exact match >= 0.99
# or 15000 steps; evaluated at 8, 16, 24, 32, 36, ..., 64 (every L/8), 128, 256, 512 (the claim's windows end at
# 16x), not-learned runs too (--include-not-learned: the ungated line reads every seed).
#
#   bash scripts/ruoss_recipe.sh                  # trains (resumably), then tables and verdicts
#   SEEDS="0" bash scripts/ruoss_recipe.sh        # only these seeds (default: 0 1 2)
#   LIST=1 bash scripts/ruoss_recipe.sh > runs.txt  # only list the unfinished runs, in order, one line of
#                                               # overrides each: python scripts/train_parallel.py --from runs.txt
#                                               # trains them many at once on a GPU (then run this script to tabulate)
#   TABLES=0 bash scripts/ruoss_recipe.sh         # train only, no tables
#
# Runs: results/multirun/ruoss_recipe/{current,paper}/ (git-ignored; checkpoints every 250 steps). Tables,
# figures, report.md: results/ruoss_recipe/{current,paper}/; the Ruoss reverse verdict of each arm with its
# ungated sensitivity line (scripts/ungated_claims.py): results/ruoss_recipe/verdicts.md. Running it again skips
# finished runs, resumes a killed one from its checkpoint and evaluates nothing already evaluated.
# Environment: POSENC (the posenc command), PYTHON (its interpreter), RESULTS (the results root, default results).
# Cost (pilot, one thread of a shared 2-core CPU, 2026-11-28, checks included): current 5.5 s per 100 steps,
# paper 15 s; about 3.5 h for all 12 if they stop where the committed runs did (sinusoidal ~6200 steps,
# randomized its whole 15000), 5.2 h if every run uses its budget. GPU (H200, ~70 steps/s per run with 14 at
# once; ~40 steps/s for the 5-layer arm): all 12 at once, under 7 min including start-up.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/train_or_list.sh
source scripts/train_or_list.sh  # also posenc, python and results, from the environment
seeds=${SEEDS:-0 1 2}
lengths=8,16,24,32,36,40,44,48,52,56,60,64,128,256,512
export OMP_NUM_THREADS=1  # one core: the machine is shared; results are recorded at one thread
experiment_of() { case "$1" in current) echo randomized_positions ;; paper) echo ruoss_recipe ;; esac; }
overrides_of() {  # the encoder's overrides, and the sub-folder they name under seed<S>/ ("" for none)
  case "$1" in
    randomized) echo "encoder=randomized encoder.max_position=2048" ;;
    sinusoidal) echo "encoder=sinusoidal" ;;
  esac
}
subdir_of() { [ "$1" = randomized ] && echo encoder.max_position=2048 || echo ""; }
finished() {  # arm, seed, encoder: whether that run wrote its metrics.json
  local dir=$results/multirun/ruoss_recipe/$1/reverse/$3/seed$2 sub
  sub=$(subdir_of "$3")
  [ -f "$dir${sub:+/$sub}/metrics.json" ] || recorded "$dir${sub:+/$sub}"  # trained here, or elsewhere
}
tables() {
  local arm
  for arm in current paper; do
    local sweep=$results/multirun/ruoss_recipe/$arm out=$results/ruoss_recipe/$arm
    [ -n "$(find "$sweep" -name metrics.json 2>/dev/null | head -1)" ] || continue
    # --extend: the committed tables keep the runs trained on other machines (scripts/train_or_list.sh)
    "$posenc" runs --extend --runs "$sweep" --out "$out"
    # shellcheck disable=SC2046  # extend_of gives one word or none
    "$posenc" compare --runs "$sweep" --out "$out" $(extend_of "$out") --lengths "$lengths" --include-not-learned
  done
  local folders=()
  for arm in current paper; do
    [ -f "$results/ruoss_recipe/$arm/comparison.csv" ] && folders+=(--folder "$results/ruoss_recipe/$arm")
  done
  [ ${#folders[@]} -eq 0 ] || "$python" scripts/ungated_claims.py "${folders[@]}" --claim ruoss2023_reverse \
    --out "$results/ruoss_recipe/verdicts.md"
}
read_recorded "$results"/ruoss_recipe/{current,paper}
for seed in $seeds; do  # both arms and encoders of one seed, then the next: balanced at every point
  for arm in current paper; do
    for encoder in randomized sinusoidal; do
      if finished "$arm" "$seed" "$encoder"; then continue; fi
      experiment=$(experiment_of "$arm") sweep=$results/multirun/ruoss_recipe/$arm
      # shellcheck disable=SC2046  # the overrides split into words on purpose
      train_or_list ruoss_recipe "$arm $encoder seed $seed" "$experiment" "$sweep" \
        seed="$seed" task=reverse $(overrides_of "$encoder")
    done
  done
done
[ "${LIST:-0}" = 1 ] || [ "${TABLES:-1}" = 0 ] || tables
