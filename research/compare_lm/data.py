# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparison's data: WikiText-2 or the Gutenberg books from --data_dir, the WordPiece tokenizer, the training
segments and their order, and the evaluation blocks."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from run_scripts.helpers.data_files import read_records
from run_scripts.helpers.language_modeling import group_into_blocks
from run_scripts.helpers.tokenizer import train_wordpiece_tokenizer


logger = logging.getLogger("run_scripts")

GUTENBERG_HELD_OUT_BOOKS = 3  # books in each of validation and test; the rest train
SPLIT_FILES = {
    "train": "wiki.train.docshuf.tokens",
    "validation": "wiki.valid.tokens",
    "test": "wiki.test.tokens",
}
DATA_SOURCES = {
    "wikitext2": "the WikiText-2 v1 tokenized files (Merity et al., 2016) " + ", ".join(SPLIT_FILES.values()),
    "gutenberg": "Project Gutenberg books as books-*.jsonl(.gz), one JSON object per book with `id` and `text` (e.g. "
                 "PG-19 texts, Rae et al., 2020)",
}


def gutenberg_splits(data_dir: str) -> dict[str, list[str]]:
    """Paragraph lines of the Gutenberg books per split. Books are sorted by id and a seeded permutation picks the
    validation and test books, so no book is in two splits. A paragraph (lines up to a blank line) becomes one line
    with its hard line breaks joined by spaces; training books are concatenated in id order."""
    folder = Path(data_dir)
    files = sorted(folder.glob("books-*.jsonl*")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"--data_dir '{data_dir}' holds no books-*.jsonl(.gz) (--data_dir must hold "
                                f"{DATA_SOURCES['gutenberg']}).")
    books = {}
    for path in files:
        for record in read_records(path, ["id"], arg_name="data_dir", text_field="text"):
            books[record["id"]] = [" ".join(p.split()) for p in record["_text"].split("\n\n") if p.strip()]
    if len(books) < 2 * GUTENBERG_HELD_OUT_BOOKS + 1:
        raise ValueError(f"--data_dir '{data_dir}' has {len(books)} books; the gutenberg corpus needs at least "
                         f"{2 * GUTENBERG_HELD_OUT_BOOKS + 1} (validation, test and training books).")
    ids = sorted(books)
    held_out = np.random.default_rng(0).permutation(len(ids))[: 2 * GUTENBERG_HELD_OUT_BOOKS]
    validation = sorted(ids[i] for i in held_out[:GUTENBERG_HELD_OUT_BOOKS])
    test = sorted(ids[i] for i in held_out[GUTENBERG_HELD_OUT_BOOKS:])
    train = [i for i in ids if i not in validation and i not in test]
    return {"books": {"train": train, "validation": validation, "test": test},
            **{split: [line for book in names for line in books[book]]
               for split, names in (("train", train), ("validation", validation), ("test", test))}}


def split_paths(data_dir: str) -> dict[str, Path]:
    """The three WikiText-2 files in `data_dir`, or FileNotFoundError naming --data_dir and what is missing."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"--data_dir: no such directory: '{data_dir}'. Pass the folder holding "
                                f"{DATA_SOURCES['wikitext2']}.")
    paths = {split: folder / name for split, name in SPLIT_FILES.items()}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"--data_dir '{data_dir}' lacks {', '.join(missing)} (it needs "
                                f"{', '.join(SPLIT_FILES.values())}).")
    return paths




def read_lines(path: Path) -> list[str]:
    """Non-blank lines of a WikiText file; its `<unk>` becomes the tokenizer's `[UNK]` (one token, id 1)."""
    records = read_records(path, [], arg_name="data_dir", text_field="text")
    return [r["_text"].replace("<unk>", "[UNK]") for r in records]


