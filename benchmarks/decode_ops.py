# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""What one decoding step launches: RAN (`RANForCausalLM` with its cache) against a GPT-2 of the same size, measured
on a CPU.

At batch 1 on a GPU a decoding step is bound by the host: its time is about the number of kernels launched from
Python, plus a full wait for the device at every read of a tensor's value (`item`, `tolist`, `int(t)`, `bool(t)`,
...), after which the host cannot run ahead of the device. Both numbers can be counted without a GPU:

* ATen operations dispatched by one step (views and metadata-only operations left out, and dropout, which in eval
  mode returns its input: they launch nothing), with `chain_ops.OpCounter`; in inference mode the counter sees
  composite operations (`linear`, `layer_norm`, `rms_norm`) whole, as CUDA runs them, where a CPU decomposes them;
* host reads of tensor values during one step.

The step is the 33rd token after a prompt, so the prompt's windows are committed and the cache is in its steady
state. Counts are per step and per layer (the difference between `--layers` and one layer fewer).

    python -m benchmarks.decode_ops                                  # base width, 12 layers, a 1,024-token prompt
    python -m benchmarks.decode_ops --hidden-size 32 --heads 2 --head-size 16 --layers 2 --context 64   # seconds
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys

import torch

from benchmarks import benchmark
from benchmarks.chain_ops import OpCounter


HOST_READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")
NO_LAUNCH_IN_EVAL = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout")


@contextlib.contextmanager
def count_host_reads():
    """A counter of the Python-level reads of tensor values while the context is open."""
    counter = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def counting(name, original):
        def read(self, *args, **kwargs):
            counter[name] += 1
            return original(self, *args, **kwargs)
        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(name, original))
    try:
        yield counter
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def step_counts(name: str, size: dict, context: int, warm_tokens: int) -> dict:
    """ATen operations and host reads of one decoding step after `context` prompt tokens and `warm_tokens` steps."""
    torch.manual_seed(0)
    model = benchmark.build_generator(name, size, context + warm_tokens + 2)
    prompt = torch.randint(1, size["vocab_size"], (1, context), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        out = model(prompt, use_cache=True)
        cache, token = out.cache, out.logits[:, -1:].argmax(-1)
        for _ in range(warm_tokens):
            out = model(token, cache=cache, use_cache=True)
            cache, token = out.cache, out.logits[:, -1:].argmax(-1)
        with OpCounter() as ops, count_host_reads() as reads:
            model(token, cache=cache, use_cache=True)
    for name in NO_LAUNCH_IN_EVAL:
        ops.counts.pop(name, None)
    return dict(aten_ops=ops.total, host_reads=sum(reads.values()),
                top_ops=dict(sorted(ops.counts.items(), key=lambda kv: -kv[1])[:12]))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden-size", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--warm-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    if args.layers < 2:
        parser.error("--layers must be at least 2 (the per-layer count is the difference to one layer fewer)")
    torch.set_num_threads(1)
    result = dict(command="python -m benchmarks.decode_ops " + " ".join(argv if argv is not None else sys.argv[1:]),
                  torch=torch.__version__, hidden_size=args.hidden_size, heads=args.heads, head_size=args.head_size,
                  layers=args.layers, window=args.window, context=args.context, models={})
    for name in ("ran", "gpt2"):
        counts = {}
        for layers in (args.layers, args.layers - 1):
            size = dict(vocab_size=args.vocab_size, hidden_size=args.hidden_size, num_hidden_layers=layers,
                        num_attention_heads=args.heads, attention_head_size=args.head_size, window_size=args.window)
            counts[layers] = step_counts(name, size, args.context, args.warm_tokens)
        full, fewer = counts[args.layers], counts[args.layers - 1]
        result["models"][name] = dict(
            step=full, per_layer=dict(aten_ops=full["aten_ops"] - fewer["aten_ops"],
                                      host_reads=full["host_reads"] - fewer["host_reads"]))
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
