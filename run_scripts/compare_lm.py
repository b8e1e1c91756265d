#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Does RAN carry context across windows? A causal-LM perplexity comparison on long texts, trained from scratch.

Corpora: WikiText-2 (`--corpus wikitext2`, Wikipedia articles) or 67 Project Gutenberg books (`--corpus gutenberg`,
split by book: 3 validation and 3 test books), both from the shared data folder.

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

Reproduce the README tables (1 torch thread per process, about 11 minutes per model on one CPU core; models and
seeds can run in parallel processes sharing an output directory):

    python run_scripts/compare_lm.py --steps 600 --output_dir outputs/compare_lm
    python run_scripts/compare_lm.py --corpus gutenberg --block_size 2048 --steps 600 \
        --output_dir outputs/compare_lm_gutenberg

A quick smoke run: `python run_scripts/compare_lm.py --steps 5 --max_train_tokens 100000 --max_eval_tokens 8192
--output_dir /tmp/lm_smoke`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from utils_ran import (  # noqa: E402
    SHARED_DATA_DIR,
    append_result,
    command_line,
    group_into_blocks,
    perplexity,
    read_records,
    read_result_log,
    train_wordpiece_tokenizer,
)

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    get_cosine_schedule_with_warmup,
    get_linear_schedule_with_warmup,
    set_seed,
)

from ran_hf import RANConfig, RANForCausalLM  # noqa: E402


logger = logging.getLogger("run_scripts")

DEFAULT_DATA_DIRS = {"wikitext2": SHARED_DATA_DIR / "wikitext-2", "gutenberg": SHARED_DATA_DIR / "gutenberg"}
DEFAULT_DATA_DIR = DEFAULT_DATA_DIRS["wikitext2"]
GUTENBERG_HELD_OUT_BOOKS = 3  # books in each of validation and test; the rest train
SPLIT_FILES = {
    "train": "wiki.train.docshuf.tokens",
    "validation": "wiki.valid.tokens",
    "test": "wiki.test.tokens",
}
MODEL_NAMES = ("ran", "ran_no_review", "gpt2_w", "gpt2_4w")
GPT2_CONTEXT_IN_WINDOWS = {"gpt2_w": 1, "gpt2_4w": 4}


# ----------------------------------------------------------------------------------------------------------------------
# arguments
# ----------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--corpus", choices=tuple(DEFAULT_DATA_DIRS), default="wikitext2",
                      help="wikitext2: the WikiText-2 splits; gutenberg: 67 Project Gutenberg books, split by book "
                           f"({GUTENBERG_HELD_OUT_BOOKS} validation and {GUTENBERG_HELD_OUT_BOOKS} test books drawn "
                           "with a fixed seed), each paragraph one line.")
    data.add_argument("--data_dir", default=None,
                      help=f"wikitext2: the folder holding {', '.join(SPLIT_FILES.values())} (default "
                           f"{DEFAULT_DATA_DIRS['wikitext2']}); gutenberg: the folder holding books-*.jsonl.gz "
                           f"(default {DEFAULT_DATA_DIRS['gutenberg']}).")
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


def gutenberg_splits(data_dir: str) -> dict[str, list[str]]:
    """Paragraph lines of the Gutenberg books per split. Books are sorted by id and a seeded permutation picks the
    validation and test books, so no book is in two splits. A paragraph (lines up to a blank line) becomes one line
    with its hard line breaks joined by spaces; training books are concatenated in id order."""
    folder = Path(data_dir)
    files = sorted(folder.glob("books-*.jsonl*")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"--data_dir '{data_dir}' holds no books-*.jsonl(.gz) (pass the gutenberg folder of "
                                f"the shared data, e.g. {DEFAULT_DATA_DIRS['gutenberg']}).")
    books = {}
    for path in files:
        for record in read_records(path, ["id"], arg_name="data_dir", text_field="text"):
            books[record["id"]] = [" ".join(p.split()) for p in record["_text"].split("\n\n") if p.strip()]
    if len(books) < 2 * GUTENBERG_HELD_OUT_BOOKS + 1:
        raise ValueError(f"--data_dir '{data_dir}' has {len(books)} books; the gutenberg corpus needs at least "
                         f"{2 * GUTENBERG_HELD_OUT_BOOKS + 1} (validation, test and training books).")
    ids = sorted(books)
    held_out = np.random.default_rng(0).permutation(len(ids))[: 2 * GUTENBERG_HELD_OUT_BOOKS]
    validation = sorted(ids[i] for i in held_out[:GUTENBERG_HELD_OUT_BOOKS])
    test = sorted(ids[i] for i in held_out[GUTENBERG_HELD_OUT_BOOKS:])
    train = [i for i in ids if i not in validation and i not in test]
    return {"books": {"train": train, "validation": validation, "test": test},
            **{split: [line for book in names for line in books[book]]
               for split, names in (("train", train), ("validation", validation), ("test", test))}}


