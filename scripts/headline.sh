#!/usr/bin/env bash
# The headline comparison in results/headline/: seven encoders x copy and retrieval x 3 seeds (42 runs,
# conf/experiment/headline.yaml), evaluated at 1x, 2x, 4x ... 8192 tokens, aggregated over seeds into
# tables (comparison.*), figures (*.png, *.svg) and report.md. Under an hour on a 2-core CPU.
#
#   bash scripts/headline.sh                              # as committed
#   bash scripts/headline.sh hydra/launcher=joblib        # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
exec bash "$(dirname "$0")/experiment.sh" headline -- "$@"
