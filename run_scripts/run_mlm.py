#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Masked-language-model pretraining of RAN (`RANForMaskedLM`) with the Transformers `Trainer`, offline.

Text: `.txt` (one document or paragraph per line), `.jsonl`/`.json`/`.csv` with a `text` field, optionally gzipped.
Every document is tokenized as `[CLS] ... [SEP]`, the documents are concatenated and cut into long blocks of
`--block_size` tokens (default 4096, not 512), and `DataCollatorForLanguageModeling` masks 15% of the tokens.
Evaluation reports the masked-token loss and its perplexity on `--validation_file` (or the last
`--validation_split_percentage` of the training documents).

From scratch (a WordPiece tokenizer is trained on the training split unless `--tokenizer_name` is given; config
flags `--hidden_size --num_hidden_layers --num_attention_heads --attention_head_size --window_size`) or continuing
from `--model_name_or_path`. The output directory loads with `AutoModelForMaskedLM` / `AutoTokenizer`, and with
`run_classification.py --model_name_or_path` / `run_ner.py --model_name_or_path` for fine-tuning.

    python run_scripts/run_mlm.py --train_file corpus.txt --validation_file valid.txt --output_dir outputs/mlm \
        --block_size 2048 --num_train_epochs 1

The code is shared with run_clm.py: `run_scripts/helpers/language_modeling.py`.
"""

from __future__ import annotations

from run_scripts.helpers import language_modeling


def main(argv: list[str] | None = None) -> dict:
    return language_modeling.main(argv, causal=False)


if __name__ == "__main__":
    main()
