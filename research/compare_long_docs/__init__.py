# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""RAN against the baselines of both seed papers on real long documents, trained from scratch under one budget.

Run from the repository root: `python -m research.compare_long_docs --data_dir DATA ...` (see `__main__.py`).
Modules: `data` (datasets, tokenization, sentence embeddings), `models` (baselines and their batches), `train`
(one budget, dev-based selection, test evaluation), `report` (the table).
"""
