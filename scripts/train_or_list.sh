# Sourced by the experiment scripts of issue 39's item 5 (scripts/t5_layout.sh, scripts/ruoss_recipe.sh,
# scripts/t5_gap.sh): one run of an experiment, trained into its sweep folder, or with LIST=1 only its line of
# overrides, the run list that scripts/gpu_train.py and scripts/train_parallel.py read (scripts/kazemnejad.sh's
# convention). Sourcing it also sets what every such script reads from its environment: posenc (POSENC, the
# posenc command), python (PYTHON, the interpreter posenc is installed in) and results (RESULTS, the results
# root, default results).
#
#   train_or_list NAME LABEL EXPERIMENT SWEEP OVERRIDES...   # NAME, LABEL: what its progress lines say
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