def split_paths(data_dir: str) -> dict[str, Path]:
    """The three WikiText-2 files in `data_dir`, or FileNotFoundError naming --data_dir and what is missing."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"--data_dir: no such directory: '{data_dir}'. Pass the folder holding "
                                f"{', '.join(SPLIT_FILES.values())}.")
    paths = {split: folder / name for split, name in SPLIT_FILES.items()}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"--data_dir '{data_dir}' lacks {', '.join(missing)} (it needs "
                                f"{', '.join(SPLIT_FILES.values())}).")
    return paths


# ----------------------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[str]:
    """Non-blank lines of a WikiText file; its `<unk>` becomes the tokenizer's `[UNK]` (one token, id 1)."""
    records = read_records(path, [], arg_name="data_dir", text_field="text")
    return [r["_text"].replace("<unk>", "[UNK]") for r in records]


def get_tokenizer(train_lines: list[str], source: dict, vocab_size: int, output_dir: Path):
    """A WordPiece tokenizer trained on the train lines, saved in `output_dir/tokenizer` and reused when it was
    trained on the same `source` (what identifies the training text) with the same vocabulary size."""
    folder = output_dir / "tokenizer"
    meta_path = folder / "compare_lm_tokenizer.json"
    meta = {**source, "vocab_size": vocab_size}
    if meta_path.is_file() and json.loads(meta_path.read_text()) == meta:
        logger.info(f"Reusing the tokenizer in {folder}.")
        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    start = time.time()
    tokenizer = train_wordpiece_tokenizer(train_lines, vocab_size=vocab_size)
    tokenizer.save_pretrained(str(folder))
    meta_path.write_text(json.dumps(meta, indent=2))
    logger.info(f"Trained a WordPiece tokenizer ({len(tokenizer)} pieces) in {time.time() - start:.1f}s -> {folder}.")
    return tokenizer


def token_stream(lines: list[str], tokenizer, max_tokens: int | None) -> torch.Tensor:
    """All lines' word pieces, each line followed by `[SEP]` (end of line), as one 1-D tensor."""
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    (stream,) = group_into_blocks(ids, block_size=sum(len(x) + 1 for x in ids), separator=[tokenizer.sep_token_id])
    stream = torch.tensor(stream, dtype=torch.long)
    return stream[:max_tokens] if max_tokens else stream


def train_segments(stream: torch.Tensor, tokens_per_step: int) -> torch.Tensor:
    """The train stream cut into (num_segments, tokens_per_step): one segment is the data of one step."""
    num_segments = len(stream) // tokens_per_step
    if num_segments == 0:
        raise ValueError(f"--tokens_per_step ({tokens_per_step}) is more than the {len(stream)} train tokens; lower "
                         f"it or raise --max_train_tokens.")
    return stream[: num_segments * tokens_per_step].view(num_segments, tokens_per_step)


