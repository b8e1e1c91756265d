# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Does RAN carry context across windows? A causal-LM perplexity comparison on long texts, trained from scratch.

Corpora: WikiText-2 (`--corpus wikitext2`, Wikipedia articles) or 67 Project Gutenberg books (`--corpus gutenberg`,
split by book: 3 validation and 3 test books), both read from --data_dir.

Four small models are trained with the same WordPiece tokenizer (trained here on the train split, cached in the
output directory), the same optimizer and schedule (AdamW, linear warmup then cosine or linear decay, gradient
clipping), the same number of steps and the same tokens per step, taken from the same shuffled token stream in the
same order for a given seed:

* `ran`: `RANForCausalLM` (hidden 128, 2 layers, 4 heads x 32, window W=128), trained on blocks of --block_size
  tokens (default 8W = 1024);
* `ran_no_review`: the same with `use_memory_review=False`;
* `gpt2_w`: a GPT-2 (`GPT2LMHeadModel`, n_embd 128, 2 layers, 4 heads, n_inner 512) with a context of W tokens;
* `gpt2_4w`: the same GPT-2 with a context of 4W tokens.

Evaluation: the validation and test splits are cut into consecutive blocks of --block_size tokens (the tail is
dropped). Every model scores exactly the same target tokens: RAN reads a block in one forward pass; a GPT-2 with
context C reads it as block / C independent chunks. The first token of every W-token window is left out of the score (a
context-free W-token chunk cannot predict it), so each window contributes its W - 1 later tokens. Reported per model:
perplexity over all scored tokens and per window index inside the block. RAN's window 1 has no earlier cell, so
later windows can beat it only by carrying context across windows. RAN is also scored with a fresh state per window
(each W-token chunk read on its own): the gap to the full-block number is the measured value of cross-window context.
The checkpoint scored is the one after the last step; the test split is scored once, at the end.

Perplexities are over word pieces (not words), so they are comparable between the models here, not with published
word-level WikiText-2 numbers. The output directory gets `runs.jsonl` (one line per model and seed; a run with the
same settings is reused when the command runs again, so models and seeds can be added, or run in parallel processes
that share the directory), `results.json` and `table.md` (of the models and seeds asked for).

Reproduce the results in `research/compare_lm/results/` (1 torch thread per process, about 11 minutes per model on
one CPU core; models and seeds can run in parallel processes sharing an output directory):

    python -m research.compare_lm --data_dir DATA/wikitext-2 --steps 600 --seeds 0 1 --output_dir outputs/compare_lm
    python -m research.compare_lm --corpus gutenberg --data_dir DATA/gutenberg --block_size 2048 --steps 600 \
        --output_dir outputs/compare_lm_gutenberg

A quick smoke run:

    python -m research.compare_lm --data_dir DATA/wikitext-2 --steps 5 --max_train_tokens 100000 \
        --max_eval_tokens 8192 --output_dir /tmp/lm_smoke
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import torch

from research.result_log import append_result, read_result_log
from run_scripts.helpers.reports import command_line

from . import train as train_module
from .data import DATA_SOURCES, GUTENBERG_HELD_OUT_BOOKS, load_data, split_paths
from .models import GPT2_CONTEXT_IN_WINDOWS, MODEL_NAMES
from .report import format_table, summarize


