# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""RAN against the baselines of both seed papers on real long documents, every model trained to convergence
(early stopping on dev macro-F1) in resumable background runs.

Run from the repository root: `bash research/compare_long_docs/run_all.sh DATA OUTPUT_DIR` or
`python -m research.compare_long_docs --data_dir DATA ...` (see `__main__.py` and README.md). Modules: `data`
(datasets, tokenization, MiniLM inputs), `models` (the compared models and their batches), `train` (early stopping,
checkpoints, test evaluation), `report` (the table), `estimate` (the CPU-hour estimate from smoke runs).
"""
