# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Does a pretrained masked LM use word order? Held-out masked-token accuracy as packed, and again with each
block's unmasked tokens shuffled among their own positions (the masked positions, [CLS] and [SEP] stay put).

    python -m research.pretraining.order_probe CHECKPOINT [CHECKPOINT ...] --spans 16

A model that reads order loses most of its accuracy on shuffled context; a bag-of-words model keeps all of it. Each
checkpoint is scored on the same validation spans as in pretraining (`validation_batches`: one block of 4,082 for a
RAN, 8 blocks of 512 for a BERT), so both see the same masked tokens."""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from transformers import AutoModelForMaskedLM

import ran_hf  # noqa: F401  (registers RAN with the Auto classes)
from research.pretraining.device_pretrain import validation_batches


def block_size_for(model: torch.nn.Module, span_length: int) -> int:
    """The block a model scores a span in: a RAN the whole span between [CLS] and [SEP], a BERT its context."""
    if model.config.model_type == "ran":
        return span_length + 2
    return model.config.max_position_embeddings


def shuffle_context(ids: torch.Tensor, labels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`ids` with every row's unmasked body tokens permuted among their own positions."""
    shuffled = ids.clone()
    for row in range(len(ids)):
        free = (labels[row] == -100).nonzero()[:, 0]
        free = free[(free > 0) & (free < ids.shape[1] - 1)]
        shuffled[row, free] = ids[row, free[torch.randperm(len(free), generator=generator)]]
    return shuffled


@torch.no_grad()
def accuracy(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor, batch_size: int = 8) -> float:
    correct = scored = 0
    for start in range(0, len(ids), batch_size):
        batch_ids, batch_labels = ids[start: start + batch_size], labels[start: start + batch_size]
        logits = model(input_ids=batch_ids).logits
        keep = batch_labels != -100
        correct += int((logits[keep].argmax(-1) == batch_labels[keep]).sum())
        scored += int(keep.sum())
    return correct / scored


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--validation", default=".pretrain_payload/validation.npz",
                        help="The packed validation spans (`research.pretraining.pack`).")
    parser.add_argument("--spans", type=int, default=16, help="Score the first N spans.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with np.load(args.validation) as packed:
        held_out = {key: packed[key][: args.spans] for key in ("input_ids", "labels")}
    rows = []
    for path in args.checkpoints:
        model = AutoModelForMaskedLM.from_pretrained(path).eval()
        ids, labels = validation_batches(held_out, block_size_for(model, held_out["input_ids"].shape[1]), "cpu")
        shuffled = shuffle_context(ids, labels, torch.Generator().manual_seed(args.seed))
        row = {"checkpoint": path, "masked_tokens": int((labels != -100).sum()),
               "accuracy": round(accuracy(model, ids, labels), 4),
               "accuracy_context_shuffled": round(accuracy(model, shuffled, labels), 4)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