def get_tokenizer(train_lines: list[str], source: dict, vocab_size: int, output_dir: Path):
    """A WordPiece tokenizer trained on the train lines, saved in `output_dir/tokenizer` and reused when it was
    trained on the same `source` (what identifies the training text) with the same vocabulary size."""
    folder = output_dir / "tokenizer"
    meta_path = folder / "compare_lm_tokenizer.json"
    meta = {**source, "vocab_size": vocab_size}
    if meta_path.is_file() and json.loads(meta_path.read_text()) == meta:
        logger.info(f"Reusing the tokenizer in {folder}.")
        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    start = time.time()
    tokenizer = train_wordpiece_tokenizer(train_lines, vocab_size=vocab_size)
    tokenizer.save_pretrained(str(folder))
    meta_path.write_text(json.dumps(meta, indent=2))
    logger.info(f"Trained a WordPiece tokenizer ({len(tokenizer)} pieces) in {time.time() - start:.1f}s -> {folder}.")
    return tokenizer


def token_stream(lines: list[str], tokenizer, max_tokens: int | None) -> torch.Tensor:
    """All lines' word pieces, each line followed by `[SEP]` (end of line), as one 1-D tensor."""
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    (stream,) = group_into_blocks(ids, block_size=sum(len(x) + 1 for x in ids), separator=[tokenizer.sep_token_id])
    stream = torch.tensor(stream, dtype=torch.long)
    return stream[:max_tokens] if max_tokens else stream


def train_segments(stream: torch.Tensor, tokens_per_step: int) -> torch.Tensor:
    """The train stream cut into (num_segments, tokens_per_step): one segment is the data of one step."""
    num_segments = len(stream) // tokens_per_step
    if num_segments == 0:
        raise ValueError(f"--tokens_per_step ({tokens_per_step}) is more than the {len(stream)} train tokens; lower "
                         f"it or raise --max_train_tokens.")
    return stream[: num_segments * tokens_per_step].view(num_segments, tokens_per_step)


def segment_order(num_segments: int, steps: int, seed: int) -> list[int]:
    """Segment index of every step: a seeded shuffle of the segments, reshuffled after each pass (epoch)."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    while len(order) < steps:
        order.extend(rng.permutation(num_segments).tolist())
    return order[:steps]


def eval_blocks(stream: torch.Tensor, block_size: int, split: str) -> torch.Tensor:
    """(num_blocks, block_size) consecutive blocks; the tail shorter than a block is dropped."""
    num_blocks = len(stream) // block_size
    if num_blocks == 0:
        raise ValueError(f"The {split} split has {len(stream)} tokens, fewer than one --block_size ({block_size}); "
                         f"raise --max_eval_tokens or lower --block_size.")
    return stream[: num_blocks * block_size].view(num_blocks, block_size)



def load_data(args: argparse.Namespace, output_dir: Path):
    extra = {}
    if args.corpus == "gutenberg":
        lines = gutenberg_splits(args.data_dir)
        extra["books"] = lines.pop("books")
        tokenizer_source = {"data_dir": str(Path(args.data_dir).resolve()), "train_books": extra["books"]["train"]}
    else:
        paths = split_paths(args.data_dir)
        lines = {split: read_lines(path) for split, path in paths.items()}
        tokenizer_source = {"train_file": str(paths["train"].resolve()), "train_bytes": paths["train"].stat().st_size}
    tokenizer = get_tokenizer(lines["train"], tokenizer_source, args.vocab_size, output_dir)
    train = token_stream(lines["train"], tokenizer, args.max_train_tokens)
    data = {split: eval_blocks(token_stream(lines[split], tokenizer, args.max_eval_tokens), args.block_size, split)
            for split in ("validation", "test")}
    segments = train_segments(train, args.tokens_per_step)
    info = {"corpus": args.corpus, **extra, "data_dir": str(Path(args.data_dir).resolve()), "vocab_size": len(tokenizer),
            "train_tokens": len(train), "train_segments": len(segments),
            "train_tokens_seen_per_model": args.steps * args.tokens_per_step,
            "validation_blocks": len(data["validation"]), "test_blocks": len(data["test"]),
            "scored_test_tokens": len(data["test"]) * (args.block_size - args.block_size // args.window_size)}
    logger.info(f"Data: {info}")
    return tokenizer, segments, data, info
