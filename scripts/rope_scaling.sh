#!/usr/bin/env bash
# RoPE context-extension methods compared on the same checkpoints, in results/rope_scaling/: RoPE trained on
# copy and passkey (conf/experiment/rope_scaling.yaml, 6 runs), evaluated at 32 ... 1024 tokens as trained
# and under linear interpolation, NTK, dynamic NTK, YaRN and Llama-3 scaling (passkey: by key depth too).
#
#   bash scripts/rope_scaling.sh                       # as committed
#   bash scripts/rope_scaling.sh hydra/launcher=joblib # extra Hydra overrides go to the sweep
# Running it again resumes an interrupted sweep and re-evaluates nothing that is already evaluated.
exec bash "$(dirname "$0")/experiment.sh" rope_scaling --lengths 32,64,128,256,512,1024 \
  --rope-scaling none,linear,ntk,dynamic_ntk,yarn,llama3 -- "$@"
