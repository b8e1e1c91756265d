# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The cell chain as a Python loop, one window at a time: the reference runner (see `cell_chain.py`)."""

import torch


def run_windows(step, layer, carry, windows, num_steps: int):
    """`carry, y = step(layer, carry, window i)` for the first `num_steps` windows. `windows` holds, per input, a
    sequence over windows (a list, or a tensor with windows first, unbound once: never indexed in a loop) or None.
    Returns the last carry and the list of per-window `y`."""
    windows = [w.unbind(0) if isinstance(w, torch.Tensor) else w for w in windows]
    outputs = []
    for i in range(num_steps):
        carry, y = step(layer, carry, tuple(w[i] if w is not None else None for w in windows))
        outputs.append(y)
    return carry, outputs


def stack_windows(outputs: list[tuple[torch.Tensor, ...]], dim: int) -> tuple[torch.Tensor, ...] | None:
    """Per-window output tuples -> one tensor per output, the windows stacked on `dim`; None for no window."""
    if not outputs:
        return None
    return tuple(torch.stack(ys, dim) if len(ys) > 1 else ys[0].unsqueeze(dim) for ys in zip(*outputs))


def chain_eager(step, layer, carry, windows):
    """The chain window by window: outputs (B, num_steps, ...) each (see `cell_chain.py` for the signature)."""
    carry, outputs = run_windows(step, layer, carry, windows.unbound(), windows.num_steps)
    return carry, stack_windows(outputs, 1)
