# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Fine-tune the BERT peer (a `BertForMaskedLM` folder written by `collect.py`) for classification with
`run_scripts/run_classification.py`, so its data, dev split, training loop and report (test accuracy and macro-F1,
overall and on the documents over 512 tokens) are the RAN runs' own:

    python -m research.pretraining.finetune_peer --checkpoint outputs/pretrained/bert-books-small --mode first512 \\
        --seed 42 --output_dir outputs/peer/first512-seed42 [run_classification.py flags ...]

`--mode first512`: `BertForSequenceClassification` on the first 512 tokens of each document (`--max_length 512`).
`--mode chunks`: `BertChunkPoolForSequenceClassification` (`bert_peer.py`) over the first `--max_length` tokens (the
main job's 1,024 unless given) cut into chunks of 512, their [CLS] vectors averaged. Both start from the pretrained
RAN's fine-tuning flags (`--recipe pretrained`'s schedule and learning rate, `PRETRAINED_FLAGS`); flags given here
win.
"""

from __future__ import annotations

import argparse
import sys

from research.pretraining.bert_peer import BERT_CONTEXT, BertChunkPoolForSequenceClassification
from run_scripts import run_classification
from run_scripts.helpers.model_args import build_model
from run_scripts.helpers.recipes import PRETRAINED_FLAGS


def build_chunk_pool(auto_class, *args, **kwargs):
    """`run_classification`'s `build_model` (config overrides, vocabulary and pad checks) with the chunk-and-pool
    classifier in place of `auto_class`."""
    return build_model(BertChunkPoolForSequenceClassification, *args, **kwargs)


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
    parser.add_argument("--checkpoint", required=True, help="the peer's BertForMaskedLM folder, with its tokenizer")
    parser.add_argument("--mode", required=True, choices=["first512", "chunks"])
    args, script_argv = parser.parse_known_args(argv)
    if args.mode == "chunks":
        run_classification.build_model = build_chunk_pool
    try:
        return run_classification.main(peer_arguments(args.checkpoint, args.mode, script_argv))
    finally:
        run_classification.build_model = build_model


if __name__ == "__main__":
    main(sys.argv[1:])
