# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Does RAN carry context across windows? A causal-LM perplexity comparison against GPT-2 with contexts W and 4W.

Run from the repository root: `python -m research.compare_lm --data_dir DATA/wikitext-2 ...` (see `__main__.py`).
Modules: `data` (corpus, tokenizer, segments, blocks), `models`, `train` (training and scoring), `report`.
"""
