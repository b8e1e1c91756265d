# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The compiled cell chain of a layer captured as CUDA graphs (`config.chain_implementation="cuda_graphs"`; see
`cell_chain.py`).

Not timed on a GPU yet: tested on a CPU through a stand-in with the same buffer semantics
(`benchmarks/static_replay.py`).

Each layer's whole chain (every block of every window) is captured as one forward and one backward graph with
`torch.cuda.make_graphed_callables`: one host call per layer and direction instead of one per block of windows.
Window counts are padded to multiples of `GRAPH_WINDOWS` with windows no row has, so lengths within one multiple
share a capture; `GRAPHS_PER_LAYER` captures are kept per layer (least recently used dropped first), held weakly
per layer, so a dropped model frees them.
"""

import math
import weakref

import torch
from torch import nn

from transformers.utils import logging

from .chain_compiled import chain_compiled, row_major, run_blocks
from .chain_eager import stack_windows


logger = logging.get_logger(__name__)

# Windows per capture: a layer's window count is padded up to a multiple of this (16 windows: 4,096 tokens at
# window 256).
GRAPH_WINDOWS = 16
# Captures each layer keeps: each holds a memory pool of its own, with the chain's inputs, their gradients and its
# saved activations (how much has not been measured on a GPU yet).
GRAPHS_PER_LAYER = 2
GRAPH_DEVICES = ("cuda",)  # device types whose chains are captured (elsewhere the chain runs compiled)
_GRAPHS = weakref.WeakKeyDictionary()  # layer -> {signature: ChainGraph}, most recently used last


def num_captures(model: nn.Module) -> int:
    """How many chain captures the layers of `model` hold now."""
    return sum(len(_GRAPHS.get(module, {})) for module in model.modules())


def pending_backwards(model: nn.Module) -> int:
    """How many of `model`'s captures wait for the backward of their last forward replay."""
    return sum(graph.busy() for module in model.modules() for graph in _GRAPHS.get(module, {}).values())


