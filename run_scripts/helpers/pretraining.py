# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""What run_mlm.py adds for pretraining on a large corpus: the streamed corpus flags and datasets, a validation set
masked once with a fixed seed (so every evaluation scores the same masked positions), the collator that masks
training blocks and only pads those validation blocks, and the masked-token accuracy."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import datasets
import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling, DataCollatorForTokenClassification

from .corpus import corpus_shards, read_blocks, streamed_blocks, streamed_documents
from .reports import length_statistics


logger = logging.getLogger("run_scripts")


@dataclass
class CorpusArguments:
    """A corpus of long documents (jsonl shards, e.g. one book per line) streamed into blocks that never cross two
    documents. Used instead of --train_file."""

    train_dirs: list[str] | None = field(
        default=None,
        metadata={"help": "Streamed training corpus: directories of .jsonl/.jsonl.gz shards (one document per line, "
                          "field --text_column_name), or single shards. Documents are tokenized on the fly and cut "
                          "into blocks of --block_size tokens, [CLS] ... [SEP], that never span two documents. "
                          "Needs --max_steps and --tokenizer_name (train one with train_tokenizer.py --train_dirs).",
                  "nargs": "+"},
    )
    split_column: str | None = field(
        default=None,
        metadata={"help": "With --train_dirs: the field naming a document's split. Documents of --train_split are "
                          "trained on (a document without the field counts as train); the documents of "
                          "--validation_split are the validation set."},
    )
    train_split: str = field(default="train", metadata={"help": "With --split_column: the training split."})
    validation_split: str = field(default="validation", metadata={"help": "With --split_column: the held-out split."})
    min_block_size: int = field(
        default=64, metadata={"help": "With --train_dirs: a document's last, shorter block is kept only if it has at "
                                      "least this many tokens."},
    )
    shuffle_buffer_size: int = field(
        default=1000, metadata={"help": "With --train_dirs: blocks are shuffled in a buffer of this many blocks (and "
                                        "the shard order per epoch); 0 reads the corpus in order."},
    )


def check_corpus_arguments(data_args, training_args, model_args) -> None:
    if data_args.train_file:
        raise ValueError("Pass --train_file (a file read into memory) or --train_dirs (a streamed corpus), not both.")
    if training_args.max_steps is None or training_args.max_steps <= 0:
        raise ValueError("--train_dirs streams the corpus, which has no length: pass --max_steps (the number of "
                         "optimizer steps to train).")
    if not (model_args.tokenizer_name or model_args.model_name_or_path):
        raise ValueError("--train_dirs needs --tokenizer_name (or --model_name_or_path): train the tokenizer once "
                         "with `python run_scripts/train_tokenizer.py --train_dirs ...`.")
    if data_args.validation_file and data_args.split_column:
        raise ValueError("Pass --validation_file or --split_column (held-out documents of --train_dirs), not both.")


def streamed_corpus_datasets(data_args, tokenizer, seed: int) -> tuple[dict, dict]:
    """{'train': streamed blocks (an `IterableDataset`), 'validation': held-out blocks in memory} and the token
    length statistics of the held-out documents.

    The held-out documents (`--split_column` == `--validation_split`) are few (e.g. 10 books), so their blocks are
    read into memory; `--max_eval_samples` keeps that many blocks evenly spaced over them (every book is seen)."""
    shards = corpus_shards(data_args.train_dirs, "train_dirs")
    documents = streamed_documents(shards, data_args.text_column_name, data_args.split_column,
                                   data_args.train_split if data_args.split_column else None)
    train = streamed_blocks(documents, tokenizer, data_args.block_size, data_args.min_block_size)
    if data_args.shuffle_buffer_size > 0:
        train = train.shuffle(seed=seed, buffer_size=data_args.shuffle_buffer_size)
    out, stats = {"train": train}, {}
    logger.info(f"Training corpus: {len(shards)} shard(s), streamed in blocks of up to {data_args.block_size} tokens"
                f" (shuffle buffer {data_args.shuffle_buffer_size} blocks).")
    if data_args.split_column:
        blocks, document_lengths = read_blocks(shards, tokenizer, data_args.block_size, data_args.min_block_size,
                                               data_args.text_column_name, data_args.split_column,
                                               data_args.validation_split)
        if not blocks:
            raise ValueError(f"--train_dirs: no document has {data_args.split_column} == "
                             f"{data_args.validation_split!r}; pass the held-out split's name with --validation_split.")
        stats["validation"] = length_statistics(document_lengths)
        limit = data_args.max_eval_samples
        if limit and limit < len(blocks):
            keep = np.unique(np.linspace(0, len(blocks) - 1, limit).round().astype(int))
            blocks = [blocks[i] for i in keep]
        out["validation"] = datasets.Dataset.from_dict({"input_ids": blocks})
        logger.info(f"Validation: {len(blocks)} block(s) of the {data_args.validation_split!r} documents.")
    return out, stats


