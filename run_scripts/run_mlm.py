#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Masked-language-model pretraining of RAN (`RANForMaskedLM`) with the Transformers `Trainer`, offline.

Text: `.txt` (one document or paragraph per line), `.jsonl`/`.json`/`.csv` with a `text` field, optionally gzipped.
Every document is tokenized as `[CLS] ... [SEP]`, the documents are concatenated and cut into long blocks of
`--block_size` tokens (default 4096, not 512), and `DataCollatorForLanguageModeling` masks 15% of the tokens.
Evaluation reports the masked-token loss and its perplexity on `--validation_file` (or the last
`--validation_split_percentage` of the training documents).

From scratch (a WordPiece tokenizer is trained on the training split unless `--tokenizer_name` is given; config
flags `--hidden_size --num_hidden_layers --num_attention_heads --attention_head_size --window_size`) or continuing
from `--model_name_or_path`. The output directory loads with `AutoModelForMaskedLM` / `AutoTokenizer`, and with
`run_classification.py --model_name_or_path` / `run_ner.py --model_name_or_path` for fine-tuning.

    python run_scripts/run_mlm.py --train_file /work/shared/data/wikitext-2/wiki.train.docshuf.tokens \
        --validation_file /work/shared/data/wikitext-2/wiki.valid.tokens --output_dir outputs/mlm \
        --block_size 2048 --num_train_epochs 1
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import utils_ran  # noqa: E402
from utils_ran import (  # noqa: E402
    LMDataArguments,
    RANModelArguments,
    RANTrainer,
    build_model,
    command_line,
    disable_eval_if_no_data,
    format_length_table,
    format_metrics_table,
    lm_data_section,
    get_tokenizer,
    lm_datasets,
    perplexity,
    read_lm_texts,
    resolve_checkpoint,
    setup_logging,
    setup_threads,
    train_and_save,
    trainer_defaults,
    write_model_card,
)

from transformers import AutoModelForMaskedLM, DataCollatorForLanguageModeling, HfArgumentParser, TrainingArguments  # noqa: E402,E501
from transformers import set_seed  # noqa: E402


logger = logging.getLogger("run_scripts")

SCRIPT_DEFAULTS = trainer_defaults("outputs/mlm", learning_rate="5e-4", epochs="1", train_batch_size="4",
                                   eval_batch_size="4", logging_steps="20", warmup="0.05", save_total_limit="2")


@dataclass
class MLMDataArguments(LMDataArguments):
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens to mask."})


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser((RANModelArguments, MLMDataArguments, TrainingArguments))
    model_args, data_args, training_args = utils_ran.parse_args(parser, argv, SCRIPT_DEFAULTS)
    setup_logging(training_args)
    setup_threads(model_args)
    started = time.time()
    if not utils_ran.steps_given(argv):
        training_args.do_train = data_args.train_file is not None
    if training_args.do_train and not data_args.train_file:
        raise ValueError("Masked-LM training needs --train_file (.txt/.jsonl/.json/.csv).")
    if not training_args.do_train and not data_args.validation_file:
        raise ValueError("Nothing to do: pass --train_file (training) or --validation_file with --model_name_or_path "
                         "(evaluation).")
    if not training_args.do_train and not model_args.model_name_or_path:
        raise ValueError("Evaluation without training needs --model_name_or_path.")
    set_seed(training_args.seed)

    texts = read_lm_texts(data_args, training_args)
    disable_eval_if_no_data(training_args, "validation" in texts)
    resume = resolve_checkpoint(training_args) if training_args.do_train else None
    tokenizer, tokenizer_source = get_tokenizer(model_args, lambda: texts["train"], resume_checkpoint=resume)
    if tokenizer.mask_token is None:
        raise ValueError(f"The tokenizer ({tokenizer_source}) has no mask token; masked-LM training needs one.")
    data, doc_stats = lm_datasets(texts, tokenizer, data_args, causal=False)
    report = format_length_table(doc_stats)
    print(f"\nDocument lengths in tokens ({tokenizer_source}):\n{report}\n", flush=True)

    model = build_model(AutoModelForMaskedLM, model_args, tokenizer)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=data_args.mlm_probability)
    trainer = RANTrainer(model=model, args=training_args, train_dataset=data.get("train") if training_args.do_train
                         else None, eval_dataset=data.get("validation"), processing_class=tokenizer,
                         data_collator=collator)
    results: dict = {}
    if training_args.do_train:
        results["train"] = train_and_save(trainer, resume, train_blocks=len(data["train"]))
    if "validation" in data:
        set_seed(training_args.seed)  # the same masks for every evaluation run with this seed
        metrics = trainer.evaluate()
        metrics["eval_blocks"] = len(data["validation"])
        metrics["perplexity"] = perplexity(metrics["eval_loss"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results["eval"] = metrics
        print(f"\nValidation: masked-token loss {metrics['eval_loss']:.4f}, perplexity {metrics['perplexity']:.2f}\n",
              flush=True)
    results["wall_time_s"] = round(time.time() - started, 1)
    if training_args.should_save:
        if not training_args.do_train:
            trainer.save_model()
        sections = {}
        if "eval" in results:
            sections["Results"] = ("Masked-token loss on the validation blocks (15% of the tokens masked, BERT "
                                   "80/10/10 replacement) and its exponential:\n\n" + format_metrics_table(
                                       {"validation": {"loss": results["eval"]["eval_loss"],
                                                       "perplexity": results["eval"]["perplexity"]}}))
        sections["Data"] = lm_data_section(data_args, data, tokenizer_source, report)
        if "train" in results:
            sections["Training"] = f"{results['train'].get('train_runtime', 0):.0f} s of training."
        write_model_card(training_args.output_dir, title="RAN masked language model",
                         description="A Recurrent Attention Network (RAN, Li et al., ACL 2023) masked language model "
                                     "trained on long blocks with `run_scripts/run_mlm.py` of `ran_hf`.",
                         auto_class="AutoModelForMaskedLM", sections=sections, model=trainer.model,
                         training_args=training_args, command=command_line("run_mlm.py", argv), tags=["fill-mask"])
    logger.info(f"Done in {results['wall_time_s']} s; output in {training_args.output_dir}")
    return results


if __name__ == "__main__":
    main()