def segment_order(num_segments: int, steps: int, seed: int) -> list[int]:
    """Segment index of every step: a seeded shuffle of the segments, reshuffled after each pass (epoch)."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    while len(order) < steps:
        order.extend(rng.permutation(num_segments).tolist())
    return order[:steps]


def eval_blocks(stream: torch.Tensor, block_size: int, split: str) -> torch.Tensor:
    """(num_blocks, block_size) consecutive blocks; the tail shorter than a block is dropped."""
    num_blocks = len(stream) // block_size
    if num_blocks == 0:
        raise ValueError(f"The {split} split has {len(stream)} tokens, fewer than one --block_size ({block_size}); "
                         f"raise --max_eval_tokens or lower --block_size.")
    return stream[: num_blocks * block_size].view(num_blocks, block_size)


# ----------------------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------------------


def model_context(name: str, args: argparse.Namespace) -> int:
    """Tokens per training row and per evaluation forward pass."""
    return GPT2_CONTEXT_IN_WINDOWS[name] * args.window_size if name in GPT2_CONTEXT_IN_WINDOWS else args.block_size


def model_label(name: str, args: argparse.Namespace) -> str:
    labels = {"ran": f"RAN (W={args.window_size})",
              "ran_no_review": f"RAN, no memory review (W={args.window_size})",
              "gpt2_w": f"GPT-2 (context {args.window_size})",
              "gpt2_4w": f"GPT-2 (context {4 * args.window_size})"}
    return labels[name]


def build_model(name: str, args: argparse.Namespace, tokenizer) -> torch.nn.Module:
    if name.startswith("ran"):
        config = RANConfig(
            vocab_size=len(tokenizer), hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
            num_attention_heads=args.num_heads, attention_head_size=args.head_size, window_size=args.window_size,
            min_window_size=0, hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
            use_memory_review=name != "ran_no_review", is_decoder=True, use_cache=False,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
        )
        return RANForCausalLM(config)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=model_context(name, args), n_embd=args.hidden_size,
        n_layer=args.num_layers, n_head=args.num_heads, n_inner=args.gpt2_inner_size, resid_pdrop=args.dropout,
        embd_pdrop=args.dropout, attn_pdrop=args.dropout, use_cache=False, bos_token_id=tokenizer.sep_token_id,
        eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    """Unique parameters (tied ones once), and the same without the token and position embedding tables."""
    total = sum(p.numel() for p in model.parameters())
    tables = {id(model.get_input_embeddings().weight): model.get_input_embeddings().weight}
    position = getattr(getattr(model, "transformer", None), "wpe", None)
    if position is not None:
        tables[id(position.weight)] = position.weight
    embedding = sum(p.numel() for p in tables.values())
    return {"total": total, "non_embedding": total - embedding}


# ----------------------------------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------------------------------


def make_scheduler(optimizer, args: argparse.Namespace):
    warmup = math.ceil(args.warmup_ratio * args.steps)
    schedule = get_cosine_schedule_with_warmup if args.lr_scheduler == "cosine" else get_linear_schedule_with_warmup
    return schedule(optimizer, num_warmup_steps=warmup, num_training_steps=args.steps)


def train_model(model, segments: torch.Tensor, order: list[int], context: int, args: argparse.Namespace,
                label: str) -> dict:
    """Plain AdamW loop: step s reads segment `order[s]` as rows of `context` tokens. Returns the loss curve and
    the wall time."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    scheduler = make_scheduler(optimizer, args)
    model.train()
    curve, window_losses = [], []
    start = time.time()
    for step, segment in enumerate(order, start=1):
        input_ids = segments[segment].view(-1, context)
        loss = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=input_ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        window_losses.append(loss.item())
        if step % args.logging_steps == 0 or step == len(order):
            mean_loss = sum(window_losses) / len(window_losses)
            curve.append({"step": step, "loss": mean_loss, "elapsed_s": time.time() - start})
            logger.info(f"{label}: step {step}/{len(order)} loss {mean_loss:.4f} ({time.time() - start:.0f}s)")
            window_losses = []
    return {"loss_curve": curve, "train_wall_s": time.time() - start, "final_train_loss": curve[-1]["loss"]}


