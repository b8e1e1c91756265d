# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""What the document classification scripts (`run_classification.py`, `run_sentence_classification.py`) share:
reading and checking labels, the validation split carved from the training split, test scores next to the
majority class, and the predictions file. Every error names the flag, the file and the line."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import field

import numpy as np
import torch

from run_scripts.helpers.dependencies import script_dependencies
from run_scripts.helpers.reports import classification_scores


logger = logging.getLogger("run_scripts")

LONG = 512  # test documents of more than this many tokens are scored apart (what a 512-token model would cut)


# ----------------------------------------------------------------------------------------------------------------------
# labels
# ----------------------------------------------------------------------------------------------------------------------


def _label_key(value, path, line, arg_name) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"--{arg_name} '{path}', line {line}: label {value!r} is not a class (regression is not "
                             f"supported by this script); use int or string labels.")
        value = int(value)
    if isinstance(value, (int, str)):
        key = str(value).strip()
        if key:
            return key
    raise ValueError(f"--{arg_name} '{path}', line {line}: invalid label {value!r}; use an int, a string or a list "
                     f"of them (multi-label).")


def parse_labels(records, label_field, path, arg_name,
                 class_names: dict[str, str] | None = None) -> tuple[bool, list]:
    """(multi_label, per-record label keys: a str, or a list of str for multi-label). Labels of different types in
    one file (`check_label_types`) are an error unless `class_names` (`--class_names`) names every one."""
    kinds = {isinstance(r[label_field], (list, tuple)) for r in records}
    if len(kinds) > 1:
        first_list = next(r["_line"] for r in records if isinstance(r[label_field], (list, tuple)))
        first_scalar = next(r["_line"] for r in records if not isinstance(r[label_field], (list, tuple)))
        raise ValueError(f"--{arg_name} '{path}': field {label_field!r} is a list on line {first_list} (multi-label) "
                         f"but a single value on line {first_scalar}; use one kind for the whole file.")
    multi = kinds == {True}
    keys = []
    for r in records:
        value = r[label_field]
        if multi:
            keys.append(sorted({_label_key(v, path, r["_line"], arg_name) for v in value}))
        else:
            keys.append(_label_key(value, path, r["_line"], arg_name))
    check_label_types(records, label_field, multi, keys, f"--{arg_name} '{path}'", class_names)
    return multi, keys


