#!/usr/bin/env bash
# T5's gap to the paper's matched number on Kazemnejad et al.'s copy (issue 39, item 5): posenc's T5 reached about
# 0.10 exact match past L where the paper's cmc_tr20_ts40 split gives 0.420 (pred/test_acc_overall) / 0.549
# (pred/test_seq_acc). Runs that change one factor at a time against a T5 baseline in the matched protocol
# (conf/experiment/kazemnejad_matched.yaml, task=copy encoder=t5: 100 symbols, 4-20 in training, scored EOS,
# d_model 64, 3 layers, 4 heads, lr 3e-3, stop at held-out exact match >= 0.99, at most 10000 steps) with
# posenc's bucket layout, as that experiment built T5 until this measurement made it take the paper's layout
# (conf/experiment_encoder/kazemnejad_matched_t5.yaml, 2026-11-28):
#   baseline     encoder.max_distance=null: posenc's rule, max(32, 43 // 2) = 32 (its seeds 0-4 were trained
#                into scripts/kazemnejad.sh's mastery-arm folder before that change, seeds 0-3 by that script
#                and seed 4 by this one, and moved here)
#   alphabet16   task.n_symbols=16 (and the baseline's layout): posenc's former alphabet (the paper's 100 is
#                the baseline's), so the alphabet's share of the gap is measured in the matched protocol
#   layout128    encoder.max_distance=128: T5's own layout as the paper's code builds it (32 buckets, as posenc's
#                default, and max_distance 128: McGill-NLP/length-generalization @ 40f8a445,
#                src/models/custom_t5_decoder_only.py L155 takes only relative_attention_num_buckets from the
#                config and L324 calls the inherited compute_bias, which in its pinned transformers==4.16.2
#                (src/requirements.txt L8; transformers/models/t5/modeling_t5.py L401-414) passes num_buckets alone
#                to _relative_position_bucket(..., num_buckets=32, max_distance=128) (L354), unidirectional since
#                config.is_decoder = True (L1137); configs/models/t5a_small.jsonnet L21 relative_attention_num_buckets:
#                32; one table shared by all layers, L660, as posenc's). posenc's rule gives max(32, 43 // 2) = 32.
#                Now the matched experiment's own T5 (scripts/kazemnejad.sh trains it on both tasks, 15 seeds,
#                into its own folder: its copy seeds 0-4 are these runs again, bit for bit on one machine).
#   size         model.d_model=768 model.n_layers=12 model.n_heads=12 model.d_mlp=3072 (and the baseline's
#                layout): the paper's T5-base-sized
#                decoder (README L85 configs/t5_dec_base.jsonnet -> configs/models/t5_base.jsonnet, hf_model_name
#                t5-base: d_model 768, 12 layers, 12 heads of 64, d_ff 3072, as t5a_small.jsonnet L5-18 spells
#                out), at posenc's lr and budget (one factor: the paper's lr 3e-5 over 40000 steps is a second)
# Seeds 0-4 each (5 per variant; the gap is 0.3-0.45 against a seed SD near 0.08 in posenc's runs): 20 runs.
# Evaluated at 43 (L, 20 symbols), 44, 46, ..., 82 (21-40
# symbols, the paper's test range) and 122, 162 (60, 80 symbols), every run, learned or not.
#
#   bash scripts/t5_gap.sh                          # trains (resumably), then tables
#   VARIANTS="alphabet16 layout128" bash scripts/t5_gap.sh   # only these variants (default: all three); the
#                                                   # size variant is a GPU job (see Cost)
#   SEEDS="0 1 2" bash scripts/t5_gap.sh            # only these seeds (default: 0 1 2 3 4)
#   LIST=1 bash scripts/t5_gap.sh > runs.txt        # only list the unfinished runs, in order, one line of overrides
#                                                   # each: python scripts/train_parallel.py --from runs.txt trains
#                                                   # them many at once on a GPU (then run this script to tabulate).
#   TABLES=0 bash scripts/t5_gap.sh                 # train only, no tables
#
# Runs: results/multirun/t5_gap/, git-ignored. Tables, figures, report.md: results/t5_gap/; per seed and the table of
# each variant against the baseline over 21-40 symbols (mean, SD, min, max over seeds; difference with a Welch 95%
# interval): results/t5_gap/gap.md (scripts/t5_gap.py). Running it again skips finished runs, resumes a killed one
# from its checkpoint and evaluates nothing already evaluated.
# Environment: POSENC (the posenc command), PYTHON (its interpreter), RESULTS (the results root, default results).
# Cost: baseline, alphabet16, layout128 about 6 s per 100 steps on one thread (scripts/kazemnejad.sh; 9.5 s in a
# contended pilot, 2026-11-28), 7-16 min a run: 15 runs about 2.5 h (all trained, 2026-11). size: about 1400x the FLOPs
# per step (0.9 TFLOP): many seconds a step on a CPU, days a run, so a GPU job: on an H200 in fp32 an estimated 20-40
# ms a step, 5 runs at once sharing the card about 5 steps/s each, up to 10000 steps: 30-40 min. The small variants on
# the H200 (~70 steps/s per run with 14 at once): under 3 min.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/train_or_list.sh
source scripts/train_or_list.sh  # also posenc, python and results, from the environment
seeds=${SEEDS:-0 1 2 3 4}
variants=${VARIANTS:-alphabet16 layout128 size}
lengths=43,$(seq -s, 44 2 82),122,162
export OMP_NUM_THREADS=1  # one core: the machine is shared; results are recorded at one thread
sweep=$results/multirun/t5_gap
overrides_of() {
  case "$1" in  # the matched experiment gives T5 max_distance 128: the others pin posenc's rule (null)
    baseline) echo "encoder.max_distance=null" ;;
    alphabet16) echo "encoder.max_distance=null task.n_symbols=16" ;;
    layout128) echo "encoder.max_distance=128" ;;
    size) echo "encoder.max_distance=null model.d_model=768 model.n_layers=12 model.n_heads=12 model.d_mlp=3072" ;;
    *) echo "t5_gap: unknown variant $1" >&2; exit 2 ;;
  esac
}
rundir_of() {  # variant, seed: the run's folder (Hydra's override_dirname: the overrides sorted, comma-joined)
  local sub
  sub=$(overrides_of "$1" | tr ' ' '\n' | sort | paste -sd, -)
  echo "$sweep/copy/t5/seed$2/$sub"
}
for variant in $variants; do overrides_of "$variant" > /dev/null; done  # refuse an unknown variant up front
read_recorded "$results/t5_gap"
tables() {
  local runs=() variant seed
  for variant in baseline $variants; do
    for seed in $seeds; do
      [ -f "$(rundir_of "$variant" "$seed")/metrics.json" ] && runs+=(--runs "$(rundir_of "$variant" "$seed")")
    done
  done
  [ ${#runs[@]} -gt 0 ] || return 0
  # --extend: the committed tables keep the runs trained on other machines (scripts/train_or_list.sh)
  "$posenc" runs --extend "${runs[@]}" --out "$results/t5_gap"
  # shellcheck disable=SC2046  # extend_of gives one word or none
  "$posenc" compare "${runs[@]}" --out "$results/t5_gap" $(extend_of "$results/t5_gap") --lengths "$lengths" \
    --include-not-learned
  "$python" scripts/t5_gap.py --folder "$results/t5_gap"
}
for seed in $seeds; do  # the baseline and every variant of one seed, then the next: balanced at every point
  for variant in baseline $variants; do
    run=$(rundir_of "$variant" "$seed")
    if [ -f "$run/metrics.json" ] || recorded "$run"; then continue; fi  # trained here, or elsewhere
    # shellcheck disable=SC2046  # the overrides split into words on purpose
    train_or_list t5_gap "$variant seed $seed" kazemnejad_matched "$sweep" \
      seed="$seed" task=copy encoder=t5 $(overrides_of "$variant")
  done
done
[ "${LIST:-0}" = 1 ] || [ "${TABLES:-1}" = 0 ] || tables
