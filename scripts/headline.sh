#!/usr/bin/env bash
# The headline comparison in results/headline/: every encoder x copy, reverse and retrieval (MQAR) x 3 seeds
# (conf/experiment/headline.yaml: 99 runs, each trained until held-out exact match reaches 0.99 or its
# budget is spent), evaluated at 1x, 2x, 4x ... 1024 tokens, aggregated into tables (comparison.*), figures
# (*.png, *.svg) and report.md. RoPE scaling methods are compared in scripts/rope_scaling.sh and lm.sh.
#
#   bash scripts/headline.sh                    # as committed
#   bash scripts/headline.sh seed=0             # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
# --up-to 1024 keeps the evaluation to minutes on a 2-core CPU (every learned run is at chance by 2x there);
# --up-to 8192 is the papers' range (a GPU makes it cheap).
exec bash "$(dirname "$0")/experiment.sh" headline --up-to 1024 -- "$@"
