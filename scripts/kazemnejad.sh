#!/usr/bin/env bash
# Kazemnejad et al. 2023's copy and reverse in the paper's protocol (conf/experiment/kazemnejad_matched.yaml,
# issue 39): 100 symbols, 4-20 symbols in training, scored EOS; nope, t5, alibi, rope, sinusoidal; 15 seeds.
# Trains one single-thread job at a time, seed by seed (all five encoders on both tasks for seed 0, then seed 1,
# ...), and after each run tabulates what is trained and evaluates it at the lengths the claim reads: 43 (the
# training length, 20 symbols), 44, 46, ..., 82 (21..40 symbols, the paper's test range) and 122, 162 (60, 80
# symbols). A partial run is a balanced design at every seed.
#
#   bash scripts/kazemnejad.sh                 # arm "mastery": each run stops at held-out exact match >= 0.99
#   ARM=schedule bash scripts/kazemnejad.sh    # arm "schedule": runs over the whole 10000-step schedule, each
#                                              # saving its state at its first check >= 0.99 (mastery.pt); its
#                                              # twin, the same run stopped there (resume=<run>/mastery.pt:
#                                              # bit for bit the run stopping at mastery, tests/running/
#                                              # test_train.py), is arm "schedule_at_mastery": paired by run
#   ARM=long bash scripts/kazemnejad.sh        # arm "long": the paper's 40000 steps (its batch 64 is posenc's),
#                                              # each run stopping at mastery (why: conf/experiment/kazemnejad_matched.yaml)
#   SEEDS="0 1 2" bash scripts/kazemnejad.sh   # only these seeds (default: 0 .. 14; arm schedule 0 .. 9)
#   LIST=1 bash scripts/kazemnejad.sh > runs.txt   # only list the unfinished runs, in order, one line of
#                                              # overrides each: python scripts/train_parallel.py --from runs.txt
#                                              # trains them many at once on a GPU (then run this script to
#                                              # tabulate, and to stop each schedule run at its mastery.pt)
#   TABLES_ONLY=1 bash scripts/kazemnejad.sh   # only tabulate what is trained (after stopping it, or unpacking
#                                              # runs from a device): trains nothing
#   COMMIT=1 bash scripts/kazemnejad.sh        # also commit results/kazemnejad every 25 min and after each seed
#                                              # (COMMIT_EVERY=seconds; sequences.parquet after each seed only)
#
# Runs: results/multirun/kazemnejad_matched[_schedule|_long]/ (git-ignored; checkpoints every 250 steps).
# Tables, figures and report.md: results/kazemnejad/<arm>/; every seed's outcome (seeds.*, distribution.md)
# and, paired by seed, results/kazemnejad/stopping_rule.md (schedule minus schedule_at_mastery, the same runs)
# and budget.md (long minus mastery) (scripts/kazemnejad_seeds.py).
# Running it again skips finished runs, resumes a killed one from its checkpoint and evaluates nothing already
# evaluated, so it can be stopped at any point (kill its process group) and started again, by any session, with
# the same command. On another machine, where the run folders are not, the runs the arm's committed training.csv
# records count as finished, and the tables extend the committed ones (scripts/train_or_list.sh).
# Environment: POSENC (the posenc command), PYTHON (its interpreter), RESULTS (the results root, default
# results; a symlink lets a copy of the code elsewhere keep its runs and tables in this checkout's results/).
# Timing (one thread of a shared 2-core CPU, 2026-11): about 6 s per 100 steps at these lengths; a mastery run
# 3-10 min, a schedule run 12-13 min plus evaluation; the mastery arm about 10-17 h for 150 runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/train_or_list.sh
source scripts/train_or_list.sh  # posenc, python and results, from the environment; recorded, extend_of
arm=${ARM:-mastery}
last_seed=14  # the 15 seeds the experiment registered; the schedule arm's 10 (0-9, registered 2026-12-08)
if [ "$arm" = schedule ]; then last_seed=9; fi
seeds=${SEEDS:-$(seq 0 "$last_seed")}
at_mastery=$results/multirun/kazemnejad_matched_schedule_at_mastery  # arm schedule: each run stopped at mastery
case "$arm" in
  mastery) extra=() ; sweep=$results/multirun/kazemnejad_matched ;;
  schedule) extra=(train.stop_at_mastery=false) ; sweep=$results/multirun/kazemnejad_matched_schedule ;;
  long) extra=(train.steps=40000) ; sweep=$results/multirun/kazemnejad_matched_long ;;
  *) echo "ARM must be mastery, schedule or long, got $arm" >&2; exit 2 ;;
