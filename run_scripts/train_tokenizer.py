#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Train a BERT-style WordPiece tokenizer for RAN with the `tokenizers` library, offline.

The result is a `PreTrainedTokenizerFast` directory that `AutoTokenizer.from_pretrained(DIR)` loads:
[PAD]=0 (RAN's `pad_token_id`), [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4; `[CLS] text [SEP]` templates; the BERT
normaliser (lower-cased unless `--no_lowercase`) and pre-tokeniser; and no 512-token cap (`model_max_length` = 1e30).

Input: text files (`.txt`, one document per line; blank lines skipped), `.jsonl`/`.json` (field `--text_column_name`,
default `text`) or `.csv`/`.tsv` with a header, each optionally gzipped.

    python run_scripts/train_tokenizer.py --train_files corpus.txt more.jsonl.gz --vocab_size 16000 \
        --output_dir outputs/tokenizer
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

from transformers import HfArgumentParser

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


def main(argv: list[str] | None = None):
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO,
                        handlers=[logging.StreamHandler(sys.stdout)], force=True)
    (args,) = HfArgumentParser(TokenizerArguments).parse_args_into_dataclasses(args=argv)
    if not args.train_files:
        raise ValueError("--train_files is required (one or more .txt/.jsonl/.json/.csv files).")
    if not args.output_dir:
        raise ValueError("--output_dir is required.")
    if args.vocab_size < 6:
        raise ValueError(f"--vocab_size must be more than the 5 special tokens, got {args.vocab_size}.")
    started = time.time()
    texts = []
    for path in args.train_files:
        p = check_file(path, "train_files")
        records = read_records(p, [], "train_files", text_field=split_columns(args.text_column_name),
                               skip_empty=args.skip_empty_documents)
        texts += [r["_text"] for r in records]
        logger.info(f"{path}: {len(records)} {'lines' if file_format(p) == 'text' else 'documents'}")
    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                          lowercase=args.lowercase, limit_alphabet=args.limit_alphabet)
    tokenizer.save_pretrained(args.output_dir)
    n_tokens = sum(len(x) for x in tokenizer(texts[:2000], add_special_tokens=False)["input_ids"])
    n_chars = sum(len(t) for t in texts[:2000])
    info = {"vocab_size": len(tokenizer), "documents": len(texts), "lowercase": args.lowercase,
            "chars_per_token": round(n_chars / max(n_tokens, 1), 2), "train_files": args.train_files,
            "special_tokens": {t: tokenizer.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                                 "[MASK]"]}}
    with open(os.path.join(args.output_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write(
            "# WordPiece tokenizer for RAN\n\n"
            f"Trained with `run_scripts/train_tokenizer.py` (`tokenizers` WordPiece) on {len(texts)} documents/lines of "
            f"{', '.join(f'`{p}`' for p in args.train_files)}: vocabulary {len(tokenizer)}, "
            f"{'lower-cased' if args.lowercase else 'cased'}, {info['chars_per_token']} characters per token "
            f"(first 2,000 texts). Special tokens: {info['special_tokens']}. `model_max_length` is unlimited "
            f"(RAN has no 512-token cap).\n\n"
            "```python\nfrom transformers import AutoTokenizer\n"
            f"tokenizer = AutoTokenizer.from_pretrained(\"{os.path.abspath(args.output_dir)}\")\n```\n\n"
            f"Command:\n\n```bash\n{command_line('train_tokenizer.py', argv)}\n```\n")
    logger.info(f"Saved the tokenizer to {args.output_dir} in {time.time() - started:.1f} s: {json.dumps(info)}")
    return tokenizer


if __name__ == "__main__":
    main()