logger = logging.getLogger("run_scripts")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--corpus", choices=tuple(DATA_SOURCES), default="wikitext2",
                      help="wikitext2: the WikiText-2 splits; gutenberg: 67 Project Gutenberg books, split by book "
                           f"({GUTENBERG_HELD_OUT_BOOKS} validation and {GUTENBERG_HELD_OUT_BOOKS} test books drawn "
                           "with a fixed seed), each paragraph one line.")
    data.add_argument("--data_dir", default=None,
                      help=f"Required. wikitext2: the folder holding {DATA_SOURCES['wikitext2']}; gutenberg: the "
                           f"folder holding {DATA_SOURCES['gutenberg']}.")
    data.add_argument("--output_dir", default="outputs/compare_lm", help="results.json, table.md, tokenizer/.")
    data.add_argument("--vocab_size", type=int, default=8000, help="WordPiece vocabulary trained on the train split.")
    data.add_argument("--max_train_tokens", type=int, default=None, help="Keep the first N train tokens.")
    data.add_argument("--max_eval_tokens", type=int, default=None,
                      help="Keep the first N validation and N test tokens (rounded down to whole blocks).")
    model = parser.add_argument_group("models")
    model.add_argument("--models", nargs="+", default=list(MODEL_NAMES), choices=MODEL_NAMES)
    model.add_argument("--hidden_size", type=int, default=128)
    model.add_argument("--num_layers", type=int, default=2)
    model.add_argument("--num_heads", type=int, default=4)
    model.add_argument("--head_size", type=int, default=32, help="RAN head size (GPT-2: hidden_size / num_heads).")
    model.add_argument("--gpt2_inner_size", type=int, default=512, help="GPT-2 MLP width (n_inner).")
    model.add_argument("--window_size", type=int, default=128, help="RAN window W; GPT-2 contexts are W and 4W.")
    model.add_argument("--block_size", type=int, default=1024,
                       help="RAN training block and evaluation block, a multiple of 4W.")
    model.add_argument("--dropout", type=float, default=0.0,
                       help="Dropout of every model (training stays under one epoch by default).")
    train = parser.add_argument_group("training")
    train.add_argument("--steps", type=int, default=120, help="Optimizer steps, the same for every model.")
    train.add_argument("--tokens_per_step", type=int, default=4096, help="A multiple of --block_size.")
    train.add_argument("--learning_rate", type=float, default=1e-3)
    train.add_argument("--weight_decay", type=float, default=0.0)
    train.add_argument("--warmup_ratio", type=float, default=0.05)
    train.add_argument("--lr_scheduler", choices=("cosine", "linear"), default="cosine")
    train.add_argument("--max_grad_norm", type=float, default=1.0)
    train.add_argument("--seeds", type=int, nargs="+", default=[0], help="Model init and data order seeds.")
    train.add_argument("--eval_batch_tokens", type=int, default=1024, help="Tokens per evaluation forward pass.")
    train.add_argument("--threads", type=int, default=1, help="torch.set_num_threads.")
    train.add_argument("--logging_steps", type=int, default=10)
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Clear errors, naming the flag, before anything is trained."""
    positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "head_size", "gpt2_inner_size", "window_size",
                "block_size", "steps", "tokens_per_step", "eval_batch_tokens", "threads", "logging_steps")
    for name in positive:
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}.")
    for name in ("max_train_tokens", "max_eval_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name} must be a positive integer, got {getattr(args, name)}.")
    if args.vocab_size < 32:
        raise ValueError(f"--vocab_size must be at least 32 (special tokens and characters), got {args.vocab_size}.")
    if args.window_size < 2:
        raise ValueError(f"--window_size must be at least 2 (a window scores its W - 1 later tokens), got "
                         f"{args.window_size}.")
    longest_gpt2_context = max([GPT2_CONTEXT_IN_WINDOWS[m] for m in args.models if m in GPT2_CONTEXT_IN_WINDOWS],
                               default=1) * args.window_size
    if args.block_size % longest_gpt2_context:
        raise ValueError(
            f"--block_size ({args.block_size}) must be a multiple of the window size and of every GPT-2 context "
            f"(--window_size {args.window_size}, so a multiple of {longest_gpt2_context}): a block is scored as "
            f"whole windows and whole GPT-2 chunks."
        )
    if args.tokens_per_step % args.block_size:
        raise ValueError(f"--tokens_per_step ({args.tokens_per_step}) must be a multiple of --block_size "
                         f"({args.block_size}), so every model gets whole rows.")
    if args.hidden_size % args.num_heads:
        raise ValueError(f"--hidden_size ({args.hidden_size}) must be divisible by --num_heads ({args.num_heads}) "
                         f"for GPT-2.")
    if not 0.0 <= args.dropout < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}.")
    if not 0.0 <= args.warmup_ratio < 1.0:
        raise ValueError(f"--warmup_ratio must be in [0, 1), got {args.warmup_ratio}.")
    if args.learning_rate <= 0:
        raise ValueError(f"--learning_rate must be positive, got {args.learning_rate}.")



def run_setting(args: argparse.Namespace) -> dict:
    """Everything besides the model and the seed that decides a run's numbers; a finished run in `runs.jsonl` is
    reused only when this matches."""
    keys = ("corpus", "vocab_size", "max_train_tokens", "max_eval_tokens", "hidden_size", "num_layers", "num_heads",
            "head_size", "gpt2_inner_size", "window_size", "block_size", "dropout", "steps", "tokens_per_step",
            "learning_rate", "weight_decay", "warmup_ratio", "lr_scheduler", "max_grad_norm", "eval_batch_tokens")
    return {**{key: getattr(args, key) for key in keys}, "data_dir": str(Path(args.data_dir).resolve())}


def main(argv: Sequence[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.data_dir is None:
        raise ValueError(f"--data_dir is required: for --corpus {args.corpus}, a folder holding "
                         f"{DATA_SOURCES[args.corpus]}.")
    check_args(args)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    logger.setLevel(logging.INFO)
    torch.set_num_threads(args.threads)
    output_dir = Path(args.output_dir)
    if args.corpus == "wikitext2":
        split_paths(args.data_dir)  # fail on a bad --data_dir before creating the output folder
    output_dir.mkdir(parents=True, exist_ok=True)

    tokenizer, segments, data, info = load_data(args, output_dir)
    runs_path = output_dir / "runs.jsonl"
    setting = run_setting(args)
    runs = []
    for seed in args.seeds:
        for name in args.models:
            # read again before every run: another process may have finished it meanwhile
            done = {(r["model"], r["seed"]): r for r in read_result_log(runs_path) if r.get("setting") == setting}
            if (name, seed) not in done:
                done[(name, seed)] = {**train_module.run_one(name, seed, segments, data, args, tokenizer), "setting": setting}
                append_result(runs_path, done[(name, seed)])
            runs.append(done[(name, seed)])
    summary = summarize(runs)
    table = format_table(summary, args, info)
    results = {"command": command_line("research.compare_lm", argv), "args": vars(args), "data": info,
               "torch_version": torch.__version__, "models": summary, "runs": runs}
    (output_dir / "results.json").write_text(json.dumps(results, indent=2))
    (output_dir / "table.md").write_text(table)
    print(table)
    return results


if __name__ == "__main__":
    main()
