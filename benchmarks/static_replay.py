# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""`torch.cuda.make_graphed_callables` without a GPU, for rehearsing `chain_implementation="cuda_graphs"` on a CPU
(the tests, and `python -m benchmarks.gpu_suite --scale tiny --device cpu`).

`StaticReplay` keeps what the function does with memory: the inputs are copied into the sample tensors; the outputs
and the gradients are copied into buffers of its own and returned as views of them; and the backward reads the
autograd graph of the *last* forward, as a captured backward reads the activations its forward graph left in the
capture's memory. So a caller that holds an output across calls, runs two forwards before a backward, or
accumulates gradients over several backwards sees what it would see on a GPU.
"""

from __future__ import annotations

import torch


class StaticReplay:
    """`make_graphed_callables(module, sample_args, allow_unused_input=True)` without a GPU: one set of static
    buffers per capture, shared by every call (so a second forward overwrites what the first one's backward reads,
    as a CUDA graph's does). Counts its captures."""

    captures = 0

    def __init__(self, module, sample_args, allow_unused_input):
        assert allow_unused_input
        StaticReplay.captures += 1
        self.module, self.inputs = module, sample_args
        self.parameters = tuple(module.parameters())
        self.outputs = self.static_outputs = self.static_gradients = None
        replay = self

        class Replay(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                with torch.no_grad():
                    for static, given in zip(replay.inputs, inputs):
                        static.copy_(given)
                with torch.enable_grad():
                    replay.outputs = replay.module(*replay.inputs)
                if replay.static_outputs is None:
                    replay.static_outputs = tuple(torch.empty_like(o) for o in replay.outputs)
                with torch.no_grad():
                    for static, output in zip(replay.static_outputs, replay.outputs):
                        static.copy_(output)
                return tuple(o.detach() for o in replay.static_outputs)

            @staticmethod
            def backward(ctx, *grads):
                surface = replay.inputs + replay.parameters
                wanted = [t for t in surface if t.requires_grad]
                got = torch.autograd.grad(replay.outputs, wanted, grads, allow_unused=True)
                if replay.static_gradients is None:
                    replay.static_gradients = [None if g is None else torch.empty_like(g) for g in got]
                for static, gradient in zip(replay.static_gradients, got):
                    if static is not None:
                        static.copy_(gradient)
                got = iter(None if g is None else g.detach() for g in replay.static_gradients)
                return tuple(next(got) if t.requires_grad else None for t in surface)

        self.function = Replay

    def __call__(self, *inputs):
        return self.function.apply(*inputs, *self.parameters)


def install(device_type: str) -> None:
    """Capture the cell chains of `chain_implementation="cuda_graphs"` on `device_type` with `StaticReplay` (for the
    life of the process)."""
    from ran_hf import chain_cuda_graphs

    torch.cuda.make_graphed_callables = StaticReplay
    chain_cuda_graphs.GRAPH_DEVICES = ("cuda", device_type)
