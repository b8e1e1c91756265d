# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The cell chain through `torch.compile`, blocks of windows per call (`config.chain_implementation="compiled"`;
see `cell_chain.py`). Meant for GPUs, where the eager chain is bound by kernel launches."""

import functools

import torch

from .chain_eager import run_windows, stack_windows


# Windows per compiled call: a block of this many windows is one compiled graph (unrolled); the windows left over
# go one at a time through the one-window graph. More windows per call means fewer host round trips per window
# (on a GPU, fewer launches) and a longer first compile.
BLOCK_SIZE = 4
# Keyword arguments of `torch.compile` for both graphs (`configure` sets them).
COMPILE_OPTIONS: dict = {}


def configure(block_size: int = 4, **compile_options) -> None:
    """Set the windows per compiled block and the `torch.compile` options (e.g. `backend="aot_eager"`,
    `mode="reduce-overhead"`) of the compiled chain, for every model of the process; the graphs compiled so far are
    dropped. `configure()` restores the defaults."""
    global BLOCK_SIZE, COMPILE_OPTIONS
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"configure: `block_size` must be a positive int, got {block_size!r}.")
    BLOCK_SIZE, COMPILE_OPTIONS = block_size, dict(compile_options)
    compiled_window.cache_clear()
    compiled_block.cache_clear()


@functools.cache
def compiled_window(step):
    """`step` compiled, built on first use and shared by every layer of every model in the process: the layer is an
    argument, so its weights are graph inputs and one graph serves all layers of the same shapes. Dynamo compiles
    a graph per grad mode (a training forward has two: a layer's first window, whose incoming `c_0` needs no
    gradient, and the others) and, at the first new batch size or window capacity, one with dynamic sizes; a new
    number of windows needs none (`chain_compiled` gives every window's inputs the same strides)."""
    return torch.compile(step, **COMPILE_OPTIONS)


@functools.cache
def compiled_block(step):
    """`BLOCK_SIZE` windows of `step`, unrolled and compiled like `compiled_window`: inductor fuses across the
    windows of a block (at the base width 6.25 kernel and library calls per window forward and 11.5 backward,
    against 7 and 15 one window at a time: `python -m benchmarks.chain_ops`)."""

    def block(layer, carry, windows):
        carry, outputs = run_windows(step, layer, carry, windows, windows[0].shape[0])
        return carry, stack_windows(outputs, 0)

    return torch.compile(block, **COMPILE_OPTIONS)


def row_major(x: torch.Tensor | None) -> torch.Tensor | None:
    """A copy with fresh row-major strides, so that a window's (or a block's) strides do not depend on the number
    of windows (a new stride recompiles; `contiguous()` would keep a size-1 axis's stride)."""
    return None if x is None else x.clone(memory_format=torch.contiguous_format)


def run_blocks(step, layer, carry, inputs, num_steps: int):
    """The first `num_steps` windows of `inputs` (windows first): `BLOCK_SIZE` at a time through
    `compiled_block`, the rest one at a time through `compiled_window`. Returns the last carry and the per-window
    outputs."""
    outputs, block_step, num_blocks = [], compiled_block(step), num_steps // BLOCK_SIZE
    pieces = [w.split(BLOCK_SIZE) if w is not None else None for w in inputs]  # views: never index in a loop
    for j in range(num_blocks):
        carry, ys = block_step(layer, carry, tuple(p[j] if p is not None else None for p in pieces))
        outputs.extend(zip(*(y.unbind(0) for y in ys)))
    rest = [p[num_blocks] if p is not None and num_blocks < len(p) else None for p in pieces]
    carry, tail = run_windows(compiled_window(step), layer, carry, rest, num_steps - num_blocks * BLOCK_SIZE)
    return carry, outputs + tail


def chain_compiled(step, layer, carry, windows):
    """The compiled chain: outputs (B, num_steps, ...) each (see `cell_chain.py` for the signature)."""
    inputs = [row_major(t) for t in windows.stacked()]
    carry, outputs = run_blocks(step, layer, carry, inputs, windows.num_steps)
    return carry, stack_windows(outputs, 1)
