#!/usr/bin/env bash
# Perplexity vs length in results/lm/: every encoder as a byte-level language model on Python's standard
# library (conf/experiment/lm.yaml), evaluated at 1x ... 8x its training length of 128 bytes, rotary runs
# also under every RoPE extension method; tables (comparison.*), figures (*.png, *.svg) and report.md.
#
#   bash scripts/lm.sh                          # as committed
#   bash scripts/lm.sh hydra/launcher=joblib    # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
exec bash "$(dirname "$0")/experiment.sh" lm --lengths 128,256,512,1024 \
  --rope-scaling none,linear,ntk,dynamic_ntk,yarn,llama3 -- "$@"
