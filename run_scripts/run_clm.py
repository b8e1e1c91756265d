#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Causal language modelling with RAN (`RANForCausalLM`) and the Transformers `Trainer`, with perplexity, offline.

Text: `.txt` (one document or paragraph per line), `.jsonl`/`.json`/`.csv` with a `text` field, optionally gzipped.
Every document is tokenized without [CLS], followed by `[SEP]` (the end-of-document token, `eos_token_id`), the
documents are concatenated and cut into long blocks of `--block_size` tokens (default 4096, not 512). The model
predicts every next token of a block (labels = inputs, shifted inside the model). Evaluation reports the per-token
loss on `--validation_file` (or the last `--validation_split_percentage` of the training documents) and the
perplexity `exp(loss)` (over the tokenizer's word pieces, each block read from its start), and prints a short greedy
continuation of the first validation block.

    python run_scripts/run_clm.py --train_file /work/shared/data/wikitext-2/wiki.train.docshuf.tokens \
        --validation_file /work/shared/data/wikitext-2/wiki.valid.tokens --output_dir outputs/clm \
        --block_size 2048 --num_train_epochs 1

The output directory loads with `AutoModelForCausalLM` / `AutoTokenizer` and generates with `model.generate()`.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import torch

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

from transformers import AutoModelForCausalLM, DataCollatorForLanguageModeling, HfArgumentParser, TrainingArguments  # noqa: E402,E501
from transformers import set_seed  # noqa: E402


logger = logging.getLogger("run_scripts")

SCRIPT_DEFAULTS = trainer_defaults("outputs/clm", learning_rate="5e-4", epochs="1", train_batch_size="4",
                                   eval_batch_size="4", logging_steps="20", warmup="0.05", save_total_limit="2")


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser((RANModelArguments, LMDataArguments, TrainingArguments))
    model_args, data_args, training_args = utils_ran.parse_args(parser, argv, SCRIPT_DEFAULTS)
    setup_logging(training_args)
    setup_threads(model_args)
    started = time.time()
    if not utils_ran.steps_given(argv):
        training_args.do_train = data_args.train_file is not None
    if training_args.do_train and not data_args.train_file:
        raise ValueError("Causal-LM training needs --train_file (.txt/.jsonl/.json/.csv).")
    if not training_args.do_train and not (data_args.validation_file and model_args.model_name_or_path):
        raise ValueError("Nothing to do: pass --train_file (training), or --validation_file with "
                         "--model_name_or_path (perplexity of a trained model).")
    set_seed(training_args.seed)

    texts = read_lm_texts(data_args, training_args)
    disable_eval_if_no_data(training_args, "validation" in texts)
    resume = resolve_checkpoint(training_args) if training_args.do_train else None
    tokenizer, tokenizer_source = get_tokenizer(model_args, lambda: texts["train"], resume_checkpoint=resume)
    if tokenizer.sep_token_id is None:
        raise ValueError(f"The tokenizer ({tokenizer_source}) has no [SEP] token to end documents with.")
    data, doc_stats = lm_datasets(texts, tokenizer, data_args, causal=True)
    report = format_length_table(doc_stats)
    print(f"\nDocument lengths in tokens ({tokenizer_source}; [SEP] not included):\n{report}\n", flush=True)

    model = build_model(AutoModelForCausalLM, model_args, tokenizer, config_overrides=None if model_args.
                        model_name_or_path else {"is_decoder": True, "eos_token_id": tokenizer.sep_token_id,
                                                 "bos_token_id": tokenizer.cls_token_id})
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)  # labels = input_ids, -100 at pads
    trainer = RANTrainer(model=model, args=training_args, train_dataset=data.get("train") if training_args.do_train
                         else None, eval_dataset=data.get("validation"), processing_class=tokenizer,
                         data_collator=collator)
    results: dict = {}
    if training_args.do_train:
        results["train"] = train_and_save(trainer, resume, train_blocks=len(data["train"]))
    sample = None
    if "validation" in data:
        metrics = trainer.evaluate()
        metrics["eval_blocks"] = len(data["validation"])
        metrics["eval_tokens"] = sum(len(x) for x in data["validation"]["input_ids"])
        metrics["perplexity"] = perplexity(metrics["eval_loss"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results["eval"] = metrics
        print(f"\nValidation: loss {metrics['eval_loss']:.4f} per token, perplexity {metrics['perplexity']:.2f} "
              f"({metrics['eval_tokens']} tokens in {metrics['eval_blocks']} blocks)\n", flush=True)
        sample = sample_continuation(trainer.model, tokenizer, data["validation"][0]["input_ids"][:32])
        logger.info(f"Greedy continuation: {sample}")
    results["wall_time_s"] = round(time.time() - started, 1)
    if training_args.should_save:
        if not training_args.do_train:
            trainer.model.config.use_cache = True
            trainer.save_model()
        sections = {}
        if "eval" in results:
            e = results["eval"]
            sections["Results"] = (
                f"Per-token loss of the next word piece on the validation blocks ({e['eval_tokens']} tokens) and "
                "its perplexity (word-piece level, not comparable with word-level perplexities):\n\n"
                + format_metrics_table({"validation": {"loss": e["eval_loss"], "perplexity": e["perplexity"]}}))
            if sample:
                sections["Results"] += f"\n\nGreedy continuation of the first validation block:\n\n> {sample}"
        sections["Data"] = lm_data_section(data_args, data, tokenizer_source, report,
                                           note=", each document ended by [SEP]")
        if "train" in results:
            sections["Training"] = f"{results['train'].get('train_runtime', 0):.0f} s of training."
        write_model_card(training_args.output_dir, title="RAN causal language model",
                         description="A causal Recurrent Attention Network (RAN, Li et al., ACL 2023) language model "
                                     "trained on long blocks with `run_scripts/run_clm.py` of `ran_hf`; it "
                                     "generates with `model.generate()` on a constant-size recurrent cache.",
                         auto_class="AutoModelForCausalLM", sections=sections, model=trainer.model,
                         training_args=training_args, command=command_line("run_clm.py", argv),
                         tags=["text-generation"])
    logger.info(f"Done in {results['wall_time_s']} s; output in {training_args.output_dir}")
    return results


@torch.no_grad()
def sample_continuation(model, tokenizer, prompt_ids, max_new_tokens: int = 24) -> str:
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


if __name__ == "__main__":
    main()
