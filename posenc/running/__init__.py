"""Running experiments: configuration, training, checkpoints, evaluation, extrapolation, run folders and tracking
(torch; uses posenc.nn and posenc.analysis)."""
