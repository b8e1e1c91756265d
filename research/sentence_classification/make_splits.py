# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Writes the compare_long_docs splits of a dataset (train = the official training split less a fixed stratified
10% dev, dev, official test) as jsonl files with `text` and `label`, for `run_sentence_classification.py`:

    python -m research.sentence_classification.make_splits --data_dir DATA --dataset hyperpartisan \
        --output_dir outputs/sentence_splits

The texts are those of `research.compare_long_docs.data` (Hyperpartisan: title, blank line, text; IMDB: `<br />`
as newlines), so the runs read the same documents as the comparison's sentence models.

`--regex_sentences` writes `<dataset>-regex/` instead: each document as the comparison's own sentences
(`research.compare_long_docs.data.split_sentences`, a regular expression) separated by blank lines, so that the
product's splitter, which splits per paragraph, starts from the comparison's sentences (run it with
`--min_sentence_tokens 1` to merge nothing, as the comparison did).

For a choice made on dev where encoding a whole dataset does not fit the machine, `--no_test` writes no test split
and `--train_size` / `--dev_size` draw stratified samples (`load_dataset_splits`, seed 0); the folder is then
`<dataset>-<training documents>/`."""

import argparse
import json
from pathlib import Path

from research.compare_long_docs.data import DATASETS, load_dataset_splits, split_sentences


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--dataset", required=True, choices=DATASETS)
    parser.add_argument("--output_dir", default="outputs/sentence_splits")
    parser.add_argument("--regex_sentences", action="store_true",
                        help="Write <dataset>-regex/: the comparison's sentences, one paragraph each.")
    parser.add_argument("--train_size", type=int, help="A stratified sample of this many training documents.")
    parser.add_argument("--dev_size", type=int, help="A stratified dev split of this many documents (default 10%%).")
    parser.add_argument("--no_test", action="store_true", help="Write the train and dev splits only.")
    args = parser.parse_args(argv)
    data = load_dataset_splits(args.dataset, Path(args.data_dir), train_size=args.train_size, dev_size=args.dev_size)
    name = f"{args.dataset}-regex" if args.regex_sentences else args.dataset
    if args.no_test or args.train_size is not None or args.dev_size is not None:
        name += f"-{len(data['train']['text'])}"
    folder = Path(args.output_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev") if args.no_test else ("train", "dev", "test"):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for text, label in zip(data[split]["text"], data[split]["label"]):
                if args.regex_sentences:
                    text = "\n\n".join(split_sentences(text, max_sentences=10**6))
                f.write(json.dumps({"text": text, "label": data["labels"][int(label)]}) + "\n")
        print(f"{folder / split}.jsonl: {len(data[split]['text'])} documents")


if __name__ == "__main__":
    main()
