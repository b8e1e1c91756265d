# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Score a run's test predictions on the documents of up to and over 512 tokens as another tokenizer counts them.

`run_classification.py` splits its test scores at 512 tokens of the run's own tokenizer, so two models with different
vocabularies split the test set differently (on Hyperpartisan, 393 articles are over 512 tokens of the books
tokenizer and 371 of BERT's uncased vocabulary). This script rescores a run's `test_predictions.jsonl` on the split
of `--tokenizer`, so that runs with different tokenizers are compared on the same documents:

    python -m research.pretraining.length_split outputs/minilm/first512-seed42 --tokenizer pretrained/ran-books-small

The test file defaults to the main job's (Hyperpartisan by-article test split); the length counts `[CLS]` and `[SEP]`
as `run_classification.py` does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

import ran_hf  # noqa: F401  (registers RAN with the Auto classes: a RAN checkpoint's tokenizer loads without a prompt)
from run_scripts.helpers.data_files import read_records
from run_scripts.helpers.reports import classification_scores

MAIN_JOB_TEST_FILE = Path(__file__).resolve().parents[2] / "run_scripts/data/hyperpartisan/test-byarticle.jsonl.gz"


def token_lengths(test_file: Path, tokenizer, text_field: str = "text") -> dict[int, int]:
    """Each test document's length in tokens of `tokenizer`, special tokens included, by its line number."""
    records = read_records(test_file, [], "test_file", text_field=text_field)
    lengths = tokenizer([r["_text"] for r in records], add_special_tokens=True)["input_ids"]
    return {r["_line"]: len(ids) for r, ids in zip(records, lengths)}


def split_scores(predictions: list[dict], lengths: dict[int, int], limit: int = 512) -> dict:
    """Accuracy and macro-F1 of `predictions` (rows of `test_predictions.jsonl`) overall, on the documents of at most
    `limit` tokens and on those over it (lengths by line number), with the number of documents in each part."""
    labels = sorted({p["label"] for p in predictions} | {p["prediction"] for p in predictions})
    index = {label: i for i, label in enumerate(labels)}
    y_true = np.array([index[p["label"]] for p in predictions])
    y_pred = np.array([index[p["prediction"]] for p in predictions])
    long = np.array([lengths[p["line"]] > limit for p in predictions])
    scores = {}
    for name, keep in (("all", np.ones_like(long)), (f"le_{limit}", ~long), (f"over_{limit}", long)):
        part = classification_scores(y_true[keep], y_pred[keep])
        scores[name] = {"documents": int(keep.sum()), "accuracy": round(part["accuracy"], 4),
                        "macro_f1": round(part["macro_f1"], 4)}
    return scores


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run folders holding test_predictions.jsonl")
    parser.add_argument("--tokenizer", required=True, help="the tokenizer (folder) whose counts split the test set")
    parser.add_argument("--test_file", type=Path, default=MAIN_JOB_TEST_FILE)
    parser.add_argument("--text_column_name", default="text")
    args = parser.parse_args(argv)
    lengths = token_lengths(args.test_file, AutoTokenizer.from_pretrained(args.tokenizer), args.text_column_name)
    result = {}
    for run_dir in args.run_dirs:
        path = run_dir / "test_predictions.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{run_dir}: no test_predictions.jsonl (run_classification.py --do_predict "
                                    "writes it).")
        predictions = [json.loads(line) for line in path.read_text().splitlines()]
        missing = [p["line"] for p in predictions if p["line"] not in lengths]
        if missing:
            raise ValueError(f"{path}: lines {missing[:5]} are not in --test_file {args.test_file}; pass the test "
                             "file the run predicted on.")
        result[str(run_dir)] = split_scores(predictions, lengths)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