esac
out=$results/kazemnejad/$arm
lengths=43,$(seq -s, 44 2 82),122,162
protocol_note="Protocol: conf/experiment/kazemnejad_matched.yaml. Since 2026-11-28 its T5 (max_distance 128) and \
RoPE (a quarter of each head rotated) are built as the paper's code builds them; the runs trained before that \
left this record (results/kazemnejad/README.md)."
export OMP_NUM_THREADS=1  # one core: the machine is shared; results are recorded at one thread
tabulate() {  # SWEEP OUT: tabulate and evaluate what is trained (only what is new is evaluated)
  local sweep=$1 out=$2
  # --extend: the committed tables keep the runs trained on other machines (their folders are not here)
  "$posenc" runs --extend --runs "$sweep" --out "$out"
  # every run at every length, not-learned ones too (marked): every seed's outcome is wanted (seeds.md), and
  # a configuration short of mastery (fewer than 10 of its seeds learned, and not all: posenc.analysis.mastery)
  # would otherwise be evaluated at its training length only. The comparison and the claims still read a
  # configuration learned by quorum on its learned seeds alone past the training length.
  # shellcheck disable=SC2046  # extend_of gives one word or none
  "$posenc" compare --runs "$sweep" --out "$out" $(extend_of "$out") --lengths "$lengths" --include-not-learned
  # the claims' verdicts, each with what it would say with the mastery gate lifted (every seed of every side)
  "$python" scripts/ungated_claims.py --folder "$out" --claim kazemnejad2023_mean_rank \
    --claim kazemnejad2023_copy --claim kazemnejad2023_reverse --out "$out/verdicts.md" --note "$protocol_note"
}
stop_at_mastery() {  # arm schedule: each finished run here, stopped at its first check that met the target, into
  # $at_mastery (once): resume=<run>/mastery.pt with train.stop_at_mastery true trains nothing and ends as the run
  # stopping at mastery ends; a run that never met it is its own stopped twin (resume=<run>, its whole schedule)
  local metrics run rest task encoder seed source twin
  find "$sweep" -name metrics.json -path '*/seed*/*' | sort | while read -r metrics; do
    run=$(dirname "$metrics")
    rest=${run#"$sweep"/}  # <task>/<encoder>/seed<N>/<override folder>
    task=${rest%%/*}; rest=${rest#*/}; encoder=${rest%%/*}; rest=${rest#*/}; seed=${rest%%/*}; seed=${seed#seed}
    twin=$at_mastery/$task/$encoder/seed$seed
    [ ! -f "$twin/metrics.json" ] || continue
    source=$run
    if [ -f "$run/mastery.pt" ]; then source=$run/mastery.pt; fi
    if [ -f "$twin/checkpoint.pt" ]; then source=true; fi  # killed before its metrics: it finishes its own
    # a run that met the target without leaving mastery.pt (trained before 2026-12-08) is refused in one line
    "$posenc" train -m experiment=kazemnejad_matched "paths.results=$results" "hydra.sweep.dir=$at_mastery" \
      hydra/launcher=basic progress=false "seed=$seed" "task=$task" "encoder=$encoder" "resume=$source" \
      </dev/null || echo "kazemnejad: $run could not be stopped at its mastery; it stays unpaired" >&2
  done
}
tables() {  # the arm's tables, its runs stopped at mastery beside (arm schedule), every seed, the arms paired
  tabulate "$sweep" "$out"
  if [ "$arm" = schedule ]; then
    stop_at_mastery
    [ -z "$(find "$at_mastery" -name metrics.json 2>/dev/null | head -1)" ] ||
      tabulate "$at_mastery" "$results/kazemnejad/schedule_at_mastery"
  fi
  "$python" scripts/kazemnejad_seeds.py --root "$results/kazemnejad"  # every seed; the arms paired by seed
}
committed=$(date +%s)
# what ran where (the run folders, which hold it, stay on the machine): named in every commit of the tables
machine=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
machine="${machine:-$(uname -m)} ($(nproc --all 2>/dev/null || echo ?) cores)"
commit() {  # COMMIT=1: commit results/kazemnejad (its files only): everything when $1 is "now" (after each seed),
  # else, once COMMIT_EVERY seconds (default 1500) have passed, all but the per-sequence scores (sequences.parquet,
  # the one big file, rewritten by every evaluation: regenerated by compare, committed once a seed)
  [ "${COMMIT:-0}" = 1 ] || return 0
  local paths=(. ':(exclude,glob)**/sequences.parquet')
  if [ "$1" = now ]; then paths=(.); else [ $(($(date +%s) - committed)) -ge "${COMMIT_EVERY:-1500}" ] || return 0; fi
  for try in 1 2 3 4 5 6 7 8 9 10; do  # another writer may hold the index lock a moment
    if (cd "$results/kazemnejad" && [ ! -e "$(git rev-parse --git-path index.lock)" ] && git add -- "${paths[@]}" &&
        { git diff --cached --quiet -- "${paths[@]}" ||
          git commit -q -m "kazemnejad/$arm: $2" -m "Tables written by scripts/kazemnejad.sh after its last finished run.
Trained on: $machine, one thread a run." -- "${paths[@]}"; }); then
      committed=$(date +%s)
      return 0
    fi
    sleep 30
  done
}
holds() {  # whether the arm's run of seed $1, task $2, encoder $3 holds file $4: the arm's only configuration
  # is its folder, or one override folder below
  local dir=$sweep/$2/$3/seed$1 file
  for file in "$dir/$4" "$dir"/*/"$4"; do [ -f "$file" ] && return 0; done
  return 1
}
finished() {  # the run of this arm has finished here, or on another machine (the arm's training table records it)
  holds "$1" "$2" "$3" metrics.json || recorded "$sweep/$2/$3/seed$1"
}
read_recorded "$out"
# runs finished before an interruption but not yet tabulated
if [ "${LIST:-0}" != 1 ] && [ -n "$(find "$sweep" -name metrics.json 2>/dev/null | head -1)" ]; then
  tables || echo "tables failed" >&2
fi
[ "${TABLES_ONLY:-0}" != 1 ] || exit 0
for seed in $seeds; do  # every encoder on both tasks for one seed, then the next seed: balanced at every point
  for task in copy reverse; do
    for encoder in nope t5 alibi rope sinusoidal; do
      if finished "$seed" "$task" "$encoder"; then continue; fi
      if [ "${LIST:-0}" = 1 ]; then  # one line of overrides per unfinished run, for scripts/train_parallel.py
        echo "experiment=kazemnejad_matched hydra.sweep.dir=$sweep seed=$seed task=$task encoder=$encoder" \
          ${extra[@]+"${extra[@]}"}
        continue
      fi
      start=$(date +%s)
      if ! "$posenc" train -m experiment=kazemnejad_matched "paths.results=$results" "hydra.sweep.dir=$sweep" \
        hydra/launcher=basic progress=false "seed=$seed" "task=$task" "encoder=$encoder" ${extra[@]+"${extra[@]}"}
      then
        echo "kazemnejad $arm $task $encoder seed $seed: training failed; going on with the next run" >&2
        continue
      fi
      trained=$(date +%s)
      tables || echo "kazemnejad: tables failed after $task $encoder seed $seed" >&2
      echo "kazemnejad $arm $task $encoder seed $seed: training $((trained - start)) s," \
        "tables $(($(date +%s) - trained)) s" >&2
      commit later "through seed $seed, $task, $encoder"
    done
  done
  [ "${LIST:-0}" = 1 ] || commit now "seed $seed done"
done
