#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Train a BERT-style WordPiece tokenizer for RAN with the `tokenizers` library, offline.

The result is a `PreTrainedTokenizerFast` directory that `AutoTokenizer.from_pretrained(DIR)` loads:
[PAD]=0 (RAN's `pad_token_id`), [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4; `[CLS] text [SEP]` templates; the BERT
normaliser (lower-cased unless `--no_lowercase`) and pre-tokeniser; and no 512-token cap (`model_max_length` = 1e30).

Input: text files (`.txt`, one document per line; blank lines skipped), `.jsonl`/`.json` (field `--text_column_name`,
default `text`) or `.csv`/`.tsv` with a header, each optionally gzipped (`--train_files`, read into memory); or a
large corpus of jsonl shards streamed one document at a time (`--train_dirs`: directories of `*.jsonl(.gz)` or
single shards), with `--split_column` to train only on the documents of `--train_split` and to report word pieces
per word on the held-out documents of `--heldout_split`.

    python run_scripts/train_tokenizer.py --train_files corpus.txt more.jsonl.gz --vocab_size 16000 \
        --output_dir outputs/tokenizer
    python run_scripts/train_tokenizer.py --train_dirs DATA/gutenberg-more DATA/gutenberg \
        --split_column split --vocab_size 24000 --output_dir outputs/tokenizer-books
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from run_scripts.helpers.corpus import corpus_shards, iter_documents, streamed_documents
from run_scripts.helpers.data_files import check_file, file_format, read_records, split_columns
from run_scripts.helpers.reports import command_line
from run_scripts.helpers.tokenizer import train_wordpiece_tokenizer


logger = logging.getLogger("run_scripts")


@dataclass
class TokenizerArguments:
    train_files: list[str] = field(
        default=None, metadata={"help": "Text files (.txt/.jsonl/.json/.csv, optionally .gz) to train on.",
                                "nargs": "+"},
    )
    train_dirs: list[str] = field(
        default=None, metadata={"help": "Corpus streamed document by document: directories of .jsonl/.jsonl.gz "
                                        "shards, or single shards (one JSON document per line).", "nargs": "+"},
    )
    split_column: str | None = field(
        default=None, metadata={"help": "With --train_dirs: the field naming a document's split; only --train_split "
                                        "documents are trained on (a document without the field counts as train)."},
    )
    train_split: str = field(default="train", metadata={"help": "With --split_column: the split trained on."})
    heldout_split: str | None = field(
        default="validation", metadata={"help": "With --split_column: word pieces per word are measured on the "
                                                "documents of this split (none: skip)."},
    )
    output_dir: str = field(default=None, metadata={"help": "Where to save the tokenizer."})
    vocab_size: int = field(default=16000, metadata={"help": "Vocabulary size (special tokens included)."})
    min_frequency: int = field(default=2, metadata={"help": "Minimum frequency of a merged pair."})
    lowercase: bool = field(default=True, metadata={"help": "Lower-case and strip accents (--no_lowercase: keep)."})
    limit_alphabet: int = field(default=1000, metadata={"help": "Most frequent initial characters kept."})
    text_column_name: str = field(
        default="text", metadata={"help": "Text field of .jsonl/.csv files; several, comma-separated, are joined."}
    )
    skip_empty_documents: bool = field(
        default=True, metadata={"help": "Skip empty documents of .jsonl/.csv files with a warning (False: fail)."}
    )


class DocumentCounter:
    """An iterable over texts that counts what it yields (the tokenizer trainer consumes a stream once)."""

    def __init__(self, texts):
        self.texts, self.count = texts, 0

    def __iter__(self):
        for text in self.texts:
            self.count += 1
            yield text


def pieces_per_word(tokenizer, documents) -> dict:
    """Word pieces per whitespace-separated word, and the share of [UNK] pieces, over `documents` (dicts with
    "text"), tokenized one document at a time."""
    n_docs = n_words = n_pieces = n_unk = 0
    for doc in documents:
        ids = tokenizer(doc["text"], add_special_tokens=False)["input_ids"]
        n_docs += 1
        n_words += len(doc["text"].split())
        n_pieces += len(ids)
        n_unk += sum(1 for i in ids if i == tokenizer.unk_token_id)
    return {"documents": n_docs, "words": n_words, "pieces": n_pieces,
            "pieces_per_word": round(n_pieces / max(n_words, 1), 4), "unk_share": n_unk / max(n_pieces, 1)}


def check_arguments(args: TokenizerArguments) -> None:
    if not args.train_files and not args.train_dirs:
        raise ValueError("--train_files (.txt/.jsonl/.json/.csv files read into memory) or --train_dirs (jsonl "
                         "shards, streamed) is required.")
    if args.train_files and args.train_dirs:
        raise ValueError("Pass --train_files or --train_dirs, not both.")
    if not args.output_dir:
        raise ValueError("--output_dir is required.")
    if args.vocab_size < 6:
        raise ValueError(f"--vocab_size must be more than the 5 special tokens, got {args.vocab_size}.")


def training_texts(args: TokenizerArguments, shards: list | None):
    """The texts to train on: every document of `--train_files` in memory (a list), or the documents of the
    `--train_dirs` `shards` streamed (a `DocumentCounter`, which counts them as the trainer reads them)."""
    if args.train_files:
        texts = []
        for path in args.train_files:
            p = check_file(path, "train_files")
            records = read_records(p, [], "train_files", text_field=split_columns(args.text_column_name),
                                   skip_empty=args.skip_empty_documents)
            texts += [r["_text"] for r in records]
            logger.info(f"{path}: {len(records)} {'lines' if file_format(p) == 'text' else 'documents'}")
        return texts
    logger.info(f"Streaming the documents of {len(shards)} shard(s)"
                + (f" with {args.split_column} == {args.train_split!r}" if args.split_column else ""))
    return DocumentCounter(doc["text"] for doc in streamed_documents(shards, args.text_column_name,
                                                                     args.split_column, args.train_split))


def tokenizer_stats(tokenizer, args: TokenizerArguments, texts, shards: list | None) -> dict:
    """The vocabulary, the documents trained on, characters per token on the first texts (`sample_size` of them)
    and, for a streamed corpus with `--heldout_split`, word pieces per word and the [UNK] share on held-out text."""
    if args.train_files:
        sources, n_documents, sample = args.train_files, len(texts), texts[:2000]
    else:
        documents = iter_documents(shards, args.text_column_name, args.split_column, args.train_split)
        sources, n_documents, sample = args.train_dirs, texts.count, [doc["text"] for _, doc in zip(range(20),
                                                                                                    documents)]
    n_tokens = sum(len(x) for x in tokenizer(sample, add_special_tokens=False)["input_ids"])
    info = {"vocab_size": len(tokenizer), "documents": n_documents, "lowercase": args.lowercase,
            "chars_per_token": round(sum(len(t) for t in sample) / max(n_tokens, 1), 2), "sample_size": len(sample),
            "train_files": sources,
            "special_tokens": {t: tokenizer.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                                 "[MASK]"]}}
    if args.train_dirs and args.split_column and args.heldout_split:
        info["heldout"] = pieces_per_word(tokenizer, iter_documents(shards, args.text_column_name,
                                                                    args.split_column, args.heldout_split))
    return info


