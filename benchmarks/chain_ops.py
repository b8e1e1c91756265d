# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Operations per window of RAN's cell chain, eager against `chain_implementation="compiled"`, measured on a CPU.

On a GPU the eager chain is bound by the host: every operation of a window step is one or more kernel launches
from Python, and the device idles between them. The count of launches per window is the number to shrink, and it
can be measured without a GPU:

* eager: the ATen operations one window step dispatches (views and metadata-only operations left out, since they
  launch nothing), forward and backward, counted with a `TorchDispatchMode` over the chain of one layer;
* compiled: the calls in the wrapper code inductor generates for one window step, and for a block of windows as
  `chain_implementation="compiled"` runs them (forward and backward graphs): fused kernels (`cpp_fused_*` on CPU,
  `triton_*` on GPU) and library calls (`extern_kernels.*`, `aten.*`), and the seconds of the first call, which
  compiles them. Inductor fuses the same way for both devices up to its device-specific heuristics, so the CPU
  count stands in for the GPU's.

    python -m benchmarks.chain_ops                       # base width (D 768, 12 x 64 heads, window 256), batch 2
    python -m benchmarks.chain_ops --block 8             # blocks of 8 windows instead of the shipped 4
    python -m benchmarks.chain_ops --hidden-size 32 --heads 2 --head-size 16 --window 16   # under a minute
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched while active, except views and other metadata-only operations."""

    SKIP = {"aten::detach", "aten::view", "aten::_unsafe_view", "aten::alias", "aten::t", "aten::transpose",
            "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::select", "aten::slice", "aten::permute",
            "aten::split", "aten::unbind", "aten::split_with_sizes", "aten::as_strided", "aten::unflatten"}

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name not in self.SKIP and not func.is_view:
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def chain_inputs(layer, batch_size: int, num_windows: int, padded: bool, generator: torch.Generator):
    """What a layer hands its chain runner (`ran_hf.cell_chain`): the carry and the `ChainWindows`, with the keys
    and values as leaves that need a gradient (so a backward stops at the chain)."""
    from ran_hf.cell_chain import ChainWindows

    config = layer.config
    heads, head_size, hidden = config.num_attention_heads, config.attention_head_size, config.hidden_size
    capacity = config.window_size
    keys = torch.randn(batch_size, num_windows, capacity, heads, head_size, generator=generator).requires_grad_()
    values = torch.randn(batch_size, num_windows, capacity, heads, head_size, generator=generator).requires_grad_()
    s = torch.randn(batch_size, hidden, generator=generator).requires_grad_()
    key_mask = valid = None
    if padded:  # the last row ends half-way through the last window
        key_mask = torch.ones(num_windows, batch_size, capacity, dtype=torch.bool)
        key_mask[-1, -1, capacity // 2:] = False
        valid = torch.ones(num_windows, batch_size, dtype=torch.bool)
    has_previous = torch.arange(num_windows)[:, None].expand(num_windows, batch_size) > 0
    windows = ChainWindows([keys], [values], key_mask, valid, has_previous, None, num_steps=num_windows)
    return (s, torch.zeros_like(s)), windows, (keys, values, s)


def run_and_differentiate(runner, layer, carry, windows, leaves):
    """One chain run by `runner` and the backward of the sum of its outputs."""
    (s, _), outputs = runner(type(layer).chain_window, layer, carry, windows)
    loss = s.sum() + sum(y.sum() for y in outputs)
    torch.autograd.grad(loss, leaves + tuple(layer.parameters()), allow_unused=True)
    return loss


def count_eager(layer, batch_size: int, num_windows: int, padded: bool) -> dict:
    """ATen operations per window step of the eager chain, forward and backward."""
    from ran_hf.chain_eager import chain_eager

    carry, windows, leaves = chain_inputs(layer, batch_size, num_windows, padded, torch.Generator().manual_seed(0))
    with OpCounter() as forward:
        (s, _), outputs = chain_eager(type(layer).chain_window, layer, carry, windows)
    loss = s.sum() + sum(y.sum() for y in outputs)
    with OpCounter() as backward:
        torch.autograd.grad(loss, leaves + tuple(layer.parameters()), allow_unused=True)
    return dict(forward_per_window=round(forward.total / num_windows, 1),
                backward_per_window=round(backward.total / num_windows, 1),
                forward_ops=dict(sorted(forward.counts.items(), key=lambda kv: -kv[1])))


KERNEL_CALL = re.compile(r"^\s+(?:\w+ = )?((?:cpp_fused|triton)_\w+|extern_kernels\.\w+|aten\.\w+|torch\.ops\.\w+\.\w+)"
                         r"(?:\.run)?\(", re.MULTILINE)


def count_compiled(layer, batch_size: int, num_windows: int, padded: bool, block_size: int = 1) -> dict:
    """Kernel and library calls in inductor's generated wrapper code, per graph (forward graphs of the first and the
    later windows, and their backward graphs): one window per call (`block_size` 1), or blocks of `block_size`
    windows per call as `chain_implementation="compiled"` runs them (two blocks, so both grad modes appear; the
    calls per window are a block's calls divided by its windows)."""
    from torch._inductor.utils import run_and_get_code

    from ran_hf import chain_compiled

    torch._dynamo.reset()
    unit = "window"
    if block_size > 1:
        num_windows, unit = 2 * block_size, "block"
    # one window per call: a block longer than the chain sends every window through the one-window graph
    chain_compiled.configure(block_size=block_size if block_size > 1 else num_windows + 1)
    carry, windows, leaves = chain_inputs(layer, batch_size, num_windows, padded, torch.Generator().manual_seed(0))

    def run():
        run_and_differentiate(chain_compiled.chain_compiled, layer, carry, windows, leaves)

    with torch._inductor.config.patch(fx_graph_cache=False):  # a cache hit would emit no code for a graph
        start = time.perf_counter()
        _, sources = run_and_get_code(run)
        compile_s = time.perf_counter() - start
    # compile order: the forward graphs (first window or block, later ones) as the loop reaches them, then the
    # backward graphs as the backward reaches them (later ones first); a backward graph takes the tangents
    order = {"forward": iter(["first", "later"]), "backward": iter(["later", "first"])}
    graphs = []
    for source in sources:
        call = source[source.index("def call("):] if "def call(" in source else source
        direction = "backward" if "tangents_" in call else "forward"
        position = next(order[direction], "another")
        calls = KERNEL_CALL.findall(call)
        graphs.append(dict(graph=f"{direction}, {position} {unit}{'s' if position == 'later' else ''}",
                           calls=len(calls), calls_per_window=round(len(calls) / block_size, 2),
                           fused_kernels=sum(c.startswith(("cpp_fused", "triton")) for c in calls),
                           library_calls=sum(not c.startswith(("cpp_fused", "triton")) for c in calls)))
    # the first call compiles every graph (forward and backward, both grad modes): its seconds are the compile time
    chain_compiled.configure()
    return dict(windows_per_call=block_size, first_call_s=round(compile_s, 1), graphs=graphs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden-size", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--padded", action="store_true", help="a row ends inside the last window (masks present)")
    parser.add_argument("--no-compiled", action="store_true", help="count the eager chain only")
    parser.add_argument("--block", type=int, default=None,
                        help="windows per compiled call for the block count (default: the compiled chain's, "
                             "`ran_hf.chain_compiled.BLOCK_SIZE`)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from ran_hf import RANConfig
    from ran_hf.modeling_ran import RANLayer

    config = RANConfig(hidden_size=args.hidden_size, num_attention_heads=args.heads,
                       attention_head_size=args.head_size, window_size=args.window, min_window_size=0,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_hidden_layers=1)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = RANLayer(config, 0).train()
    result = dict(command="python -m benchmarks.chain_ops " + " ".join(argv if argv is not None else sys.argv[1:]),
                  torch=torch.__version__, hidden_size=args.hidden_size, heads=args.heads, head_size=args.head_size,
                  window=args.window, batch_size=args.batch_size, windows=args.windows, padded=args.padded,
                  eager=count_eager(layer, args.batch_size, args.windows, args.padded))
    if not args.no_compiled:
        from ran_hf import chain_compiled

        result["compiled"] = count_compiled(layer, args.batch_size, args.windows, args.padded)
        result["compiled_blocks"] = count_compiled(layer, args.batch_size, args.windows, args.padded,
                                                   args.block or chain_compiled.BLOCK_SIZE)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
