# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Training every model on the same tokens in the same order, and scoring every model on the same test tokens."""

from __future__ import annotations

import argparse
import logging
import math
import time

import torch
import torch.nn.functional as F
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup, set_seed

from run_scripts.helpers.reports import perplexity

from .data import segment_order
from .models import build_model, count_parameters, model_context, model_label


logger = logging.getLogger("run_scripts")


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
