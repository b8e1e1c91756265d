# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Forward (or training step) speed of this checkout's ran_hf against another checkout's, interleaved in one process.

`benchmark.py --ran-source DIR` times each implementation in its own subprocess, one after the other, so a slow
minute of a shared machine lands on one side only. This script loads both packages into one process (the other
checkout as the module `ran_other`), gives both models the same weights, checks that their outputs agree, and
alternates the calls (ABBA...), so machine drift hits both sides alike. It reports the median time per call and the
ratio other/this (above 1: this checkout is faster).

    python benchmarks/ab_forward.py --other /path/to/other/checkout --length 32768 --rounds 6
    python benchmarks/ab_forward.py --other /path/to/other/checkout --length 8192 --train

`--train` times a training step instead: forward in train mode (dropout on), the loss `mean(h**2)` and backward.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import torch

import ran_hf


def load_other(root: str):
    """The `ran_hf` package of another checkout, imported as `ran_other`."""
    spec = importlib.util.spec_from_file_location(
        "ran_other", f"{root}/ran_hf/__init__.py", submodule_search_locations=[f"{root}/ran_hf"])
    module = importlib.util.module_from_spec(spec)
    sys.modules["ran_other"] = module
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", required=True, help="another checkout (the folder holding its ran_hf/ package)")
    parser.add_argument("--length", type=int, default=32768)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--hidden-size", type=int, default=768)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--window-size", type=int, default=256)
    parser.add_argument("--train", action="store_true", help="time forward + backward in train mode")
    args = parser.parse_args(argv)
    other = load_other(args.other)
    models = {}
    for name, package in (("this", ran_hf), ("other", other)):
        config = package.RANConfig(vocab_size=30522, hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
                                   num_attention_heads=args.hidden_size // 64, attention_head_size=64,
                                   window_size=args.window_size, min_window_size=16)
        models[name] = package.RANModel(config).eval()
    models["other"].load_state_dict(models["this"].state_dict())
    ids = torch.randint(1, 30522, (1, args.length), generator=torch.Generator().manual_seed(0))
    times = {"this": [], "other": []}
    with torch.no_grad():
        difference = (models["this"](ids).last_hidden_state - models["other"](ids).last_hidden_state).abs().max()

    def call(model):
        if not args.train:
            with torch.no_grad():
                model(ids)
            return
        model.train()
        model(ids).last_hidden_state.pow(2).mean().backward()
        model.zero_grad(set_to_none=True)

    for name in ("other", "this"):  # untimed warm-up (a first training step allocates the gradients)
        call(models[name])
    for round_index in range(args.rounds):
        for name in ("this", "other") if round_index % 2 == 0 else ("other", "this"):
            start = time.perf_counter()
            call(models[name])
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{'training step' if args.train else 'forward'}, length {args.length}, threads {torch.get_num_threads()}, "
          f"max abs output difference {float(difference):.2e}")
    for name in times:
        print(f"{name:5s} median {medians[name]:.3f} s/call  ({', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"speed this/other: {medians['other'] / medians['this']:.3f}")


if __name__ == "__main__":
    main()
