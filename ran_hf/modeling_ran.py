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
  every output independent of later tokens (see [`RANModel`]).

Fast path: all token projections and all windows' attention run batched over the windows; only the cell chain
(a few D x D mat-vecs per window) is sequential, and how it runs (an eager loop, a traced loop, compiled blocks, CUDA
graphs) is `cell_chain.py`'s. Where each token sits on the window grid (index arithmetic, no parameters) is worked
out in `window_layout.py`, the causal state and its cache are in `cache_ran.py`, and the argument checks in
`input_checks.py`.
"""

import contextlib
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from transformers import initialization as init
from transformers.activations import ACT2FN
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
from transformers.utils.deprecation import deprecate_kwarg

from .cache_ran import RANCache, RANLayerState
from .cell_chain import ChainWindows, run_cell_chain
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
from .window_layout import RANWindowLayout


logger = logging.get_logger(__name__)


# ----------------------------------------------------------------------------------------------------------------------
# Small blocks
# ----------------------------------------------------------------------------------------------------------------------


def _cat(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    """`torch.cat`, without a copy for a single tensor."""
    return torch.cat(tensors, dim) if len(tensors) > 1 else tensors[0]



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
    """Token embedding, norm and dropout, placed on the window grid. RAN has no absolute position embedding
    (positions are rotary, per window)."""

    def __init__(self, config: RANConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=None)
        self.norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                layout: RANWindowLayout) -> torch.Tensor:
        """(B, L) ids or (B, L, D) vectors -> (B, n, C, D) on the grid of `layout`; empty slots are zero."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        return layout.to_grid(self.dropout(self.norm(inputs_embeds)))


class RANEncoderEmbeddings(nn.Module):
    """BERT's embeddings on the window grid (`config.window_block="bert"`): `LayerNorm(word + position + type 0)`,
    with the absolute position of a token counted from the start of its window (0 .. C - 1), so every window is read
    as the encoder reads a text of its own."""

    def __init__(self, config: RANConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=None)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                layout: RANWindowLayout) -> torch.Tensor:
        """(B, L) ids or (B, L, D) vectors -> (B, n, C, D) on the grid of `layout` (empty slots are not zero: they are
        masked in every attention and dropped by `to_sequence`)."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        positions = layout.rotary_positions() - 1  # the cell takes no position; tokens 0 .. C - 1 in their window
        grid = layout.to_grid(inputs_embeds) + self.position_embeddings(positions)
        grid = grid + self.token_type_embeddings.weight[0]
        return self.dropout(self.norm(grid))


class WindowRows(NamedTuple):
    """A window block's projection of rows (`project`): the normed rows `z` (..., D) and their queries, keys and
    values (..., H, d); per chunk of windows (B, m, C, ...), the keys and values with a continued window's earlier
    slots in front (B, m, P + C, H, d)."""

    normed: torch.Tensor
    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor


def cell_in_front(
    cell: WindowRows, window_keys: torch.Tensor, window_values: torch.Tensor, window_key_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The keys and values of `[cell; window]` for a block's `cell_step`: the cell row's (B, 1, H, d) in front of the
    window's (B, K, H, d), and the key mask (B, 1, 1 + K) with the cell always visible (None when the window has
    none)."""
    keys = torch.cat([cell.keys, window_keys], dim=1)
    values = torch.cat([cell.values, window_values], dim=1)
    if window_key_mask is None:
        return keys, values, None
    return keys, values, torch.cat([window_key_mask.new_ones(window_key_mask.shape[0], 1), window_key_mask], 1)[:, None]