# ----------------------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def token_nll(model, blocks: torch.Tensor, context: int, batch_tokens: int) -> torch.Tensor:
    """(num_blocks, block_size) negative log-likelihood of every token, each chunk of `context` tokens read on its
    own; NaN at the first token of every chunk (nothing predicts it)."""
    model.eval()
    chunks = blocks.reshape(-1, context)
    nll = torch.full(chunks.shape, float("nan"))
    rows_per_batch = max(1, batch_tokens // context)
    for first in range(0, len(chunks), rows_per_batch):
        input_ids = chunks[first: first + rows_per_batch]
        logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
        predicted = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
        nll[first: first + len(input_ids), 1:] = F.cross_entropy(
            predicted, input_ids[:, 1:].reshape(-1), reduction="none"
        ).view(len(input_ids), -1)
    return nll.view(blocks.shape)


def score(nll: torch.Tensor, window_size: int) -> dict:
    """Perplexity over the scored tokens (every token but the first of each window), and per window index."""
    per_window = nll.view(nll.shape[0], -1, window_size)[:, :, 1:]
    if torch.isnan(per_window).any():
        raise RuntimeError("A scored token has no prediction; the chunk length must be a multiple of the window.")
    window_losses = per_window.mean(dim=(0, 2)).tolist()
    loss = per_window.mean().item()
    return {"loss": loss, "ppl": perplexity(loss), "per_window_ppl": [perplexity(x) for x in window_losses],
            "scored_tokens": per_window.numel()}


def evaluate(name: str, model, data: dict[str, torch.Tensor], args: argparse.Namespace) -> dict:
    context = model_context(name, args)
    out = {}
    for split in ("validation", "test"):
        out[split] = score(token_nll(model, data[split], context, args.eval_batch_tokens), args.window_size)
    if name.startswith("ran"):
        fresh = token_nll(model, data["test"], args.window_size, args.eval_batch_tokens)
        out["test_fresh_state_per_window"] = score(fresh, args.window_size)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# one run, summaries, table
# ----------------------------------------------------------------------------------------------------------------------


def run_one(name: str, seed: int, segments: torch.Tensor, data: dict, args: argparse.Namespace, tokenizer) -> dict:
    label = model_label(name, args)
    set_seed(seed)
    model = build_model(name, args, tokenizer)
    context = model_context(name, args)
    order = segment_order(len(segments), args.steps, seed)
    logger.info(f"{label}: {count_parameters(model)} parameters, rows of {context} tokens x "
                f"{args.tokens_per_step // context} per step.")
    result = {"model": name, "label": label, "seed": seed, "context": context,
              "rows_per_step": args.tokens_per_step // context, "params": count_parameters(model)}
    result.update(train_model(model, segments, order, context, args, label))
    start = time.time()
    result.update(evaluate(name, model, data, args))
    result["eval_wall_s"] = time.time() - start
    logger.info(f"{label}: valid ppl {result['validation']['ppl']:.2f}, test ppl {result['test']['ppl']:.2f}.")
    return result


def summarize(runs: list[dict]) -> dict:
    """Mean (and sample standard deviation over seeds) of each model's numbers."""
    def stats(values):
        return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0}

    def split_summary(results):
        return {"ppl": stats([r["ppl"] for r in results]),
                "per_window_ppl": [float(np.mean(v)) for v in zip(*[r["per_window_ppl"] for r in results])]}

    summary = {}
    for name in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == name]
        entry = {"label": mine[0]["label"], "context": mine[0]["context"], "params": mine[0]["params"],
                 "seeds": [r["seed"] for r in mine], "train_wall_s": stats([r["train_wall_s"] for r in mine]),
                 "validation": split_summary([r["validation"] for r in mine]),
                 "test": split_summary([r["test"] for r in mine])}
        if "test_fresh_state_per_window" in mine[0]:
            entry["test_fresh_state_per_window"] = split_summary([r["test_fresh_state_per_window"] for r in mine])
        summary[name] = entry
    return summary


def fmt_stat(value: dict, digits: int = 2) -> str:
    text = f"{value['mean']:.{digits}f}"
    return text + (f" ± {value['std']:.{digits}f}" if value["std"] else "")


