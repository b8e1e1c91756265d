# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""How the cell chain runs over the windows: one interface, four runners.

The cell chain is the only sequential part of a RAN layer: window i's cell reads window i's keys and the cell of
window i - 1. What one window does is the layer's `chain_window` (paper eqs. 3-7 for the cell row). This module
holds what every runner is given (`ChainWindows`) and picks the runner (`run_cell_chain`); each runner lives in its
own module, all with one signature, `runner(step, layer, carry, windows) -> (carry, outputs)`:

* `chain_eager.chain_eager`: a Python loop, one window at a time; the reference the others are tested against;
* `chain_while_loop.chain_while_loop`: one traced `while_loop`, for `torch.export` and compiled inference at any
  length;
* `chain_compiled.chain_compiled`: the loop with blocks of windows through `torch.compile`
  (`config.chain_implementation="compiled"`);
* `chain_cuda_graphs.chain_cuda_graphs`: the compiled chain of a layer captured as CUDA graphs
  (`config.chain_implementation="cuda_graphs"`).

`step(layer, carry, window) -> (carry, y)` is one window: `carry` is `(s, previous_c)`, both (B, D); `window` holds
the window's inputs in `ChainWindows.names` order; `y` is `(c, s, cell_key, cell_value)`. Runners return the last
carry and the four outputs stacked over the windows run, each (B, num_steps, ...), or None when no window runs.
"""

from dataclasses import dataclass

import torch

from .input_checks import is_compiling


def cat_windows(chunks: list[torch.Tensor]) -> torch.Tensor:
    """Chunks of windows (B, m, ...) -> all windows, windows first (n, B, ...): a view for a single chunk."""
    whole = torch.cat(chunks, 1) if len(chunks) > 1 else chunks[0]
    return whole.transpose(0, 1)


@dataclass
class ChainWindows:
    """The cell chain's per-window inputs.

    Attributes:
        keys, values: the window tokens' keys and values as the layer computed them, per chunk of windows
            (B, m, K, H, d); a runner takes them per window (`unbound`) or windows first (`stacked`).
        key_mask: (n, B, K) bool, True on real keys, or None when every key is real.
        valid: (n, B) bool, the rows that have window i, or None when every row has every window.
        has_previous: (n, B) bool, whether the row finished a window before window i (eq. 7 applies).
        drop_passed: (n, B) bool, the rows whose passed cell is dropped out after window i (training), or None.
        num_steps: how many windows run: all but a causal call's last window when no row finishes it.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor | None
    valid: torch.Tensor | None
    has_previous: torch.Tensor
    drop_passed: torch.Tensor | None
    num_steps: int

    names = ("keys", "values", "key_mask", "valid", "has_previous", "drop_passed")

    @classmethod
    def from_layout(cls, keys: list[torch.Tensor], values: list[torch.Tensor], layout, had_previous: torch.Tensor,
                    drop_passed: bool) -> "ChainWindows":
        """The chain inputs of a layer over `layout` (a `RANWindowLayout`): its keys and values per chunk, the
        layout's key mask and real windows, `has_previous` from `had_previous` (B,) (a row finished a window before
        this call) and the windows before; with `drop_passed`, every window of a row but its last."""
        after_first = had_previous[:, None] | layout.after_first_window()
        drop = None
        if drop_passed:
            window_index = torch.arange(layout.window_mask.shape[1], device=after_first.device)
            drop = window_index[None, :] < layout.windows_per_row[:, None] - 1
        masks = [layout.key_mask(), layout.varying_window_mask, after_first, drop]
        masks = [t.transpose(0, 1) if t is not None else None for t in masks]
        num_steps = layout.window_mask.shape[1] - layout.last_window_unfinished
        return cls(keys, values, *masks, num_steps=num_steps)

    def masks(self) -> list[torch.Tensor | None]:
        return [self.key_mask, self.valid, self.has_previous, self.drop_passed]

    def unbound(self) -> list[list[torch.Tensor] | None]:
        """Per input, the list of its windows (views, no copy), or None."""
        keys = [k for chunk in self.keys for k in chunk.unbind(1)]
        values = [v for chunk in self.values for v in chunk.unbind(1)]
        return [keys, values, *(None if t is None else list(t.unbind(0)) for t in self.masks())]

    def stacked(self) -> list[torch.Tensor | None]:
        """Per input, one tensor with windows first (n, ...), or None (keys and values: a copy if chunked)."""
        return [cat_windows(self.keys), cat_windows(self.values), *self.masks()]


def run_cell_chain(step, layer, carry: tuple[torch.Tensor, torch.Tensor], windows: ChainWindows,
                   implementation: str, static: bool):
    """Run the chain with the runner that fits: the traced loop for a static layout (`torch.export`, or compiled
    without gradients: its backward is wrong in torch 2.13); the eager loop inside any other compiled region (the
    outer compiler traces it) and for `implementation="eager"`; else the compiled or the captured chain."""
    if static and (torch.compiler.is_exporting() or not torch.is_grad_enabled()):
        from .chain_while_loop import chain_while_loop

        return chain_while_loop(step, layer, carry, windows)
    if implementation == "eager" or is_compiling():
        from .chain_eager import chain_eager

        return chain_eager(step, layer, carry, windows)
    if implementation == "compiled":
        from .chain_compiled import chain_compiled

        return chain_compiled(step, layer, carry, windows)
    from .chain_cuda_graphs import chain_cuda_graphs

    return chain_cuda_graphs(step, layer, carry, windows)
