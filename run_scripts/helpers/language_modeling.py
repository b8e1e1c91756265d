# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Language-modelling data and the one main of run_mlm.py and run_clm.py: the two differ only in the template a
document is tokenized with, the head, the collator's masking and what the evaluation adds (see `main`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import datasets
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import IntervalStrategy

from .data_files import check_file, read_records, split_columns
from .model_args import RANModelArguments, build_model, parameter_learning_rates
from .pretraining import (
    CorpusArguments,
    MaskedLMCollator,
    check_corpus_arguments,
    mask_once,
    masked_accuracy,
    masked_predictions,
    streamed_corpus_datasets,
)
from .reports import (
    command_line,
    format_length_table,
    format_metrics_table,
    length_statistics,
    perplexity,
    training_time,
    write_model_card,
)
from .tokenizer import get_tokenizer, use_causal_lm_template
from .trainer_setup import (
    RANTrainer,
    disable_eval_if_no_data,
    parse_args,
    resolve_checkpoint,
    setup_logging,
    setup_threads,
    steps_given,
    train_and_save,
    trainer_defaults,
)


logger = logging.getLogger("run_scripts")


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

    Each document is tokenized with the tokenizer's template: masked LM `[CLS] ... [SEP]`; causal LM `[SEP] ...`
    (`use_causal_lm_template`: the end-of-document token precedes every document, the way a prompt is encoded).
    The documents are concatenated (causal LM: plus a final `[SEP]` ending the last one) and cut into blocks."""
    out, stats = {}, {}
    for split, docs in texts.items():
        enc = tokenizer(docs)["input_ids"]
        stats[split] = length_statistics([len(x) for x in enc])
        blocks = group_into_blocks([*enc, [tokenizer.eos_token_id]] if causal else enc, data_args.block_size)
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
    train_dirs = getattr(data_args, "train_dirs", None)
    if train_dirs:
        split = f" ({data_args.split_column} == {data_args.train_split!r})" if data_args.split_column else ""
        train = f"{', '.join(f'`{d}`' for d in train_dirs)}{split}, streamed"
        validation = data_args.validation_file or (f"{data_args.split_column} == {data_args.validation_split!r}"
                                                   if data_args.split_column else "none")
    else:
        train = f"`{data_args.train_file}`"
        validation = data_args.validation_file or f"last {data_args.validation_split_percentage:g}% of train"
    counts = {split: len(ds) if isinstance(ds, datasets.Dataset) else "streamed" for split, ds in data.items()}
    return (f"Train {train}, validation `{validation}`; blocks of {data_args.block_size} tokens "
            f"(train {counts.get('train', 0)}, validation {counts.get('validation', 0)}){note}. Tokenizer: "
            f"{tokenizer_source}. Document lengths in tokens:\n\n{length_report}")


@dataclass
class MLMDataArguments(CorpusArguments, LMDataArguments):
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens to mask."})


def parse_job_arguments(argv: list[str], causal: bool) -> tuple:
    """The three argument groups (the script's defaults in front of `argv`), `--do_train` set from the data when
    no step is given, and the data checked against the steps. Returns them and whether the training corpus is
    streamed (`run_mlm.py --train_dirs`)."""
    task = "Causal-LM" if causal else "Masked-LM"
    parser = HfArgumentParser((RANModelArguments, LMDataArguments if causal else MLMDataArguments,
                               TrainingArguments))
    defaults = trainer_defaults("outputs/clm" if causal else "outputs/mlm", learning_rate="5e-4", epochs="1",
                                train_batch_size="4", eval_batch_size="4", logging_steps="20", warmup="0.05",
                                save_total_limit="2")
    model_args, data_args, training_args = parse_args(parser, argv, defaults)
    setup_logging(training_args)
    setup_threads(model_args)
    streamed = not causal and bool(data_args.train_dirs)
    if streamed:
        check_corpus_arguments(data_args, training_args, model_args)
    if not steps_given(argv):
        training_args.do_train = data_args.train_file is not None or streamed
    if training_args.do_train and not (data_args.train_file or streamed):
        raise ValueError(f"{task} training needs --train_file (.txt/.jsonl/.json/.csv)"
                         + ("." if causal else " or --train_dirs (a corpus of jsonl shards, streamed)."))
    if not training_args.do_train and not (data_args.validation_file and model_args.model_name_or_path):
        raise ValueError("Nothing to do: pass --train_file (training), or --validation_file with "
                         "--model_name_or_path (evaluation of a trained model).")
    return model_args, data_args, training_args, streamed


def lm_tokenizer(model_args, texts: dict, resume: str | None, causal: bool) -> tuple:
    """The tokenizer (trained on the training text where none is given), with the causal template (`[SEP]` after
    each document) or checked for a mask token. Returns (tokenizer, where it came from)."""
    tokenizer, tokenizer_source = get_tokenizer(model_args, lambda: texts["train"], resume_checkpoint=resume)
    if causal:
        use_causal_lm_template(tokenizer)
    elif tokenizer.mask_token is None:
        raise ValueError(f"The tokenizer ({tokenizer_source}) has no mask token; masked-LM training needs one.")
    return tokenizer, tokenizer_source


def block_datasets(texts: dict, tokenizer, tokenizer_source: str, data_args, seed: int, causal: bool,
                   streamed: bool) -> tuple[dict, str]:
    """The training and validation blocks (the training blocks streamed from `--train_dirs` for a streamed corpus;
    masked-LM validation blocks masked once, so every evaluation scores the same positions); prints the documents'
    lengths. Returns (split -> blocks, the printed table)."""
    if streamed:
        data, doc_stats = streamed_corpus_datasets(data_args, tokenizer, seed)
        if "validation" in texts:
            more_data, more_stats = lm_datasets({"validation": texts["validation"]}, tokenizer, data_args, causal)
            data.update(more_data)
            doc_stats.update(more_stats)
    else:
        data, doc_stats = lm_datasets(texts, tokenizer, data_args, causal=causal)
    if not causal and "validation" in data:
        data["validation"] = mask_once(data["validation"], tokenizer, data_args.mlm_probability, seed)
    report = format_length_table(doc_stats)
    template = "[SEP] ..." if causal else "[CLS] ... [SEP]"
    print(f"\nDocument lengths in tokens ({tokenizer_source}; as {template}):\n{report}\n", flush=True)
    return data, report


def build_trainer(model_args, data_args, training_args, tokenizer, data: dict, causal: bool) -> RANTrainer:
    """The model (causal: a decoder with the tokenizer's bos / eos), its collator (masked LM: fresh masks per
    batch, masked-token accuracy as the metric) and `RANTrainer` over the blocks."""
    if causal:
        overrides = None if model_args.model_name_or_path else {
            "is_decoder": True, "eos_token_id": tokenizer.eos_token_id, "bos_token_id": tokenizer.bos_token_id}
        model = build_model(AutoModelForCausalLM, model_args, tokenizer, config_overrides=overrides)
        collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)  # labels = input_ids, -100 at pads
        metric_hooks = {}
    else:
        model = build_model(AutoModelForMaskedLM, model_args, tokenizer)
        collator = MaskedLMCollator(tokenizer, mlm_probability=data_args.mlm_probability, seed=training_args.seed)
        metric_hooks = {"compute_metrics": masked_accuracy, "preprocess_logits_for_metrics": masked_predictions}
    return RANTrainer(model=model, args=training_args, train_dataset=data.get("train") if training_args.do_train
                      else None, eval_dataset=data.get("validation"), processing_class=tokenizer,
                      data_collator=collator, save_every_minutes=model_args.save_every_minutes,
                      learning_rates=parameter_learning_rates(model, model_args), **metric_hooks)


def evaluate(trainer: RANTrainer, validation: datasets.Dataset, seed: int, causal: bool) -> dict:
    """Loss, perplexity (and masked-token accuracy) on the validation blocks, printed and saved."""
    set_seed(seed)  # (masked LM: the validation masks were drawn once, by mask_once)
    metrics = trainer.evaluate()
    metrics["eval_blocks"] = len(validation)
    metrics["eval_tokens"] = sum(len(x) for x in validation["input_ids"])
    metrics["perplexity"] = perplexity(metrics["eval_loss"])
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    what = "per token" if causal else "masked-token"
    accuracy = "" if causal else f", masked-token accuracy {metrics['eval_accuracy']:.4f}"
    print(f"\nValidation: {what} loss {metrics['eval_loss']:.4f}, perplexity {metrics['perplexity']:.2f}"
          f"{accuracy} ({metrics['eval_tokens']} tokens in {metrics['eval_blocks']} blocks)\n", flush=True)
    return metrics


def main(argv: Sequence[str] | None, causal: bool) -> dict:
    """Train and/or evaluate a masked (`causal=False`, run_mlm.py) or causal (`causal=True`, run_clm.py) RAN
    language model; returns the train and eval metrics."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, training_args, streamed = parse_job_arguments(argv, causal)
    started = time.time()
    set_seed(training_args.seed)

    texts = read_lm_texts(data_args, training_args)
    disable_eval_if_no_data(training_args, "validation" in texts or (streamed and bool(data_args.split_column)))
    resume = resolve_checkpoint(training_args) if training_args.do_train else None
    tokenizer, tokenizer_source = lm_tokenizer(model_args, texts, resume, causal)
    data, report = block_datasets(texts, tokenizer, tokenizer_source, data_args, training_args.seed, causal, streamed)
    trainer = build_trainer(model_args, data_args, training_args, tokenizer, data, causal)

    results: dict = {}
    if training_args.do_train:
        block_count = {} if streamed else {"train_blocks": len(data["train"])}  # a stream has no length
        results["train"] = train_and_save(trainer, resume, **block_count)
    sample = None
    if "validation" in data:
        results["eval"] = evaluate(trainer, data["validation"], training_args.seed, causal)
        if causal:
            sample = sample_continuation(trainer.model, tokenizer, data["validation"][0]["input_ids"][:32])
            logger.info(f"Greedy continuation: {sample}")
    results["wall_time_s"] = round(time.time() - started, 1)
    if training_args.should_save:
        if not training_args.do_train:
            if causal:
                trainer.model.config.use_cache = True
            trainer.save_model()
        write_card(training_args, data_args, data, trainer.model, results, tokenizer_source, report, sample, causal,
                   command_line("run_clm.py" if causal else "run_mlm.py", argv))
    logger.info(f"Done in {results['wall_time_s']} s; output in {training_args.output_dir}")
    return results


def write_card(training_args, data_args, data, model, results, tokenizer_source, length_report, sample, causal,
               command):
    sections = {}
    if "eval" in results:
        e = results["eval"]
        table = format_metrics_table({"validation": {"loss": e["eval_loss"], "perplexity": e["perplexity"]}})
        if causal:
            sections["Results"] = (f"Per-token loss of the next word piece on the validation blocks "
                                   f"({e['eval_tokens']} tokens) and its perplexity (word-piece level, not comparable "
                                   f"with word-level perplexities):\n\n{table}")
            if sample:
                sections["Results"] += f"\n\nGreedy continuation of the first validation block:\n\n> {sample}"
        else:
            table = format_metrics_table({"validation": {"loss": e["eval_loss"], "perplexity": e["perplexity"],
                                                         "accuracy": e["eval_accuracy"]}})
            sections["Results"] = ("Masked-token loss on the validation blocks (15% of the tokens masked once with the "
                                   "run's seed, BERT 80/10/10 replacement), its exponential and the share of masked "
                                   f"tokens predicted right:\n\n{table}")
    note = ", each document started and ended by [SEP]" if causal else ""
    sections["Data"] = lm_data_section(data_args, data, tokenizer_source, length_report, note=note)
    if "train" in results:
        sections["Training"] = f"{training_time(results['train'])}."
    if causal:
        title, auto_class, tags = "RAN causal language model", "AutoModelForCausalLM", ["text-generation"]
        description = ("A causal Recurrent Attention Network (RAN, Li et al., ACL 2023) language model trained on "
                       "long blocks with `run_scripts/run_clm.py` of `ran_hf`; it generates with `model.generate()` "
                       "on a recurrent cache that grows by one key and value per layer and window (not per token). "
                       "Its tokenizer encodes a prompt as `[SEP] text`, the way training saw the start of every "
                       "document.")
    else:
        title, auto_class, tags = "RAN masked language model", "AutoModelForMaskedLM", ["fill-mask"]
        description = ("A Recurrent Attention Network (RAN, Li et al., ACL 2023) masked language model trained on "
                       "long blocks with `run_scripts/run_mlm.py` of `ran_hf`.")
    write_model_card(training_args.output_dir, title=title, description=description, auto_class=auto_class,
                     sections=sections, model=model, training_args=training_args, command=command, tags=tags)


@torch.no_grad()
def sample_continuation(model, tokenizer, prompt_ids, max_new_tokens: int = 24) -> str:
    """A greedy continuation of `prompt_ids` for the log and the model card ("" if generation fails)."""
    was_training = model.training
    model.eval()
    try:
        ids = torch.tensor([prompt_ids], device=model.device)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id)
        return (tokenizer.decode(prompt_ids) + " >>> " + tokenizer.decode(out[0, len(prompt_ids):])).strip()
    except Exception as err:  # a sample is a nicety; never fail the run on it
        logger.warning(f"Could not generate a sample: {err!r}")
        return ""
    finally:
        model.train(was_training)
