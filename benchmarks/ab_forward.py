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
`--decode N` times N decoding steps of `RANForCausalLM` (greedy, batch 1) after a `--length`-token prompt; each call
continues the cache of the call before:

    python benchmarks/ab_forward.py --other /path/to/other/checkout --length 1024 --decode 32 --num-layers 12

`--other . --other-chain compiled` times this checkout's compiled cell chain against its eager one:

    python benchmarks/ab_forward.py --other . --other-chain compiled --length 8192 --hidden-size 256 --num-layers 4
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


def copy_weights(source, target) -> None:
    """`source`'s weights into `target`, by name, or in order where the two checkouts name them differently
    (the same modules in the same order, checked by shape; the outputs are compared afterwards)."""
    source_state, target_state = source.state_dict(), target.state_dict()
    if source_state.keys() != target_state.keys():
        if [v.shape for v in source_state.values()] != [v.shape for v in target_state.values()]:
            raise ValueError("ab_forward: the two checkouts' models have different parameters")
        source_state = dict(zip(target_state, source_state.values()))
    target.load_state_dict(source_state)


def make_call(model, ids: torch.Tensor, args):
    """The timed call: a forward, a training step, or `args.decode` decoding steps continuing the model's cache."""
    if args.decode:
        with torch.inference_mode():
            out = model(ids, use_cache=True)
        state = {"cache": out.cache, "token": out.logits[:, -1:].argmax(-1)}

        def decode():
            with torch.inference_mode():
                for _ in range(args.decode):
                    out = model(state["token"], cache=state["cache"], use_cache=True)
                    state["cache"], state["token"] = out.cache, out.logits[:, -1:].argmax(-1)
        return decode

    def forward():
        with torch.no_grad():
            model(ids)

    def training_step():
        model.train()
        model(ids).last_hidden_state.pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
    return training_step if args.train else forward


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", required=True, help="another checkout (the folder holding its ran_hf/ package)")
    parser.add_argument("--length", type=int, default=32768)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--hidden-size", type=int, default=768)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--window-size", type=int, default=256)
    parser.add_argument("--train", action="store_true", help="time forward + backward in train mode")
    parser.add_argument("--decode", type=int, default=0, metavar="N",
                        help="time N decoding steps after a --length-token prompt (RANForCausalLM)")
    parser.add_argument("--other-chain", choices=("eager", "compiled"), default="eager",
                        help="the other side's `chain_implementation` (with `--other .`: this checkout's compiled "
                             "chain against its eager one; the warm-up call compiles)")
    args = parser.parse_args(argv)
    if args.train and args.decode:
        parser.error("--train and --decode time different things; pass one")
    other = load_other(args.other)
    models = {}
    for name, package in (("this", ran_hf), ("other", other)):
        config = package.RANConfig(vocab_size=30522, hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
                                   num_attention_heads=args.hidden_size // 64, attention_head_size=64,
                                   window_size=args.window_size, min_window_size=16, is_decoder=bool(args.decode),
                                   chain_implementation=args.other_chain if name == "other" else "eager")
        models[name] = (package.RANForCausalLM if args.decode else package.RANModel)(config).eval()
    copy_weights(models["this"], models["other"])
    ids = torch.randint(1, 30522, (1, args.length), generator=torch.Generator().manual_seed(0))
    times = {"this": [], "other": []}
    with torch.no_grad():
        outputs = [models[name](ids) for name in ("this", "other")]
        difference = (outputs[0][0] - outputs[1][0]).abs().max()  # last hidden state, or logits
    calls = {name: make_call(model, ids, args) for name, model in models.items()}
    for name in ("other", "this"):  # untimed warm-up (a first training step allocates the gradients)
        calls[name]()
    for round_index in range(args.rounds):
        for name in ("this", "other") if round_index % 2 == 0 else ("other", "this"):
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    mode = f"{args.decode} decoding steps" if args.decode else "training step" if args.train else "forward"
    print(f"{mode}, length {args.length}, threads {torch.get_num_threads()}, "
          f"max abs output difference {float(difference):.2e}")
    for name in times:
        print(f"{name:5s} median {medians[name]:.3f} s/call  ({', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"speed this/other: {medians['other'] / medians['this']:.3f}")


if __name__ == "__main__":
    main()