def label_type(value) -> str:
    """What kind of label `value` is, as the file wrote it: "boolean", "integer" (an int, or a float that is one),
    "integer as text" (a string of digits, as "1") or "text"."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer"
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return "integer as text"
    return "text"


def check_label_types(records, label_field, multi: bool, keys: list, source: str,
                      class_names: dict[str, str] | None = None) -> None:
    """A ValueError naming the types and their first lines when the labels of one file are of different types
    (`label_type`): `yes`, `1` and `0` would be three classes, the string "1" and the integer 1 one, and neither is
    likely what the file means. Accepted when `class_names` names every label value (as text, so "1" and 1 are
    both named by `1=...`): the classes are then the ones named."""
    found: dict[str, list] = {}
    for r in records:
        for value in (r[label_field] if multi else [r[label_field]]):
            found.setdefault(label_type(value), []).append((r["_line"], value))
    if len(found) < 2:
        return
    values = {k for key in keys for k in (key if multi else [key])}
    if class_names and values <= set(class_names):
        return
    detail = "; ".join(
        f"{kind} on line(s) {', '.join(str(line) for line, _ in rows[:5])}{', ...' if len(rows) > 5 else ''} "
        f"(e.g. {rows[0][1]!r})" for kind, rows in found.items())
    raise ValueError(
        f"{source}: the labels in field {label_field!r} are of different types: {detail}. Mixed types make classes "
        f"the file likely does not mean (the string \"1\" and the integer 1 are one class, \"yes\" and 1 two). Write "
        f"every label the same way, or name every label value with --class_names (e.g. '0=no,1=yes'; \"1\" and 1 "
        f"are then both the class named by 1=...).")


def sort_labels(keys) -> list[str]:
    try:
        return sorted(keys, key=int)
    except ValueError:
        return sorted(keys)


def parse_class_names(spec: str | None) -> dict[str, str]:
    """`--class_names '0=negative,1=positive'` -> {'0': 'negative', '1': 'positive'}."""
    if not spec:
        return {}
    names = {}
    for item in spec.split(","):
        value, sep, name = (part.strip() for part in item.partition("="))
        if not sep or not value or not name:
            raise ValueError(f"--class_names: {item!r} is not 'value=name' (e.g. '0=negative,1=positive').")
        names[value] = name
    if len(set(names.values())) < len(names):
        raise ValueError(f"--class_names {spec!r}: two values have the same name; give every label its own name.")
    return names


def training_label_names(multi: bool, keys: list, arg: str, source: str, class_names: dict[str, str] | None = None,
                         dataset_order: list[str] | None = None) -> list[str]:
    """The model's labels, in id order, from the training split's label `keys` (`parse_labels`): sorted (as
    integers where they all are), or in `dataset_order` (a `datasets.ClassLabel`'s names) when that holds them all,
    then renamed by `class_names` (`--class_names`), which must name every one."""
    class_names = class_names or {}
    labels = sort_labels({k for key in keys for k in (key if multi else [key])})
    if dataset_order is not None and set(labels) <= set(dataset_order):
        labels = list(dataset_order)  # the dataset's own label ids and order
    if len(labels) < 2 and not multi:
        raise ValueError(f"--{arg} '{source}' has a single label ({labels}); classification needs at least two.")
    unnamed = [k for k in labels if class_names and k not in class_names]
    if unnamed:
        raise ValueError(f"--class_names names the values {sorted(class_names)} but not the training label(s) "
                         f"{unnamed}; give every label a name.")
    return [class_names.get(k, k) for k in labels]


def class_names_field():
    """The `--class_names` option of both classification scripts (a dataclass field of their data arguments)."""
    return field(
        default=None,
        metadata={"help": "Names for the label values, 'value=name,...' (e.g. '0=negative,1=positive'): the saved "
                          "config's id2label, the predictions and `pipeline` then use the names. Every training "
                          "label needs one. Default: the values as they are (a string label is its own name)."},
    )


def resolve_split_labels(splits: dict, label_field: str, class_names_spec: str | None,
                         trained_config: Callable[[], object], dataset_order: list[str] | None = None):
    """The model's labels and every split's label keys, as both classification scripts name them: from the training
    split (`parse_labels`, named by `--class_names` (`class_names_spec`), sorted or in `dataset_order`) or, without
    training, from the trained model's config (`trained_config()`, called only then); every split's labels
    renamed and checked against them (`check_split_labels`). `splits`: split -> (flag, source, records); a split
    whose records have no `label_field` (a test file to predict) is left out. Returns (multi_label, the labels in
    id order, split -> label keys)."""
    class_names = parse_class_names(class_names_spec)
    parsed = {split: parse_labels(records, label_field, source, arg, class_names)
              for split, (arg, source, records) in splits.items() if records and label_field in records[0]}
    if "train" in parsed:
        multi, keys = parsed["train"]
        arg, source, _ = splits["train"]
        label_list = training_label_names(multi, keys, arg, source, class_names, dataset_order)
    else:
        multi, label_list = config_label_names(trained_config())
    return multi, label_list, check_split_labels(parsed, splits, multi, label_list, class_names)


def config_label_names(config) -> tuple[bool, list[str]]:
    """(multi_label, the labels in id order) of a trained model's config: evaluation or prediction without training."""
    multi = config.problem_type == "multi_label_classification"
    return multi, [config.id2label[i] for i in range(config.num_labels)]


def check_known_labels(keys, multi, label2id, path, arg_name, records):
    unseen = {}
    for key, r in zip(keys, records):
        for k in (key if multi else [key]):
            if k not in label2id:
                unseen.setdefault(k, []).append(r["_line"])
    if unseen:
        detail = "; ".join(f"{k!r} (line {', '.join(map(str, v[:5]))}{', ...' if len(v) > 5 else ''})"
                           for k, v in sorted(unseen.items()))
        raise ValueError(
            f"--{arg_name} '{path}' has label(s) never seen in the training data: {detail}. Known labels: "
            f"{sorted(label2id)}. A classifier cannot predict a class it was not trained on: fix these labels, "
            f"add training examples of them, or drop these documents."
        )


def check_split_labels(parsed: dict, splits: dict, multi: bool, label_list: list[str],
                       class_names: dict[str, str] | None = None) -> dict[str, list]:
    """Every split's label keys (`parsed`: split -> `parse_labels` output; `splits`: split -> (flag, source,
    records)) renamed by `class_names` and checked against the model's labels: the same kind (single- or
    multi-label) as the training data, and no label the model does not have. Returns split -> keys."""
    class_names = class_names or {}
    label2id = {label: i for i, label in enumerate(label_list)}
    checked = {}
    for split, (multi_split, keys) in parsed.items():
        arg, source, records = splits[split]
        if multi_split != multi and len(records):
            raise ValueError(f"--{arg} '{source}': labels are "
                             f"{'lists (multi-label)' if multi_split else 'single values'} but the training data "
                             f"is {'multi-label' if multi else 'single-label'}.")
        keys = [[class_names.get(k, k) for k in key] if multi else class_names.get(key, key) for key in keys]
        check_known_labels(keys, multi, label2id, source, arg, records)
        checked[split] = keys
    return checked


def encode_labels(keys: list, label_list: list[str], multi: bool) -> np.ndarray:
    """Label keys -> (N,) int64 ids, or (N, num_labels) float32 multi-hot rows for multi-label."""
    label2id = {label: i for i, label in enumerate(label_list)}
    if multi:
        out = np.zeros((len(keys), len(label_list)), dtype=np.float32)
        for row, ks in enumerate(keys):
            out[row, [label2id[k] for k in ks]] = 1.0
        return out
    return np.array([label2id[k] for k in keys], dtype=np.int64)


# ----------------------------------------------------------------------------------------------------------------------
# the validation split
# ----------------------------------------------------------------------------------------------------------------------


def validation_indices(labels: np.ndarray, percentage: float, seed: int,
                       num_labels: int) -> tuple[list[int], list[int], bool]:
    """Sorted training and validation indices when a `percentage` of the training documents is held out
    (`--validation_split_percentage`). `labels` are the documents' (N,) label ids, or (N, num_labels) multi-hot rows;
    single-label ids stratify the split where every class has two documents and the split has room for every class.
    Returns (train, validation, stratified)."""
    with script_dependencies():
        from sklearn.model_selection import train_test_split

    n = len(labels)
    n_val = int(round(n * percentage / 100))
    if n_val < 1 or n - n_val < 1:
        raise ValueError(f"--validation_split_percentage {percentage} of {n} training documents leaves no validation "
                         f"or no training documents; pass --validation_file.")
    stratify = None
    if labels.dtype.kind in "iu" and labels.ndim == 1 and np.bincount(labels).min() >= 2 and n_val >= num_labels:
        stratify = labels
    train_idx, val_idx = train_test_split(np.arange(n), test_size=n_val, random_state=seed, stratify=stratify)
    logger.info(f"Validation split: {n_val} of the {n} training documents (seed {seed}"
                f"{', stratified' if stratify is not None else ''}); the model trains on the other {n - n_val}.")
    return sorted(train_idx.tolist()), sorted(val_idx.tolist()), stratify is not None


# ----------------------------------------------------------------------------------------------------------------------
# test scores and predictions
# ----------------------------------------------------------------------------------------------------------------------


def logits_to_predictions(logits: np.ndarray, multi: bool, threshold: float) -> np.ndarray:
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    if multi:
        return (1.0 / (1.0 + np.exp(-logits)) > threshold).astype(int)
    return logits.argmax(-1)


def majority_baseline(train_labels: np.ndarray, n: int, multi: bool) -> np.ndarray:
    """Most frequent training label (multi-label: every label present in more than half the training docs)."""
    if multi:
        return np.tile((train_labels.mean(0) > 0.5).astype(int), (n, 1))
    return np.full(n, np.bincount(train_labels).argmax())


def score_test_split(y_true: np.ndarray, y_pred: np.ndarray, full_length: np.ndarray, train_labels: np.ndarray | None,
                     multi: bool, label_list: list[str], model_name: str) -> tuple[dict, dict]:
    """Test metrics and the printed table's rows: the scores overall (`test_*`), on the documents of at most and of
    more than `LONG` tokens before truncation (`test_le_512_*`, `test_over_512_*`), and of the majority class of
    `train_labels` (`baseline_*`; the test labels' own majority, marked as such, where no training split is given).
    Returns (metrics, table rows)."""
    scores = classification_scores(y_true, y_pred)
    metrics = {**{f"test_{k}": v for k, v in scores.items()}, "test_samples": len(y_true)}
    table = {f"{model_name} (this run)": scores}
    for name, sign, keep in (("le_512", "<=", full_length <= LONG), ("over_512", ">", full_length > LONG)):
        if keep.any():
            part = classification_scores(y_true[keep], y_pred[keep])
            metrics.update({f"test_{name}_{k}": v for k, v in part.items()})
            metrics[f"test_{name}_samples"] = int(keep.sum())
            table[f"{model_name}, the {int(keep.sum())} documents of {sign} {LONG} tokens"] = part
    baseline_source = "training labels" if train_labels is not None else "test labels (no training split)"
    train_labels = y_true if train_labels is None else train_labels
    baseline = classification_scores(y_true, majority_baseline(train_labels, len(y_true), multi))
    metrics.update({f"baseline_{k}": v for k, v in baseline.items()})
    majority = ("labels in > 50% of training docs" if multi
                else repr(label_list[int(np.bincount(train_labels).argmax())]))
    table[f"majority class of the {baseline_source} ({majority})"] = baseline
    return metrics, table


def write_predictions(output_dir, lines, lengths, logits, y_pred, y_true, label_list, multi) -> str:
    """`output_dir/test_predictions.jsonl`: per document its `line`, `tokens` (before truncation), the gold `label`
    (labelled data only), the `prediction` (label names; a list for multi-label) and every label's `probabilities`
    (softmax; sigmoid for multi-label)."""
    os.makedirs(output_dir, exist_ok=True)
    logits = torch.from_numpy(np.asarray(logits)).float()
    probs = (torch.sigmoid(logits) if multi else torch.softmax(logits, -1)).numpy()

    def names(value):
        return [label_list[i] for i in np.flatnonzero(value)] if multi else label_list[int(value)]

    path = os.path.join(output_dir, "test_predictions.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row, (line, length, pred, p) in enumerate(zip(lines, lengths, y_pred, probs)):
            record = {"line": line, "tokens": int(length)}
            if y_true is not None:
                record["label"] = names(y_true[row])
            record.update({"prediction": names(pred),
                           "probabilities": {label: round(float(x), 5) for label, x in zip(label_list, p)}})
            f.write(json.dumps(record) + "\n")
    return path
