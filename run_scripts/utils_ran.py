# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Shared helpers of the `run_*.py` scripts: reading data files with clear errors, training a WordPiece tokenizer,
model arguments and building a RAN from scratch or from a checkpoint, length reports, logging and model cards.

Not a public API: the scripts import it from the same folder (`python run_scripts/run_classification.py` puts
`run_scripts/` on `sys.path`).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import math
import os
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch


REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS_DIR = Path(__file__).resolve().parent
SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data"  # the project's evaluation data, read by path, never copied

try:  # a checkout that is not pip-installed: make `import ran_hf` work from the repository root
    import ran_hf  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(REPO_ROOT))
    import ran_hf  # noqa: F401

import datasets  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import IntervalStrategy, get_last_checkpoint  # noqa: E402

from ran_hf import RANConfig  # noqa: E402


logger = logging.getLogger("run_scripts")

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4: RAN's pad id is 0
HUGE_MODEL_MAX_LENGTH = int(1e30)  # Transformers' "no limit" value (VERY_LARGE_INTEGER)
TEXT_SUFFIXES = {".txt", ".text", ".tokens", ".raw"}
JSON_SUFFIXES = {".jsonl", ".json", ".ndjson"}
CSV_SUFFIXES = {".csv", ".tsv"}


# ----------------------------------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------------------------------


def check_file(path: str | os.PathLike | None, arg_name: str) -> Path:
    """`path` as a Path, or FileNotFoundError naming the argument and the path."""
    if path is None:
        raise ValueError(f"`--{arg_name}` is required.")
    p = Path(path)
    if not p.is_file():
        hint = " (it is a directory; pass a file)" if p.is_dir() else ""
        raise FileNotFoundError(f"--{arg_name}: no such file: '{path}'{hint}. Pass an existing file.")
    return p


