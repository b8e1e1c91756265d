# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The cell chain as one traced `while_loop` (see `cell_chain.py`): `torch.export` and compiled inference trace it
once for any number of windows. Not for training: its backward is wrong in torch 2.13 (measured)."""

import torch

from .chain_eager import run_windows, stack_windows


def chain_while_loop(step, layer, carry, windows):
    """The chain over every window of the static grid: outputs (B, n, ...) each.

    Under `torch.compile(..., dynamic=True)` Dynamo makes every float attribute of a module (norm eps, dropout p)
    a symbolic float, which `while_loop` cannot take into its body (torch 2.13 accepts tensors, ints and symbolic
    ints only); the chain then runs as the eager loop outside the graph (a graph break per layer)."""
    inputs = windows.stacked()
    if inputs[5] is None:  # drop_passed: the loop body takes tensors only
        inputs[5] = torch.zeros_like(windows.has_previous)
    if _floats_are_symbolic():
        carry, outputs = _run_outside_graph(step, layer, carry, inputs)
    else:
        carry, outputs = _while_loop(step, layer, carry, inputs)
    return carry, tuple(t.transpose(0, 1) for t in outputs)


def _while_loop(step, layer, carry, inputs):
    """`torch._higher_order_ops.while_loop` over the windows of `inputs` (windows first); outputs (n, B, ...)."""
    from torch._higher_order_ops import while_loop

    num_windows = inputs[0].shape[0]
    key_like, s = inputs[0][0, :, 0], carry[0]  # (B, H, d), (B, D): the shapes of one window's outputs

    def more(i, *state):
        return i < num_windows

    def body(i, carry, outputs):
        index = i.reshape(1)
        carry, ys = step(layer, carry, tuple(w.index_select(0, index)[0] for w in inputs))
        # the new carry must not alias itself or the outputs (a `while_loop` rule)
        carry = tuple(t.clone() for t in carry)
        return i + 1, carry, tuple(out.index_copy(0, index, y[None]) for out, y in zip(outputs, ys))

    start = torch.zeros((), dtype=torch.long, device=inputs[0].device)
    outputs = tuple(like.new_zeros(num_windows, *like.shape) for like in (s, s, key_like, key_like))
    _, carry, outputs = while_loop(more, body, (start, carry, outputs))
    return carry, outputs


def _floats_are_symbolic() -> bool:
    """Whether Dynamo (not export) traces Python floats as symbols: `torch.compile(..., dynamic=True)` or
    `specialize_float=False` with static shapes off. Read at trace time as constants."""
    if not torch.compiler.is_dynamo_compiling() or torch.compiler.is_exporting():
        return False
    import torch._dynamo.config as dynamo_config

    return not dynamo_config.specialize_float and not dynamo_config.assume_static_by_default


@torch.compiler.disable
def _run_outside_graph(step, layer, carry, inputs):
    """The eager loop over every window, outputs stacked windows first (n, B, ...), run outside the graph."""
    carry, outputs = run_windows(step, layer, carry, inputs, inputs[0].shape[0])
    return carry, stack_windows(outputs, 0)
