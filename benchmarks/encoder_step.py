# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Time a training step of a RAN around a pretrained encoder (`python -m ran_hf.convert_encoder`) at each attention
dropout and attention implementation, interleaved, and print the medians.

    python -m benchmarks.encoder_step --checkpoint outputs/encoders/ran-all-minilm-l6-v2 --batch 8 --length 1024

On CPU `scaled_dot_product_attention` runs its fused kernel only without dropout, so the `"bert"` block's fused path
(`sdpa`) is fast at attention dropout 0 and falls back to the unfused maths at MiniLM's 0.1; `eager` is the
reference path (`RANEncoderWindowBlock.attend_eager`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ran_hf import RANForSequenceClassification


def step_seconds(model, optimizer, ids, labels) -> float:
    started = time.perf_counter()
    model(ids, labels=labels).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a converted encoder folder")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--variants", nargs="+", default=["sdpa:0.0", "sdpa:0.1", "eager:0.0"],
                        help="attn_implementation:attention_dropout pairs")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (args.batch, args.length), generator=generator)
    labels = torch.randint(0, 2, (args.batch,), generator=generator)
    runs = {}
    for variant in args.variants:
        implementation, dropout = variant.split(":")
        model = RANForSequenceClassification.from_pretrained(
            args.checkpoint, num_labels=2, attention_probs_dropout_prob=float(dropout),
            attn_implementation=implementation).train()
        runs[variant] = (model, torch.optim.AdamW(model.parameters(), lr=1e-5), [])
        step_seconds(model, runs[variant][1], ids, labels)  # warm-up
    for _ in range(args.rounds):
        for model, optimizer, times in runs.values():
            times.append(step_seconds(model, optimizer, ids, labels))
    print(f"training step, {args.batch} x {args.length} tokens, {torch.get_num_threads()} threads, "
          f"median of {args.rounds}:")
    for variant, (_, _, times) in runs.items():
        print(f"  {variant:12s} {statistics.median(times):7.2f} s")


if __name__ == "__main__":
    main()
