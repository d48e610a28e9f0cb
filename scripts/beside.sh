#!/usr/bin/env bash
# Your encoder against the standard suite, in one line: train it under each chosen committed baseline's recorded
# protocol (its experiment configs, seeds and learning-rate retry), resumably and under any launcher, then place
# the runs beside the baseline with `posenc compare --baseline` (nothing of the baseline is retrained).
#
#   bash scripts/beside.sh KEY [BASELINE ...] [-- HYDRA OVERRIDES ...]
#   POSENC_PLUGINS=examples/log_alibi/posenc_log_alibi.py bash scripts/beside.sh log_alibi length_generalization
#   bash scripts/beside.sh log_alibi headline -- hydra/launcher=submitit_local   # any launcher, any override
#
# KEY: a registered encoder (`posenc encoders`; a plugin through POSENC_PLUGINS or an installed package).
# BASELINE (default length_generalization):
#   length_generalization  copy and reverse at lengths 9..32, 3 seeds (conf/experiment/length_generalization.yaml)
#   headline               copy, reverse and retrieval, 3 seeds, a second lr where a seed missed mastery
#                          (conf/experiment/headline*.yaml, scripts/retry_not_learned.py)
# Runs go to results/multirun/<BASELINE>+KEY/, the comparison to results/<BASELINE>+KEY/ (report.md: a section
# "Beside the baseline" with KEY paired with every baseline encoder). Running it again resumes the sweep and
# evaluates nothing twice. HYDRA OVERRIDES go to every sweep (a launcher, an encoder option: encoder.scale=2).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = "--" ]; then
  echo "usage: bash scripts/beside.sh KEY [BASELINE ...] [-- HYDRA OVERRIDES ...]" >&2
  exit 2
fi
key=$1
shift
baselines=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do baselines+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the "--"
[ ${#baselines[@]} -eq 0 ] && baselines=(length_generalization)
posenc=$(command -v posenc || echo .venv/bin/posenc)
python=${PYTHON:-$(dirname "$posenc")/python}
"$posenc" encoders | grep -q "^$key " || { echo "error: unknown encoder '$key' (posenc encoders lists them)" >&2; exit 2; }

train() {  # two single-thread jobs at a time (joblib); later overrides win, e.g. -- hydra/launcher=basic
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" train -m "hydra.sweep.dir=$sweep" encoder="$key" \
    hydra/launcher=joblib hydra.launcher.n_jobs=2 "$@"
}

for baseline in "${baselines[@]}"; do
  sweep=results/multirun/$baseline+$key
  out=results/$baseline+$key
  start=$(date +%s)
  case $baseline in
    length_generalization)
      train experiment=length_generalization "$@" ;;
    headline)
      train experiment=headline "$@"
      train experiment=headline_retrieval "$@"
      retries=$("$python" scripts/retry_not_learned.py "$sweep" --lr 0.003)  # headline.yaml's lr
      while read -r task encoders mixer; do  # the fallback lr, where a seed missed mastery (as headline.sh)
        [ -z "$task" ] && continue
        experiment=headline; [ "$task" = "task=retrieval" ] && experiment=headline_retrieval
        train "experiment=$experiment" "$task" ${mixer:+"$mixer"} seed=0,1,2 train.lr=0.001 "$@"
      done <<< "$retries" ;;
    *)
      echo "error: no recorded protocol for baseline '$baseline' (length_generalization, headline)" >&2
      exit 2 ;;
  esac
  trained=$(date +%s)
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$posenc" compare --baseline "results/$baseline" --runs "$sweep" --out "$out"
  "$posenc" runs --extend --runs "$sweep" --out "$out"  # the training table: the baseline's runs and these
  echo "$key beside $baseline: training $((trained - start)) s, compare $(($(date +%s) - trained)) s" >&2
done