def file_format(path: Path) -> str:
    """'json' (.jsonl/.json), 'csv' (.csv/.tsv) or 'text' (.txt/.tokens/.raw), with an optional .gz suffix."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    if suffix in JSON_SUFFIXES:
        return "json"
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in TEXT_SUFFIXES:
        return "text"
    raise ValueError(
        f"'{path}': unknown file type '{suffix or path.name}'. Use .jsonl/.json (one JSON object per line), "
        f".csv/.tsv (with a header row) or .txt (one document per line), optionally gzipped (.gz)."
    )


def open_text(path: Path) -> io.TextIOBase:
    if path.suffix.lower() == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def _iter_json_records(path: Path) -> Iterable[tuple[int, Any]]:
    with open_text(path) as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        if head == "[":  # a JSON array of objects
            try:
                items = json.loads(head + f.read())
            except json.JSONDecodeError as err:
                raise ValueError(f"'{path}': not valid JSON ({err}).") from None
            yield from ((i + 1, item) for i, item in enumerate(items))
            return
        f.seek(0)
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"'{path}', line {number}: not valid JSON ({err}). Expected one JSON object per line (jsonl)."
                ) from None


def split_columns(names: str) -> list[str]:
    """'title,text' -> ['title', 'text']."""
    cols = [c.strip() for c in names.split(",") if c.strip()]
    if not cols:
        raise ValueError(f"Empty column name list {names!r}.")
    return cols


def read_records(path: Path, fields: Sequence[str], arg_name: str = "train_file",
                 text_field: str | Sequence[str] | None = None, skip_empty: bool = False) -> list[dict]:
    """Read a .jsonl/.json/.csv/.tsv/.txt file (optionally gzipped) into dicts holding `fields`, `_line` (the
    1-based line number; for a JSON array the item number) and, with `text_field`, `_text`: the text, or the texts of
    several fields (e.g. `["title", "text"]`) joined by a blank line.

    Errors (ValueError) name the file, the line and the fix: a record that is not an object, a missing field, a text
    that is not a string. A `.txt` file holds one document per line (blank lines are skipped; they separate
    paragraphs). An empty document (its text empty or only whitespace) is an error listing the lines, or with
    `skip_empty` a warning and the records are dropped.
    """
    text_fields = [text_field] if isinstance(text_field, str) else list(text_field or [])
    fields = list(dict.fromkeys([*fields, *text_fields]))
    fmt = file_format(path)
    records = []
    if fmt == "text":
        extra = [name for name in fields if name not in text_fields[:1] + ["text"]]
        if extra or len(text_fields) > 1:
            raise ValueError(
                f"--{arg_name} '{path}': a .txt file holds only text (one document per line), but the field(s) "
                f"{extra or text_fields} are needed. Use a .jsonl or .csv file with the fields {fields}."
            )
        with open_text(path) as f:
            for number, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    records.append({(text_fields or ["text"])[0]: line, "_text": line, "_line": number})
        if not records:
            raise ValueError(f"--{arg_name} '{path}': the file holds no text.")
        return records
    items = _iter_json_records(path) if fmt == "json" else _iter_csv_records(path)
    for number, item in items:
        if not isinstance(item, dict):
            raise ValueError(f"--{arg_name} '{path}', line {number}: expected a JSON object, got "
                             f"{type(item).__name__}.")
        missing = [name for name in fields if name not in item]
        if missing:
            present = sorted(k for k in item if not k.startswith("_"))
            raise ValueError(
                f"--{arg_name} '{path}', line {number}: no field {missing[0]!r} (fields present: {present}). Add the "
                f"field to every record, or name the field to use with "
                f"{'--text_column_name' if missing[0] in text_fields else '--label_column_name'}."
            )
        record = {name: item[name] for name in fields}
        for name in text_fields:
            if record[name] is not None and not isinstance(record[name], str):
                raise ValueError(f"--{arg_name} '{path}', line {number}: field {name!r} must be a string, got "
                                 f"{type(record[name]).__name__}.")
        if text_fields:
            record["_text"] = "\n\n".join(record[n].strip() for n in text_fields if record[n] and record[n].strip())
        record["_line"] = number
        records.append(record)
    if not records:
        raise ValueError(f"--{arg_name} '{path}': the file holds no records.")
    if text_fields:
        records = drop_empty(records, text_fields, path, arg_name, skip_empty)
    return records


def drop_empty(records: list[dict], text_fields: list[str], path: Path, arg_name: str, skip_empty: bool) -> list:
    """Empty documents are an error (naming the lines) unless `skip_empty`, then a warning and they are dropped."""
    empty = [r["_line"] for r in records if not r["_text"]]
    if not empty:
        return records
    shown = ", ".join(map(str, empty[:20])) + (f" ... ({len(empty)} in all)" if len(empty) > 20 else "")
    what = " and ".join(repr(n) for n in text_fields)
    if not skip_empty:
        raise ValueError(
            f"--{arg_name} '{path}': empty document ({what} empty or only whitespace) on line(s) {shown}. Remove "
            f"them, or pass --skip_empty_documents to skip them with a warning."
        )
    logger.warning(f"--{arg_name} '{path}': skipping {len(empty)} empty document(s) on line(s) {shown}.")
    kept = [r for r in records if r["_text"]]
    if not kept:
        raise ValueError(f"--{arg_name} '{path}': every document is empty.")
    return kept


def _iter_csv_records(path: Path) -> Iterable[tuple[int, dict]]:
    delimiter = "\t" if ".tsv" in [s.lower() for s in path.suffixes] else ","
    with open_text(path) as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            raise ValueError(f"'{path}': empty CSV file (a header row with the column names is needed).")
        for row in reader:
            # DictReader's line_num is the physical line of the row's end; fine for error messages
            yield reader.line_num, {k: v for k, v in row.items() if k is not None}


# ----------------------------------------------------------------------------------------------------------------------
# tokenizer
# ----------------------------------------------------------------------------------------------------------------------


def train_wordpiece_tokenizer(texts: Iterable[str], vocab_size: int = 16000, min_frequency: int = 2,
                              lowercase: bool = True, limit_alphabet: int = 1000) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer trained with `tokenizers` on `texts`: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3,
    [MASK]=4, `[CLS] text [SEP]` templates, BERT normaliser (lower-cased and accents stripped if `lowercase`) and
    pre-tokeniser, and no length cap (`model_max_length` = 1e30)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=SPECIAL_TOKENS, limit_alphabet=limit_alphabet,
                                        continuing_subword_prefix="##")
    tok.train_from_iterator(texts, trainer=trainer)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    assert [ids[t] for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS))), ids
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=HUGE_MODEL_MAX_LENGTH, do_lower_case=lowercase, padding_side="right",
    )


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    if tokenizer.model_max_length < 100_000:
        logger.info(f"Tokenizer '{name_or_path}' has model_max_length={tokenizer.model_max_length}; RAN has no "
                    f"length cap, so it is lifted (truncation only at --max_length / --block_size).")
        tokenizer.model_max_length = HUGE_MODEL_MAX_LENGTH
    if tokenizer.pad_token is None:
        raise ValueError(f"Tokenizer '{name_or_path}' has no pad token; RAN batches need one (id 0 by default).")
    return tokenizer


# ----------------------------------------------------------------------------------------------------------------------
# model arguments and model
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class RANModelArguments:
    """Where the model and tokenizer come from; the config of a model trained from scratch."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A checkpoint directory (or Hub id) to start from. Leave unset to train from scratch with "
                          "the config flags below."},
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "A tokenizer directory. Default: the one of --model_name_or_path, or else a WordPiece "
                          "tokenizer trained on the training split (see --tokenizer_vocab_size)."},
    )
    tokenizer_vocab_size: int = field(default=16000, metadata={"help": "Vocabulary of a tokenizer trained here."})
    tokenizer_min_frequency: int = field(default=2, metadata={"help": "Min pair frequency of a tokenizer trained here."})
    tokenizer_lowercase: bool = field(default=True, metadata={"help": "Lower-case in a tokenizer trained here."})
    hidden_size: int = field(default=128, metadata={"help": "From scratch: hidden size D."})
    num_hidden_layers: int = field(default=2, metadata={"help": "From scratch: number of RAN layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "From scratch: attention heads."})
    attention_head_size: int = field(default=32, metadata={"help": "From scratch: size of one head."})
    window_size: int = field(default=128, metadata={"help": "From scratch: tokens per window."})
    min_window_size: int = field(default=16, metadata={"help": "From scratch: a shorter last window is merged."})
    hidden_dropout_prob: float = field(default=0.1, metadata={"help": "From scratch: hidden dropout."})
    attention_probs_dropout_prob: float = field(default=0.1, metadata={"help": "From scratch: attention dropout."})
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "More RANConfig fields, 'key=value,key=value' (e.g. 'pooler_type=average,rope_theta=5e4'); "
                          "applied from scratch and to a loaded config."},
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow code from the checkpoint directory."})
    torch_threads: int | None = field(
        default=None,
        metadata={"help": "torch.set_num_threads for this run (default: torch's choice). Tiny models on a busy "
                          "machine often run fastest with 1."},
    )

    def parsed_config_overrides(self) -> dict:
        """`--config_overrides` as a dict, values typed like RANConfig's defaults."""
        if not self.config_overrides:
            return {}
        defaults = RANConfig()
        out = {}
        for item in self.config_overrides.split(","):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not hasattr(defaults, key):
                raise ValueError(f"--config_overrides: {item!r} is not 'field=value' with a RANConfig field.")
            default = getattr(defaults, key)
            value = value.strip()
            if isinstance(default, bool):
                if value.lower() not in ("true", "false"):
                    raise ValueError(f"--config_overrides: {key} needs true or false, got {value!r}.")
                out[key] = value.lower() == "true"
            elif isinstance(default, int) and not isinstance(default, bool):
                out[key] = int(value)
            elif isinstance(default, float):
                out[key] = float(value)
            elif value.lower() in ("none", "null"):
                out[key] = None
            else:
                out[key] = value
        return out

    def scratch_config_kwargs(self) -> dict:
        return dict(hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
                    num_attention_heads=self.num_attention_heads, attention_head_size=self.attention_head_size,
                    window_size=self.window_size, min_window_size=min(self.min_window_size, self.window_size),
                    hidden_dropout_prob=self.hidden_dropout_prob,
                    attention_probs_dropout_prob=self.attention_probs_dropout_prob)


def get_tokenizer(model_args: RANModelArguments, training_texts, output_dir: str | None = None,
                  resume_checkpoint: str | None = None):
    """The tokenizer named by `--tokenizer_name` / `--model_name_or_path`, the one saved in the checkpoint a run
    resumes from, or a new WordPiece tokenizer trained on `training_texts()` (a callable, called only then)."""
    if model_args.tokenizer_name:
        return load_tokenizer(model_args.tokenizer_name, model_args.trust_remote_code), model_args.tokenizer_name
    if model_args.model_name_or_path:
        return (load_tokenizer(model_args.model_name_or_path, model_args.trust_remote_code),
                model_args.model_name_or_path)
    if resume_checkpoint and Path(resume_checkpoint, "tokenizer.json").is_file():
        logger.info(f"Resuming: the tokenizer of {resume_checkpoint}.")
        return load_tokenizer(resume_checkpoint), resume_checkpoint
    texts = training_texts()
    logger.info(f"Training a WordPiece tokenizer (vocab {model_args.tokenizer_vocab_size}, lowercase="
                f"{model_args.tokenizer_lowercase}) on {len(texts)} training texts.")
    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=model_args.tokenizer_vocab_size,
                                          min_frequency=model_args.tokenizer_min_frequency,
                                          lowercase=model_args.tokenizer_lowercase)
    return tokenizer, f"WordPiece trained here on the training split (vocab {len(tokenizer)})"


