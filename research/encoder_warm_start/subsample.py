# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Stratified random subsets of a dataset's train and test files, for the reduced protocol that fits 2 CPU cores.

    python -m research.encoder_warm_start.subsample --data_dir DATA/imdb --train 4000 --test 2000 --seed 0 \\
        --output_dir outputs/reduced/imdb

Reads `train.jsonl.gz` and `test.jsonl.gz` (`text`, `label`) from `--data_dir` and writes the same files with
`--train` and `--test` documents, each label's share kept (the shipped files are sorted by label, so the first N are
not a sample). The subsets are written outside the repository; only the command is kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os

import numpy as np


def read_jsonl(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def stratified_sample(rows: list[dict], size: int, seed: int) -> list[dict]:
    """`size` rows drawn without replacement, each label's count proportional to its share (largest remainders)."""
    if not 0 < size <= len(rows):
        raise ValueError(f"a sample of {size} from {len(rows)} documents")
    rng = np.random.default_rng(seed)
    labels = np.array([str(row["label"]) for row in rows])
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * size / len(rows)
    take = np.floor(quota).astype(int)
    take[np.argsort(take - quota)[: size - take.sum()]] += 1
    chosen = np.concatenate([rng.choice(np.flatnonzero(labels == c), n, replace=False)
                             for c, n in zip(classes, take)])
    return [rows[i] for i in np.sort(chosen)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--train", type=int, required=True)
    parser.add_argument("--test", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    for split, size in (("train", args.train), ("test", args.test)):
        rows = stratified_sample(read_jsonl(os.path.join(args.data_dir, f"{split}.jsonl.gz")), size, args.seed)
        with gzip.open(os.path.join(args.output_dir, f"{split}.jsonl.gz"), "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        print(f"{split}: {len(rows)} documents")


if __name__ == "__main__":
    main()