def format_table(summary: dict, args: argparse.Namespace, data_info: dict) -> str:
    steps = f"{args.steps} x {args.tokens_per_step}"
    lines = [
        f"Test blocks: {data_info['test_blocks']} x {args.block_size} tokens, {data_info['scored_test_tokens']} scored "
        f"word pieces (the first token of every {args.window_size}-token window is not scored). Training: {steps} "
        f"tokens (steps x tokens per step), seeds {args.seeds}, {args.threads} thread(s).",
        "",
        "| model | rows per step | params (non-emb.) | train wall s | valid ppl | test ppl | test ppl, fresh state "
        "per window |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in summary.values():
        fresh = entry.get("test_fresh_state_per_window")
        rows = args.tokens_per_step // entry["context"]
        lines.append(
            f"| {entry['label']} | {rows} x {entry['context']} | {entry['params']['total']:,} "
            f"({entry['params']['non_embedding']:,}) | {fmt_stat(entry['train_wall_s'], 0)} | "
            f"{fmt_stat(entry['validation']['ppl'])} | {fmt_stat(entry['test']['ppl'])} | "
            f"{fmt_stat(fresh['ppl']) if fresh else '-'} |"
        )
    num_windows = args.block_size // args.window_size
    title = f"Test perplexity per {args.window_size}-token window index inside the {args.block_size}-token block:"
    lines += ["", title, "", "| model | " + " | ".join(f"w{i}" for i in range(1, num_windows + 1)) + " |",
              "|---|" + "---|" * num_windows]
    for entry in summary.values():
        rows = [(entry["label"], entry["test"])]
        if "test_fresh_state_per_window" in entry:
            rows.append((entry["label"] + ", fresh state per window", entry["test_fresh_state_per_window"]))
        for label, split in rows:
            lines.append(f"| {label} | " + " | ".join(f"{x:.1f}" for x in split["per_window_ppl"]) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------------


def load_data(args: argparse.Namespace, output_dir: Path):
    extra = {}
    if args.corpus == "gutenberg":
        lines = gutenberg_splits(args.data_dir)
        extra["books"] = lines.pop("books")
        tokenizer_source = {"data_dir": str(Path(args.data_dir).resolve()), "train_books": extra["books"]["train"]}
    else:
        paths = split_paths(args.data_dir)
        lines = {split: read_lines(path) for split, path in paths.items()}
        tokenizer_source = {"train_file": str(paths["train"].resolve()), "train_bytes": paths["train"].stat().st_size}
    tokenizer = get_tokenizer(lines["train"], tokenizer_source, args.vocab_size, output_dir)
    train = token_stream(lines["train"], tokenizer, args.max_train_tokens)
    data = {split: eval_blocks(token_stream(lines[split], tokenizer, args.max_eval_tokens), args.block_size, split)
            for split in ("validation", "test")}
    segments = train_segments(train, args.tokens_per_step)
    info = {"corpus": args.corpus, **extra, "data_dir": str(Path(args.data_dir).resolve()), "vocab_size": len(tokenizer),
            "train_tokens": len(train), "train_segments": len(segments),
            "train_tokens_seen_per_model": args.steps * args.tokens_per_step,
            "validation_blocks": len(data["validation"]), "test_blocks": len(data["test"]),
            "scored_test_tokens": len(data["test"]) * (args.block_size - args.block_size // args.window_size)}
    logger.info(f"Data: {info}")
    return tokenizer, segments, data, info


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
        args.data_dir = str(DEFAULT_DATA_DIRS[args.corpus])
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
                done[(name, seed)] = {**run_one(name, seed, segments, data, args, tokenizer), "setting": setting}
                append_result(runs_path, done[(name, seed)])
            runs.append(done[(name, seed)])
    summary = summarize(runs)
    table = format_table(summary, args, info)
    results = {"command": command_line("compare_lm.py", argv), "args": vars(args), "data": info,
               "torch_version": torch.__version__, "models": summary, "runs": runs}
    (output_dir / "results.json").write_text(json.dumps(results, indent=2))
    (output_dir / "table.md").write_text(table)
    print(table)
    return results


if __name__ == "__main__":
    main()