class ChainGraphModule(nn.Module):
    """A layer's whole cell chain as one module, for `torch.cuda.make_graphed_callables`: the layer's parameters
    are registered here too (so the captured backward returns their gradients), the layer itself is held weakly.
    `forward(s, previous_c, *inputs)` takes the non-None chain inputs, windows first, and runs the compiled
    blocks over them."""

    def __init__(self, step, layer: nn.Module, present: tuple[bool, ...]):
        super().__init__()
        for index, parameter in enumerate(layer.parameters()):
            self.register_parameter(f"layer_parameter_{index}", parameter)
        self.step, self.layer, self.present = step, weakref.ref(layer), present
        self.train(layer.training)

    def forward(self, s: torch.Tensor, previous_c: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Returns the last carry (two (B, D)) and the chain's outputs stacked windows first, (n, B, ...)."""
        tensors = iter(tensors)
        inputs = [next(tensors) if present else None for present in self.present]
        carry, outputs = run_blocks(self.step, self.layer(), (s, previous_c), inputs, inputs[0].shape[0])
        return (*carry, *stack_windows(outputs, 0))


class ChainGraph:
    """One capture of a layer's chain: the forward and, with gradients on, the backward of `ChainGraphModule`.

    The backward graph reads the activations the last forward replay left in the capture's memory, so a second
    forward before the first one's backward would make that backward wrong: `busy` says when one is pending, and
    the compiled chain runs instead. Outputs and gradients are cloned out of the capture's buffers, so a later
    replay never changes a tensor a caller (or a parameter's `.grad`) holds."""

    def __init__(self, step, layer: nn.Module, inputs: list[torch.Tensor | None]):
        tensors = [row_major(t.detach()).requires_grad_(t.requires_grad) for t in inputs if t is not None]
        module = ChainGraphModule(step, layer, tuple(t is not None for t in inputs[2:]))
        self.replay = torch.cuda.make_graphed_callables(module, tuple(tensors), allow_unused_input=True)
        self.pending = None  # weak reference to the autograd node of a replay whose backward has not run

    def busy(self) -> bool:
        return self.pending is not None and self.pending() is not None

    def __call__(self, inputs: list[torch.Tensor | None]) -> tuple[torch.Tensor, ...]:
        outputs = self.replay(*(t for t in inputs if t is not None))
        node = outputs[0].grad_fn
        if node is not None:
            self.pending = weakref.ref(node)
            node.register_hook(self._backward_ran)
        return tuple(t.clone() for t in outputs)

    def _backward_ran(self, gradients: tuple[torch.Tensor | None, ...], _) -> tuple[torch.Tensor | None, ...]:
        """After the backward replay: nothing pending, and the gradients cloned out of the capture's buffers
        (autograd would otherwise keep a parameter's first gradient in that buffer, and the next replay would
        overwrite it: accumulated gradients would be wrong, pytorch/pytorch#181723)."""
        self.pending = None
        return tuple(g.clone() if g is not None else None for g in gradients)


def chain_graph(step, layer: nn.Module, inputs: list[torch.Tensor | None]) -> ChainGraph | None:
    """The layer's capture for these inputs (captured now if new; the least recently used beyond
    `GRAPHS_PER_LAYER` is dropped), or None while it waits for a backward."""
    parameters = tuple((p.data_ptr(), p.requires_grad) for p in layer.parameters())
    signature = (tuple(None if t is None else (t.shape, t.dtype, t.device, t.requires_grad) for t in inputs),
                 parameters, layer.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    graphs = _GRAPHS.setdefault(layer, {})
    graph = graphs.pop(signature, None)
    if graph is None:
        while len(graphs) >= GRAPHS_PER_LAYER:
            graphs.pop(next(iter(graphs)))
            logger.warning_once(
                '`chain_implementation="cuda_graphs"` dropped a capture to make room for a new one: every new window '
                "count (in steps of 16 windows), batch size or grad mode captures again, which takes several "
                "compiled chain runs. Pad batches to one length and size (`padding=\"max_length\"`, or "
                "`pad_to_multiple_of` in the data collator) so that one capture serves them all."
            )
        graph = ChainGraph(step, layer, inputs)
    graphs[signature] = graph
    return None if graph.busy() else graph


def pad_windows(inputs: list[torch.Tensor | None], num_windows: int) -> list[torch.Tensor | None]:
    """The chain inputs (windows first) padded with windows no row has: zero keys and values, `valid` false (the
    carry passes them unchanged), the rest false. `valid` is made where it was None, so that a count with padding
    and one without share a capture."""
    keys = inputs[0]
    if inputs[3] is None:
        inputs = inputs[:3] + [keys.new_ones(keys.shape[:2], dtype=torch.bool)] + inputs[4:]
    extra = num_windows - keys.shape[0]
    if extra == 0:
        return inputs
    return [None if t is None else torch.cat([t, t.new_zeros(extra, *t.shape[1:])]) for t in inputs]


def can_capture(layer: nn.Module, device: torch.device) -> bool:
    """Whether the chain on `device` can be captured: a CUDA device, no gradient checkpointing, not inside another
    capture. Warns once where the device or checkpointing rule it out."""
    checkpointing = bool(getattr(layer, "gradient_checkpointing", False) and layer.training)
    if device.type not in GRAPH_DEVICES or checkpointing:
        logger.warning_once(
            '`chain_implementation="cuda_graphs"` captures the cell chain on CUDA devices and without gradient '
            f"checkpointing; here (device {device.type}, checkpointing {checkpointing}) the chain runs compiled."
        )
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def chain_cuda_graphs(step, layer, carry, windows):
    """The chain as one replay of the layer's capture, padded to a multiple of `GRAPH_WINDOWS` windows; where no
    capture applies (see `can_capture`, no window to run, a capture waiting for its backward), the compiled chain.
    Outputs (B, num_steps, ...) each (see `cell_chain.py` for the signature)."""
    num_steps, inputs = windows.num_steps, windows.stacked()
    if num_steps == 0 or not can_capture(layer, inputs[0].device):
        return chain_compiled(step, layer, carry, windows)
    size = GRAPH_WINDOWS * math.ceil(num_steps / GRAPH_WINDOWS)
    inputs = [*carry, *pad_windows([t[:num_steps] if t is not None else None for t in inputs], size)]
    graph = chain_graph(step, layer, inputs)
    if graph is None:
        return chain_compiled(step, layer, carry, windows)
    s, previous_c, *stacked = graph(inputs)
    return (s, previous_c), tuple(t[:num_steps].transpose(0, 1).contiguous() for t in stacked)