def build_model(auto_class, model_args: RANModelArguments, tokenizer, config_overrides: dict | None = None,
                ignore_mismatched_sizes: bool = False):
    """A RAN from `--model_name_or_path` (with `config_overrides`, e.g. the labels) or from scratch (the config flags,
    `vocab_size` = the tokenizer's size, `pad_token_id` = the tokenizer's pad id)."""
    config_overrides = {**model_args.parsed_config_overrides(), **(config_overrides or {})}
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path,
                                            trust_remote_code=model_args.trust_remote_code)
        if getattr(config, "model_type", None) != "ran":
            logger.warning(f"--model_name_or_path {model_args.model_name_or_path} is a '{config.model_type}' "
                           f"model, not RAN.")
        for key, value in config_overrides.items():
            setattr(config, key, value)
        model = auto_class.from_pretrained(model_args.model_name_or_path, config=config,
                                           trust_remote_code=model_args.trust_remote_code,
                                           ignore_mismatched_sizes=ignore_mismatched_sizes)
    else:
        config = RANConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                           **{**model_args.scratch_config_kwargs(), **config_overrides})
        model = auto_class.from_config(config)
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
                         f"{model.config.vocab_size}; use the tokenizer the model was trained with (--tokenizer_name).")
    if model.config.pad_token_id != tokenizer.pad_token_id:
        raise ValueError(f"The tokenizer's pad id ({tokenizer.pad_token_id}) differs from the model's "
                         f"config.pad_token_id ({model.config.pad_token_id}).")
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Model: {type(model).__name__}, {n_params / 1e6:.2f}M parameters, "
                f"{'from ' + model_args.model_name_or_path if model_args.model_name_or_path else 'from scratch'}.")
    return model