class RANWindowBlock(nn.Module):
    """The authors' window block (`config.window_block="ran"`): `PosMHA` of a window with the cell as its first
    row (paper eqs. 3-5; the authors' `encode-attn`), then the output `SN(norm(act(o) + GLU(z)))`, the GLU residual
    of the attention input `z` and the standard normalisation (eq. 6). The rows are normed first (the concat norm);
    q, k, v and the output projection all carry an activation (swish); rotary positions put the cell at 0 and a
    window's tokens at 1..W.

    A window block has a small interface, which the layer calls in this order:
    * `project(rows, positions)`: the normed rows and their queries, keys and values, for every token at once;
    * `cell_step(s, keys, values, key_mask)`: the cell row of one window, `[s; window]` attended, eqs. 3-6;
    * `forward(...)`: the token rows of all windows, with the cells' keys and values in front.
    The cell chain, memory review, pooling, the heads and the cache do not depend on which block runs.
    """

    is_causal = False  # masks are always explicit

    def __init__(self, config: RANConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.attention_head_size
        self.scaling = self.head_size**-0.5
        self.input_norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.qkv = nn.Linear(config.hidden_size, 3 * config.all_head_size)
        self.o = nn.Linear(config.all_head_size, config.hidden_size)
        self.glu = RANGLU(config.hidden_size)
        self.norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.act = ACT2FN[config.hidden_act]
        self.rotary = RANRotaryEmbedding(config) if config.use_rotary else None
        self.attention_dropout = config.attention_probs_dropout_prob
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.eps = config.layer_norm_eps

    def project(self, rows: torch.Tensor, positions: torch.Tensor | None = None) -> WindowRows:
        """Rows (..., D) -> their normed values and q, k, v (..., H, d) with the activation applied, rotated to
        `positions` (broadcast over the rows' leading axes; None: not rotated, as the cell at position 0)."""
        z = self.dropout(self.input_norm(rows))
        q, k, v = self.act(self.qkv(z)).unflatten(-1, (3, self.num_heads, self.head_size)).unbind(-3)
        if positions is not None and self.rotary is not None:
            cos, sin = self.rotary(positions, z.dtype)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return WindowRows(z, q, k, v)

    def cell_step(
        self, s: torch.Tensor, window_keys: torch.Tensor, window_values: torch.Tensor,
        window_key_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The cell row of `[s_{i-1}; window]` (eqs. 3-6): s (B, D) the incoming cell; window_keys, window_values
        (B, K, H, d) and window_key_mask (B, K) the window's tokens'. Returns `c_i` (B, D) and the cell row's key and
        value (B, H, d), which the window's tokens read."""
        cell = self.project(s[:, None])
        keys, values, mask = cell_in_front(cell, window_keys, window_values, window_key_mask)
        c = self(cell.normed, cell.queries, keys, values, mask)[0][:, 0]
        return c, cell.keys[:, 0], cell.values[:, 0]

    def forward(
        self, z: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
        mask: torch.Tensor | None, output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """z (..., Q, D) the normed rows whose queries are `query`, N = prod(z.shape[:-2]) attention rows; query
        (N, Q, H, d); key, value (N, K, H, d); mask bool (N, Q|1, K), True = attend, or None. Returns (..., Q, D) the
        output rows (eq. 6, dropout applied) and, with `output_attentions` (eager), the probabilities (N, H, Q, K)."""
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
        out = self.dropout(self.act(self.o(attended.reshape(*z.shape[:-1], -1))))
        return self.dropout(standard_normalize(self.norm(out + self.glu(z)), self.eps)), probs


class RANEncoderWindowBlock(nn.Module):
    """A BERT encoder layer as RAN's window block (`config.window_block="bert"`; BERT, MiniLM, bge: post-norm
    multi-head attention, then a GELU feed-forward, each with a residual and a LayerNorm). A window `[cell; tokens]`
    is read as the encoder reads a short text; the parameters map one to one onto a `BertLayer`'s
    (`convert_encoder.py`).

    The cell row attends over `[s_{i-1}; window]` like any row. The token rows read the cell through a gate `g_h =
    tanh(cell_gate_h)` per head, zero at initialisation: with `a` the cell's share of the joint softmax over `[cell;
    window]`, a token's weights are `g a` on the cell and `(1 - g a) softmax(window scores)` on the window's tokens,
    which interpolates between the encoder's own attention (`g = 0`) and RAN's joint attention over `[cell; window]`
    (`g = 1`). So a converted encoder starts as the encoder, run window by window, and learns how much of the cell its
    tokens read. `attn_implementation="eager"` computes these weights from one score matrix (`attend_eager`, the
    reference, also used for `output_attentions`); any other runs two fused attentions (`attend_fused`).
    """

    is_causal = False  # masks are always explicit

    def __init__(self, config: RANConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.attention_head_size
        self.scaling = self.head_size**-0.5
        self.query = nn.Linear(config.hidden_size, config.all_head_size)
        self.key = nn.Linear(config.hidden_size, config.all_head_size)
        self.value = nn.Linear(config.hidden_size, config.all_head_size)
        self.attention_output = nn.Linear(config.all_head_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.feed_forward_size)
        self.output = nn.Linear(config.feed_forward_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.cell_gate = nn.Parameter(torch.zeros(config.num_attention_heads))
        self.act = ACT2FN[config.hidden_act]
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def project(self, rows: torch.Tensor, positions: torch.Tensor | None = None) -> WindowRows:
        """Rows (..., D) -> the rows themselves (BERT's residual reads its input unnormed) and their q, k, v
        (..., H, d). `positions` is not read: the positions are in the embeddings."""
        q, k, v = (linear(rows).unflatten(-1, (self.num_heads, self.head_size))
                   for linear in (self.query, self.key, self.value))
        return WindowRows(rows, q, k, v)

    def cell_step(
        self, s: torch.Tensor, window_keys: torch.Tensor, window_values: torch.Tensor,
        window_key_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The cell row of `[s_{i-1}; window]`: s (B, D); window_keys, window_values (B, K, H, d); window_key_mask
        (B, K) or None. Returns `c_i` (B, D) and the cell row's key and value (B, H, d)."""
        cell = self.project(s[:, None])
        keys, values, mask = cell_in_front(cell, window_keys, window_values, window_key_mask)
        attended, _ = self.attend(cell.queries, keys, values, mask, cell_gate=None)
        return self.feed_forward(attended.flatten(-2), cell.normed)[:, 0], cell.keys[:, 0], cell.values[:, 0]

    def forward(
        self, z: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
        mask: torch.Tensor | None, output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The token rows: z (..., Q, D) the rows whose queries are `query` (N, Q, H, d), N = prod(z.shape[:-2]);
        key, value (N, 1 + K, H, d) with the cell's in front; mask bool (N, Q|1, 1 + K), True = attend, or None.
        Returns (..., Q, D) and, with `output_attentions`, the weights (N, H, Q, 1 + K)."""
        attended, probs = self.attend(query, key, value, mask, torch.tanh(self.cell_gate), output_attentions)
        return self.feed_forward(attended.reshape(*z.shape[:-1], -1), z), (probs if output_attentions else None)

    def attend(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
        cell_gate: torch.Tensor | None, output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of query (N, Q, H, d) over key, value (N, 1 + K, H, d), key 0 the cell; mask bool (N, Q|1, 1 + K)
        or None. `cell_gate` None: the plain softmax; (H,): the gated weights of the class docstring. Returns (N, Q,
        H, d) and, with `output_attentions` (or `attn_implementation="eager"`, the reference), the weights (N, H, Q,
        1 + K) from `attend_eager`; otherwise `attend_fused` (the same outputs through PyTorch's fused kernels)."""
        if output_attentions or self.config._attn_implementation == "eager":
            return self.attend_eager(query, key, value, mask, cell_gate)
        return self.attend_fused(query, key, value, mask, cell_gate), None

    def attend_eager(self, query, key, value, mask, cell_gate) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference: the weights `g a` on the cell and `(1 - g a) softmax(window scores)` on the tokens, from
        one score matrix. Same arguments and returns as `attend`."""
        scores = torch.einsum("nqhd,nkhd->nhqk", query, key) * self.scaling
        if mask is not None:
            scores = scores.masked_fill(~mask[:, None], torch.finfo(scores.dtype).min)
        scores = _upcast(scores)
        if cell_gate is None:
            probs = F.softmax(scores, dim=-1)
        else:
            cell_score, token_scores = scores[..., :1], scores[..., 1:]
            normaliser = torch.logsumexp(token_scores, dim=-1, keepdim=True)
            cell_weight = cell_gate.to(scores.dtype)[:, None, None] * torch.sigmoid(cell_score - normaliser)
            probs = torch.cat([cell_weight, torch.exp(token_scores - normaliser) * (1 - cell_weight)], dim=-1)
        probs = self.attention_dropout(probs.to(query.dtype))
        return torch.einsum("nhqk,nkhd->nqhd", probs, value), probs

    def attend_fused(self, query, key, value, mask, cell_gate) -> torch.Tensor:
        """The same weights as `attend_eager`, written as `window + g (joint - window)`: `joint` attends over `[cell;
        window]`, `window` over the window's tokens alone, each one `F.scaled_dot_product_attention` call (on CPU the
        fused kernel runs without attention dropout only; with it, both calls fall back to the unfused maths). A row
        with no real token key (a pad-only window, dropped later) reads its first slot instead of producing NaN."""
        query, key, value = (t.transpose(1, 2) for t in (query, key, value))
        mask = mask[:, None] if mask is not None else None
        dropout = self.attention_dropout.p if self.training else 0.0
        joint = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                               scale=self.scaling)
        if cell_gate is None:
            return joint.transpose(1, 2)
        window_mask = None
        if mask is not None:
            window_mask = mask[..., 1:]
            window_mask = window_mask | ~window_mask.any(-1, keepdim=True)
        window = F.scaled_dot_product_attention(query, key[:, :, 1:], value[:, :, 1:], attn_mask=window_mask,
                                                dropout_p=dropout, scale=self.scaling)
        gate = cell_gate.to(window.dtype)[:, None, None]
        return (window + gate * (joint - window)).transpose(1, 2)

    def feed_forward(self, attended: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """BERT's attention output and feed-forward: attended (..., A) the heads' outputs, rows (..., D) the layer's
        input rows (the first residual). Returns (..., D)."""
        hidden = self.attention_norm(self.dropout(self.attention_output(attended)) + rows)
        return self.output_norm(self.dropout(self.output(self.act(self.intermediate(hidden)))) + hidden)


# The window blocks `config.window_block` selects.
WINDOW_BLOCKS = {"ran": RANWindowBlock, "bert": RANEncoderWindowBlock}


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
        """tokens (B, N, D), the window block's token outputs (any layout); keys, values (B, K, D) of the cells to
        review, from `memory`; cell_mask (B, 1|N, K) bool, True where a token may read a cell. Returns (B, N, D)
        reviewed tokens, and the (B, N, K) probabilities when `output_attentions`."""
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


class RANGatedMemoryReview(nn.Module):
    """Memory review for the `"bert"` window block: the same reading of the cells as [`RANMemoryReview`] (eqs. 8-9,
    one head of width D), added to the token as a residual through a per-channel gate `tanh(gate)`, zero at
    initialisation: `out = y + tanh(gate) * o(softmax(q(y) k(c)^T / sqrt(D)) v(c))`. A converted encoder's token
    states pass through unchanged until training opens the gate. No activations (BERT's projections have none)."""

    def __init__(self, config: RANConfig):
        super().__init__()
        hidden_size = config.hidden_size
        self.q = nn.Linear(hidden_size, hidden_size)
        self.kv = nn.Linear(hidden_size, 2 * hidden_size)
        self.o = nn.Linear(hidden_size, hidden_size)
        self.gate = nn.Parameter(torch.zeros(hidden_size))
        self.attention_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)

    def memory(self, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cells (B, K, D) -> review keys and values, each (B, K, D)."""
        return self.kv(cells).chunk(2, dim=-1)

    def forward(
        self, tokens: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, cell_mask: torch.Tensor,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As [`RANMemoryReview.forward`]: tokens (B, N, D); keys, values (B, K, D); cell_mask (B, 1|N, K)."""
        query = self.q(tokens)
        scores = torch.matmul(query, keys.transpose(-1, -2)) / math.sqrt(query.shape[-1])
        scores = scores.masked_fill(~cell_mask, torch.finfo(scores.dtype).min)
        probs = F.softmax(_upcast(scores), dim=-1).to(query.dtype) * cell_mask.to(query.dtype)
        review = self.hidden_dropout(self.o(torch.matmul(self.attention_dropout(probs), values)))
        return tokens + torch.tanh(self.gate).to(review.dtype) * review, (probs if output_attentions else None)


# Per window block: its memory review, and the layer's output norm when memory review is off (the authors' block
# ends in SN, which the norm rescales; BERT's layer ends in a LayerNorm of its own).
MEMORY_REVIEWS = {"ran": RANMemoryReview, "bert": RANGatedMemoryReview}
OUTPUT_NORMS = {"ran": lambda config: RANNorm(config.hidden_size, config.layer_norm_eps),
                "bert": lambda config: nn.Identity()}
EMBEDDINGS = {"ran": RANEmbeddings, "bert": RANEncoderEmbeddings}


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

    The window block (`window_block`, chosen by `config.window_block`) computes the first three lines; the layer
    runs them in the order that lets every window but the cell chain run at once:
    1. `project_windows`: the block's projection of every token of every window;
    2. `run_cell_chain`: the cell chain, sequential over windows (`chain_window`, run by `cell_chain.py`);
    3. `attend_tokens`: the block's token rows of all windows at once, then memory review.
    On CPU, 1 and 3 run over chunks of about `window_layout.CPU_TOKEN_CHUNK` tokens (whole windows). The modes
    differ in the layout's masks, the window merge (bidirectional only) and the state commit (causal only).
    """

    def __init__(self, config: RANConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        hidden_size = config.hidden_size
        self.window_block = WINDOW_BLOCKS[config.window_block](config)
        self.cell_initializer = nn.Linear(hidden_size, hidden_size, bias=False)
        self.cell_initializer_norm = RANNorm(hidden_size, config.layer_norm_eps)
        self.cell_glu = RANGLU(hidden_size)
        self.cell_residual_norm = RANNorm(hidden_size, config.layer_norm_eps)
        if config.use_memory_review:
            self.memory_review = MEMORY_REVIEWS[config.window_block](config)
        else:
            self.output_norm = OUTPUT_NORMS[config.window_block](config)
        self.act = ACT2FN[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def initial_cell(self, cell: torch.Tensor | None, batch_size: int, like: torch.Tensor) -> torch.Tensor:
        """`s_0` per row: a given non-zero cell is used as it is; a zero or missing one goes through the cell
        initializer, `norm(act(c W_init))` (which is the norm's bias for a zero cell)."""
        zero = like.new_zeros(batch_size, self.config.hidden_size)
        initialized = self.dropout(self.cell_initializer_norm(self.act(self.cell_initializer(
            zero if cell is None else cell))))
        if cell is None:
            return initialized
        return torch.where((cell == 0).all(-1, keepdim=True), initialized, cell.to(initialized.dtype))

    def initial_state(self, cell: torch.Tensor | None, batch_size: int, like: torch.Tensor) -> RANLayerState:
        """The causal state before any token: `s_0` from the cell initializer, an empty window, history `[s_0]`."""
        s0, block = self.initial_cell(cell, batch_size, like), self.window_block
        return RANLayerState.start(s0, self.review_memory(s0[:, None]), self.config.window_size, block.num_heads,
                                   block.head_size)

    def review_memory(self, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cells (B, K, D) -> memory-review keys and values (B, K, D) each (width 0 without memory review)."""
        if not self.config.use_memory_review:
            return cells[..., :0], cells[..., :0]
        return self.memory_review.memory(cells)

    def next_cell(self, c: torch.Tensor, previous_c: torch.Tensor, has_previous: torch.Tensor) -> torch.Tensor:
        """eq. 7: `s_i = norm(c_i + GLU(c_{i-1}))`, or `c_i` itself after a row's first window."""
        if not self.config.use_cell_residual:
            return c
        residual = self.cell_residual_norm(c + self.cell_glu(previous_c))
        return torch.where(has_previous[:, None], residual, c)

    def chain_window(self, carry, window):
        """One window of the cell chain (the `step` of `cell_chain.py`): the cell row (eqs. 3-6, `cell_step`) and
        eq. 7, then the carry `(s, c)` advances on the rows that have the window."""
        s, previous_c = carry
        keys, values, key_mask, valid, has_previous, drop_passed = window
        c, k_cell, v_cell = self.window_block.cell_step(s, keys, values, key_mask)
        new_s = self.next_cell(c, previous_c, has_previous)
        if drop_passed is not None:  # the authors drop out the passed cell in every window but a row's last
            new_s = torch.where(drop_passed[:, None], self.dropout(new_s), new_s)
        if valid is None:
            return (new_s, c), (c, new_s, k_cell, v_cell)
        s, previous_c = torch.where(valid[:, None], new_s, s), torch.where(valid[:, None], c, previous_c)
        return (s, previous_c), (c, s, k_cell, v_cell)

    def forward(self, hidden_states: torch.Tensor, cell: torch.Tensor | None = None, state: RANLayerState | None = None,
                *, layout: RANWindowLayout, output_attentions: bool = False) -> RANLayerOutput:
        """hidden_states (B, n, C, D) on the window grid of `layout`; cell (B, D) incoming (bidirectional: the
        previous layer's last cell or the user's `initial_cell`; causal: the `initial_cell` of a fresh state) or
        None; state: causal mode, the state this input continues (None starts one). Returns [`RANLayerOutput`]."""
        if layout.causal and state is None:
            state = self.initial_state(cell, hidden_states.shape[0], hidden_states)
        windows = self.project_windows(hidden_states, layout, state)  # 1. eqs. 3-5 inputs, all tokens at once
        chain = self.run_cell_chain(windows, cell, state, layout)  # 2. eqs. 3-7 for the cell rows, window by window
        tokens, window_probs, review_probs = self.attend_tokens(  # 3. eqs. 3-6 for the tokens, then eqs. 8-9
            windows, chain, layout, state, output_attentions)
        last_cell = chain.last_cell
        if state is not None:
            state = state.advance(layout, chain, _cat([w.keys for w in windows], 1),
                                  _cat([w.values for w in windows], 1))
            last_cell = state.cell  # the cell the open window starts from
        return RANLayerOutput(tokens, last_cell, chain.cells, state, window_probs, review_probs)

    def project_windows(
        self, hidden_states: torch.Tensor, layout: RANWindowLayout, state: RANLayerState | None
    ) -> list[WindowRows]:
        """Step 1, per chunk of windows: the block's rows (B, m, C, ...) at the slots' window positions; a continued
        open window's earlier keys and values (from `state`) go in front of each window's, (B, m, P + C, H, d)."""
        chunks = layout.window_chunks()
        sizes = [chunk.stop - chunk.start for chunk in chunks]
        positions = layout.rotary_positions()
        positions = positions.split(sizes, 1) if positions.dim() > 1 else [positions] * len(chunks)
        # split, never slice inside loops: each slice's backward would zero-fill a full-length gradient
        pieces = hidden_states.split(sizes, dim=1) if len(sizes) > 1 else [hidden_states]
        rows = [self.window_block.project(piece, where) for piece, where in zip(pieces, positions)]
        if not layout.num_past:
            return rows
        past_keys, past_values = (t[:, None, :layout.num_past].to(hidden_states.dtype)
                                  for t in (state.window_keys, state.window_values))
        return [r._replace(keys=torch.cat([past_keys.expand(-1, r.keys.shape[1], -1, -1, -1), r.keys], 2),
                           values=torch.cat([past_values.expand(-1, r.values.shape[1], -1, -1, -1), r.values], 2))
                for r in rows]

    def run_cell_chain(
        self, windows: list[WindowRows], cell: torch.Tensor | None, state: RANLayerState | None,
        layout: RANWindowLayout,
    ) -> RANCellChain:
        """Step 2: the cell chain, sequential over windows and batched over rows, from `state` (causal) or from
        `initial_cell(cell)`; a row carries its cell only through its own windows. It runs in the weights' dtype
        with autocast off: under bf16 autocast a bf16 cell is rounded at every window, and the rounding compounds
        through eq. 7 and the layers (at base size on 2,048 tokens, the last hidden state's relative error against
        float64: 0.056 with a bf16 chain, 0.020 with a float32 one). The cell keys and values the tokens read take
        the tokens' dtype."""
        token_dtype, dtype = windows[0].keys.dtype, self.cell_initializer.weight.dtype
        with _autocast_disabled(windows[0].keys.device.type):
            carry, chain_windows = self.chain_inputs(windows, cell, state, layout, dtype)
            (s, _), outputs = run_cell_chain(type(self).chain_window, self, carry, chain_windows,
                                             self.config.chain_implementation, layout.static)
            if layout.last_window_unfinished:  # not run: only a later call reads its cell, and recomputes it
                open_window = (torch.zeros_like(s), s, *self.open_cell_key_value(s, state, layout, dtype))
                open_window = tuple(t.unsqueeze(1) for t in open_window)
                outputs = open_window if outputs is None else tuple(torch.cat(pair, 1) for pair in zip(outputs, open_window))
        cells, passed_cells, cell_keys, cell_values = outputs
        if layout.cell_mask is not None:
            cells = cells * layout.cell_mask[..., None].to(cells.dtype)
        review_memory = None if layout.no_window_finishes else self.review_memory(cells[:, :layout.review_entries])
        return RANCellChain(cells, passed_cells, cell_keys.to(token_dtype), cell_values.to(token_dtype), s,
                            review_memory)

    def chain_inputs(
        self, windows: list[WindowRows], cell: torch.Tensor | None, state: RANLayerState | None,
        layout: RANWindowLayout, dtype: torch.dtype,
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], ChainWindows]:
        """Where the chain starts, `(s_0, c_0)` (B, D) in `dtype`, from `state` or `initial_cell(cell)`, and its
        per-window inputs (`ChainWindows.from_layout`; training drops out a row's passed cells but its last)."""
        keys, values = [w.keys.to(dtype) for w in windows], [w.values.to(dtype) for w in windows]
        if state is not None:
            carry, had_previous = (state.cell.to(dtype), state.previous_cell.to(dtype)), state.has_previous
        else:
            s = self.initial_cell(cell, layout.window_mask.shape[0], keys[0])
            carry, had_previous = (s, torch.zeros_like(s)), s.new_zeros(s.shape[0], dtype=torch.bool)
        drop_passed = self.training and self.dropout.p > 0 and state is None
        return carry, ChainWindows.from_layout(keys, values, layout, had_previous, drop_passed)

    def open_cell_key_value(self, s: torch.Tensor, state: RANLayerState | None, layout: RANWindowLayout,
                            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, H, d) key and value of the open window's incoming cell `s` (B, D): from the state when this call only
        continues the window they were projected for (a decoding step inside a window, in eval mode, where the
        projection has no dropout to draw), else projected."""
        if layout.num_windows == 1 and state is not None and state.open_cell_key is not None and not self.training:
            return state.open_cell_key.to(dtype), state.open_cell_value.to(dtype)
        cell = self.window_block.project(s[:, None])
        return cell.keys[:, 0], cell.values[:, 0]

    def attend_tokens(
        self, windows: list[WindowRows], chain: RANCellChain, layout: RANWindowLayout,
        state: RANLayerState | None, output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Step 3, per chunk of windows: the block's token rows over `[cell; window]` for all its windows in one call
        (eqs. 3-6), then memory review of its tokens (eqs. 8-9) over all the row's cells (bidirectional) or over
        the history and the earlier windows (causal, `state`). Returns (B, n, C, D) tokens and the attentions."""
        review_memory = chain.review_memory
        if state is not None and self.config.use_memory_review:  # causal: the history, then this call's windows
            review_memory = state.history_and(review_memory, _linear_output_dtype(self.memory_review.kv.weight))
        batch_size, capacity = layout.window_mask.shape[0], layout.window_capacity
        outputs = []
        for rows, chunk in zip(windows, layout.window_chunks()):
            keys = torch.cat([chain.cell_keys[:, chunk, None], rows.keys], dim=2).flatten(0, 1)  # (B*m, 1+P+C, H, d)
            values = torch.cat([chain.cell_values[:, chunk, None], rows.values], dim=2).flatten(0, 1)
            y, window_probs = self.window_block(rows.normed, rows.queries.flatten(0, 1), keys, values,
                                                layout.attention_mask(chunk), output_attentions)
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
            pooled = masked_max(tokens, token_mask)
        else:
            pooled = masked_mean(tokens, token_mask)
        if self.mode == "token_mean":
            return pooled
        return self.cell_glu(self.dropout(self.act(self.cell_dense(cell)))) + self.pooling_dense(pooled)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, N, D) over the positions where mask (B, N) is True; 0 where a row has none."""
    weights = mask.to(x.dtype)[..., None]
    return (x * weights).sum(1) / weights.sum(1).clamp(min=1)


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max of x (B, N, D) over the positions where mask (B, N) is True; 0 where a row has none."""
    filled = x.masked_fill(~mask[..., None], torch.finfo(x.dtype).min).amax(1)
    return torch.where(mask.any(1, keepdim=True), filled, torch.zeros_like(filled))


# ----------------------------------------------------------------------------------------------------------------------
# Pretrained model and encoder
# ----------------------------------------------------------------------------------------------------------------------


# `past_key_values`, Transformers' older name of the cache, still works as `cache` (with a deprecation warning)
accepts_past_key_values = deprecate_kwarg("past_key_values", version="6.0.0", new_name="cache", raise_if_both_names=True)

# Checkpoints saved before the window block was a module of its own name its parameters `layers.N.concat_norm.*` and
# `layers.N.window_attention.*`; `from_pretrained` renames them (regular expressions, Transformers' `key_mapping`).
LEGACY_KEY_MAPPING = {r"\.concat_norm\.": ".window_block.input_norm.", r"\.window_attention\.": ".window_block."}


class RANPreTrainedModel(PreTrainedModel):
    config_class = RANConfig
    config: RANConfig
    base_model_prefix = "ran"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RANLayer", "RANEmbeddings", "RANEncoderEmbeddings"]
    _supports_sdpa = True
    _supports_flash_attn = False  # flash kernels take no per-key mask (see `RANWindowBlock.forward`)
    _supports_flex_attn = True
    # not used: `@capture_outputs` (hidden states live on the window grid, which a hook cannot map back to (B, L, D))
    # and `@auto_docstring` (each forward documents its own window-grid shapes). The task heads are bidirectional
    # and RANForCausalLM causal, whatever `config.is_decoder` says; a bare RANModel reads it (`RANModel.__init__`).
    is_causal: bool = False

    @classmethod
    def from_pretrained(cls, *args, key_mapping: dict[str, str] | None = None, **kwargs):
        """`PreTrainedModel.from_pretrained`, with the parameter names of checkpoints saved before the window block
        was a module of its own (`LEGACY_KEY_MAPPING`) renamed on load, before any `key_mapping` of the call."""
        return super().from_pretrained(*args, key_mapping={**LEGACY_KEY_MAPPING, **(key_mapping or {})}, **kwargs)

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
        embedding table, zero biases, norms at weight 1 and bias 0; the `"bert"` block's two gates at zero."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (RANNorm, nn.LayerNorm)):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, RANEncoderWindowBlock):  # the gates start closed: the encoder as it was
            init.zeros_(module.cell_gate)
        elif isinstance(module, RANGatedMemoryReview):
            init.zeros_(module.gate)
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



class RANModel(RANPreTrainedModel):
    """The bare RAN encoder: embeddings, `num_hidden_layers` RAN layers, and the cell transform pooler.

    The layers share one window split per row (`RANWindowLayout`). Bidirectional mode: layer `l + 1` starts from
    layer `l`'s last cell, as in the authors' code. Causal mode differs: tokens attend causally inside their window,
    the cell row reads its whole window (so context crosses windows), there is no `min_window_size` merge, memory
    review of a token in window i reads `[s_0, c_1 .. c_{i-1}]`, and every layer starts from its own initial cell
    (`initial_cell` seeds the first layer only). So the output at position t depends on tokens <= t only.
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
        self.embeddings = EMBEDDINGS[config.window_block](config)
        self.layers = nn.ModuleList([RANLayer(config, i) for i in range(config.num_hidden_layers)])
        self.pooler = RANPooler(config) if add_pooling_layer else None
        self.gradient_checkpointing = False
        self.post_init()
        config.mark_built()  # a later edit of a field the modules were built from raises (`RANConfig.BUILD_FIELDS`)

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
    @accepts_past_key_values
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
        """
        check_forward_kwargs(self, kwargs)
        check_export_path(self.is_causal)
        if attention_mask is not None and cache is not None and attention_mask.dim() == 2:
            length = (input_ids if input_ids is not None else inputs_embeds).shape[1]
            attention_mask = attention_mask[:, -length:]  # generate() passes the mask of the past and new tokens
        sequence_mask = check_inputs(self.config, self.embeddings.word_embeddings.weight.dtype, input_ids,
                                     attention_mask, inputs_embeds, initial_cell, token_type_ids, self.is_causal)
        use_cache = self.is_causal and (
            use_cache if use_cache is not None else (self.config.use_cache and not self.training))
        self._check_cache(cache, sequence_mask.shape[0])
        if cache is None and use_cache:
            cache = RANCache(self.config)
        layout = RANWindowLayout.from_mask(
            sequence_mask, self.config.window_size, self.config.min_window_size, causal=self.is_causal,
            offset=cache.open_window_length() if cache is not None else None,
            static=is_compiling() and not self.is_causal,
        )
        output = self._run_layers(layout, self.embeddings(input_ids, inputs_embeds, layout), initial_cell, cache,
                                  **kwargs)
        output.cache = cache if use_cache else None
        return output

    def _check_cache(self, cache, batch_size: int) -> None:
        if cache is None:
            return
        if not self.is_causal:
            raise ValueError("RANModel: `cache` needs the causal model (RANForCausalLM, or `config.is_decoder=True`).")
        if not isinstance(cache, RANCache):
            raise TypeError(
                f"RANModel: `cache` must be a RANCache (got {type(cache).__name__}); RAN keeps a recurrent "
                "state, not per-token keys and values. Pass the cache a previous call returned, or None."
            )
        if cache.states and cache.batch_size != batch_size:
            raise ValueError(f"RANModel: the cache holds {cache.batch_size} rows but the input has {batch_size}.")

    def _run_layers(
        self, layout: RANWindowLayout, hidden: torch.Tensor, initial_cell: torch.Tensor | None,
        cache: "RANCache | None", output_hidden_states: bool | None = None, output_attentions: bool | None = None,
        **kwargs,
    ) -> RANModelOutput:
        """The layers over `hidden` (B, n, C, D), the embeddings on the window grid of `layout` (updating `cache`),
        the cell pooling and the pooler."""
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
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
                cache_layer.update_state(state, layout.sequence_mask.shape[1])
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
            return masked_mean(cells, window_mask)
        if self.config.cell_pooling == "max":
            return masked_max(cells, window_mask)
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
    [`RANModel`]) whatever `config.is_decoder` says."""

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
    @accepts_past_key_values
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
