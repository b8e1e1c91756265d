#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Named-entity recognition on WHOLE documents with RAN (`RANForTokenClassification`) and the Transformers `Trainer`.

Data: CoNLL column files (`token POS chunk NER`, e.g. CoNLL-2003; the tag is the last column unless
`--label_column`): a `-DOCSTART-` line starts a document and a blank line ends a sentence. Every document is kept
whole: its sentences are joined into ONE input (hundreds to thousands of word pieces; no 512 cap, no truncation unless
`--max_length`). A file without `-DOCSTART-` lines is read one sentence per example (with a warning), as is any file
with `--document_level False`.

Word pieces: a word's tag goes on its first piece; other pieces, [CLS], [SEP] and pads get -100 (no loss). A word the
tokenizer turns into no piece at all (e.g. a lone control character) is replaced by [UNK] so every word is predicted.

Evaluation: entity-level precision / recall / F1 (and token accuracy) with `seqeval` (conlleval rules) on every word;
the per-type report goes to the log, `<split>_results.json` and the model card, and the test predictions to
`test_predictions.txt` (`word gold predicted`, CoNLL layout, sentences restored). A test file of words only (one
column: `word` per line, blank lines and `-DOCSTART-` as above) is predicted: `test_predictions.txt` gets `word
predicted` per line and no metrics are computed.
Tag sets: the training file's tags; a validation/test tag unseen in training is an error naming the tags.
An empty document (`-DOCSTART-` with no tokens after it) is an error naming its line; `--skip_empty_documents`
skips it with a warning instead.

From scratch (a cased WordPiece tokenizer is trained on the training words unless `--tokenizer_name` is given;
config flags as in run_classification.py) or from `--model_name_or_path`.

    python run_scripts/run_ner.py --train_file conll2003/train.txt --validation_file conll2003/valid.txt \
        --test_file conll2003/test.txt \
        --output_dir outputs/conll2003 --num_train_epochs 5
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
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    HfArgumentParser,
    TrainingArguments,
    set_seed,
)

