# Sourced by the experiment scripts of issue 39's item 5 (scripts/t5_layout.sh, scripts/ruoss_recipe.sh,
# scripts/t5_gap.sh): one run of an experiment, trained into its sweep folder, or with LIST=1 only its line of
# overrides, the run list that scripts/gpu_train.py and scripts/train_parallel.py read (scripts/kazemnejad.sh's
# convention). Sourcing it also sets what every such script reads from its environment: posenc (POSENC, the
# posenc command), python (PYTHON, the interpreter posenc is installed in) and results (RESULTS, the results
# root, default results).
#
#   train_or_list NAME LABEL EXPERIMENT SWEEP OVERRIDES...   # NAME, LABEL: what its progress lines say
#   read_recorded OUT...        # once, before training: the runs OUT's committed training tables record
#   recorded RUN                # whether RUN (a run folder under $results/multirun) is one of them
#   extend_of OUT               # "--extend" where OUT holds a comparison: for posenc compare
#
# Run folders are git-ignored and stay on the machine that trained them; the tables are committed. A run that
# another session trained on another machine is recorded, so it is not trained again, and the tables extend
# the committed ones (posenc runs --extend, posenc compare --extend) instead of being rewritten from the run
# folders this machine holds. (Taking a run out of a record, e.g. a superseded build, is therefore a deliberate
# step: posenc runs/compare without --extend on a machine holding every run that stays.)
posenc=${POSENC:-$(command -v posenc || echo .venv/bin/posenc)}
python=${PYTHON:-$(dirname "$posenc")/python}
results=${RESULTS:-results}
train_or_list() {
  local name=$1 label=$2 experiment=$3 sweep=$4 start
  shift 4
  if [ "${LIST:-0}" = 1 ]; then echo "experiment=$experiment hydra.sweep.dir=$sweep $*"; return 0; fi
  start=$(date +%s)
  # a failed run is reported and the sweep goes on: the others of the seed keep the design balanced
  "$posenc" train -m "experiment=$experiment" "hydra.sweep.dir=$sweep" "$@" "paths.results=$results" \
    hydra/launcher=basic progress=false || echo "$name: $label failed; going on with the next run" >&2
  echo "$name: $label: training $(($(date +%s) - start)) s" >&2
}
recorded_runs=""
read_recorded() {  # (standard library only: any python3 where posenc's interpreter is not named; an
  # unreadable table stops the script here, before it could train a recorded run again)
  local interpreter=$python
  [ -x "$interpreter" ] || interpreter=python3
  recorded_runs=$("$interpreter" scripts/recorded_runs.py "$@")
}
recorded() {  # RUN: recorded as it is, or with one override folder below it (Hydra's override_dirname)
  local tail=${1#"$results"/}
  [ -n "$recorded_runs" ] || return 1
  printf '%s\n' "$recorded_runs" | awk -v run="$tail" '$0 == run || index($0, run "/") == 1 { found = 1 }
    END { exit !found }'
}
extend_of() { if [ -f "$1/comparison.parquet" ]; then echo --extend; fi; }
