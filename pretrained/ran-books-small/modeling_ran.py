# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""PyTorch Recurrent Attention Network (RAN, Li et al., ACL 2023, arXiv 2306.06843).

A document is cut into windows of `window_size` tokens. Each RAN layer carries one vector, the global perception
cell (GPC), from window to window: the cell is prepended to the window as an extra row, attends with the window's
tokens under rotary positions, and its output becomes the next window's cell through a GLU residual. Memory review
lets every token attend to the history of window cells.

Equation numbers refer to the paper. Numerically the bidirectional encoder reproduces the authors' package
`rannet==0.3.1` on unpadded input (uncentred norms, swish projections, interleaved rotary with the cell at position
0, GLU residuals, the `min_window_size` merge), and departs from it where it is wrong:

* every row is split into windows by its own real length; pads never touch the cell, memory review or pooling,
  so outputs do not depend on padding or batch-mates;
* the causal mode ([`RANForCausalLM`]) lets the cell read its whole window, so context crosses windows, and keeps
  every output independent of later tokens (see `RANModel.forward`).

Fast path: all token projections and all windows' attention run batched over the windows; only the cell chain
(a few D x D mat-vecs per window) is sequential. Where each token sits on the window grid (index arithmetic, no
parameters) is worked out in `window_layout.py`; the argument checks live in `input_checks.py`.
"""

import contextlib
import functools
import math
import weakref
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    CausalLMOutputWithPast,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, can_return_tuple, logging

from .configuration_ran import RANConfig
from .input_checks import (
    answer_positions,
    check_export_path,
    check_forward_kwargs,
    check_inputs,
    check_labels,
    check_sequence_labels,
    is_compiling,
)
from .window_layout import (
    OpenWindowWrites,
    RANWindowLayout,
    pick_window,
    run_chain,
    run_chain_stacked,
    run_chain_while_loop,
    window_chunks,
)


logger = logging.get_logger(__name__)


# ----------------------------------------------------------------------------------------------------------------------
# Small blocks
# ----------------------------------------------------------------------------------------------------------------------


def _cat(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    """`torch.cat`, without a copy for a single tensor."""
    return torch.cat(tensors, dim) if len(tensors) > 1 else tensors[0]


def _stack(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    """`torch.stack`, without a copy for a single tensor."""
    return torch.stack(tensors, dim) if len(tensors) > 1 else tensors[0].unsqueeze(dim)


def _row_major(x: torch.Tensor) -> torch.Tensor:
    """A copy with fresh row-major strides. The compiled chain's inputs go through this: a window's (or a block's)
    strides then do not depend on the number of windows (a new stride recompiles the step; `contiguous()` would
    keep a size-1 axis's stride)."""
    return x.clone(memory_format=torch.contiguous_format)


def _autocast_disabled(device_type: str):
    """A context with autocast off on `device_type`, or a no-op context where it is not on."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _linear_output_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype of a linear layer's output with this weight under the autocast state now in force (autocast leaves
    float64 alone)."""
    device_type = weight.device.type
    if torch.is_autocast_enabled(device_type) and weight.dtype != torch.float64:
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 -> float32 for norms and softmax; float32 and float64 stay as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def standard_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The authors' `standard_normalize` (SN, eq. 6): `(x - mean(x)) / sqrt(mean(x**2) + eps)` over the last axis.

    The denominator is the uncentred second moment, not the variance (so this is not `nn.LayerNorm`): it is an RMS
    norm, `x / sqrt(mean(x**2) + eps)`, minus its own mean (`mean(x) / sqrt(...)`). `F.rms_norm` is one fused kernel on
    CUDA (three launches in all instead of seven), and its decomposition on CPU. Computed in float32 (or the input's
    wider dtype) and returned in the input dtype.
    """
    x32 = _upcast(x)
    scaled = F.rms_norm(x32, x32.shape[-1:], eps=eps)
    return (scaled - scaled.mean(-1, keepdim=True)).to(x.dtype)


class RANNorm(nn.Module):
    """The authors' LayerNorm: `standard_normalize(x) * weight + bias` (uncentred second moment, eps 1e-7)."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normalized = standard_normalize(_upcast(x), self.eps)
        return torch.addcmul(self.bias.to(normalized.dtype), normalized, self.weight.to(normalized.dtype)).to(x.dtype)


class RANGLU(nn.Module):
    """Gated linear unit `(x W_t + b_t) * sigmoid(x W_g + b_g)`, both halves in one `D -> 2D` projection."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.proj = nn.Linear(hidden_size, 2 * hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        transform, gate = self.proj(x).chunk(2, dim=-1)
        return transform * torch.sigmoid(gate)


class RANRotaryEmbedding(nn.Module):
    """Rotary positions inside a window (RoFormer). The cell sits at position 0, a window's tokens at 1..W.

    The authors rotate interleaved pairs `(x[2j], x[2j+1])`. This module rotates the half-split pairs
    `(x[j], x[j + d/2])` instead; the converter permutes the columns of the q and k projections inside every head
    to `[0, 2, 4, ..., 1, 3, 5, ...]`, which gives the same attention scores exactly.
    """

    def __init__(self, config: RANConfig):
        super().__init__()
        self.register_buffer("inv_freq", self.inverse_frequencies(config), persistent=False)

    @staticmethod
    def inverse_frequencies(config: RANConfig) -> torch.Tensor:
        """(d/2,) float32 `rope_theta ** (-2j / d)`, d the head size."""
        head_size = config.attention_head_size
        return 1.0 / (config.rope_theta ** (torch.arange(0, head_size, 2, dtype=torch.float32) / head_size))

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of shape (*positions.shape, d) for the integer positions `positions` (any shape)."""
        angles = positions.to(torch.float32)[..., None] * self.inv_freq.to(positions.device)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """`(x1, x2) -> (-x2, x1)` on the two halves of the last axis."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the half-split pairs of `x` (..., H, d) by the angles cos/sin (..., d), the same for every head."""
    return x * cos.unsqueeze(-2) + rotate_half(x) * sin.unsqueeze(-2)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax attention with Transformers' attention-function contract: query (N, H, Q, d), key/value
    (N, H, K, d), attention_mask bool (N, 1, Q|1, K), True = attend. Returns the output (N, Q, H, d) and the
    probabilities (N, H, Q, K)."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    probs = F.softmax(_upcast(scores), dim=-1).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=module.training)
    return torch.matmul(probs, value).transpose(1, 2), probs


# Implementations of `config._attn_implementation` the window attention honours. Flash-attention kernels take no
# per-key mask, and every RAN window needs one (the cell key in front, padding, causal windows).
SUPPORTED_ATTENTION = ("eager", "sdpa", "flex_attention")


# ----------------------------------------------------------------------------------------------------------------------
# RAN layer
# ----------------------------------------------------------------------------------------------------------------------


class RANEmbeddings(nn.Module):
    """Token embedding, norm and dropout. RAN has no absolute position embedding (positions are rotary, per window)."""

    def __init__(self, config: RANConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=None)
        self.norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        return self.dropout(self.norm(inputs_embeds))


class RANWindowAttention(nn.Module):
    """`PosMHA` of a window with the cell as its first row (paper eqs. 3-5; the authors' `encode-attn`), then the
    output `SN(norm(act(o) + GLU(z)))`: the GLU residual of the attention input `z` and the standard normalisation
    (eq. 6). q, k, v and the output projection all carry an activation (swish).

    `project` stands apart from `forward` because the fast path needs every token's key before any attention runs:
    the cell chain reads a window's keys, and the window's tokens then read the cell's key.
    """

    is_causal = False  # masks are always explicit

    def __init__(self, config: RANConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.attention_head_size
        self.scaling = self.head_size**-0.5
        self.qkv = nn.Linear(config.hidden_size, 3 * config.all_head_size)
        self.o = nn.Linear(config.all_head_size, config.hidden_size)
        self.glu = RANGLU(config.hidden_size)
        self.norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.act = ACT2FN[config.hidden_act]
        self.attention_dropout = config.attention_probs_dropout_prob
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.eps = config.layer_norm_eps

    def project(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(..., D) -> q, k, v, each (..., H, d), activation applied, not rotated."""
        qkv = self.act(self.qkv(z)).unflatten(-1, (3, self.num_heads, self.head_size))
        return qkv.unbind(-3)

    def forward(
        self, z: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
        mask: torch.Tensor | None, output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """
        Args:
            z: (..., Q, D) the normed rows whose queries are `query`; N = prod(z.shape[:-2]) attention rows.
            query: (N, Q, H, d); key, value: (N, K, H, d); mask: bool (N, Q|1, K), True = attend, or None.
        Returns:
            (..., Q, D) the output rows (eq. 6) and, with `output_attentions` (eager), the probabilities
            (N, H, Q, K).
        """
        implementation = "eager" if output_attentions else self.config._attn_implementation
        if implementation not in SUPPORTED_ATTENTION:
            raise ValueError(
                f"RAN's window attention cannot run `attn_implementation={implementation!r}`: every window needs a "
                f"per-key mask (the cell key, padding, causal windows). Use one of {SUPPORTED_ATTENTION} ('sdpa' "
                "picks PyTorch's fused kernels by itself)."
            )
        query, key, value = (t.transpose(1, 2) for t in (query, key, value))
        if mask is not None:
            mask = mask[:, None]
        attention_function = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        if implementation == "flex_attention" and mask is not None:  # flex reads an additive (N, 1, Q, K) mask
            mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~mask, torch.finfo(query.dtype).min).expand(query.shape[0], 1, query.shape[2], key.shape[2])
        attended, probs = attention_function(
            self, query, key, value, mask, scaling=self.scaling, is_causal=False,
            dropout=self.attention_dropout if self.training else 0.0,
        )
        out = self.hidden_dropout(self.act(self.o(attended.reshape(*z.shape[:-1], -1))))
        return standard_normalize(self.norm(out + self.glu(z)), self.eps), probs


class RANMemoryReview(nn.Module):
    """Memory review (paper eqs. 8-9, the authors' `output-attn`): every token attends to the window cells.

    One head of width D, scale 1/sqrt(D), activations on q, k, v and o, and a GLU residual of the *projected* query.
    With `config.memory_review_residual` the input token is added too (not in the paper; see the config).

    `memory` stands apart from `forward` because a cell's key and value are projected once and read by every later
    token: the causal cache keeps them instead of the cells.
    """

    def __init__(self, config: RANConfig):
        super().__init__()
        hidden_size = config.hidden_size
        self.q = nn.Linear(hidden_size, hidden_size)
        self.kv = nn.Linear(hidden_size, 2 * hidden_size)
        self.o = nn.Linear(hidden_size, hidden_size)
        self.glu = RANGLU(hidden_size)
        self.norm = RANNorm(hidden_size, config.layer_norm_eps)
        self.act = ACT2FN[config.hidden_act]
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.token_residual = config.memory_review_residual

    def memory(self, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cells (B, K, D) -> review keys and values, each (B, K, D)."""
        return self.act(self.kv(cells)).chunk(2, dim=-1)

    def forward(
        self, tokens: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, cell_mask: torch.Tensor,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """
        Args:
            tokens: (B, N, D) token outputs of the window attention (N tokens, any layout).
            keys, values: (B, K, D) the cells to review, from `memory`.
            cell_mask: (B, 1|N, K) bool, True where a token may read a cell.
        Returns:
            (B, N, D) reviewed tokens, and the (B, N, K) probabilities when `output_attentions`.
        """
        query = self.act(self.q(tokens))
        scores = torch.matmul(query, keys.transpose(-1, -2)) / math.sqrt(query.shape[-1])
        scores = scores.masked_fill(~cell_mask, torch.finfo(scores.dtype).min)
        # a row with no cell to read (an all-pad row) gets a zero review instead of a uniform average
        probs = F.softmax(_upcast(scores), dim=-1).to(query.dtype) * cell_mask.to(query.dtype)
        probs = self.attention_dropout(probs)
        out = self.hidden_dropout(self.act(self.o(torch.matmul(probs, values)))) + self.glu(query)
        if self.token_residual:
            out = out + tokens
        return self.norm(out), (probs if output_attentions else None)


@dataclass
class RANLayerState:
    """Recurrent state of one causal RAN layer between calls; all tensors are per row.

    Attributes:
        cell: (B, D) incoming cell `s` of the open (unfinished) window.
        previous_cell: (B, D) pre-residual cell `c` of the last finished window (used by the residual, eq. 7).
        has_previous: (B,) bool, whether a window has finished (no residual after the first window).
        window_keys, window_values: (B, W, H, d) rotated keys and values of the open window's tokens.
        window_length: (B,) tokens in the open window (< W).
        review_keys, review_values: (B, K, D) memory-review keys and values of `[s_0, c_1, .., c_m]`.
        review_length: (B,) valid entries of the review history (1 + finished windows).
        open_cell_key, open_cell_value: (B, H, d) the key and value of `cell` that the open window's tokens read,
            kept between decoding steps inside one window; None until a call has projected them (after a commit).
    """

    cell: torch.Tensor
    previous_cell: torch.Tensor
    has_previous: torch.Tensor
    window_keys: torch.Tensor
    window_values: torch.Tensor
    window_length: torch.Tensor
    review_keys: torch.Tensor
    review_values: torch.Tensor
    review_length: torch.Tensor
    open_cell_key: torch.Tensor | None = None
    open_cell_value: torch.Tensor | None = None

    @classmethod
    def start(cls, cell: torch.Tensor, review_key_value: tuple[torch.Tensor, torch.Tensor], window_size: int,
              num_heads: int, head_size: int) -> "RANLayerState":
        """The state before any token: cell `s_0` (B, D), an empty window, review history `[s_0]`."""
        batch_size = cell.shape[0]
        window = cell.new_zeros(batch_size, window_size, num_heads, head_size)
        count = torch.zeros(batch_size, dtype=torch.long, device=cell.device)
        return cls(cell=cell, previous_cell=torch.zeros_like(cell), has_previous=count.bool(), window_keys=window,
                   window_values=window.clone(), window_length=count, review_keys=review_key_value[0],
                   review_values=review_key_value[1], review_length=count + 1)

    def review_mask(self, layout: RANWindowLayout, chunk: slice) -> torch.Tensor:
        """(B, m*C, K + n) bool: a token of window i reads the history and the cells of this call's windows < i.
        Every layer's state has committed the same windows, so the layers of one forward share one mask."""
        key = ("review_mask", chunk.start, chunk.stop, self.review_keys.shape[1])
        return layout.once(key, self._review_mask, layout, chunk)

    def _review_mask(self, layout: RANWindowLayout, chunk: slice) -> torch.Tensor:
        device = self.review_length.device
        history = torch.arange(self.review_keys.shape[1], device=device)[None, :] < self.review_length[:, None]
        window_of_slot = torch.arange(chunk.start, chunk.stop, device=device).repeat_interleave(layout.window_capacity)
        earlier = torch.arange(layout.review_entries, device=device)[None, :] < window_of_slot[:, None]
        batch_size = history.shape[0]
        return torch.cat([history[:, None, :].expand(-1, len(window_of_slot), -1),
                          earlier[None].expand(batch_size, -1, -1)], dim=-1)

    def advance(self, layout: RANWindowLayout, chain: "RANCellChain", keys: torch.Tensor,
                values: torch.Tensor) -> "RANLayerState":
        """The state after this call: keep the open window's keys, and commit the windows it finished.

        Args:
            chain: this call's cell chain (`RANCellChain`: cells, passed cells, cell keys and values, review memory).
            keys, values: (B, n, P + C, H, d) each window's keys and values (past slots first).
        """
        writes = layout.open_window_writes()
        state = self._keep_open_window(layout, writes, keys, values)
        if layout.no_window_finishes:  # the cell stays, and so do the key and value its window's tokens read
            return replace(state, open_cell_key=chain.cell_keys[:, 0], open_cell_value=chain.cell_values[:, 0])
        return state._commit(layout, writes, chain.cells, chain.passed_cells, *chain.review_memory)

    def _keep_open_window(self, layout: RANWindowLayout, writes: OpenWindowWrites, keys: torch.Tensor,
                          values: torch.Tensor) -> "RANLayerState":
        """This state with the open window holding its tokens' keys and values: the past slots (when it is window 0),
        then its new slots (`writes`; slots past the window length are masked)."""
        new_slots = [pick_window(t, writes.open_window, writes.rows)[:, layout.num_past:][writes.slot_mask]
                     for t in (keys, values)]
        window_keys = self.window_keys.to(keys.dtype).index_put(writes.cache_index, new_slots[0])
        window_values = self.window_values.to(values.dtype).index_put(writes.cache_index, new_slots[1])
        return replace(self, window_keys=window_keys, window_values=window_values, window_length=writes.window_length)

    def _commit(self, layout: RANWindowLayout, writes: OpenWindowWrites, cells: torch.Tensor,
                passed_cells: torch.Tensor, review_keys: torch.Tensor, review_values: torch.Tensor) -> "RANLayerState":
        """This state with each row's `writes.finished` windows committed: the last one's cells become the row's cell
        and previous cell, and their review keys and values are appended to the row's history. The new history's
        size is read from the device once per forward: every layer commits the same windows."""
        rows, finished = writes.rows, writes.finished
        last = (finished - 1).clamp(min=0)
        done = (finished > 0)[:, None]
        cell = torch.where(done, pick_window(passed_cells, last, rows), self.cell)
        previous_cell = torch.where(done, pick_window(cells, last, rows), self.previous_cell)
        # review history: row b keeps its entries [0, review_length) and appends its `finished` new cells
        history_size = self.review_keys.shape[1]
        review_length = self.review_length + finished
        new_size = layout.once(("review_size", history_size), lambda: int(review_length.max()))
        position = torch.arange(new_size, device=cells.device)[None, :]
        source = torch.where(position < self.review_length[:, None], position,
                             history_size + position - self.review_length[:, None])
        source = source.clamp(max=history_size + review_keys.shape[1] - 1)
        source = source[..., None].expand(-1, -1, review_keys.shape[-1])
        all_keys = torch.cat([self.review_keys.to(review_keys.dtype), review_keys], 1)
        all_values = torch.cat([self.review_values.to(review_values.dtype), review_values], 1)
        return replace(self, cell=cell, previous_cell=previous_cell, has_previous=self.has_previous | done[:, 0],
                       review_keys=torch.gather(all_keys, 1, source),
                       review_values=torch.gather(all_values, 1, source), review_length=review_length,
                       open_cell_key=None, open_cell_value=None)

    def map_batch(self, fn) -> "RANLayerState":
        """A new state with `fn` applied to every tensor along the batch axis (beam reorder, repeat, select)."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return RANLayerState(**{name: None if value is None else fn(value) for name, value in values.items()})

    def num_bytes(self) -> int:
        tensors = [getattr(self, name) for name in self.__dataclass_fields__]
        return sum(tensor.numel() * tensor.element_size() for tensor in tensors if tensor is not None)


class RANLayerOutput(NamedTuple):
    """What a [`RANLayer`] returns (gradient checkpointing with `use_reentrant=True` hands it back as a plain tuple
    in this order)."""

    hidden_states: torch.Tensor  # (B, n, C, D) token outputs on the window grid
    last_cell: torch.Tensor  # (B, D) bidirectional: `s_n`; causal: the cell the open window starts from
    cells: torch.Tensor  # (B, n, D) `c_i`, zero on pad windows (causal: zero on windows not finished)
    state: "RANLayerState | None"  # causal: the state after this input
    window_attentions: torch.Tensor | None  # (B, n, H, C, 1+P+C) with `output_attentions`
    review_attentions: torch.Tensor | None  # (B, n*C, K) with `output_attentions` and memory review


@dataclass
class RANWindowProjections:
    """Step 1 of a layer, per chunk of windows (`RANLayer.window_chunks`): the normed rows `z` (B, m, C, D), rotated
    queries (B, m, C, H, d), keys and values (B, m, P + C, H, d), and the key mask (B, n, P + C) of all windows, or
    None when every key is real."""

    normed: list[torch.Tensor]
    queries: list[torch.Tensor]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor | None


@dataclass
class RANCellChain:
    """Step 2 of a layer: pre-residual cells `c_i` and passed cells `s_i` (B, n, D), the cell rows' keys and values
    (B, n, H, d), the last carried cell (B, D), and the memory-review keys and values of the cells that get a review
    entry (`RANWindowLayout.review_entries`), (B, n or n - 1, D) each, or None when none does."""

    cells: torch.Tensor
    passed_cells: torch.Tensor
    cell_keys: torch.Tensor
    cell_values: torch.Tensor
    last_cell: torch.Tensor
    review_memory: tuple[torch.Tensor, torch.Tensor] | None


class RANLayer(GradientCheckpointingLayer):
    """One RAN layer over a window grid (paper Fig. 2). Per window i, with `s_{i-1}` the incoming cell:

        z            = norm([s_{i-1}; X_i])                               concat norm, per row
        z'           = PosMHA(z)                                          eqs. 3-5
        c_i, Y_i     = SN(z'[0]), SN(z'[1:])                              eq. 6 (standard normalisation)
        s_i          = c_1 if i == 1 else norm(c_i + GLU(c_{i-1}))        eq. 7, residual of the pre-residual cell
        out          = MemoryReview(Y, [c_1 .. c_n])                      eqs. 8-9

    One schedule serves the bidirectional, causal and incremental modes:
    1. the row norm and q/k/v of every token of every window at once (rotary at the slots' window positions);
    2. the cell chain, sequential over windows (`chain_step`): the cell row's q/k/v and its attention over the
       window's precomputed keys, then eq. 7;
    3. all windows' token attention as one batched attention call with the cell key/value prepended, then
       memory review. On CPU, 1 and 3 run over chunks of about `window_layout.CPU_TOKEN_CHUNK` tokens (whole windows).
    The modes differ in the layout's key mask (causal inside a window), the review mask (causal: the history and
    earlier windows only), the window merge (bidirectional only) and the state commit (causal only).
    """

    def __init__(self, config: RANConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        hidden_size = config.hidden_size
        self.concat_norm = RANNorm(hidden_size, config.layer_norm_eps)
        self.window_attention = RANWindowAttention(config)
        self.cell_initializer = nn.Linear(hidden_size, hidden_size, bias=False)
        self.cell_initializer_norm = RANNorm(hidden_size, config.layer_norm_eps)
        self.cell_glu = RANGLU(hidden_size)
        self.cell_residual_norm = RANNorm(hidden_size, config.layer_norm_eps)
        if config.use_memory_review:
            self.memory_review = RANMemoryReview(config)
        else:
            self.output_norm = RANNorm(hidden_size, config.layer_norm_eps)
        self.act = ACT2FN[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.rotary = RANRotaryEmbedding(config) if config.use_rotary else None

    def initial_cell(self, cell: torch.Tensor | None, batch_size: int, like: torch.Tensor) -> torch.Tensor:
        """`s_0` per row: a given non-zero cell is used as it is; a zero or missing one goes through the cell
        initializer, `norm(act(c W_init))` (which is the norm's bias for a zero cell). The authors decide this for
        the whole batch at once; here it is decided per row."""
        zero = like.new_zeros(batch_size, self.config.hidden_size)
        projected = self.cell_initializer(zero if cell is None else cell)
        initialized = self.dropout(self.cell_initializer_norm(self.act(projected)))
        if cell is None:
            return initialized
        is_zero = (cell == 0).all(-1, keepdim=True)
        return torch.where(is_zero, initialized, cell.to(initialized.dtype))

    def initial_state(self, cell: torch.Tensor | None, batch_size: int, like: torch.Tensor) -> RANLayerState:
        """The causal state before any token: `s_0` from the cell initializer, an empty window, history `[s_0]`."""
        s0 = self.initial_cell(cell, batch_size, like)
        attention = self.window_attention
        return RANLayerState.start(s0, self._review_memory(s0[:, None]), self.config.window_size,
                                   attention.num_heads, attention.head_size)

    def _review_memory(self, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.config.use_memory_review:
            empty = cells[..., :0]
            return empty, empty
        return self.memory_review.memory(cells)

    def _project(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None):
        """Rows (..., D) -> z (normed input, ..., D) and q, k, v (..., H, d), rotated by `cos_sin` if given (the
        cell, at position 0, is not rotated)."""
        z = self.dropout(self.concat_norm(x))
        q, k, v = self.window_attention.project(z)
        if cos_sin is not None:
            q, k = apply_rotary(q, *cos_sin), apply_rotary(k, *cos_sin)
        return z, q, k, v

    def _next_cell(self, c: torch.Tensor, previous_c: torch.Tensor, has_previous: torch.Tensor) -> torch.Tensor:
        """eq. 7: `s_i = norm(c_i + GLU(c_{i-1}))`, or `c_i` itself after a row's first window."""
        if not self.config.use_cell_residual:
            return c
        residual = self.cell_residual_norm(c + self.cell_glu(previous_c))
        return torch.where(has_previous[:, None], residual, c)

    def chain_step(
        self, s: torch.Tensor, previous_c: torch.Tensor, has_previous: torch.Tensor, window_keys: torch.Tensor,
        window_values: torch.Tensor, window_key_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One window of the cell chain: the cell row of `[s_{i-1}; window]` (eqs. 3-6) and eq. 7.

        Args:
            s, previous_c: (B, D) incoming cell `s_{i-1}` and the pre-residual cell `c_{i-1}`; has_previous (B,).
            window_keys, window_values: (B, K, H, d) the window's token keys and values; window_key_mask (B, K).
        Returns:
            c_i (B, D), s_i (B, D), and the cell row's key and value (B, H, d), which the window's tokens read.
        """
        z_cell, q_cell, k_cell, v_cell = self._project(s[:, None])
        keys = torch.cat([k_cell, window_keys], dim=1)
        values = torch.cat([v_cell, window_values], dim=1)
        mask = None
        if window_key_mask is not None:
            mask = torch.cat([window_key_mask.new_ones(s.shape[0], 1), window_key_mask], dim=1)[:, None, :]
        c = self.dropout(self.window_attention(z_cell, q_cell, keys, values, mask)[0])[:, 0]
        return c, self._next_cell(c, previous_c, has_previous), k_cell[:, 0], v_cell[:, 0]

    def _chain_window(self, carry, window):
        """The body of the chain loop (`run_chain`, or `run_chain_while_loop` under compile / export): `chain_step`,
        then the carry advances on the rows that have window i. `window` holds the per-window inputs of
        `run_cell_chain` (anything after the sixth, the window index, is not read)."""
        s, previous_c = carry
        keys, values, key_mask, valid, has_previous, drop_passed = window[:6]
        c, new_s, k_cell, v_cell = self.chain_step(s, previous_c, has_previous, keys, values, key_mask)
        if drop_passed is not None:  # the authors drop out the passed cell in every window but a row's last
            new_s = torch.where(drop_passed[:, None], self.dropout(new_s), new_s)
        if valid is None:
            s, previous_c = new_s, c
        else:
            s = torch.where(valid[:, None], new_s, s)
            previous_c = torch.where(valid[:, None], c, previous_c)
        return (s, previous_c), (c, s, k_cell, v_cell)

    def _chain_windows(self, carry, windows):
        """`_chain_window` over a block of windows, unrolled: `windows` holds the per-window inputs of
        `_chain_window` cut to (k, ...) windows first (or None); returns the carry after the block and the outputs
        stacked windows first, (k, ...)."""
        return run_chain_stacked(self._chain_window, carry, windows)

    def _compiled_chain_window(self, carry, window):
        """`_chain_window` through the process-wide compiled function (`config.chain_implementation="compiled"`);
        the window index is left out so that it never becomes part of the graph."""
        return compiled_chain_window()(self, carry, window[:6])

    def _compiled_chain_windows(self, carry, windows):
        """`_chain_windows` through the process-wide compiled function: `COMPILED_CHAIN_BLOCK` windows per call."""
        return compiled_chain_windows()(self, carry, windows[:6])

    def forward(
        self,
        hidden_states: torch.Tensor,
        cell: torch.Tensor | None = None,
        state: RANLayerState | None = None,
        *,
        layout: RANWindowLayout,
        output_attentions: bool = False,
    ) -> RANLayerOutput:
        """
        Args:
            hidden_states: (B, n, C, D) tokens on the window grid of `layout`.
            cell: (B, D) incoming cell (bidirectional: the previous layer's last cell or the user's `initial_cell`;
                causal: the user's `initial_cell` of a fresh state), or None.
            state: causal mode (`layout.causal`): the state this input continues; None starts a fresh one.
        Returns:
            [`RANLayerOutput`] (a tuple of tensors and the state, so that every gradient-checkpointing mode tracks
            them).
        """
        if layout.causal and state is None:
            state = self.initial_state(cell, hidden_states.shape[0], hidden_states)
        windows = self.project_windows(hidden_states, layout, state)  # 1. eqs. 3-5 inputs, all tokens at once
        chain = self.run_cell_chain(windows, cell, state, layout)  # 2. eqs. 3-7 for the cell rows, window by window
        tokens, window_probs, review_probs = self.attend_tokens(  # 3. eqs. 3-6 for the tokens, then eqs. 8-9
            windows, chain, layout, state, output_attentions)
        last_cell = chain.last_cell
        if state is not None:
            state = state.advance(layout, chain, _cat(windows.keys, 1), _cat(windows.values, 1))
            last_cell = state.cell  # the cell the open window starts from
        return RANLayerOutput(tokens, last_cell, chain.cells, state, window_probs, review_probs)

    def _reviewed_memory(self, chain: RANCellChain, state: RANLayerState | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The review keys and values (B, K, D) the call's tokens read: the call's windows' (bidirectional), or the
        history followed by them (causal); the history alone, in the dtype a projection would have, when no window
        of the call has an entry (a decoding step inside a window)."""
        if state is None:
            return chain.review_memory
        history = (state.review_keys, state.review_values)
        if chain.review_memory is None:
            dtype = _linear_output_dtype(self.memory_review.kv.weight)
            return tuple(t.to(dtype) for t in history)
        return tuple(torch.cat([old.to(new.dtype), new], 1) for old, new in zip(history, chain.review_memory))

    @staticmethod
    def window_chunks(layout: RANWindowLayout, device: torch.device) -> list[slice]:
        """Slices of the window axis that steps 1 and 3 process together (`window_layout.window_chunks`); a static
        layout (compile / export) has a symbolic number of windows: one chunk."""
        if layout.static:
            return [slice(0, layout.num_windows)]
        return window_chunks(layout.num_windows, layout.window_capacity, device)

    def project_windows(
        self, hidden_states: torch.Tensor, layout: RANWindowLayout, state: RANLayerState | None
    ) -> RANWindowProjections:
        """Step 1: the row norm and q/k/v of every token of every window (in chunks of windows on CPU), rotary at
        the slots' window positions; a continued open window's earlier keys (from `state`) go in front."""
        chunks = self.window_chunks(layout, hidden_states.device)
        sizes = [chunk.stop - chunk.start for chunk in chunks]
        cos_sin = [None] * len(chunks)
        if self.rotary is not None:
            positions = layout.rotary_positions()
            cos, sin = layout.once(("rotary", hidden_states.dtype), self.rotary, positions, hidden_states.dtype)
            cos_sin = [(cos, sin)] * len(chunks)
            if positions.dim() > 1:  # per window (continuing an open window): split like the windows
                cos_sin = zip(cos.split(sizes, 1), sin.split(sizes, 1))
        # split and unbind, never slicing inside loops: each slice's backward would zero-fill a full-length
        # gradient (quadratic in length)
        pieces = hidden_states.split(sizes, dim=1) if len(sizes) > 1 else [hidden_states]
        normed, queries, keys, values = zip(*(self._project(piece, rotation) for piece, rotation in zip(pieces, cos_sin)))
        keys, values = list(keys), list(values)
        if layout.num_past:  # the open window's earlier tokens, from the state, in front of every window's slots
            for cached, projected in ((state.window_keys, keys), (state.window_values, values)):
                past = cached[:, None, : layout.num_past].to(hidden_states.dtype)
                projected[:] = [torch.cat([past.expand(-1, t.shape[1], -1, -1, -1), t], 2) for t in projected]
        return RANWindowProjections(list(normed), list(queries), keys, values, layout.key_mask())

    def run_cell_chain(
        self, windows: RANWindowProjections, cell: torch.Tensor | None, state: RANLayerState | None,
        layout: RANWindowLayout,
    ) -> RANCellChain:
        """Step 2: the cell chain, sequential over windows and batched over rows. It starts from `state` (causal)
        or from `initial_cell(cell)`; a row carries its cell only through its own windows.

        The chain runs in the weights' dtype with autocast off. Under bf16 autocast a bf16 cell is rounded at every
        window, and the rounding compounds through eq. 7 and, through each layer's first cell, through the layers:
        at base size on 2,048 tokens the last hidden state's relative error against float64 was 0.056 with a bf16
        chain and 0.020 with a float32 one. The chain is a few mat-vecs per window, so float32 costs little. The
        cells stay in that dtype; the cell keys and values that the tokens read take the tokens' key dtype."""
        with _autocast_disabled(windows.keys[0].device.type):
            cells, passed_cells, cell_keys, cell_values, last_cell = self._run_cell_chain(
                windows, cell, state, layout, self.cell_initializer.weight.dtype)
        token_dtype = windows.keys[0].dtype
        review_memory = None if layout.no_window_finishes else self._review_memory(cells[:, :layout.review_entries])
        return RANCellChain(cells, passed_cells, cell_keys.to(token_dtype), cell_values.to(token_dtype), last_cell,
                            review_memory)

    def _run_cell_chain(
        self, windows: RANWindowProjections, cell: torch.Tensor | None, state: RANLayerState | None,
        layout: RANWindowLayout, dtype: torch.dtype,
    ) -> tuple[torch.Tensor, ...]:
        """`run_cell_chain` in `dtype` (autocast off): cells, passed cells, cell keys, cell values, last cell."""
        keys = [k.to(dtype) for k in windows.keys]
        values = [v.to(dtype) for v in windows.values]
        s, previous_c, has_previous = self._chain_start(cell, state, layout.window_mask.shape[0], keys[0], dtype)
        per_window = self._chain_masks(windows.key_mask, has_previous, layout, state)
        if layout.static and (torch.compiler.is_exporting() or not torch.is_grad_enabled()):
            s, outputs = self._chain_traced(keys, values, per_window, (s, previous_c))
        else:
            s, outputs = self._chain_python_loop(keys, values, per_window, (s, previous_c), layout, state)
        cells, passed_cells, cell_keys, cell_values = outputs
        if layout.cell_mask is not None:
            cells = cells * layout.cell_mask[..., None].to(cells.dtype)
        return cells, passed_cells, cell_keys, cell_values, s

    def _chain_start(
        self, cell: torch.Tensor | None, state: RANLayerState | None, batch_size: int, like: torch.Tensor,
        dtype: torch.dtype,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Where the chain starts: `s_0` and `c_0` (B, D) in `dtype`, and (B,) whether a row has finished a window
        before this call; from `state` (causal) or from `initial_cell(cell)`."""
        if state is not None:
            return state.cell.to(dtype), state.previous_cell.to(dtype), state.has_previous
        s = self.initial_cell(cell, batch_size, like)
        return s, torch.zeros_like(s), s.new_zeros(batch_size, dtype=torch.bool)

    def _chain_masks(
        self, key_mask: torch.Tensor | None, has_previous: torch.Tensor, layout: RANWindowLayout,
        state: RANLayerState | None,
    ) -> list[torch.Tensor | None]:
        """The per-window inputs of `_chain_window` after the keys and values, windows first (n, B, ...), each
        None where it would be all true: the key mask, the rows that have window i, whether a row has finished a
        window before window i (no cell residual until then, eq. 7), and the rows whose passed cell is dropped out
        (training: the authors drop it in every window of a row but its last)."""
        has_previous = has_previous[:, None] | layout.after_first_window()  # (B, n)
        drop_passed = None
        if self.training and self.dropout.p > 0 and state is None:
            window_index = torch.arange(layout.window_mask.shape[1], device=has_previous.device)
            drop_passed = window_index[None, :] < layout.windows_per_row[:, None] - 1
        masks = [key_mask, layout.varying_window_mask, has_previous, drop_passed]
        return [t.transpose(0, 1) if t is not None else None for t in masks]

    def _chain_traced(
        self, keys: list[torch.Tensor], values: list[torch.Tensor], per_window: list[torch.Tensor | None],
        carry: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The chain as one traced loop body for any number of windows (the grid size is symbolic under compile /
        export). Not for training: the backward of `while_loop` is wrong in torch 2.13 (measured), so a compiled
        training step runs `_chain_python_loop` (one graph per number of windows). Returns the last cell (B, D) and
        the outputs (B, n, ...)."""
        keys, values = _cat(keys, 1).transpose(0, 1), _cat(values, 1).transpose(0, 1)  # (n, B, K, H, d)
        key_mask, valid, has_previous, drop_passed = per_window
        if drop_passed is None:
            drop_passed = torch.zeros_like(has_previous)
        key_like, s = keys[0, :, 0], carry[0]  # (B, H, d), (B, D)
        (s, _), outputs = run_chain_while_loop(
            self._chain_window, carry, [keys, values, key_mask, valid, has_previous, drop_passed],
            (s, s, key_like, key_like))
        return s, [t.transpose(0, 1) for t in outputs]

    def _chain_python_loop(
        self, keys: list[torch.Tensor], values: list[torch.Tensor], per_window: list[torch.Tensor | None],
        carry: tuple[torch.Tensor, torch.Tensor], layout: RANWindowLayout, state: RANLayerState | None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The chain as a Python loop over windows: eagerly one window at a time, or through the compiled step,
        `COMPILED_CHAIN_BLOCK` windows a call (`config.chain_implementation="compiled"`), or as one replay of the
        layer's captured compiled chain (`"cuda_graphs"`, `_chain_graphed`). A last window left open
        (causal) is not run: its cell would only be read by a later call, which recomputes it. Returns the last
        cell (B, D) and the outputs (B, n, ...)."""
        num_windows = layout.window_mask.shape[1]
        num_steps = num_windows - layout.last_window_unfinished
        step, blocks, graphed = self._chain_window, {}, None
        if self.config.chain_implementation != "eager" and not is_compiling():
            step = self._compiled_chain_window
            blocks = dict(block_step=self._compiled_chain_windows, block_size=COMPILED_CHAIN_BLOCK)
            windows = [_cat(keys, 1).transpose(0, 1), _cat(values, 1).transpose(0, 1), *per_window]  # windows first
            if self.config.chain_implementation == "cuda_graphs":  # copied into the capture's own buffers
                graphed = self._chain_graphed(carry, windows, num_steps)
            if graphed is None:
                windows = [_row_major(t) if t is not None else None for t in windows]
        else:
            windows = [[k for chunk in keys for k in chunk.unbind(1)],
                       [v for chunk in values for v in chunk.unbind(1)], *per_window]
        if graphed is not None:
            s, outputs = graphed
        else:
            (s, _), outputs = run_chain(step, carry, windows, num_steps, **blocks)
        if layout.last_window_unfinished:
            open_key, open_value = self._open_cell_key_value(s, state, num_windows, keys[0].dtype)
            outputs.append((torch.zeros_like(s), s, open_key, open_value))
        return s, [_stack(t, 1) for t in zip(*outputs)]

    def _chain_graphed(self, carry: tuple[torch.Tensor, torch.Tensor], windows: list[torch.Tensor | None],
                       num_steps: int) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]] | None:
        """The first `num_steps` windows of the chain as one replay of the layer's captured chain
        (`config.chain_implementation="cuda_graphs"`, `chain_graph`), padded to a multiple of
        `CHAIN_GRAPH_WINDOWS` windows; `windows` are windows first. Returns the last cell and the per-window
        outputs, or None where no capture applies (off CUDA, under gradient checkpointing, inside another capture,
        no window to run, the capture waiting for a backward): the compiled chain runs then."""
        device = windows[0].device
        if device.type not in CHAIN_GRAPH_DEVICES or (self.gradient_checkpointing and self.training):
            logger.warning_once(
                '`chain_implementation="cuda_graphs"` captures the cell chain on CUDA devices and without gradient '
                f"checkpointing; here (device {device.type}, checkpointing "
                f"{self.gradient_checkpointing and self.training}) the chain runs compiled."
            )
            return None
        if num_steps == 0 or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            return None
        size = CHAIN_GRAPH_WINDOWS * math.ceil(num_steps / CHAIN_GRAPH_WINDOWS)
        inputs = [*carry, *pad_windows([t[:num_steps] if t is not None else None for t in windows], size)]
        graph = chain_graph(self, inputs)
        if graph is None:
            return None
        s, *stacked = graph(inputs)
        return s, list(zip(*(t[:num_steps].unbind(0) for t in stacked)))

    def _open_cell_key_value(self, s: torch.Tensor, state: RANLayerState | None, num_windows: int,
                             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, H, d) key and value of the open window's incoming cell `s` (B, D): from the state when this call only
        continues the window they were projected for (a decoding step inside a window; in eval mode, where the
        projection has no dropout to draw), else projected."""
        if num_windows == 1 and state is not None and state.open_cell_key is not None and not self.training:
            return state.open_cell_key.to(dtype), state.open_cell_value.to(dtype)
        _, _, k_cell, v_cell = self._project(s[:, None])
        return k_cell[:, 0], v_cell[:, 0]

    def attend_tokens(
        self, windows: RANWindowProjections, chain: RANCellChain, layout: RANWindowLayout,
        state: RANLayerState | None, output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Step 3, per chunk of windows: token attention over `[cell; window]` for all its windows in one call
        (eqs. 3-6), then memory review of its tokens (eqs. 8-9) over all the row's cells (bidirectional) or over
        the history and the earlier windows (causal, `state`). Returns (B, n, C, D) tokens and the attentions."""
        review_memory = self._reviewed_memory(chain, state) if self.config.use_memory_review else None
        batch_size, capacity = layout.window_mask.shape[0], layout.window_capacity
        outputs = []
        chunks = self.window_chunks(layout, windows.keys[0].device)
        for z, q, k, v, chunk in zip(windows.normed, windows.queries, windows.keys, windows.values, chunks):
            keys = torch.cat([chain.cell_keys[:, chunk, None], k], dim=2).flatten(0, 1)  # (B*m, 1+P+C, H, d)
            values = torch.cat([chain.cell_values[:, chunk, None], v], dim=2).flatten(0, 1)
            y, window_probs = self.window_attention(
                z, q.flatten(0, 1), keys, values, layout.attention_mask(chunk), output_attentions)
            y = self.dropout(y)
            if window_probs is not None:
                window_probs = window_probs.unflatten(0, (batch_size, chunk.stop - chunk.start))
            if not self.config.use_memory_review:
                outputs.append((self.output_norm(y), window_probs, None))
                continue
            review_mask = state.review_mask(layout, chunk) if state is not None else layout.window_mask[:, None, :]
            out, review_probs = self.memory_review(y.flatten(1, 2), *review_memory, review_mask, output_attentions)
            if review_probs is not None and layout.last_window_unfinished:  # the last window's cell, read by none
                review_probs = F.pad(review_probs, (0, 1))
            outputs.append((out.unflatten(1, (chunk.stop - chunk.start, capacity)), window_probs, review_probs))
        return tuple(_cat(parts, 1) if parts[0] is not None else None for parts in zip(*outputs))


# Windows per call of the compiled chain (`config.chain_implementation="compiled"`): a block of this many windows is
# one compiled graph (unrolled), the windows left over go one at a time through the one-window graph. More windows
# per call means fewer host round trips per window (on a GPU, fewer graph launches) and a longer first compile.
COMPILED_CHAIN_BLOCK = 4


@functools.cache
def compiled_chain_window():
    """`RANLayer._chain_window` compiled by `torch.compile` (inductor), built on first use and shared by every layer
    of every model in the process: the layer is an argument, so its weights are graph inputs and one graph serves
    all layers of the same shapes. Dynamo compiles a graph per grad mode (a training forward has two: a layer's
    first window, whose incoming `c_0` needs no gradient, and the others) and, at the first new batch size or
    window capacity, one with dynamic sizes; a new number of windows needs none (`run_cell_chain` passes each
    window's inputs with the same strides). Past `torch._dynamo.config.recompile_limit` graphs, Dynamo runs the step
    eagerly, with a warning."""
    return torch.compile(RANLayer._chain_window)


@functools.cache
def compiled_chain_windows():
    """`RANLayer._chain_windows` (a block of `COMPILED_CHAIN_BLOCK` windows, unrolled) compiled like
    `compiled_chain_window`: one graph per grad mode for every layer, and none more for a new number of windows
    (every block has the same size and strides). Inductor fuses across the windows of a block: at the base width,
    6.25 kernel and library calls per window forward and 11.5 backward, against 7 and 15 one window at a time
    (`python -m benchmarks.chain_ops`)."""
    return torch.compile(RANLayer._chain_windows)


# Windows per captured chain (`config.chain_implementation="cuda_graphs"`): a layer's window count is padded up to a
# multiple of this, so that lengths within one multiple share a capture (16 windows: 4,096 tokens at window 256).
CHAIN_GRAPH_WINDOWS = 16
# Captures each layer keeps (the least recently used goes first): each holds a memory pool of its own, with the
# chain's inputs, their gradients and its saved activations (how much has not been measured on a GPU yet).
CHAIN_GRAPHS_PER_LAYER = 2
CHAIN_GRAPH_DEVICES = ("cuda",)  # device types whose chains are captured (elsewhere the chain runs compiled)
_CHAIN_GRAPHS = weakref.WeakKeyDictionary()  # RANLayer -> {signature: ChainGraph}, most recently used last


class ChainGraphModule(nn.Module):
    """A layer's whole cell chain as one module, for `torch.cuda.make_graphed_callables`: the layer's parameters
    are registered here too (so the captured backward returns their gradients), the layer itself is held weakly
    (so a dropped model frees its captures). `forward(s, previous_c, *windows)` takes the non-None per-window inputs
    of `RANLayer._chain_window`, windows first, and runs them through the compiled blocks."""

    def __init__(self, layer: "RANLayer", present: tuple[bool, ...]):
        super().__init__()
        for index, parameter in enumerate(layer.parameters()):
            self.register_parameter(f"layer_parameter_{index}", parameter)
        self.layer = weakref.ref(layer)
        self.present = present  # which of the per-window inputs are tensors (the others are None)
        self.train(layer.training)

    def forward(self, s: torch.Tensor, previous_c: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Returns the last cell (B, D) and the per-window outputs of `_chain_window` stacked windows first."""
        layer, tensors = self.layer(), iter(tensors)
        windows = [next(tensors) if present else None for present in self.present]
        (s, _), outputs = run_chain(layer._compiled_chain_window, (s, previous_c), windows, windows[0].shape[0],
                                    block_step=layer._compiled_chain_windows, block_size=COMPILED_CHAIN_BLOCK)
        return (s, *(torch.stack(ys, dim=0) for ys in zip(*outputs)))


class ChainGraph:
    """One capture of a layer's cell chain (`config.chain_implementation="cuda_graphs"`): the forward and, with
    gradients on, the backward of `ChainGraphModule` as two CUDA graphs, through
    `torch.cuda.make_graphed_callables`. A replay copies the inputs into the capture's own buffers and launches the
    whole chain (every window of the layer, thousands of kernels) as one host call.

    The backward graph reads the activations the last forward replay left in the capture's memory, so a second
    forward before the first one's backward would make that backward wrong: `busy` says when one is pending (its
    autograd node is alive and has not run), and the layer then runs the compiled chain instead. Outputs and
    gradients are cloned out of the capture's buffers, so a later replay never changes a tensor a caller (or a
    parameter's `.grad`) holds."""

    def __init__(self, layer: "RANLayer", inputs: list[torch.Tensor | None]):
        tensors = [_row_major(t.detach()).requires_grad_(t.requires_grad) for t in inputs if t is not None]
        module = ChainGraphModule(layer, tuple(t is not None for t in inputs[2:]))
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
        """After the backward replay: no backward pending, and the gradients cloned out of the capture's buffers.
        Autograd would otherwise keep a parameter's first gradient *in* that buffer (it takes over a gradient
        nothing else holds), and the next replay would overwrite it: gradients accumulated over micro-batches
        would be wrong (pytorch/pytorch#181723)."""
        self.pending = None
        return tuple(g.clone() if g is not None else None for g in gradients)


def chain_graph(layer: "RANLayer", inputs: list[torch.Tensor | None]) -> ChainGraph | None:
    """The layer's capture for these inputs (captured now if new; the least recently used beyond
    `CHAIN_GRAPHS_PER_LAYER` is dropped), or None when it is waiting for a backward."""
    parameters = tuple((p.data_ptr(), p.requires_grad) for p in layer.parameters())
    signature = (tuple(None if t is None else (t.shape, t.dtype, t.device, t.requires_grad) for t in inputs),
                 parameters, layer.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    graphs = _CHAIN_GRAPHS.setdefault(layer, {})
    graph = graphs.pop(signature, None)
    if graph is None:
        while len(graphs) >= CHAIN_GRAPHS_PER_LAYER:
            graphs.pop(next(iter(graphs)))
            logger.warning_once(
                '`chain_implementation="cuda_graphs"` dropped a capture to make room for a new one: every new window '
                "count (in steps of 16 windows), batch size or grad mode captures again, which takes several "
                "compiled chain runs. Pad batches to one length and size (`padding=\"max_length\"`, or "
                "`pad_to_multiple_of` in the data collator) so that one capture serves them all."
            )
        graph = ChainGraph(layer, inputs)
    graphs[signature] = graph
    return None if graph.busy() else graph


def pad_windows(windows: list[torch.Tensor | None], num_windows: int) -> list[torch.Tensor | None]:
    """The per-window inputs of `_chain_window` (windows first) padded with windows no row has: zero keys and
    values, `valid` false (the carry passes them unchanged), the rest false. `valid` is made where it was None, so
    that a count with padding and one without share a capture."""
    keys = windows[0]
    extra = num_windows - keys.shape[0]
    if windows[3] is None:
        windows = windows[:3] + [keys.new_ones(keys.shape[:2], dtype=torch.bool)] + windows[4:]
    if extra == 0:
        return windows
    return [None if t is None else torch.cat([t, t.new_zeros(extra, *t.shape[1:])]) for t in windows]


class RANPooler(nn.Module):
    """The document vector, by `config.pooler_mode`. `"cell_max"` / `"cell_mean"`: the authors' cell transform
    (paper eq. 10), `GLU(act(cell W_c + b_c)) + (pool(tokens) W_p + b_p)`, `pool` the max / mean over the real
    tokens of the last layer. `"token_mean"` (the Table 4 ablation): the plain mean of the real token outputs, no
    weights.
    """

    def __init__(self, config: RANConfig):
        super().__init__()
        self.mode = config.pooler_mode
        if self.mode != "token_mean":
            self.cell_dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.cell_glu = RANGLU(config.hidden_size)
            self.pooling_dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.act = ACT2FN[config.hidden_act]
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, cell: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """cell (B, D); tokens (B, N, D) with token_mask (B, N) bool. Returns (B, D); an all-pad row pools to 0."""
        if self.mode == "cell_max":
            pooled = _masked_max(tokens, token_mask)
        else:
            pooled = _masked_mean(tokens, token_mask)
        if self.mode == "token_mean":
            return pooled
        return self.cell_glu(self.dropout(self.act(self.cell_dense(cell)))) + self.pooling_dense(pooled)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, N, D) over the positions where mask (B, N) is True; 0 where a row has none."""
    weights = mask.to(x.dtype)[..., None]
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1)


def _masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max of x (B, N, D) over the positions where mask (B, N) is True; 0 where a row has none."""
    filled = x.masked_fill(~mask[..., None], torch.finfo(x.dtype).min).amax(1)
    return torch.where(mask.any(1, keepdim=True), filled, torch.zeros_like(filled))


# ----------------------------------------------------------------------------------------------------------------------
# Pretrained model and encoder
# ----------------------------------------------------------------------------------------------------------------------


class RANPreTrainedModel(PreTrainedModel):
    config_class = RANConfig
    config: RANConfig
    base_model_prefix = "ran"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RANLayer", "RANEmbeddings"]
    _supports_sdpa = True
    _supports_flash_attn = False  # flash kernels take no per-key mask (see `RANWindowAttention.forward`)
    _supports_flex_attn = True
    # `_can_record_outputs` / `@capture_outputs` are not used: hidden states live on the window grid (B, n, C, D)
    # inside the layers and are mapped back to (B, L, D) by the layout, which a forward hook cannot do.
    # `@auto_docstring` is not used: every forward keeps its own docstring, with the window-grid shapes and the
    # paper's equation numbers that the library's shared argument texts do not have.
    # The mode: the task heads are bidirectional and RANForCausalLM is causal, whatever `config.is_decoder` says;
    # a bare RANModel reads `config.is_decoder` (see `RANModel.__init__`).
    is_causal: bool = False

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`save_pretrained`, overridden to write two facts into the saved config: every RAN head in `auto_map`
        (not only this model's class), so a checkpoint saved from one head (e.g. a pretrained masked LM) loads into
        any other head with `AutoModelFor*.from_pretrained(..., trust_remote_code=True)`; and the mode the model
        ran in as `is_decoder` (RANForCausalLM: True, the task heads: False), so the checkpoint says how its weights
        were trained. The config object is left as it was."""
        if getattr(self, "_auto_class", None) is not None:
            self.config.auto_map = {**RAN_AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        is_decoder = self.config.is_decoder
        self.config.is_decoder = self.is_causal
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.config.is_decoder = is_decoder

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The authors' init: truncated normal (std `initializer_range`, cut at 2 std) for every kernel and the
        embedding table, zero biases, norms at weight 1 and bias 0."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, RANNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, RANRotaryEmbedding):
            init.copy_(module.inv_freq, module.inverse_frequencies(self.config))
        elif hasattr(module, "bias") and isinstance(getattr(module, "bias"), nn.Parameter) and module is not self:
            # heads' own output biases (e.g. the masked-LM decoder bias)
            init.zeros_(module.bias)


@dataclass
class RANModelOutput(ModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
        Token outputs of the last layer; zero at pad positions.
    pooler_output (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
        The document vector: the authors' cell transform (paper eq. 10) of the last layer's cell.
    last_cell (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
        Final cell `s_n` of the last layer (after the cell residual), or the cell picked by `config.cell_pooling`.
        Causal mode: the cell after the last finished window (the one the open window starts from).
    cells (`torch.FloatTensor` of shape `(batch_size, num_windows, hidden_size)`):
        History `[c_1 .. c_n]` of the last layer (pre-residual cells); rows with fewer windows are zero after their
        last window. Causal mode: the cells of the windows this call finished, zero elsewhere.
    cache (`RANCache`, *optional*):
        Causal mode with `use_cache`: the recurrent state to continue from.
    hidden_states (`tuple(torch.FloatTensor)`, *optional*):
        Embedding output and every layer's output, each `(batch_size, sequence_length, hidden_size)`.
    attentions (`tuple(torch.FloatTensor)`, *optional*):
        Per layer, the window attention `(batch_size, num_windows, num_heads, window_capacity, 1 + window_capacity)`;
        key 0 is the cell, key `1 + j` the window's j-th token.
    memory_review_attentions (`tuple(torch.FloatTensor)`, *optional*):
        Per layer, `(batch_size, num_windows * window_capacity, num_windows)` attention of window slots over cells.
    """

    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    last_cell: torch.FloatTensor | None = None
    cells: torch.FloatTensor | None = None
    cache: "RANCache | None" = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    memory_review_attentions: tuple[torch.FloatTensor, ...] | None = None


class RANCacheLayer(CacheLayerMixin):
    """One causal RAN layer's entry in a [`RANCache`]: its recurrent state ([`RANLayerState`], None before the first
    call) and the number of input positions it has read. RAN keeps no per-token keys and values, so the key/value
    interface of `CacheLayerMixin` (`update`, `lazy_initialization`, `get_mask_sizes`) raises; the layer's state is
    replaced whole by `update_state` after each call."""

    is_compileable = False
    is_croppable = False
    supports_early_init = False

    def __init__(self, **kwargs):
        super().__init__()
        self.state: RANLayerState | None = None
        self.cumulative_length = 0

    def __repr__(self) -> str:
        return f"RANCacheLayer(positions={self.cumulative_length}, bytes={self.num_bytes()})"

    def _no_keys_and_values(self, *args, **kwargs):
        raise NotImplementedError(
            "RANCacheLayer keeps a recurrent state, not per-token keys and values; RAN layers call `update_state`."
        )

    lazy_initialization = update = get_mask_sizes = _no_keys_and_values

    def update_state(self, state: RANLayerState, num_positions: int) -> None:
        """Keep the state after a call that read `num_positions` more input positions (padding included)."""
        self.state = state
        self.is_initialized = True
        self.cumulative_length += num_positions

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return -1

    def num_bytes(self) -> int:
        return self.state.num_bytes() if self.state is not None else 0

    def reset(self) -> None:
        self.state, self.is_initialized, self.cumulative_length = None, False, 0

    def _map_batch(self, fn) -> None:
        if self.state is not None:
            self.state = self.state.map_batch(fn)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row i becomes row `beam_idx[i]`."""
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_batch(lambda t: t[indices.to(t.device)])

    def offload(self):
        self._map_batch(lambda t: t.to("cpu", non_blocking=True))

    def prefetch(self):
        pass  # the state is read whole at the start of the layer; `offloading` is not supported

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise ValueError("RANCacheLayer cannot be cropped: a recurrent state cannot go back into a finished window.")


class RANCache(Cache):
    """Recurrent state of a causal RAN for `generate()` and chunked prefill: one [`RANCacheLayer`] per RAN layer.

    Per layer it holds the incoming cell and its key/value, the previous pre-residual cell, the keys/values of the
    current window's tokens (at most `window_size`) and the memory-review history (one key and value per finished
    window). Its size grows only by that history: `O(n_layers * (W*A + n_windows*D))`, not with every token.

    A recurrent state cannot be cut back into a finished window, so `crop` raises.
    """

    def __init__(self, config: RANConfig | None = None, **kwargs):
        num_layers = config.num_hidden_layers if config is not None else 0
        super().__init__(layers=[RANCacheLayer() for _ in range(num_layers)])

    def __repr__(self) -> str:
        return f"RANCache(layers={len(self.layers)}, positions={self.get_seq_length()}, bytes={self.num_bytes()})"

    def layer_states(self, num_layers: int) -> list[RANLayerState | None]:
        """The state of each of `num_layers` layers (None: fresh); adds the layers a cache built without a config
        lacks."""
        self.layers += [RANCacheLayer() for _ in range(num_layers - len(self.layers))]
        return [layer.state for layer in self.layers]

    @property
    def states(self) -> list[RANLayerState]:
        """The states of the layers that have one."""
        return [layer.state for layer in self.layers if layer.state is not None]

    @property
    def batch_size(self) -> int:
        states = self.states
        return states[0].cell.shape[0] if states else 0

    @property
    def is_linear(self) -> list[bool]:
        """Per layer, whether the state is a pure recurrent (Mamba-like) one. RAN's also holds the open window's keys
        and values, and counts the positions it has seen, so `generate()` (Transformers >= 5.24) slices a resumed
        prompt by `get_seq_length()` as it does for attention caches."""
        return [False] * max(1, len(self.layers))

    def open_window_length(self) -> torch.Tensor | None:
        """(B,) tokens of each row's open window (the same in every layer), or None for an empty cache."""
        states = self.states
        return states[0].window_length if states else None

    def num_bytes(self) -> int:
        """Memory held by the state, in bytes."""
        return sum(layer.num_bytes() for layer in self.layers)

    def crop(self, max_length: int):
        """Transformers' rollback (assisted decoding): only a no-op is possible. `max_length < 0` counts back from
        the positions seen."""
        seen = self.get_seq_length()
        if max_length < 0:
            max_length = seen + max_length
        if max_length >= seen:
            return
        raise ValueError(
            f"RANCache cannot be cropped to {max_length} positions (it has seen {seen}): a recurrent "
            "state cannot go back into a finished window. Re-run the prompt instead (assisted decoding and other "
            "rollback features are not supported by RAN)."
        )


class RANModel(RANPreTrainedModel):
    """The bare RAN encoder: embeddings, `num_hidden_layers` RAN layers, and the cell transform pooler.

    The layers share one window split per row (`RANWindowLayout`). Bidirectional mode: layer `l + 1` starts from
    layer `l`'s last cell, as in the authors' code. Causal mode: see `forward`.
    """

    def __init__(self, config: RANConfig, add_pooling_layer: bool = True, is_causal: bool | None = None):
        r"""
        is_causal (`bool`, *optional*):
            The mode: causal (`True`, RANForCausalLM's body) or bidirectional. Defaults to `config.is_decoder`. The
            heads pass it, so a head's mode never depends on the config it is built from (the config is not
            changed).
        """
        super().__init__(config)
        self.is_causal = config.is_decoder if is_causal is None else is_causal
        if config.is_decoder and not self.is_causal:
            logger.warning(
                "RAN: the config is causal (`is_decoder=True`, e.g. a RANForCausalLM checkpoint); this model uses the "
                "bidirectional encoder instead, so every token sees the whole document. Load the checkpoint with "
                "`RANForCausalLM` for the causal language model."
            )
        self.embeddings = RANEmbeddings(config)
        self.layers = nn.ModuleList([RANLayer(config, i) for i in range(config.num_hidden_layers)])
        self.pooler = RANPooler(config) if add_pooling_layer else None
        self.gradient_checkpointing = False
        self.post_init()

    @classmethod
    def from_pretrained(cls, *args, is_decoder: bool = False, **kwargs):
        """`PreTrainedModel.from_pretrained`, overridden for one reason: a causal checkpoint (e.g. `run_clm.py`'s)
        loads as a bidirectional feature encoder (with a logged notice) unless the call passes `is_decoder=True`."""
        if is_decoder and kwargs.get("config") is None:
            kwargs["is_decoder"] = True
        return super().from_pretrained(*args, is_causal=is_decoder, **kwargs)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.word_embeddings = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        cache: "RANCache | None" = None,
        use_cache: bool | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> RANModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids. Exactly one of `input_ids` and `inputs_embeds` must be given.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding (left, right or anywhere). Defaults to
                `input_ids != config.pad_token_id` (all ones with `inputs_embeds`, and in causal mode, where the pad
                id is often also a real token such as eos). Each row is windowed by its own
                real tokens, so outputs do not depend on padding or on the other rows of the batch.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Vectors used instead of the embedding lookup (they still go through the embedding norm).
            initial_cell (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*):
                Cell that seeds the first layer, per row (the authors' `with_cell`). A row of zeros means "none":
                that row starts from the cell initializer.
            cache (`RANCache`, *optional*):
                Causal mode only: the recurrent state left by earlier calls; the input continues it.
                `attention_mask` may then cover the past and the new tokens (its last `sequence_length` columns are
                used).
            use_cache (`bool`, *optional*):
                Causal mode only: return the updated `RANCache` as `cache`.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Accepted so that BERT tokenizers' outputs can be passed as they are; RAN has no token types, so they
                must be all zero (a `ValueError` otherwise) and are ignored.
            kwargs (`TransformersKwargs`): `output_hidden_states`, `output_attentions`, Trainer's
                `num_items_in_batch`, `return_dict`; any other keyword raises a `TypeError`.

        Causal mode differs from the bidirectional one: tokens attend causally inside their window, the cell row
        reads its whole window (so context crosses windows), there is no `min_window_size` merge, memory review of
        a token in window i reads `[s_0, c_1 .. c_{i-1}]`, and every layer starts from its own initial cell
        (`initial_cell` seeds the first layer only). So the output at position t depends on tokens <= t only.
        """
        check_forward_kwargs(self, kwargs)
        check_export_path(self.is_causal)
        self._check_cache(cache)
        if attention_mask is not None and cache is not None and attention_mask.dim() == 2:
            length = (input_ids if input_ids is not None else inputs_embeds).shape[1]
            attention_mask = attention_mask[:, -length:]  # generate() passes the mask of the past and new tokens
        sequence_mask = check_inputs(self.config, self.embeddings.word_embeddings.weight.dtype, input_ids,
                                     attention_mask, inputs_embeds, initial_cell, token_type_ids, self.is_causal)
        use_cache = self.is_causal and (
            use_cache if use_cache is not None else (self.config.use_cache and not self.training))
        if cache is None and use_cache:
            cache = RANCache(self.config)
        if cache is not None and cache.states and cache.batch_size != sequence_mask.shape[0]:
            raise ValueError(
                f"RANModel: the cache holds {cache.batch_size} rows but the input has {sequence_mask.shape[0]}.")
        layout = RANWindowLayout.from_mask(
            sequence_mask, self.config.window_size, self.config.min_window_size, causal=self.is_causal,
            offset=cache.open_window_length() if cache is not None else None,
            static=is_compiling() and not self.is_causal,
        )
        output = self._run_layers(layout, self.embeddings(input_ids, inputs_embeds), initial_cell, cache, **kwargs)
        output.cache = cache if use_cache else None
        return output

    def _check_cache(self, cache) -> None:
        if cache is None:
            return
        if not self.is_causal:
            raise ValueError("RANModel: `cache` needs the causal model (RANForCausalLM, or `config.is_decoder=True`).")
        if not isinstance(cache, RANCache):
            raise TypeError(
                f"RANModel: `cache` must be a RANCache (got {type(cache).__name__}); RAN keeps a recurrent "
                "state, not per-token keys and values. Pass the cache a previous call returned, or None."
            )

    def _run_layers(
        self, layout: RANWindowLayout, embedded: torch.Tensor, initial_cell: torch.Tensor | None,
        cache: "RANCache | None", output_hidden_states: bool | None = None, output_attentions: bool | None = None,
        **kwargs,
    ) -> RANModelOutput:
        """The layers over the window grid of `layout` (updating `cache`), the cell pooling and the pooler."""
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        hidden = layout.to_grid(embedded)
        all_hidden_states = (layout.to_sequence(hidden),) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        all_reviews = () if output_attentions and self.config.use_memory_review else None
        states = cache.layer_states(len(self.layers)) if cache is not None else [None] * len(self.layers)
        cell, new_states = initial_cell, []
        for layer, state in zip(self.layers, states):
            out = RANLayerOutput(*layer(hidden, cell, state, layout=layout, output_attentions=output_attentions))
            hidden = out.hidden_states
            # bidirectional: layer l + 1 starts from layer l's last cell; causal: every layer from its own s_0
            cell = None if self.is_causal else out.last_cell
            new_states.append(out.state)
            if output_hidden_states:
                all_hidden_states += (layout.to_sequence(hidden),)
            if output_attentions:
                all_attentions += (out.window_attentions,)
                if all_reviews is not None:
                    all_reviews += (out.review_attentions,)
        if cache is not None:
            for cache_layer, state in zip(cache.layers, new_states):
                cache_layer.update_state(state, embedded.shape[1])
        last_cell = self._pool_cell(out.last_cell, out.cells, layout.window_mask)
        pooler_output = None
        if self.pooler is not None:
            pooler_output = self.pooler(last_cell, hidden.flatten(1, 2), layout.token_mask.flatten(1, 2))
        return RANModelOutput(
            last_hidden_state=all_hidden_states[-1] if output_hidden_states else layout.to_sequence(hidden),
            pooler_output=pooler_output,
            last_cell=last_cell,
            cells=layout.trim_windows(out.cells),
            hidden_states=all_hidden_states,
            attentions=all_attentions,
            memory_review_attentions=all_reviews,
        )

    def _pool_cell(self, last_cell: torch.Tensor, cells: torch.Tensor, window_mask: torch.Tensor) -> torch.Tensor:
        """`config.cell_pooling`: the final cell, or the mean / max of the history over the row's real windows."""
        if self.config.cell_pooling == "mean":
            return _masked_mean(cells, window_mask)
        if self.config.cell_pooling == "max":
            return _masked_max(cells, window_mask)
        return last_cell


# ----------------------------------------------------------------------------------------------------------------------
# Heads
# ----------------------------------------------------------------------------------------------------------------------


class RANLMHead(nn.Module):
    """The authors' masked-LM head: `norm(act(dropout(h) W + b)) E^T + bias`, the decoder tied to the input
    embeddings E, with its own bias (`MLM-Hidden` and `MLM-Matching`)."""

    def __init__(self, config: RANConfig):
        super().__init__()
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.act(self.dense(self.dropout(hidden_states)))))


class RANForMaskedLM(RANPreTrainedModel):
    """RAN with the authors' masked-LM head (bidirectional). Loads the MLM weights the converter keeps."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "ran.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }
    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\."]

    def __init__(self, config: RANConfig):
        super().__init__(config)
        self.ran = RANModel(config, add_pooling_layer=False, is_causal=self.is_causal)
        self.lm_head = RANLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head.decoder = new_embeddings
        self.lm_head.bias = new_embeddings.bias

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Token ids to predict; -100 marks positions without a loss (and pads, if you like). With
            `config.sparse_prediction`, the returned `logits` are only those of the positions with a label,
            `(num_masked, vocab_size)` in row-major order (`logits == dense_logits[labels != -100]`).
        """
        check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                           initial_cell=initial_cell, token_type_ids=token_type_ids, return_dict=True, **kwargs)
        hidden_states = outputs.last_hidden_state
        loss = None
        if labels is not None:
            check_labels(type(self).__name__, "labels", labels, (tuple(hidden_states.shape[:2]),),
                          self.config.vocab_size)
            if self.config.sparse_prediction:  # the head only where there is a loss: (num_masked, D)
                predicted = labels != -100
                hidden_states, labels = hidden_states[predicted], labels[predicted]
        logits = self.lm_head(hidden_states)
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                              attentions=outputs.attentions)


class RANForSequenceClassification(RANPreTrainedModel):
    """RAN with a linear classifier on the pooled document vector (eq. 10). `config.problem_type` selects
    regression (MSE), single-label (cross-entropy) or multi-label (BCE with logits) as in Transformers."""

    # a pretrained masked-LM checkpoint carries the LM head; fine-tuning from it drops that head quietly
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]

    def __init__(self, config: RANConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ran = RANModel(config, is_causal=self.is_causal)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.Tensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput | tuple:
        r"""
        labels (`torch.Tensor` of shape `(batch_size,)`, or `(batch_size, num_labels)` for multi-label, *optional*):
            Class indices (single-label), floats (regression) or 0/1 floats per label (multi-label).
        """
        check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                           initial_cell=initial_cell, token_type_ids=token_type_ids, return_dict=True, **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = None
        if labels is not None:
            check_sequence_labels(type(self).__name__, labels, self.config, logits.shape[0])
            loss = self.loss_function(labels, logits, self.config, **kwargs)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


class RANForTokenClassification(RANPreTrainedModel):
    """RAN with a linear tagger over every token of the document (NER on whole documents)."""

    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\.", r"^lm_head\."]

    def __init__(self, config: RANConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ran = RANModel(config, add_pooling_layer=False, is_causal=self.is_causal)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> TokenClassifierOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Tag indices in `[0, num_labels)`; -100 for positions without a loss (pads, continuation word pieces).
        """
        check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                           initial_cell=initial_cell, token_type_ids=token_type_ids, return_dict=True, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            check_labels(type(self).__name__, "labels", labels, (tuple(logits.shape[:2]),), self.config.num_labels)
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                     attentions=outputs.attentions)


class RANForQuestionAnswering(RANPreTrainedModel):
    """RAN with start/end span logits over the whole document (extractive QA). Pad positions get `-inf`-like
    logits so a span never starts or ends on padding."""

    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\.", r"^lm_head\."]

    def __init__(self, config: RANConfig):
        super().__init__(config)
        self.ran = RANModel(config, add_pooling_layer=False, is_causal=self.is_causal)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput | tuple:
        r"""
        start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Token index of the answer's first and last token; positions past the end of the input, and -100, are
            ignored in the loss (give both or neither).
        """
        check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                           initial_cell=initial_cell, token_type_ids=token_type_ids, return_dict=True, **kwargs)
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(-1)
        if attention_mask is not None or (input_ids is not None and self.config.pad_token_id is not None):
            real = attention_mask.bool() if attention_mask is not None else input_ids != self.config.pad_token_id
            start_logits = start_logits.masked_fill(~real, torch.finfo(start_logits.dtype).min)
            end_logits = end_logits.masked_fill(~real, torch.finfo(end_logits.dtype).min)
        loss = None
        if (start_positions is None) != (end_positions is None):
            raise ValueError(f"{type(self).__name__}: pass both `start_positions` and `end_positions` (or neither).")
        if start_positions is not None:
            length = start_logits.shape[1]
            start_positions, end_positions = (
                answer_positions(type(self).__name__, name, positions, start_logits.shape[0], length)
                for name, positions in (("start_positions", start_positions), ("end_positions", end_positions))
            )
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                            hidden_states=outputs.hidden_states, attentions=outputs.attentions)


class RANForCausalLM(RANPreTrainedModel, GenerationMixin):
    """Causal RAN language model with an LM head tied to the input embeddings, and `generate()` on a recurrent
    cache ([`RANCache`]) that grows by one key and value per finished window. The encoder runs in causal mode (see
    `RANModel.forward`) whatever `config.is_decoder` says."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "ran.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }
    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\."]
    _is_stateful = True
    is_causal = True

    def __init__(self, config: RANConfig):
        super().__init__(config)
        self.ran = RANModel(config, add_pooling_layer=False, is_causal=self.is_causal)
        self.lm_head = RANLMHead(config)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # RAN builds its own RANCache

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head.decoder = new_embeddings
        self.lm_head.bias = new_embeddings.bias

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        cache: RANCache | None = None,
        use_cache: bool | None = None,
        initial_cell: torch.FloatTensor | None = None,
        logits_to_keep: int = 0,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The input ids themselves (the shift happens inside, Transformers style); -100 marks positions without
            a loss.
        cache (`RANCache`, *optional*): state to continue from; returned updated when `use_cache`.
        logits_to_keep (`int`, *optional*): compute logits for the last `logits_to_keep` positions only (0: all).
        """
        check_forward_kwargs(self, kwargs)
        outputs = self.ran(
            input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, initial_cell=initial_cell,
            cache=cache, use_cache=use_cache, token_type_ids=token_type_ids, return_dict=True, **kwargs,
        )
        hidden = outputs.last_hidden_state
        if labels is not None:
            check_labels(type(self).__name__, "labels", labels, (tuple(hidden.shape[:2]),), self.config.vocab_size)
            if logits_to_keep and logits_to_keep < hidden.shape[1]:
                raise ValueError(
                    f"{type(self).__name__}: `labels` need the logits of every position; pass `logits_to_keep=0` "
                    f"(got {logits_to_keep})."
                )
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        logits = self.lm_head(hidden)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=outputs.cache,
                                      hidden_states=outputs.hidden_states, attentions=outputs.attentions)


# Auto class -> model class, written into `config.auto_map` of every saved checkpoint (remote code)
RAN_AUTO_MAP = {
    "AutoModel": "modeling_ran.RANModel",
    "AutoModelForMaskedLM": "modeling_ran.RANForMaskedLM",
    "AutoModelForCausalLM": "modeling_ran.RANForCausalLM",
    "AutoModelForSequenceClassification": "modeling_ran.RANForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_ran.RANForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_ran.RANForQuestionAnswering",
}
