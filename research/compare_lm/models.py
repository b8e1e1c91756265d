# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The four compared models: RAN and RAN without memory review (W-token windows, whole blocks), GPT-2 with a context
of W and of 4W tokens."""

from __future__ import annotations

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from ran_hf import RANConfig, RANForCausalLM


MODEL_NAMES = ("ran", "ran_no_review", "gpt2_w", "gpt2_4w")
GPT2_CONTEXT_IN_WINDOWS = {"gpt2_w": 1, "gpt2_4w": 4}


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
