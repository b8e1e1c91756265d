# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune a pretraining peer (a `BertForMaskedLM` or `ModernBertForMaskedLM` folder written by `collect.py`) for
classification with `run_scripts/run_classification.py`, so its data, dev split, training loop and report (test
accuracy and macro-F1, overall and on the documents over 512 tokens) are the RAN runs' own:

    python -m research.pretraining.finetune_peer --checkpoint outputs/pretrained/bert-books-small --mode first512 \\
        --seed 42 --output_dir outputs/peer/first512-seed42 [run_classification.py flags ...]

`--mode first512`: the checkpoint's own `AutoModelForSequenceClassification` (`BertForSequenceClassification`,
`ModernBertForSequenceClassification`) on the first 512 tokens of each document (`--max_length 512`).
`--mode chunks`: the chunk-and-pool classifier of the checkpoint's model type (`CHUNK_POOL_CLASSES` in
`bert_peer.py`) over the first `--max_length` tokens (the main job's 1,024 unless given) cut into chunks of 512,
their [CLS] vectors averaged. Both start from the pretrained
RAN's fine-tuning flags (`--recipe pretrained`'s schedule and learning rate, `PRETRAINED_FLAGS`); flags given here
win.
"""

from __future__ import annotations

import argparse
import sys

from transformers import AutoConfig

from research.pretraining.bert_peer import BERT_CONTEXT, CHUNK_POOL_CLASSES
from run_scripts import run_classification
from run_scripts.helpers.model_args import build_model
from run_scripts.helpers.recipes import PRETRAINED_FLAGS


def chunk_pool_builder(checkpoint: str):
    """`run_classification`'s `build_model` (config overrides, vocabulary and pad checks) with the chunk-and-pool
    classifier of the checkpoint's model type in place of the Auto class."""
    model_type = AutoConfig.from_pretrained(checkpoint).model_type
    if model_type not in CHUNK_POOL_CLASSES:
        raise ValueError(f"--mode chunks reads a {' or '.join(CHUNK_POOL_CLASSES)} checkpoint; --checkpoint "
                         f"{checkpoint} is a '{model_type}' model.")

    def build_chunk_pool(auto_class, *args, **kwargs):
        return build_model(CHUNK_POOL_CLASSES[model_type], *args, **kwargs)

    return build_chunk_pool


def peer_arguments(checkpoint: str, mode: str, script_argv: list[str]) -> list[str]:
    """The run_classification.py command line of a peer run: the recipe's flags first, then the caller's."""
    given = {flag.split("=", 1)[0] for flag in script_argv}
    argv = ["--model_name_or_path", checkpoint, *PRETRAINED_FLAGS]
    if mode == "first512":
        if "--max_length" in given:
            raise ValueError("--mode first512 reads the first 512 tokens: leave --max_length out.")
        argv += ["--max_length", str(BERT_CONTEXT)]
    return argv + script_argv


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="the peer's BertForMaskedLM or ModernBertForMaskedLM folder, with its tokenizer")
    parser.add_argument("--mode", required=True, choices=["first512", "chunks"])
    args, script_argv = parser.parse_known_args(argv)
    if args.mode == "chunks":
        run_classification.build_model = chunk_pool_builder(args.checkpoint)
    try:
        return run_classification.main(peer_arguments(args.checkpoint, args.mode, script_argv))
    finally:
        run_classification.build_model = build_model


if __name__ == "__main__":
    main(sys.argv[1:])