# ----------------------------------------------------------------------------------------------------------------------
# arguments, logging, checkpoints
# ----------------------------------------------------------------------------------------------------------------------


def parse_args(parser, argv: Sequence[str] | None, script_defaults: Sequence[str] = ()):
    """Parse `script_defaults + argv` (later flags win) or a single .json / .yaml file of arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    if len(argv) == 1 and argv[0].endswith((".yaml", ".yml")):
        return parser.parse_yaml_file(yaml_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=list(script_defaults) + argv)


def trainer_defaults(output_dir: str, learning_rate: str, epochs: str, train_batch_size: str, eval_batch_size: str,
                     logging_steps: str, warmup: str, save_total_limit: str = "1",
                     best_metric: str | None = None) -> list[str]:
    """The `TrainingArguments` flags a script puts in front of the user's (later flags win): epoch-wise evaluation and
    checkpoints, no reporting integrations, seed 42, and no pinned memory without CUDA."""
    flags = ["--output_dir", output_dir, "--learning_rate", learning_rate, "--num_train_epochs", epochs,
             "--warmup_steps", warmup, "--weight_decay", "0.01", "--per_device_train_batch_size", train_batch_size,
             "--per_device_eval_batch_size", eval_batch_size, "--eval_strategy", "epoch", "--save_strategy", "epoch",
             "--save_total_limit", save_total_limit, "--logging_steps", logging_steps, "--report_to", "none",
             "--seed", "42"]
    if best_metric:
        flags += ["--train_sampling_strategy", "group_by_length", "--load_best_model_at_end",
                  "--metric_for_best_model", best_metric]
    if not torch.cuda.is_available():
        flags += ["--dataloader_pin_memory", "False"]
    return flags


def steps_given(argv: Sequence[str]) -> bool:
    """Whether the command line names --do_train / --do_eval / --do_predict."""
    return any(a.split("=", 1)[0] in ("--do_train", "--do_eval", "--do_predict") for a in argv)


def setup_logging(training_args: TrainingArguments) -> None:
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)], force=True)
    level = training_args.get_process_log_level()
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.setLevel(min(level, logging.INFO) if training_args.should_log else level)
    datasets.disable_progress_bars()


def setup_threads(model_args: RANModelArguments) -> None:
    if model_args.torch_threads:
        torch.set_num_threads(model_args.torch_threads)
    logger.info(f"torch threads: {torch.get_num_threads()}")


def resolve_checkpoint(training_args: TrainingArguments) -> str | None:
    """`--resume_from_checkpoint DIR`, or `--resume_from_checkpoint last` for the newest checkpoint in output_dir."""
    resume = training_args.resume_from_checkpoint
    if resume in (None, "", "False", "false"):
        if os.path.isdir(training_args.output_dir) and get_last_checkpoint(training_args.output_dir):
            logger.warning(f"{training_args.output_dir} already holds checkpoints; this run starts over (pass "
                           f"--resume_from_checkpoint last to continue the newest one).")
        return None
    if resume in ("last", "latest", "True", "true"):
        found = get_last_checkpoint(training_args.output_dir) if os.path.isdir(training_args.output_dir) else None
        if found is None:
            raise FileNotFoundError(f"--resume_from_checkpoint {resume}: no checkpoint-* folder in "
                                    f"{training_args.output_dir}.")
        return found
    if not os.path.isdir(resume):
        raise FileNotFoundError(f"--resume_from_checkpoint: no such directory: '{resume}'.")
    return resume


def disable_eval_if_no_data(training_args: TrainingArguments, has_eval: bool) -> None:
    """Without validation data, turn off periodic evaluation and best-model selection (the scripts' defaults)."""
    if not has_eval and training_args.eval_strategy != IntervalStrategy.NO:
        logger.info("No validation data: eval_strategy=no, load_best_model_at_end=False.")
        training_args.eval_strategy = IntervalStrategy.NO
        training_args.load_best_model_at_end = False
        training_args.metric_for_best_model = None


class RANTrainer(Trainer):
    """Trainer whose evaluation and prediction read the dataset in order (even with
    `train_sampling_strategy=group_by_length`), so predictions line up with the examples."""

    def _get_eval_sampler(self, eval_dataset):
        if self.args.world_size <= 1 and eval_dataset is not None:
            return torch.utils.data.SequentialSampler(eval_dataset)
        return super()._get_eval_sampler(eval_dataset)


def train_and_save(trainer: Trainer, resume: str | None, **extra_metrics) -> dict:
    """Train (resuming from `resume` if given), save the model and tokenizer into output_dir, and log and save the
    training metrics (plus `extra_metrics`) and the trainer state. Returns the metrics."""
    train_result = trainer.train(resume_from_checkpoint=resume)
    if getattr(trainer.model.config, "is_decoder", False):
        trainer.model.config.use_cache = True  # Trainer turns the cache off for training; generation wants it
    trainer.save_model()
    metrics = {**train_result.metrics, **extra_metrics}
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    if trainer.state.best_model_checkpoint:
        logger.info(f"Best checkpoint (on validation {trainer.args.metric_for_best_model}): "
                    f"{trainer.state.best_model_checkpoint}")
    return metrics


def sort_by_length(dataset: datasets.Dataset, column: str = "input_ids") -> tuple[datasets.Dataset, np.ndarray]:
    """The dataset sorted by decreasing length (less padding in evaluation batches) and the permutation used:
    `sorted[i] = dataset[order[i]]`."""
    lengths = np.array([len(x) for x in dataset[column]])
    order = np.argsort(-lengths, kind="stable")
    return dataset.select(order.tolist()), order


def unsort(values: np.ndarray | list, order: np.ndarray) -> list:
    out = [None] * len(order)
    for position, index in enumerate(order):
        out[int(index)] = values[position]
    return out


# ----------------------------------------------------------------------------------------------------------------------
# reports
# ----------------------------------------------------------------------------------------------------------------------


def length_statistics(lengths: Sequence[int], limit: int = 512) -> dict:
    lengths = np.asarray(lengths)
    return {
        "documents": int(lengths.size),
        "tokens": int(lengths.sum()),
        f"over_{limit}": int((lengths > limit).sum()),
        f"pct_over_{limit}": round(100.0 * float((lengths > limit).mean()), 1),
        "mean": round(float(lengths.mean()), 1),
        "median": float(np.median(lengths)),
        "p90": float(np.percentile(lengths, 90)),
        "max": int(lengths.max()),
    }


def format_length_table(stats: dict[str, dict], limit: int = 512, unit: str = "tokens") -> str:
    header = (f"| split | documents | {unit} | > {limit} | % > {limit} | median | p90 | max |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = [f"| {name} | {s['documents']} | {s['tokens']} | {s[f'over_{limit}']} | {s[f'pct_over_{limit}']} | "
            f"{s['median']:g} | {s['p90']:g} | {s['max']} |" for name, s in stats.items()]
    return "\n".join([header, *rows])


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e5 else f"{value:.4g}"
    return str(value)


def format_metrics_table(metrics: dict[str, dict]) -> str:
    """`{row name: {metric: value}}` as a markdown table (rows in order; columns = union of metric names)."""
    columns: list[str] = []
    for values in metrics.values():
        columns += [k for k in values if k not in columns]
    lines = ["| | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for name, values in metrics.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(values.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def write_model_card(output_dir: str, *, title: str, description: str, auto_class: str, sections: dict[str, str],
                     model=None, training_args: TrainingArguments | None = None, command: str | None = None,
                     tags: Sequence[str] = ()) -> str:
    """Write `output_dir/README.md`: what the model is, how to load it, the given sections (metrics, data, ...),
    the model config and the main training arguments."""
    lines = ["---", "library_name: transformers", "license: apache-2.0",
             "tags:", *[f"- {t}" for t in ["ran", "recurrent-attention-network", "long-documents", *tags]],
             "---", "", f"# {title}", "", description.strip(), ""]
    lines += ["## Use", "", "```python", "import ran_hf  # registers RAN with the Auto classes "
              "(or pass trust_remote_code=True)",
              f"from transformers import AutoTokenizer, {auto_class}", "",
              f"tokenizer = AutoTokenizer.from_pretrained(\"{os.path.abspath(output_dir)}\")",
              f"model = {auto_class}.from_pretrained(\"{os.path.abspath(output_dir)}\")", "```", ""]
    for heading, body in sections.items():
        lines += [f"## {heading}", "", body.strip(), ""]
    if model is not None:
        c = model.config
        n_params = sum(p.numel() for p in model.parameters())
        lines += ["## Model", "",
                  f"`{type(model).__name__}`, {n_params / 1e6:.2f}M parameters: hidden {c.hidden_size}, "
                  f"{c.num_hidden_layers} layers, {c.num_attention_heads} heads x {c.attention_head_size}, window "
                  f"{c.window_size} (min {c.min_window_size}), vocab {c.vocab_size}, dropout "
                  f"{c.hidden_dropout_prob}/{c.attention_probs_dropout_prob}. Full config: `config.json`.", ""]
    if training_args is not None:
        keys = ["learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
                "per_device_eval_batch_size", "gradient_accumulation_steps", "weight_decay", "warmup_steps",
                "lr_scheduler_type", "max_grad_norm", "train_sampling_strategy", "eval_strategy",
                "metric_for_best_model", "load_best_model_at_end", "seed"]
        values = {k: getattr(training_args, k) for k in keys}
        values = {k: (v.value if hasattr(v, "value") else v) for k, v in values.items()}
        lines += ["## Training arguments", "", "```json", json.dumps(values, indent=2, default=str), "```", ""]
    if command:
        lines += ["## Command", "", "```bash", command, "```", ""]
    path = os.path.join(output_dir, "README.md")
    os.makedirs(output_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def command_line(script: str, argv: Sequence[str] | None) -> str:
    argv = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", f"run_scripts/{script}", *argv])


def classification_scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    """Accuracy (subset accuracy for multi-label), micro-F1 and macro-F1 (scikit-learn, offline)."""
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "micro_f1": float(f1_score(y_true, y_pred, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
    }


def read_result_log(path: Path) -> list[dict]:
    """The records of a results log (one JSON object per line, appended as runs finish); [] before the first run."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def append_result(path: Path, record: dict) -> None:
    """Append one record to a results log as a single line, so processes sharing the log never interleave."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def perplexity(loss: float) -> float:
    try:
        return math.exp(loss)
    except OverflowError:
        return float("inf")


# ----------------------------------------------------------------------------------------------------------------------
# language modelling data (run_mlm.py, run_clm.py)
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class LMDataArguments:
    train_file: str | None = field(
        default=None,
        metadata={"help": "Training text: .txt (one document or paragraph per line), .jsonl/.json or .csv with a "
                          "text field; optionally .gz."},
    )
    validation_file: str | None = field(default=None, metadata={"help": "Validation text (perplexity)."})
    validation_split_percentage: float = field(
        default=5.0,
        metadata={"help": "Without --validation_file: the LAST percentage of the training documents/lines (a "
                          "contiguous slice, not shuffled) is held out for validation. 0 turns it off."},
    )
    text_column_name: str = field(
        default="text", metadata={"help": "Text field of .jsonl/.csv files; several, comma-separated, are joined."}
    )
    block_size: int = field(
        default=4096,
        metadata={"help": "Token length of the training blocks: all documents are tokenized, concatenated and cut "
                          "into blocks of this size (the last, shorter block is kept and padded)."},
    )
    skip_empty_documents: bool = field(
        default=False, metadata={"help": "Skip empty .jsonl/.csv documents with a warning instead of failing."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training blocks."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation blocks."})


def read_lm_texts(data_args: LMDataArguments, training_args: TrainingArguments) -> dict[str, list[str]]:
    """{'train': texts, 'validation': texts} from the files (validation carved from the end of train if needed)."""
    texts: dict[str, list[str]] = {}
    col = data_args.text_column_name
    for split, path, arg in [("train", data_args.train_file, "train_file"),
                             ("validation", data_args.validation_file, "validation_file")]:
        if path is None:
            continue
        records = read_records(check_file(path, arg), [], arg, text_field=split_columns(col),
                               skip_empty=data_args.skip_empty_documents)
        texts[split] = [r["_text"] for r in records]
    if "validation" not in texts and "train" in texts and data_args.validation_split_percentage > 0 and (
            training_args.do_eval or training_args.eval_strategy != IntervalStrategy.NO):
        n = len(texts["train"])
        n_val = max(1, int(round(n * data_args.validation_split_percentage / 100)))
        if n - n_val < 1:
            raise ValueError(f"--train_file has {n} document(s): too few to hold out "
                             f"{data_args.validation_split_percentage}% for validation; pass --validation_file or "
                             f"--validation_split_percentage 0.")
        texts["validation"] = texts["train"][n - n_val:]
        texts["train"] = texts["train"][: n - n_val]
        logger.info(f"Validation: the last {n_val} of the {n} training documents/lines.")
    return texts


def group_into_blocks(token_lists: Sequence[Sequence[int]], block_size: int, separator: Sequence[int] = ()) -> list:
    """Concatenate the token lists (each followed by `separator`) and cut into blocks of `block_size`; the last,
    shorter block is kept if it has at least 2 tokens."""
    if block_size < 2:
        raise ValueError(f"--block_size must be at least 2, got {block_size}.")
    stream: list[int] = []
    for ids in token_lists:
        stream.extend(ids)
        stream.extend(separator)
    blocks = [stream[i: i + block_size] for i in range(0, len(stream), block_size)]
    if blocks and len(blocks[-1]) < 2:
        blocks.pop()
    return blocks


def lm_datasets(texts: dict[str, list[str]], tokenizer, data_args: LMDataArguments, causal: bool):
    """Tokenized block datasets per split, and the document length statistics (in tokens).

    Masked LM: each document is `[CLS] ... [SEP]` as the tokenizer makes it. Causal LM: the document's tokens then
    `[SEP]` (the end-of-document token, `eos_token_id`)."""
    out, stats = {}, {}
    for split, docs in texts.items():
        enc = tokenizer(docs, add_special_tokens=not causal)["input_ids"]
        stats[split] = length_statistics([len(x) for x in enc])
        blocks = group_into_blocks(enc, data_args.block_size, [tokenizer.sep_token_id] if causal else [])
        limit = data_args.max_train_samples if split == "train" else data_args.max_eval_samples
        blocks = blocks[:limit] if limit else blocks
        if not blocks:
            raise ValueError(f"The {split} split has no tokens.")
        out[split] = datasets.Dataset.from_dict({"input_ids": blocks, "attention_mask": [[1] * len(b) for b in blocks]})
        logger.info(f"{split}: {len(docs)} documents, {sum(len(x) for x in enc)} tokens -> {len(blocks)} block(s) "
                    f"of up to {data_args.block_size} tokens.")
    return out, stats


def lm_data_section(data_args: LMDataArguments, data: dict, tokenizer_source: str, length_report: str,
                    note: str = "") -> str:
    """The model card's "Data" paragraph of run_mlm.py / run_clm.py."""
    validation = data_args.validation_file or f"last {data_args.validation_split_percentage:g}% of train"
    return (f"Train `{data_args.train_file}`, validation `{validation}`; blocks of {data_args.block_size} tokens "
            f"(train {len(data.get('train', []))}, validation {len(data.get('validation', []))}){note}. Tokenizer: "
            f"{tokenizer_source}. Document lengths in tokens:\n\n{length_report}")
