#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Masked-language-model pretraining of RAN (`RANForMaskedLM`) with the Transformers `Trainer`, offline.

Text: `.txt` (one document or paragraph per line), `.jsonl`/`.json`/`.csv` with a `text` field, optionally gzipped.
Every document is tokenized as `[CLS] ... [SEP]`, the documents are concatenated and cut into long blocks of
`--block_size` tokens (default 4096, not 512), and `DataCollatorForLanguageModeling` masks 15% of the tokens.
Evaluation reports the masked-token loss, its perplexity and the masked-token accuracy on `--validation_file` (or
the last `--validation_split_percentage` of the training documents).

From scratch (a WordPiece tokenizer is trained on the training split unless `--tokenizer_name` is given; config
flags `--hidden_size --num_hidden_layers --num_attention_heads --attention_head_size --window_size`) or continuing
from `--model_name_or_path`. The output directory loads with `AutoModelForMaskedLM` / `AutoTokenizer`, and with
`run_classification.py --model_name_or_path` / `run_ner.py --model_name_or_path` for fine-tuning.

    python run_scripts/run_mlm.py --train_file corpus.txt --validation_file valid.txt --output_dir outputs/mlm \
        --block_size 2048 --num_train_epochs 1

Pretraining on a large corpus of long documents (`--train_dirs`: directories of `.jsonl(.gz)` shards, one document,
e.g. a book, per line): the shards are streamed with `datasets`, each document is tokenized on the fly and cut into
blocks `[CLS] ... [SEP]` of `--block_size` tokens that never span two documents, shuffled in a buffer of
`--shuffle_buffer_size` blocks; `--split_column split` holds out the documents of `--validation_split`. Needs a
tokenizer trained once (`train_tokenizer.py --train_dirs`) and `--max_steps`. Validation blocks are masked once
with the run's seed, and every evaluation logs the masked-token loss and accuracy on them. Training masks come from
a seeded generator, so `--resume_from_checkpoint last` continues exactly where the run stopped.
`--config_overrides sparse_prediction=true` computes the MLM head only at the masked positions (same loss, a
cheaper step; see research/pretraining/README.md for measurements and the pretraining command).

    python run_scripts/run_mlm.py --train_dirs DATA/gutenberg-more --split_column split \
        --tokenizer_name outputs/tokenizer --output_dir outputs/mlm-books --block_size 4096 --max_steps 1000 \
        --config_overrides sparse_prediction=true --eval_strategy steps --eval_steps 200 --save_strategy steps \
        --save_steps 200 --max_eval_samples 64

The code is shared with run_clm.py: `run_scripts/helpers/language_modeling.py`.
"""

from __future__ import annotations

from run_scripts.helpers import language_modeling


def main(argv: list[str] | None = None) -> dict:
    return language_modeling.main(argv, causal=False)


if __name__ == "__main__":
    main()