def mask_once(dataset: datasets.Dataset, tokenizer, mlm_probability: float, seed: int) -> datasets.Dataset:
    """The blocks with MLM masks drawn once with `seed` (BERT's 80/10/10 replacement): `input_ids` and `labels`
    (-100 where nothing is predicted), so every evaluation of a run, and of runs with the same seed, scores the same
    masked positions."""
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=mlm_probability, seed=seed)
    input_ids, labels = [], []
    for block in dataset["input_ids"]:
        batch = collator([{"input_ids": block}])
        input_ids.append(batch["input_ids"][0].tolist())
        labels.append(batch["labels"][0].tolist())
    return datasets.Dataset.from_dict({"input_ids": input_ids, "labels": labels})


@dataclass
class MaskedLMCollator:
    """Masks training blocks (`DataCollatorForLanguageModeling`); blocks that already carry `labels` (the validation
    set of `mask_once`) are only padded (pads get the label -100).

    The training masks come from a generator of their own, seeded with `seed`, not from torch's global RNG: the
    masks of a batch then depend only on how many batches came before it. Trainer resumes a checkpoint by
    collating and dropping the batches already trained on, so a resumed run draws the same masks as one that was
    never interrupted (within the first pass over the data; checked in tests/scripts/test_run_mlm.py). With the
    global RNG they would not match: Trainer saves and restores that RNG at points that do not line up with the
    collator's prefetched batches."""

    tokenizer: object
    mlm_probability: float = 0.15
    seed: int = 42

    def __post_init__(self):
        self.masking = DataCollatorForLanguageModeling(self.tokenizer, mlm=True, mlm_probability=self.mlm_probability,
                                                       seed=self.seed)
        self.padding = DataCollatorForTokenClassification(self.tokenizer)

    def __call__(self, examples: list[dict]) -> dict:
        if "labels" in examples[0]:
            return self.padding(examples)
        return self.masking(examples)


def masked_predictions(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """`preprocess_logits_for_metrics`: the predicted ids `(batch, length)` instead of the logits. Masked-only logits
    (`sparse_prediction`, shape `(masked tokens, vocab)`) are put back in the batch's layout, -100 where nothing is
    predicted: Trainer trims the last evaluation batch along the first dimension, which must be the batch."""
    if isinstance(logits, tuple):
        logits = logits[0]
    predicted = logits.argmax(dim=-1)
    if predicted.dim() == 1:
        dense = torch.full_like(labels, -100)
        dense[labels != -100] = predicted
        predicted = dense
    return predicted


def masked_accuracy(eval_prediction) -> dict:
    """`compute_metrics`: the share of masked tokens (label != -100) predicted right."""
    predictions, labels = np.asarray(eval_prediction.predictions), np.asarray(eval_prediction.label_ids)
    scored = labels != -100
    return {"accuracy": float((predictions[scored] == labels[scored]).mean()) if scored.any() else float("nan")}