from run_scripts.helpers.collapse import check_collapse, collapse_section, distinct_predictions
from run_scripts.helpers.data_files import check_file, named_decode_errors, open_text
from run_scripts.helpers.dependencies import script_dependencies
from run_scripts.helpers.model_args import (
    RANModelArguments,
    build_model,
    parameter_learning_rates,
    prediction_length,
    record_trained_length,
)
from run_scripts.helpers.reports import (
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


with script_dependencies("run_ner.py"):
    from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score

logger = logging.getLogger("run_scripts")

SCRIPT_DEFAULTS = trainer_defaults(
    "outputs/ner", learning_rate="1e-3", epochs="5", train_batch_size="4", eval_batch_size="8", logging_steps="20",
    warmup="0.1", best_metric="f1")


@dataclass
class ModelArguments(RANModelArguments):
    tokenizer_lowercase: bool = field(
        default=False, metadata={"help": "Lower-case in a tokenizer trained here (default cased: case helps NER)."}
    )


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None, metadata={"help": "CoNLL training file."})
    validation_file: str | None = field(default=None, metadata={"help": "CoNLL validation file (model selection)."})
    test_file: str | None = field(
        default=None,
        metadata={"help": "CoNLL test file. A file of one column (words, no tags) is predicted only: "
                          "test_predictions.txt is written and no metrics."},
    )
    label_column: int = field(default=-1, metadata={"help": "Column of the tag (default: the last)."})
    document_level: bool = field(
        default=True, metadata={"help": "Join the sentences of each -DOCSTART- document into one input."}
    )
    max_length: int | None = field(
        default=0, metadata={"help": "Truncate inputs to this many word pieces (0: no limit, the default). The saved "
                                     "model records it (config.max_length_trained); evaluating or predicting without "
                                     "training reads inputs at the recorded length unless this flag is given."}
    )
    skip_empty_documents: bool = field(default=False, metadata={"help": "Skip empty documents with a warning."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N train documents."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation docs."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test docs."})


# ----------------------------------------------------------------------------------------------------------------------
# CoNLL reading
# ----------------------------------------------------------------------------------------------------------------------


def read_conll(path, arg_name: str, label_column: int = -1, document_level: bool = True,
               skip_empty: bool = False, allow_untagged: bool = False) -> list[dict]:
    """Examples `{"words", "tags", "sentence_lengths", "line"}`: whole documents (split at `-DOCSTART-`) or single
    sentences (split at blank lines); `line` is where the example starts. With `allow_untagged`, a file of one
    column (words only, to predict on) gives `tags` None; a file mixing both is an error."""
    path = check_file(path, arg_name)
    documents, tagged, has_docstart = _conll_documents(path, arg_name, label_column, allow_untagged)
    if not has_docstart and document_level:
        logger.warning(f"--{arg_name} '{path}': no -DOCSTART- lines, so there are no documents to keep whole; every "
                       f"sentence is one example.")
        document_level = False
    if has_docstart:
        documents = _drop_empty_documents(documents, path, arg_name, skip_empty)
    examples = []
    for start, sentences in documents:
        for group in [sentences] if document_level else [[s] for s in sentences]:
            examples.append({"words": [w for _, words, _ in group for w in words],
                             "tags": [t for _, _, tags in group for t in tags] if tagged else None,
                             "sentence_lengths": [len(words) for _, words, _ in group],
                             "line": start if document_level else group[0][0]})
    if not examples:
        raise ValueError(f"--{arg_name} '{path}': no tokens found (expected CoNLL columns 'token ... tag').")
    return examples


def _conll_documents(path, arg_name: str, label_column: int, allow_untagged: bool) -> tuple[list, bool, bool]:
    """The file's documents as `(start line, [(start line, words, tags), ...])`, split at `-DOCSTART-` lines (one
    document without them) and into sentences at blank lines. Returns (documents, whether the lines have tags,
    whether there was a `-DOCSTART-`); a line without a tag is an error unless `allow_untagged`, and a file mixing
    tagged and untagged lines is always one."""
    documents, sentences = [], []
    words, tags, sentence_start, doc_start, has_docstart = [], [], None, 1, False
    first_tagged, first_untagged = None, None  # line numbers

    def end_sentence():
        nonlocal words, tags, sentence_start
        if words:
            sentences.append((sentence_start, words, tags))
        words, tags, sentence_start = [], [], None

    def end_document(next_start):
        nonlocal sentences, doc_start
        end_sentence()
        documents.append((doc_start, sentences))
        sentences, doc_start = [], next_start

    with open_text(path) as f, named_decode_errors(path, f"--{arg_name} '{path}'"):
        for number, raw in enumerate(f, start=1):
            line = raw.strip()
            if line.startswith("-DOCSTART-"):
                if has_docstart or sentences or words:
                    end_document(number)
                else:
                    doc_start = number
                has_docstart = True
                continue
            if not line:
                end_sentence()
                continue
            cols = line.split()
            if len(cols) < 2 and allow_untagged:
                first_untagged = first_untagged or number
                cols = [cols[0], None]
            elif len(cols) >= 2:
                first_tagged = first_tagged or number
            if sentence_start is None:
                sentence_start = number
            words.append(cols[0])
            tags.append(_tag(cols, label_column, path, arg_name, number, line))
    end_document(None)
    if first_tagged and first_untagged:
        raise ValueError(f"--{arg_name} '{path}': line {first_tagged} has a tag column but line {first_untagged} "
                         f"has only the word; give every line a tag (to evaluate) or none (to predict).")
    return documents, bool(first_tagged), has_docstart


def _tag(cols: list, label_column: int, path, arg_name: str, number: int, line: str) -> str | None:
    """The tag column of a line's `cols` (None for a word to predict on)."""
    if len(cols) < 2:
        raise ValueError(f"--{arg_name} '{path}', line {number}: expected at least two space-separated "
                         f"columns ('token ... tag', e.g. CoNLL-2003 'EU NNP B-NP B-ORG'), got {line!r}.")
    try:
        return cols[label_column]
    except IndexError:
        raise ValueError(f"--{arg_name} '{path}', line {number}: no column {label_column} in {line!r} "
                         f"(see --label_column).") from None


def _drop_empty_documents(documents: list, path, arg_name: str, skip_empty: bool) -> list:
    """The documents with at least one token; a `-DOCSTART-` with no token after it is an error naming its line, or
    with `skip_empty` a warning."""
    empty = [start for start, sentences in documents if not sentences]
    if empty:
        shown = ", ".join(map(str, empty[:20])) + (f" ... ({len(empty)} in all)" if len(empty) > 20 else "")
        if not skip_empty:
            raise ValueError(f"--{arg_name} '{path}': empty document (a -DOCSTART- line with no tokens after it) "
                             f"on line(s) {shown}. Remove those -DOCSTART- lines, or pass "
                             f"--skip_empty_documents to skip them with a warning.")
        logger.warning(f"--{arg_name} '{path}': skipping {len(empty)} empty document(s) (lines {shown}).")
    return [(start, sentences) for start, sentences in documents if sentences]


# ----------------------------------------------------------------------------------------------------------------------
# tokenization and metrics
# ----------------------------------------------------------------------------------------------------------------------


def tokenize_and_align(examples: list[dict], tokenizer, label2id: dict, max_length: int | None):
    """input_ids / attention_mask / labels per example (tag on the first piece of each word, -100 elsewhere; an
    example without tags gets 0 on the first pieces, marking the words to predict), the number of word pieces before
    truncation, and the number of words cut away by truncation."""
    rows = {"input_ids": [], "attention_mask": [], "labels": [], "length": []}
    full_lengths, words_cut, replaced = [], 0, 0
    batch = 256
    for start in range(0, len(examples), batch):
        chunk = examples[start: start + batch]
        enc = tokenizer([ex["words"] for ex in chunk], is_split_into_words=True)
        for i, ex in enumerate(chunk):
            word_ids = enc.word_ids(i)
            ids = enc["input_ids"][i]
            present = {w for w in word_ids if w is not None}
            if len(present) < len(ex["words"]):  # words without a piece: replace by [UNK] and redo this example
                words = [w if j in present else tokenizer.unk_token for j, w in enumerate(ex["words"])]
                replaced += len(ex["words"]) - len(present)
                one = tokenizer(words, is_split_into_words=True)
                word_ids, ids = one.word_ids(0), one["input_ids"]
            labels, previous = [], None
            for w in word_ids:
                if w is None or w == previous:
                    labels.append(-100)
                else:
                    labels.append(0 if ex["tags"] is None else label2id[ex["tags"][w]])
                previous = w
            full_lengths.append(len(ids))
            if max_length and len(ids) > max_length:
                keep_last = ids[-1] == tokenizer.sep_token_id
                cut = (ids[: max_length - 1] + ids[-1:]) if keep_last else ids[:max_length]
                labels = (labels[: max_length - 1] + [-100]) if keep_last else labels[:max_length]
                words_cut += len(ex["words"]) - sum(1 for x in labels if x != -100)
                ids = cut
            rows["input_ids"].append(ids)
            rows["attention_mask"].append([1] * len(ids))
            rows["labels"].append(labels)
            rows["length"].append(len(ids))
    if replaced:
        logger.warning(f"{replaced} word(s) produced no word piece and were replaced by {tokenizer.unk_token}.")
    return datasets.Dataset.from_dict(rows), full_lengths, words_cut


def tag_sequences(predictions: np.ndarray, label_ids: np.ndarray, id2label: dict) -> tuple[list, list]:
    """Gold and predicted tag sequences over the labelled positions (first pieces of the words) of every row."""
    if isinstance(predictions, (tuple, list)):
        predictions = predictions[0]
    pred_ids = predictions.argmax(-1) if predictions.ndim == 3 else predictions
    gold, pred = [], []
    for p_row, l_row in zip(pred_ids, label_ids):
        keep = l_row != -100
        gold.append([id2label[int(x)] for x in l_row[keep]])
        pred.append([id2label[int(x)] for x in p_row[keep]])
    return gold, pred


def entity_scores(gold: list, pred: list) -> dict:
    return {"precision": float(precision_score(gold, pred, zero_division=0)),
            "recall": float(recall_score(gold, pred, zero_division=0)),
            "f1": float(f1_score(gold, pred, zero_division=0)),
            "accuracy": float(accuracy_score(gold, pred))}


def per_type_scores(gold: list, pred: list) -> dict:
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    return {name: {k: float(v) if k != "support" else int(v) for k, v in values.items()}
            for name, values in report.items()}


# ----------------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------------


def parse_job_arguments(argv: list[str]) -> tuple[ModelArguments, DataTrainingArguments, TrainingArguments]:
    """The three argument groups (the script's defaults in front of `argv`); `--do_train/--do_eval/--do_predict`
    set from the files given when none is, and checked against them."""
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parse_args(parser, argv, SCRIPT_DEFAULTS)
    setup_logging(training_args)
    setup_threads(model_args)
    if not steps_given(argv):
        training_args.do_train = data_args.train_file is not None
        training_args.do_eval = data_args.validation_file is not None
        training_args.do_predict = data_args.test_file is not None
    if training_args.do_train and not data_args.train_file:
        raise ValueError("Training needs --train_file (a CoNLL column file).")
    if not training_args.do_train and not model_args.model_name_or_path:
        raise ValueError("Evaluation or prediction without training needs --model_name_or_path.")
    if training_args.do_eval and not data_args.validation_file:
        if "--do_eval" in [a.split("=", 1)[0] for a in argv]:
            raise ValueError("--do_eval needs --validation_file.")
        training_args.do_eval = False  # set by the default epoch-wise evaluation, not asked for
    if training_args.do_predict and not data_args.test_file:
        raise ValueError("--do_predict needs --test_file.")
    return model_args, data_args, training_args


def read_splits(data_args, training_args) -> dict[str, list[dict]]:
    """The examples (documents or sentences) of every split this run uses; the test file may come without tags."""
    examples = {}
    for split, arg, wanted, limit in (
            ("train", "train_file", training_args.do_train, data_args.max_train_samples),
            ("validation", "validation_file", training_args.do_eval, data_args.max_eval_samples),
            ("test", "test_file", training_args.do_predict, data_args.max_predict_samples)):
        path = getattr(data_args, arg)
        if path and wanted:
            split_examples = read_conll(path, arg, data_args.label_column, data_args.document_level,
                                        data_args.skip_empty_documents, allow_untagged=split == "test")
            examples[split] = split_examples[:limit] if limit else split_examples
    if "test" in examples and examples["test"][0]["tags"] is None:
        logger.info(f"--test_file '{data_args.test_file}' has no tag column: its words are predicted "
                    f"(test_predictions.txt) and no test metrics are computed.")
    return examples


def tag_set(examples: dict, data_args, model_args) -> list[str]:
    """The tags in id order: the training split's ("O" first, then by entity type), or without training the trained
    model's; a validation or test tag outside them is an error naming the file and the document."""
    if "train" in examples:
        label_list = sorted({t for ex in examples["train"] for t in ex["tags"]}, key=lambda t: (t != "O", t[2:], t))
    else:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path,
                                            trust_remote_code=model_args.trust_remote_code)
        label_list = [config.id2label[i] for i in range(config.num_labels)]
    for split in ("validation", "test"):
        unseen = {}
        for ex in examples.get(split, []):
            for t in ex["tags"] or []:
                if t not in label_list:
                    unseen.setdefault(t, ex["line"])
        if unseen:
            arg = f"{split}_file"
            raise ValueError(
                f"--{arg} '{getattr(data_args, arg)}' has tag(s) never seen in the training data: "
                + ", ".join(f"{t!r} (document at line {n})" for t, n in sorted(unseen.items()))
                + f". Known tags: {label_list}. Fix the tags, or add training examples with them.")
    return label_list


def encode_splits(examples: dict, tokenizer, label2id: dict, max_length: int | None, unit: str,
                  tokenizer_source: str) -> tuple[dict, dict, str]:
    """Every split's word pieces with the tags on each word's first piece; prints the lengths in pieces and in words.
    Returns (split -> dataset, split -> length statistics, the printed table of pieces)."""
    encoded, lengths = {}, {}
    for split, split_examples in examples.items():
        encoded[split], lengths[split], cut = tokenize_and_align(split_examples, tokenizer, label2id, max_length)
        if cut:
            logger.warning(f"{split}: --max_length {max_length} cut {cut} word(s); they get no prediction and "
                           f"are left out of the {split} metrics.")
    stats = {split: length_statistics(v) for split, v in lengths.items()}
    word_stats = {split: length_statistics([len(ex["words"]) for ex in split_examples], unit="words")
                  for split, split_examples in examples.items()}
    report = format_length_table(stats)
    print(f"\nInput lengths in word pieces ({unit}; {tokenizer_source}; [CLS]/[SEP] included):\n{report}\n"
          f"In words:\n{format_length_table(word_stats, unit='words')}\n", flush=True)
    return encoded, stats, report


def build_trainer(model, tokenizer, encoded: dict, model_args, training_args) -> RANTrainer:
    """`RANTrainer` over the encoded splits (validation in length order), scoring entities with seqeval."""
    id2label = model.config.id2label

    def compute_metrics(eval_pred):
        gold, pred = tag_sequences(eval_pred.predictions, eval_pred.label_ids, id2label)
        return {**entity_scores(gold, pred), "predicted_tags": distinct_predictions([t for row in pred for t in row])}

    eval_dataset = sort_by_length(encoded["validation"])[0] if "validation" in encoded else None
    return RANTrainer(model=model, args=training_args, train_dataset=encoded.get("train"),
                      eval_dataset=eval_dataset, processing_class=tokenizer,
                      data_collator=DataCollatorForTokenClassification(tokenizer), compute_metrics=compute_metrics,
                      save_every_minutes=model_args.save_every_minutes,
                      learning_rates=parameter_learning_rates(model, model_args))


def score_split(trainer: RANTrainer, dataset: datasets.Dataset, split: str, unit: str) -> tuple[dict, dict, list]:
    """Entity-level scores of a tagged split (seqeval), overall and per entity type; prints the report.
    Returns (metrics, per-type scores, the predicted tags in the dataset's order)."""
    prefix = "eval" if split == "validation" else "test"
    id2label = trainer.model.config.id2label
    output = trainer.predict(dataset, metric_key_prefix=prefix)
    gold, pred = tag_sequences(output.predictions, output.label_ids, id2label)
    metrics = {f"{prefix}_{k}": v for k, v in entity_scores(gold, pred).items()}
    metrics[f"{prefix}_loss"] = output.metrics.get(f"{prefix}_loss")
    metrics[f"{prefix}_{unit}"] = len(gold)
    metrics[f"{prefix}_predicted_tags"] = distinct_predictions([tag for row in pred for tag in row])
    per_type = per_type_scores(gold, pred)
    trainer.log_metrics(prefix, metrics)
    trainer.save_metrics(prefix, {**metrics, f"{prefix}_per_type": per_type})
    print(f"\n***** {split}: entity-level scores (seqeval), {len(gold)} {unit} *****\n"
          + classification_report(gold, pred, digits=4, zero_division=0), flush=True)
    return metrics, per_type, pred


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args = parse_job_arguments(argv)
    started = time.time()
    set_seed(training_args.seed)
    max_length = data_args.max_length or None
    if not training_args.do_train:
        max_length = prediction_length(model_args, max_length, explicit=flag_value(argv, "--max_length") is not None)
    unit = "documents" if data_args.document_level else "sentences"

    examples = read_splits(data_args, training_args)
    disable_eval_if_no_data(training_args, "validation" in examples)
    label_list = tag_set(examples, data_args, model_args)
    label2id = {t: i for i, t in enumerate(label_list)}

    resume = resolve_checkpoint(training_args) if training_args.do_train else None
    tokenizer, tokenizer_source = get_tokenizer(
        model_args, lambda: [" ".join(ex["words"]) for ex in examples["train"]], resume_checkpoint=resume)
    encoded, stats, length_report = encode_splits(examples, tokenizer, label2id, max_length, unit, tokenizer_source)
    model = build_model(AutoModelForTokenClassification, model_args, tokenizer,
                        {"id2label": dict(enumerate(label_list)), "label2id": label2id},
                        ignore_mismatched_sizes=True)
    if training_args.do_train:
        record_trained_length(model.config, max_length)
    trainer = build_trainer(model, tokenizer, encoded, model_args, training_args)

    results: dict = {"labels": label_list, "length_statistics": stats}
    if training_args.do_train:
        results["train"] = train_and_save(trainer, resume)
    per_type = {}
    for split in ("validation", "test"):
        if split not in encoded:
            continue
        dataset, order = sort_by_length(encoded[split])
        if examples[split][0]["tags"] is None:  # an untagged test file: predicted, not scored
            pred = predict_untagged(trainer, dataset, trainer.model.config.id2label)
            results["predict"] = {f"predict_{unit}": len(pred), "labelled": False}
            logger.info(f"Predicted the words of {len(pred)} {unit}; no metrics (the test file has no tags).")
        else:
            results[split], per_type[split], pred = score_split(trainer, dataset, split, unit)
        if split == "test" and training_args.should_save:
            write_predictions(os.path.join(training_args.output_dir, "test_predictions.txt"), examples["test"],
                              unsort(pred, order), data_args.document_level)

    results["collapse"] = check_collapse(trainer, results.get("validation"), "eval_predicted_tags", None)
    results["wall_time_s"] = round(time.time() - started, 1)
    if training_args.should_save:
        if not training_args.do_train:
            trainer.save_model()
        with open(os.path.join(training_args.output_dir, "all_results_summary.json"), "w") as f:
            json.dump({**results, "per_type": per_type}, f, indent=2, default=str)
        write_card(trainer.model, results, per_type, data_args, model_args, training_args, label_list,
                   tokenizer_source, length_report, max_length, argv)
    logger.info(f"Done in {results['wall_time_s']} s; output in {training_args.output_dir}")
    return results


def write_card(model, results: dict, per_type: dict, data_args, model_args, training_args, label_list: list[str],
               tokenizer_source: str, length_report: str, max_length: int | None, argv: list[str]) -> None:
    sections = collapse_section(results)
    rows = {split: {k.split("_", 1)[1]: v for k, v in results[split].items()
                    if k.split("_", 1)[1] in ("precision", "recall", "f1", "accuracy")}
            for split in ("validation", "test") if split in results}
    if rows:
        sections["Results"] = ("Entity-level precision / recall / F1 (seqeval, conlleval rules) and token "
                               "accuracy, on every word:\n\n" + format_metrics_table(rows))
        for split, types in per_type.items():
            sections["Results"] += f"\n\nPer entity type ({split}):\n\n" + format_metrics_table(
                {k: v for k, v in types.items()})
    sections["Data"] = (f"CoNLL files: train `{data_args.train_file}`, validation `{data_args.validation_file}`, "
                        f"test `{data_args.test_file}`; tag column {data_args.label_column}; one input per "
                        f"{'-DOCSTART- document (sentences joined)' if data_args.document_level else 'sentence'}; "
                        f"tags {label_list}. Input lengths in word pieces (tokenizer: {tokenizer_source}):\n\n"
                        f"{length_report}\n\nTruncation: {max_length or 'none'}.")
    if "train" in results:
        sections["Training"] = (f"{training_time(results['train'])}; whole run "
                                f"{results['wall_time_s']} s, {torch.get_num_threads()} torch thread(s).")
    write_model_card(training_args.output_dir, title="RAN named-entity tagger (whole documents)",
                     description="A Recurrent Attention Network (RAN, Li et al., ACL 2023) token classifier that "
                                 "tags whole documents in one pass, trained with `run_scripts/run_ner.py` of "
                                 f"`ran_hf` {model_args.starting_point}.",
                     auto_class="AutoModelForTokenClassification", sections=sections, model=model,
                     training_args=training_args, command=command_line("run_ner.py", argv),
                     tags=["token-classification", "ner"],
                     use=use_snippets(
                         training_args.output_dir, task="token-classification", name="tagger",
                         call='"John Smith flew to Paris.", aggregation_strategy="simple"',
                         returns="[{'entity_group': ..., 'word': ..., 'start': ..., 'end': ..., 'score': ...}]",
                         script="run_ner.py", predict_file="new.txt",
                         predict_note="`new.txt` holds one word per line, a blank line after each sentence and "
                                      "`-DOCSTART-` before each document (no tag column); "
                                      "`predictions/test_predictions.txt` gets `word predicted-tag` per line and "
                                      "no metrics are computed."))


def predict_untagged(trainer, dataset: datasets.Dataset, id2label: dict) -> list[list[str]]:
    """The predicted tags of the words of every row of `dataset` (its `labels` mark the first piece of each word)."""
    first_pieces = dataset["labels"]
    output = trainer.predict(dataset.remove_columns(["labels"]), metric_key_prefix="predict")
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    marks = np.full(logits.shape[:2], -100)
    for row, labels in enumerate(first_pieces):
        marks[row, : len(labels)] = labels
    return tag_sequences(logits, marks, id2label)[1]


def write_predictions(path: str, examples: list[dict], predictions: list[list[str]], documents: bool = True) -> None:
    """`word gold predicted` per line (`word predicted` for examples without tags), a blank line after each
    sentence, `-DOCSTART-` before each document."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for ex, pred in zip(examples, predictions):
            if documents:
                f.write("-DOCSTART- O O\n\n" if ex["tags"] is not None else "-DOCSTART- O\n\n")
            pred = list(pred) + ["O"] * (len(ex["words"]) - len(pred))  # words cut by --max_length: "O"
            i = 0
            for n in ex["sentence_lengths"]:
                golds = ex["tags"][i: i + n] if ex["tags"] is not None else [None] * n
                for word, gold, p in zip(ex["words"][i: i + n], golds, pred[i: i + n]):
                    f.write(f"{word} {p}\n" if gold is None else f"{word} {gold} {p}\n")
                f.write("\n")
                i += n
    logger.info(f"Test predictions: {path}")


if __name__ == "__main__":
    main()
