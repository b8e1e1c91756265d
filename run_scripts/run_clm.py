#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Causal language modelling with RAN (`RANForCausalLM`) and the Transformers `Trainer`, with perplexity, offline.

Text: `.txt` (one document or paragraph per line), `.jsonl`/`.json`/`.csv` with a `text` field, optionally gzipped.
Every document is tokenized as `[SEP] ...` with no `[CLS]`: `[SEP]` is the end-of-document token (`eos_token_id`,
also `bos_token_id`), so the concatenated stream reads `[SEP] doc [SEP] doc ... [SEP]` and is cut into long blocks
of `--block_size` tokens (default 4096, not 512). The saved tokenizer encodes a prompt the same way (`[SEP] text`,
no trailing end-of-document), so `pipeline("text-generation", model=output_dir)` continues it. The model predicts
every next token of a block (labels = inputs, shifted inside the model). Evaluation reports the per-token loss on
`--validation_file` (or the last `--validation_split_percentage` of the training documents) and the perplexity
`exp(loss)` (over the tokenizer's word pieces, each block read from its start), and prints a short greedy
continuation of the first validation block.

    python run_scripts/run_clm.py --train_file corpus.txt --validation_file valid.txt --output_dir outputs/clm \
        --block_size 2048 --num_train_epochs 1

The output directory loads with `AutoModelForCausalLM` / `AutoTokenizer` and generates with `model.generate()`.
The code is shared with run_mlm.py: `run_scripts/helpers/language_modeling.py`.
"""

from __future__ import annotations

from run_scripts.helpers import language_modeling


def main(argv: list[str] | None = None) -> dict:
    return language_modeling.main(argv, causal=True)


if __name__ == "__main__":
    main()
