#!/usr/bin/env bash
# Kazemnejad et al. 2023's copy and reverse in the paper's protocol (conf/experiment/kazemnejad_matched.yaml,
# issue 39): 100 symbols, 4-20 symbols in training, scored EOS; nope, t5, alibi, rope, sinusoidal; 15 seeds.
# Trains one single-thread job at a time, seed by seed (all five encoders on both tasks for seed 0, then seed 1,
# ...), and after each seed tabulates what is trained and evaluates it at the lengths the claim reads: 43 (the
# training length, 20 symbols), 44, 46, ..., 82 (21..40 symbols, the paper's test range) and 122, 162 (60, 80
# symbols). A partial run is a balanced design at every seed.
#
#   bash scripts/kazemnejad.sh                 # arm "mastery": each run stops at held-out exact match >= 0.99
#   ARM=schedule bash scripts/kazemnejad.sh    # arm "schedule": the same runs over the whole 10000-step schedule
#   SEEDS="0 1 2" bash scripts/kazemnejad.sh   # only these seeds (default: 0 .. 14)
#   COMMIT=1 bash scripts/kazemnejad.sh        # also commit results/kazemnejad/ARM after each seed (its files only)
#
# Runs: results/multirun/kazemnejad_matched[_schedule]/ (git-ignored; checkpoints every 250 steps). Tables,
# figures and report.md: results/kazemnejad/mastery/ and results/kazemnejad/schedule/; every seed's outcome
# (seeds.*, distribution.md) and, with both arms, results/kazemnejad/stopping_rule.md (scripts/kazemnejad_seeds.py). Running it again skips
# finished runs, resumes a killed one from its checkpoint and evaluates nothing already evaluated, so it can be
# stopped at any point (kill its process group) and started again, by any session, with the same command.
# Environment: POSENC (the posenc command), PYTHON (its interpreter), RESULTS (the results root, default
# results; a symlink lets a copy of the code elsewhere keep its runs and tables in this checkout's results/).
# Timing (one thread of a shared 2-core CPU, 2026-11): about 6 s per 100 steps at these lengths; a mastery run
# 3-10 min, a schedule run 10 min plus evaluation; the mastery arm about 10-17 h for 150 runs.
set -euo pipefail
cd "$(dirname "$0")/.."
posenc=${POSENC:-$(command -v posenc || echo .venv/bin/posenc)}
python=${PYTHON:-$(dirname "$posenc")/python}  # the interpreter posenc is installed in
results=${RESULTS:-results}
arm=${ARM:-mastery}
seeds=${SEEDS:-$(seq 0 14)}
case "$arm" in
  mastery) extra=() ; sweep=$results/multirun/kazemnejad_matched ;;
  schedule) extra=(train.target_exact_match=0) ; sweep=$results/multirun/kazemnejad_matched_schedule ;;
  *) echo "ARM must be mastery or schedule, got $arm" >&2; exit 2 ;;
esac
out=$results/kazemnejad/$arm
lengths=43,$(seq -s, 44 2 82),122,162
export OMP_NUM_THREADS=1  # one core: the machine is shared; results are recorded at one thread
for seed in $seeds; do
  start=$(date +%s)
  "$posenc" train -m experiment=kazemnejad_matched "paths.results=$results" "hydra.sweep.dir=$sweep" \
    hydra/launcher=basic progress=false "seed=$seed" ${extra[@]+"${extra[@]}"}
  trained=$(date +%s)
  "$posenc" runs --runs "$sweep" --out "$out"
  # every run at every length, not-learned ones too (marked): a configuration with one seed short of mastery
  # would otherwise be evaluated at its training length only, and every seed's outcome is wanted
  "$posenc" compare --runs "$sweep" --out "$out" --lengths "$lengths" --include-not-learned
  "$python" scripts/kazemnejad_seeds.py --root "$results/kazemnejad"  # every seed; the arms paired by seed
  echo "kazemnejad $arm seed $seed: training $((trained - start)) s, runs + compare $(($(date +%s) - trained)) s" >&2
  if [ "${COMMIT:-0}" = 1 ]; then
    for try in 1 2 3 4 5 6 7 8 9 10; do  # another writer may hold the index lock a moment; only $out is committed
      if (cd "$out" && [ ! -e "$(git rev-parse --git-path index.lock)" ] && git add . &&
          git commit -q -m "results/kazemnejad/$arm after seed $seed (scripts/kazemnejad.sh)" -- .); then
        break
      fi
      sleep 30
    done
  fi
done