def write_readme(args: TokenizerArguments, info: dict, argv: list[str]) -> None:
    heldout = ""
    if "heldout" in info:
        h = info["heldout"]
        heldout = (f" On the {h['documents']} held-out documents ({args.split_column} == {args.heldout_split!r}, "
                   f"{h['words']} words): {h['pieces_per_word']} word pieces per word, {h['unk_share']:.5f} of the "
                   f"pieces [UNK].")
    with open(os.path.join(args.output_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write(
            "# WordPiece tokenizer for RAN\n\n"
            f"Trained with `run_scripts/train_tokenizer.py` (`tokenizers` WordPiece) on {info['documents']} "
            f"documents/lines of {', '.join(f'`{p}`' for p in info['train_files'])}: vocabulary "
            f"{info['vocab_size']}, {'lower-cased' if args.lowercase else 'cased'}, {info['chars_per_token']} "
            f"characters per token (first {info['sample_size']} texts).{heldout} Special tokens: "
            f"{info['special_tokens']}. `model_max_length` is unlimited (RAN has no 512-token cap).\n\n"
            "```python\nfrom transformers import AutoTokenizer\n"
            f"tokenizer = AutoTokenizer.from_pretrained(\"{os.path.abspath(args.output_dir)}\")\n```\n\n"
            f"Command:\n\n```bash\n{command_line('train_tokenizer.py', argv)}\n```\n")


def main(argv: list[str] | None = None):
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO,
                        handlers=[logging.StreamHandler(sys.stdout)], force=True)
    (args,) = HfArgumentParser(TokenizerArguments).parse_args_into_dataclasses(args=argv)
    check_arguments(args)
    started = time.time()
    shards = corpus_shards(args.train_dirs, "train_dirs") if args.train_dirs else None
    texts = training_texts(args, shards)
    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                          lowercase=args.lowercase, limit_alphabet=args.limit_alphabet)
    tokenizer.save_pretrained(args.output_dir)
    info = tokenizer_stats(tokenizer, args, texts, shards)
    write_readme(args, info, argv)
    info["seconds"] = round(time.time() - started, 1)
    with open(os.path.join(args.output_dir, "tokenizer_stats.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    logger.info(f"Saved the tokenizer to {args.output_dir} in {info['seconds']} s: {json.dumps(info)}")
    return tokenizer


if __name__ == "__main__":
    main()
