#!/usr/bin/env python
# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Tokens/s of one masked-LM training step (forward, backward, AdamW step) of a small RAN on CPU, fp32 (or, with
`--task classification`, of a fine-tuning step of `RANForSequenceClassification`).

Every case (hidden size x block length x masked-only logits on/off x torch threads) gets its own model and
optimizer; the cases run round-robin, one step each per round, so the load of a shared machine falls on all of
them alike. Reported: the median step time over the rounds (after `--warmup` rounds) and tokens/s = block / median.

    python research/pretraining/step_speed.py --hidden_sizes 256 --blocks 2048 4096 --threads 1 2 --rounds 3 \
        --vocab_sizes 24000 --extra 384:4096:1:1:24000 384:4096:0:1:24000
    python research/pretraining/step_speed.py --hidden_sizes 256 --blocks 4096 --threads 1 --sparse 1 --rounds 3 \
        --vocab_sizes 16000 24000 32000
    python research/pretraining/step_speed.py --task classification --hidden_sizes 256 384 --blocks 1024 \
        --batch_size 4 --threads 1 --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time

import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast
from tokenizers import Tokenizer, models

from ran_hf import RANConfig, RANForMaskedLM, RANForSequenceClassification


def masking_collator(vocab_size: int) -> DataCollatorForLanguageModeling:
    """BERT masking (15%, 80/10/10) over a stand-in tokenizer with ids 0..vocab_size-1 ([PAD]=0 .. [MASK]=4)."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{i}" for i in range(vocab_size - len(specials))])}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")),
                                        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                        mask_token="[MASK]")
    return DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15, seed=0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden_sizes", type=int, nargs="+", default=[256, 384])
    parser.add_argument("--blocks", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sparse", type=int, nargs="+", default=[0, 1], help="masked-only logits off (0) / on (1)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--head_size", type=int, default=64)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--vocab_sizes", type=int, nargs="+", default=[16000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--extra", nargs="*", default=[], metavar="D:BLOCK:SPARSE:THREADS:VOCAB",
                        help="more single cases, e.g. 384:4096:1:1:16000")
    parser.add_argument("--task", choices=("mlm", "classification"), default="mlm",
                        help="classification: RANForSequenceClassification, 2 labels (a fine-tuning step)")
    parser.add_argument("--batch_size", type=int, default=1, help="blocks (documents) per step")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    collators = {}
    generator = torch.Generator().manual_seed(0)
    cases = []
    sparse_values = args.sparse if args.task == "mlm" else [0]
    grid = list(itertools.product(args.hidden_sizes, args.blocks, sparse_values, args.threads, args.vocab_sizes))
    grid += [tuple(int(x) for x in extra.split(":")) for extra in args.extra]
    for hidden, block, sparse, threads, vocab in grid:
        collator = collators.setdefault(vocab, masking_collator(vocab))
        config = RANConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=args.layers,
                           num_attention_heads=hidden // args.head_size, attention_head_size=args.head_size,
                           window_size=args.window, sparse_prediction=bool(sparse), num_labels=2)
        torch.manual_seed(0)
        ids = torch.randint(5, vocab, (args.batch_size, block), generator=generator)
        ids[:, 0], ids[:, -1] = 2, 3
        if args.task == "mlm":
            model = RANForMaskedLM(config).train()
            batch = collator([{"input_ids": row.tolist()} for row in ids])
        else:
            model = RANForSequenceClassification(config).train()
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                     "labels": torch.randint(0, 2, (args.batch_size,), generator=generator)}
        cases.append({"vocab": vocab, "hidden": hidden, "block": block, "sparse": sparse, "threads": threads,
                      "model": model,
                      "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-4), "batch": batch, "times": [],
                      "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 2)})
    for round_ in range(args.warmup + args.rounds):
        for case in cases:
            torch.set_num_threads(case["threads"])
            start = time.perf_counter()
            loss = case["model"](**case["batch"]).loss
            loss.backward()
            case["optimizer"].step()
            case["optimizer"].zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - start
            if round_ >= args.warmup:
                case["times"].append(elapsed)
            print(f"round {round_}: D {case['hidden']} block {case['block']} sparse {case['sparse']} threads "
                  f"{case['threads']}: {elapsed:.2f} s", file=sys.stderr, flush=True)
    print(f"{args.task}: {args.layers} layers, heads of {args.head_size}, window {args.window}; median of "
          f"{args.rounds} steps, batch of {args.batch_size} block(s); fp32")
    print("| vocab | D | params | block | masked-only logits | threads | s/step | tokens/s |")
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    rows = []
    for case in cases:
        median = statistics.median(case["times"])
        row = {k: case[k] for k in ("vocab", "hidden", "params_M", "block", "sparse", "threads")}
        row.update(s_per_step=round(median, 3), tokens_per_s=round(args.batch_size * case["block"] / median),
                   times=[round(t, 3) for t in case["times"]])
        rows.append(row)
        print(f"| {row['vocab']} | {row['hidden']} | {row['params_M']}M | {row['block']} | "
              f"{'-' if args.task != 'mlm' else 'yes' if row['sparse'] else 'no'} | "
              f"{row['threads']} | {row['s_per_step']} | {row['tokens_per_s']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
