# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""A pretraining corpus of long documents (books), streamed: the documents of gzipped jsonl shards as a `datasets`
`IterableDataset`, cut into long blocks that never cross two documents.

Nothing here holds the corpus in memory: the shards are read line by line, one document (one book, a few MB) at a
time, and `datasets` streams the tokenized blocks through a bounded shuffle buffer. `read_blocks` reads a small
split (the held-out documents) into memory.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets

from .data_files import named_decode_errors, open_text


logger = logging.getLogger("run_scripts")

SHARD_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")


def corpus_shards(paths: Sequence[str], arg_name: str) -> list[Path]:
    """The jsonl shards of `paths`: each path a `.jsonl`/`.jsonl.gz` file, or a directory whose `*.jsonl(.gz)` files
    are all taken (sorted by name). Errors name the argument and the path."""
    if not paths:
        raise ValueError(f"--{arg_name} needs at least one .jsonl/.jsonl.gz file or a directory of them.")
    shards: list[Path] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.lower().endswith(SHARD_SUFFIXES))
            if not found:
                raise FileNotFoundError(f"--{arg_name} '{path}': the directory holds no .jsonl or .jsonl.gz file.")
            shards += found
        elif p.is_file():
            if not p.name.lower().endswith(SHARD_SUFFIXES):
                raise ValueError(f"--{arg_name} '{path}': expected .jsonl or .jsonl.gz (one JSON document per line), "
                                 f"got '{p.name}'.")
            shards.append(p)
        else:
            raise FileNotFoundError(f"--{arg_name}: no such file or directory: '{path}'.")
    return shards


def iter_documents(shards: Sequence[str | Path], text_column: str = "text", split_column: str | None = None,
                   split: str | None = None) -> Iterator[dict]:
    """Yield `{"text": str, "document": "shard:line"}` for every document of the shards, in order.

    With `split_column`, only the documents whose field `split_column` equals `split` are yielded; a document
    without that field counts as training text (`split == "train"`), so a corpus with a held-out split and a plain
    one (e.g. `gutenberg-more/` and `gutenberg/`) can be read together. Empty documents are skipped."""
    for shard in shards:
        with open_text(Path(shard)) as f, named_decode_errors(Path(shard), f"'{shard}'"):
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"'{shard}', line {number}: not valid JSON ({err}); expected one JSON object "
                                     f"per line.") from None
                if not isinstance(record, dict) or not isinstance(record.get(text_column), str):
                    raise ValueError(f"'{shard}', line {number}: expected a JSON object with a string field "
                                     f"{text_column!r} (set another one with --text_column_name).")
                if split_column is not None and record.get(split_column, "train") != split:
                    continue
                if record[text_column].strip():
                    yield {"text": record[text_column], "document": f"{Path(shard).name}:{number}"}


def streamed_documents(shards: Sequence[str | Path], text_column: str = "text", split_column: str | None = None,
                       split: str | None = None) -> datasets.IterableDataset:
    """`iter_documents` as a `datasets.IterableDataset` with one shard per file (so `.shuffle()` also shuffles the
    file order, and workers split the files)."""
    return datasets.IterableDataset.from_generator(
        _generate_documents,
        gen_kwargs={"shards": [str(s) for s in shards], "text_column": text_column, "split_column": split_column,
                    "split": split},
        features=datasets.Features({"text": datasets.Value("string"), "document": datasets.Value("string")}),
    )


def _generate_documents(shards, text_column, split_column, split):
    yield from iter_documents(shards, text_column, split_column, split)


def cut_document(token_ids: Sequence[int], block_size: int, cls_id: int, sep_id: int,
                 min_block_size: int) -> list[list[int]]:
    """One document's word pieces (without special tokens) as blocks `[CLS] piece [SEP]` of at most `block_size`
    tokens, cut straight across paragraphs. The last, shorter block is kept if it has at least `min_block_size`
    tokens (special tokens included)."""
    if block_size < 3:
        raise ValueError(f"--block_size must be at least 3 ([CLS] token [SEP]), got {block_size}.")
    body = block_size - 2
    blocks = [[cls_id, *token_ids[i: i + body], sep_id] for i in range(0, len(token_ids), body)]
    if blocks and len(blocks[-1]) < max(min_block_size, 3):
        blocks.pop()
    return blocks


def tokenize_into_blocks(batch: dict, tokenizer, block_size: int, min_block_size: int) -> dict:
    """`datasets.map(batched=True)` function: a batch of documents -> the blocks of all of them, in order."""
    encoded = tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False)["input_ids"]
    blocks = [block for ids in encoded
              for block in cut_document(ids, block_size, tokenizer.cls_token_id, tokenizer.sep_token_id,
                                        min_block_size)]
    return {"input_ids": blocks}


def streamed_blocks(documents: datasets.IterableDataset, tokenizer, block_size: int, min_block_size: int,
                    documents_per_batch: int = 4) -> datasets.IterableDataset:
    """The documents tokenized and cut into blocks (`{"input_ids": [...]}`), lazily."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ValueError("The tokenizer needs [CLS] and [SEP] tokens to frame the blocks.")
    return documents.map(tokenize_into_blocks, batched=True, batch_size=documents_per_batch,
                         remove_columns=["text", "document"],
                         fn_kwargs={"tokenizer": tokenizer, "block_size": block_size,
                                    "min_block_size": min_block_size})


def read_blocks(shards: Sequence[str | Path], tokenizer, block_size: int, min_block_size: int,
                text_column: str = "text", split_column: str | None = None,
                split: str | None = None) -> tuple[list[list[int]], list[int]]:
    """The blocks of the shards read without streaming, one document at a time, and each document's length in
    tokens (with [CLS] and [SEP]): for the small validation set, which is held in memory."""
    blocks, lengths = [], []
    for doc in iter_documents(shards, text_column, split_column, split):
        ids = tokenizer(doc["text"], add_special_tokens=False)["input_ids"]
        lengths.append(len(ids) + 2)
        blocks += cut_document(ids, block_size, tokenizer.cls_token_id, tokenizer.sep_token_id, min_block_size)
    return blocks, lengths
