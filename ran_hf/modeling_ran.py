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
(a few D x D mat-vecs per window) is sequential.
"""

import contextlib
import contextvars
import copy
import difflib
import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    CausalLMOutputWithPast,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import ModelOutput, logging

from .configuration_ran import RANConfig


logger = logging.get_logger(__name__)


# ----------------------------------------------------------------------------------------------------------------------
# Small blocks
# ----------------------------------------------------------------------------------------------------------------------


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 -> float32 for norms and softmax; float32 and float64 stay as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def standard_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The authors' `standard_normalize`: `(x - mean(x)) / sqrt(mean(x**2) + eps)` over the last axis.

    The denominator is the uncentred second moment, not the variance (so this is not `nn.LayerNorm`). Computed in
    float32 (or the input's wider dtype) and returned in the input dtype.
    """
    x32 = _upcast(x)
    mean = x32.mean(-1, keepdim=True)
    second_moment = x32.square().mean(-1, keepdim=True)
    return ((x32 - mean) * torch.rsqrt(second_moment + eps)).to(x.dtype)


class RANNorm(nn.Module):
    """The authors' LayerNorm: `standard_normalize(x) * weight + bias` (uncentred second moment, eps 1e-7)."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.bias = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = _upcast(x)
        mean = x32.mean(-1, keepdim=True)
        second_moment = x32.square().mean(-1, keepdim=True)
        normalized = (x32 - mean) * torch.rsqrt(second_moment + self.eps)
        out = torch.addcmul(self.bias.to(x32.dtype), normalized, self.weight.to(x32.dtype))
        return out.to(x.dtype)


class RANGLU(nn.Module):
    """Gated linear unit `(x W_t + b_t) * sigmoid(x W_g + b_g)`, both halves in one `D -> 2D` projection."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.proj = nn.Linear(hidden_size, 2 * hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        transform, gate = self.proj(x).chunk(2, dim=-1)
        return transform * torch.sigmoid(gate)


class RANRotaryEmbedding(nn.Module):
    """Rotary positions inside a window (RoFormer). The cell sits at position 0, a window's tokens at 1..T.

    The authors rotate interleaved pairs `(x[2j], x[2j+1])`. This module rotates the half-split pairs
    `(x[j], x[j + d/2])` instead; the converter permutes the columns of the q and k projections inside every head
    to `[0, 2, 4, ..., 1, 3, 5, ...]`, which gives the same attention scores exactly.
    """

    def __init__(self, config: RANConfig):
        super().__init__()
        head_size = config.attention_head_size
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, head_size, 2, dtype=torch.float32) / head_size))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, num_positions: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of shape (num_positions, d) for positions 1..num_positions (the window's tokens)."""
        positions = torch.arange(1, num_positions + 1, device=device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq.to(device))
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """`(x1, x2) -> (-x2, x1)` on the two halves of the last axis."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the half-split pairs of `x` (..., T, heads, d) by the angles of positions 1..T (cos/sin: (T, d))."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def eager_attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax attention. query (N, H, Q, d), key/value (N, H, K, d), attention_mask bool (N, 1|H, Q|1, K),
    True = attend. Returns the output (N, H, Q, d) and the probabilities (N, H, Q, K)."""
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(query.shape[-1])
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    probs = F.softmax(_upcast(scores), dim=-1).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=training)
    return torch.matmul(probs, value), probs


def sdpa_attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, None]:
    """Same contract as `eager_attention_forward`, through `torch.nn.functional.scaled_dot_product_attention`."""
    output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout if training else 0.0
    )
    return output, None


ATTENTION_FUNCTIONS = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}


@contextlib.contextmanager
def sequential_threads(device: torch.device):
    """Run the cell chain on one CPU thread. Each chain step is a string of tiny ops (mat-vecs, a 1-query
    attention); OpenMP fork/join around each costs more than the op itself, and far more when the cores are shared
    with other processes (measured: 8k-token forward 5.1 s -> 2.5 s on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# Token-parallel work on CPU runs in chunks of about this many tokens: intermediates then stay below glibc's mmap
# threshold (32 MiB) and in cache, instead of being fresh, page-faulted allocations (measured: a 32k-token forward
# spent a third of its CPU time in the kernel zeroing pages).
CPU_TOKEN_CHUNK = 2048


def _window_chunks(num_windows: int, capacity: int, device: torch.device) -> list[slice]:
    """Slices of the window axis processed together: all windows on accelerators, about CPU_TOKEN_CHUNK tokens on CPU."""
    if device.type != "cpu":
        return [slice(0, num_windows)]
    step = max(1, CPU_TOKEN_CHUNK // max(capacity, 1))
    return [slice(start, min(start + step, num_windows)) for start in range(0, num_windows, step)]


# ----------------------------------------------------------------------------------------------------------------------
# Window layout: which token of which row sits in which window slot
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class RANWindowLayout:
    """How a batch is cut into windows. Every row is split by its own real length, the same way for every layer.

    The windows of all rows live on one grid of `num_windows` windows x `window_capacity` slots. Window `i` of a row
    of real length `n_tokens` covers its real tokens `[i*W, (i+1)*W)`; its last window takes the remainder, merged
    into the window before when shorter than `min_window_size` (so a slot index can reach `W + min_window_size - 2`).

    Attributes:
        token_mask: (B, num_windows, window_capacity) bool, True on slots that hold a real token.
        window_mask: (B, num_windows) bool, True on windows that hold at least one real token.
        lengths: (B,) number of real tokens per row.
        windows_per_row: (B,) number of real windows per row.
        gather_index: (B * num_windows * window_capacity,) flat index into the (B * L) input positions for each slot,
            or None when the grid is a plain reshape of the padded input.
        scatter_index: (B * L,) flat index into the grid for each input position (pads point at slot 0 and are
            zeroed by `sequence_mask`), or None as above.
        sequence_mask: (B, L) bool mask of real input positions.
    """

    token_mask: torch.Tensor
    window_mask: torch.Tensor
    lengths: torch.Tensor
    windows_per_row: torch.Tensor
    sequence_mask: torch.Tensor
    gather_index: torch.Tensor | None
    scatter_index: torch.Tensor | None
    num_windows: int
    window_capacity: int
    all_real: bool

    @classmethod
    def from_mask(cls, sequence_mask: torch.Tensor, window_size: int, min_window_size: int) -> "RANWindowLayout":
        batch_size, seq_len = sequence_mask.shape
        device = sequence_mask.device
        lengths = sequence_mask.sum(-1)
        windows_per_row = _windows_per_row(lengths, window_size, min_window_size)
        last_window_size = lengths - (windows_per_row - 1).clamp(min=0) * window_size
        num_windows = max(int(windows_per_row.max()), 1)
        window_capacity = max(int(last_window_size.max()), min(window_size, seq_len), 1)
        if bool(windows_per_row.max() > 1):
            window_capacity = max(window_capacity, window_size)

        window_index = torch.arange(num_windows, device=device)
        slot_index = torch.arange(window_capacity, device=device)
        # sizes of every window of every row: W for the windows before the last, the remainder for the last one
        window_sizes = torch.where(
            window_index[None, :] < (windows_per_row[:, None] - 1),
            torch.full_like(window_index[None, :], window_size),
            torch.where(window_index[None, :] == windows_per_row[:, None] - 1, last_window_size[:, None], 0),
        )
        token_mask = slot_index[None, None, :] < window_sizes[:, :, None]
        window_mask = window_sizes > 0

        all_real = bool(sequence_mask.all())
        right_padded = bool((sequence_mask == (torch.arange(seq_len, device=device)[None, :] < lengths[:, None])).all())
        plain_reshape = right_padded and window_capacity == min(window_size, seq_len) and (
            all_real or seq_len <= num_windows * window_capacity
        ) and bool((windows_per_row == torch.div(lengths + window_size - 1, window_size, rounding_mode="floor")).all())
        if plain_reshape:
            return cls(token_mask, window_mask, lengths, windows_per_row, sequence_mask, None, None, num_windows,
                       window_capacity, all_real)

        # position of each real token once the row's real tokens are packed to the left, in order
        packed_source = torch.argsort((~sequence_mask).to(torch.int8), dim=-1, stable=True)
        token_position = window_index[:, None] * window_size + slot_index[None, :]  # (n, C)
        source = torch.gather(packed_source, 1, token_position.clamp(max=seq_len - 1).reshape(1, -1).expand(batch_size, -1))
        source = torch.where(token_mask.reshape(batch_size, -1), source, 0)
        row_offset = torch.arange(batch_size, device=device)[:, None] * seq_len
        gather_index = (source + row_offset).reshape(-1)

        grid_slot = torch.arange(num_windows * window_capacity, device=device).reshape(1, -1).expand(batch_size, -1)
        scatter = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)
        valid = token_mask.reshape(batch_size, -1)
        grid_offset = torch.arange(batch_size, device=device)[:, None] * (num_windows * window_capacity)
        scatter[valid.nonzero(as_tuple=True)[0], source[valid]] = (grid_slot + grid_offset)[valid]
        return cls(token_mask, window_mask, lengths, windows_per_row, sequence_mask, gather_index,
                   scatter.reshape(-1), num_windows, window_capacity, all_real)

    def to_grid(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, ...) sequence -> (B, num_windows, window_capacity, ...) grid; empty slots are zero."""
        batch_size, seq_len = x.shape[:2]
        if self.gather_index is None:
            pad = self.num_windows * self.window_capacity - seq_len
            if pad:
                x = F.pad(x, (0, 0) * (x.dim() - 2) + (0, pad))
            grid = x.reshape(batch_size, self.num_windows, self.window_capacity, *x.shape[2:])
        else:
            grid = x.reshape(batch_size * seq_len, *x.shape[2:])[self.gather_index]
            grid = grid.reshape(batch_size, self.num_windows, self.window_capacity, *x.shape[2:])
        if not self.all_real or self.gather_index is not None:
            grid = grid * self.token_mask.reshape(*self.token_mask.shape, *([1] * (x.dim() - 2))).to(grid.dtype)
        return grid

    def to_sequence(self, grid: torch.Tensor) -> torch.Tensor:
        """(B, num_windows, window_capacity, ...) grid -> (B, L, ...) sequence; pad positions are zero."""
        batch_size, seq_len = self.sequence_mask.shape
        feature_shape = grid.shape[3:]
        if self.gather_index is None:
            x = grid.reshape(batch_size, -1, *feature_shape)[:, :seq_len]
        else:
            x = grid.reshape(-1, *feature_shape)[self.scatter_index].reshape(batch_size, seq_len, *feature_shape)
        if not self.all_real:
            x = x * self.sequence_mask.reshape(batch_size, seq_len, *([1] * len(feature_shape))).to(x.dtype)
        return x


def _windows_per_row(lengths: torch.Tensor, window_size: int, min_window_size: int) -> torch.Tensor:
    """Number of windows of a row of `lengths` real tokens (authors' split, SPEC section 3): ceil(L / W), minus one
    when L > W and the remainder is shorter than `min_window_size` (it is merged into the window before)."""
    count = torch.div(lengths + window_size - 1, window_size, rounding_mode="floor")
    remainder = lengths - (count - 1).clamp(min=0) * window_size
    merge = (count > 1) & (remainder < min_window_size)
    return count - merge.long()


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
    """`PosMHA` of a window with the cell as its first row (paper eqs. 3-5; the authors' `encode-attn`).

    q, k, v and the output projection all carry an activation (swish). The output is `norm(o + GLU(z))`, a GLU
    residual of the attention input `z`.
    """

    def __init__(self, config: RANConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.attention_head_size
        self.all_head_size = config.all_head_size
        self.qkv = nn.Linear(config.hidden_size, 3 * self.all_head_size)
        self.o = nn.Linear(self.all_head_size, config.hidden_size)
        self.glu = RANGLU(config.hidden_size)
        self.norm = RANNorm(config.hidden_size, config.layer_norm_eps)
        self.act = ACT2FN[config.hidden_act]
        self.attention_dropout = config.attention_probs_dropout_prob
        self.hidden_dropout = nn.Dropout(config.hidden_dropout_prob)

    def project(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(..., D) -> q, k, v, each (..., H, d), activation applied, not rotated."""
        qkv = self.act(self.qkv(z)).unflatten(-1, (3, self.num_heads, self.head_size))
        return qkv.unbind(-3)

    def finish(self, attended: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Output projection, GLU residual of the input and norm: (..., H*d), (..., D) -> (..., D)."""
        out = self.hidden_dropout(self.act(self.o(attended)))
        return self.norm(out + self.glu(z))


class RANMemoryReview(nn.Module):
    """Memory review (paper section 3.3, the authors' `output-attn`): every token attends to the window cells.

    One head of width D, scale 1/sqrt(D), activations on q, k, v and o, and a GLU residual of the *projected* query.
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

    def forward(
        self, tokens: torch.Tensor, cells: torch.Tensor, cell_mask: torch.Tensor, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """
        Args:
            tokens: (B, N, D) token outputs of the window attention (N tokens, any layout).
            cells: (B, K, D) the cells to review.
            cell_mask: (B, K) or (B, N, K) bool, True where a token may read a cell.
        Returns:
            (B, N, D) reviewed tokens, and the (B, N, K) probabilities when `output_attentions`.
        """
        query = self.act(self.q(tokens))
        key, value = self.act(self.kv(cells)).chunk(2, dim=-1)
        return self.attend(query, key, value, cell_mask, output_attentions)

    def attend(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cell_mask: torch.Tensor,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The review from projected query (B, N, D) and cell keys/values (B, K, D) (activations applied)."""
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(query.shape[-1])
        if cell_mask.dim() == 2:
            cell_mask = cell_mask[:, None, :]
        scores = scores.masked_fill(~cell_mask, torch.finfo(scores.dtype).min)
        # a row with no cell to read (an all-pad row) gets a zero review instead of a uniform average
        probs = F.softmax(_upcast(scores), dim=-1).to(query.dtype) * cell_mask.to(query.dtype)
        probs = self.attention_dropout(probs)
        out = self.hidden_dropout(self.act(self.o(torch.matmul(probs, value))))
        return self.norm(out + self.glu(query)), (probs if output_attentions else None)


@dataclass
class RANLayerState:
    """Recurrent state of one causal RAN layer between calls (DESIGN section 5); all tensors are per row.

    Attributes:
        cell: (B, D) incoming cell `s` of the current (unfinished) window.
        cell_key, cell_value: (B, H, d) the cell row's key and value, which every token of the window reads.
        previous_cell: (B, D) pre-residual cell `c` of the last finished window (used by the residual, eq. 7).
        has_previous: (B,) bool, whether a window has finished (no residual after the first window).
        window_keys, window_values: (B, W, H, d) rotated keys and values of the current window's tokens.
        window_length: (B,) tokens in the current window (< W).
        review_keys, review_values: (B, K, D) memory-review keys and values of `[s_0, c_1, .., c_m]`.
        review_length: (B,) valid entries of the review history (1 + finished windows).
    """

    cell: torch.Tensor
    cell_key: torch.Tensor
    cell_value: torch.Tensor
    previous_cell: torch.Tensor
    has_previous: torch.Tensor
    window_keys: torch.Tensor
    window_values: torch.Tensor
    window_length: torch.Tensor
    review_keys: torch.Tensor
    review_values: torch.Tensor
    review_length: torch.Tensor

    def map_batch(self, fn) -> "RANLayerState":
        """A new state with `fn` applied to every tensor along the batch axis (beam reorder, repeat, select)."""
        return RANLayerState(**{name: fn(getattr(self, name)) for name in self.__dataclass_fields__})

    def num_bytes(self) -> int:
        return sum(getattr(self, name).numel() * getattr(self, name).element_size() for name in self.__dataclass_fields__)


@dataclass
class RANLayerOutput(ModelOutput):
    hidden_states: torch.Tensor
    last_cell: torch.Tensor | None = None
    cells: torch.Tensor | None = None
    window_attentions: torch.Tensor | None = None
    memory_review_attentions: torch.Tensor | None = None
    state: RANLayerState | None = None


class RANLayer(GradientCheckpointingLayer):
    """One RAN layer over a window grid (paper Fig. 2). Per window i, with `s_{i-1}` the incoming cell:

        z            = norm([s_{i-1}; X_i])                               concat norm, per row
        z'           = PosMHA(z)                                          eqs. 3-5
        c_i, Y_i     = SN(z'[0]), SN(z'[1:])                              eq. 6 (standard normalisation)
        s_i          = c_1 if i == 1 else norm(c_i + GLU(c_{i-1}))        eq. 7, residual of the pre-residual cell
        out          = MemoryReview(Y, [c_1 .. c_n])                      eqs. 8-9

    Fast path: the row norm and q/k/v of every token of every window are computed at once; the sequential cell
    chain needs only the cell row's q/k/v and its attention over the window's precomputed keys; then all windows'
    token attention runs as one batched attention call with the cell key/value prepended. On CPU the token-parallel
    stages run over chunks of about `CPU_TOKEN_CHUNK` tokens (whole windows), which keeps them in cache.
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
        self.eps = config.layer_norm_eps
        self.rotary = RANRotaryEmbedding(config) if config.use_rotary else None

    def initial_cell(self, cell: torch.Tensor | None, batch_size: int, like: torch.Tensor) -> torch.Tensor:
        """`s_0` per row: a given non-zero cell is used as it is; a zero or missing one goes through the cell
        initializer, `norm(act(c W_init))` (which is the norm's bias for a zero cell). The authors decide this for
        the whole batch at once; here it is decided per row."""
        zero = like.new_zeros(batch_size, self.config.hidden_size)
        initialized = self.dropout(self.cell_initializer_norm(self.act(self.cell_initializer(zero if cell is None else cell))))
        if cell is None:
            return initialized
        is_zero = (cell == 0).all(-1, keepdim=True)
        return torch.where(is_zero, initialized, cell.to(initialized.dtype))

    def forward(
        self,
        hidden_states: torch.Tensor,
        cell: torch.Tensor | None,
        layout: RANWindowLayout,
        state: RANLayerState | None = None,
        output_attentions: bool = False,
    ) -> RANLayerOutput:
        """Bidirectional layer (`config.is_decoder=False`) or causal layer continuing `state` (`is_decoder=True`)."""
        if self.config.is_decoder:
            if state is None:
                state = self.initial_state(cell, hidden_states.shape[0], hidden_states)
            return self._forward_causal(hidden_states, layout, state, output_attentions)
        return self._forward_bidirectional(hidden_states, cell, layout, output_attentions)

    def _forward_bidirectional(
        self,
        hidden_states: torch.Tensor,
        cell: torch.Tensor | None,
        layout: RANWindowLayout,
        output_attentions: bool = False,
    ) -> RANLayerOutput:
        """
        Args:
            hidden_states: (B, n, C, D) tokens on the window grid of `layout`.
            cell: (B, D) incoming cell (the previous layer's last cell, or the user's `initial_cell`), or None.
        Returns:
            `RANLayerOutput` with hidden_states (B, n, C, D), last_cell (B, D), cells (B, n, D) (zero on pad
            windows), and with `output_attentions` the window attentions (B, n, H, C, 1+C) (key 0 is the cell) and
            the memory review attentions (B, n*C, n).
        """
        batch_size, num_windows, capacity, _ = hidden_states.shape
        attention = self.window_attention
        chunks = _window_chunks(num_windows, capacity, hidden_states.device)

        # 1. every token at once (in chunks of windows on CPU): norm, q/k/v, rotary at positions 1..C
        cos_sin = self.rotary(capacity, hidden_states.device, hidden_states.dtype) if self.rotary is not None else None
        # split, not slicing: each slice's backward would zero-fill a full-length gradient (quadratic in length)
        pieces = hidden_states.split([chunk.stop - chunk.start for chunk in chunks], dim=1)
        projected = [self._project_tokens(piece, cos_sin) for piece in pieces]

        # 2. the cell chain: sequential over windows, batched over rows
        s = self.initial_cell(cell, batch_size, hidden_states)
        # unbind, not slicing: one backward node per chunk for all its windows
        keys_by_window = [k for _, _, k_tokens, _ in projected for k in k_tokens.unbind(1)]
        values_by_window = [v for _, _, _, v_tokens in projected for v in v_tokens.unbind(1)]
        masks_by_window = layout.token_mask.unbind(1)
        cell_keys, cell_values, history = [], [], []
        previous_c = None
        last_window = layout.windows_per_row - 1
        with sequential_threads(hidden_states.device):
            for i in range(num_windows):
                z_cell = self.dropout(self.concat_norm(s))
                q_cell, k_cell, v_cell = attention.project(z_cell)  # (B, H, d); position 0: no rotation
                cell_keys.append(k_cell)
                cell_values.append(v_cell)
                c = self._cell_row(attention, z_cell, q_cell, k_cell, v_cell, keys_by_window[i],
                                   values_by_window[i], masks_by_window[i])
                if i == 0 or not self.config.use_cell_residual:
                    new_s = c
                else:
                    new_s = self.cell_residual_norm(c + self.cell_glu(previous_c))  # eq. 7
                    if self.training and self.dropout.p > 0:
                        # the authors drop out the new cell in every window but the last
                        new_s = torch.where((last_window > i)[:, None], self.dropout(new_s), new_s)
                if layout.all_real:
                    s, previous_c = new_s, c
                else:
                    valid = layout.window_mask[:, i, None]
                    s = torch.where(valid, new_s, s)
                    previous_c = c if previous_c is None else torch.where(valid, c, previous_c)
                history.append(c)
        cells = torch.stack(history, dim=1)  # (B, n, D), pre-residual cells c_i
        if not layout.all_real:
            cells = cells * layout.window_mask[..., None].to(cells.dtype)
        cell_keys, cell_values = torch.stack(cell_keys, 1), torch.stack(cell_values, 1)  # (B, n, H, d)

        # 3.-4. per chunk of windows: token attention over [cell; window] for all its windows in one call, then
        # memory review of its tokens over the whole history
        review_key_value = None
        if self.config.use_memory_review:
            review_key_value = self._review_key_value(cells)
        has_padding = not bool(layout.token_mask.all())
        outputs = [
            self._attend_tokens(projected[j], chunk, cell_keys, cell_values, layout, review_key_value, has_padding,
                                output_attentions)
            for j, chunk in enumerate(chunks)
        ]
        out = torch.cat([o[0] for o in outputs], dim=1) if len(outputs) > 1 else outputs[0][0]
        window_probs = review_probs = None
        if output_attentions:
            window_probs = torch.cat([o[1] for o in outputs], dim=1)
            if self.config.use_memory_review:
                review_probs = torch.cat([o[2] for o in outputs], dim=1)
        return RANLayerOutput(out, s, cells, window_probs, review_probs)

    def _project_tokens(self, hidden_states: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor] | None):
        """(B, n, C, D) tokens -> z (normed input, B, n, C, D) and q, k, v (B, n, C, H, d), rotated at 1..C."""
        z_tokens = self.dropout(self.concat_norm(hidden_states))
        q_tokens, k_tokens, v_tokens = self.window_attention.project(z_tokens)
        if cos_sin is not None:
            q_tokens = apply_rotary(q_tokens, *cos_sin)
            k_tokens = apply_rotary(k_tokens, *cos_sin)
        return z_tokens, q_tokens, k_tokens, v_tokens

    def _attend_tokens(self, projected, chunk: slice, cell_keys, cell_values, layout: RANWindowLayout,
                       review_key_value, has_padding: bool, output_attentions: bool):
        """Token rows of the windows in `chunk` (eqs. 3-6) and their memory review (eqs. 8-9).

        Args:
            projected: `_project_tokens` of those windows; cell_keys/values: (B, n, H, d) of all windows.
            review_key_value: memory-review keys and values (B, n, D) of all cells, or None without review.
        Returns:
            out (B, m, C, D) for the m windows of the chunk; window probabilities (B, m, H, C, 1+C) and review
            probabilities (B, m*C, n) when `output_attentions`.
        """
        attention = self.window_attention
        z_tokens, q_tokens, k_tokens, v_tokens = projected
        batch_size, num_windows, capacity = q_tokens.shape[:3]
        keys = torch.cat([cell_keys[:, chunk, None], k_tokens], dim=2)  # (B, m, 1+C, H, d)
        values = torch.cat([cell_values[:, chunk, None], v_tokens], dim=2)
        query = q_tokens.transpose(2, 3).flatten(0, 1)  # (B*m, H, C, d)
        keys = keys.transpose(2, 3).flatten(0, 1)
        values = values.transpose(2, 3).flatten(0, 1)
        key_mask = None
        if has_padding:
            token_mask = layout.token_mask[:, chunk]
            cell_key = token_mask.new_ones(batch_size, num_windows, 1)
            key_mask = torch.cat([cell_key, token_mask], dim=2).reshape(batch_size * num_windows, 1, 1, -1)
        implementation = "eager" if output_attentions else self.config._attn_implementation
        attention_forward = ATTENTION_FUNCTIONS.get(implementation, sdpa_attention_forward)
        attended, window_probs = attention_forward(
            query, keys, values, key_mask, dropout=attention.attention_dropout, training=self.training
        )
        attended = attended.transpose(1, 2).reshape(batch_size, num_windows, capacity, -1)
        y_tokens = self.dropout(standard_normalize(attention.finish(attended, z_tokens), self.eps))  # eq. 6
        if window_probs is not None:
            window_probs = window_probs.reshape(batch_size, num_windows, -1, capacity, capacity + 1)
        if review_key_value is None:
            return self.output_norm(y_tokens), window_probs, None
        review = self.memory_review
        query = review.act(review.q(y_tokens.reshape(batch_size, num_windows * capacity, -1)))
        out, review_probs = review.attend(query, *review_key_value, layout.window_mask, output_attentions)
        return out.reshape(batch_size, num_windows, capacity, -1), window_probs, review_probs

    # ------------------------------------------------------------------------------------------------------------------
    # causal mode (DESIGN sections 4-5)
    # ------------------------------------------------------------------------------------------------------------------

    def initial_state(self, cell: torch.Tensor | None, batch_size: int, like: torch.Tensor) -> RANLayerState:
        """The state before any token: `s_0` from the cell initializer, an empty window, history `[s_0]`."""
        config = self.config
        attention = self.window_attention
        s0 = self.initial_cell(cell, batch_size, like)
        _, cell_key, cell_value = attention.project(self.concat_norm(s0))
        review_keys, review_values = self._review_key_value(s0[:, None])
        window = s0.new_zeros(batch_size, config.window_size, attention.num_heads, attention.head_size)
        count = torch.zeros(batch_size, dtype=torch.long, device=s0.device)
        return RANLayerState(
            cell=s0, cell_key=cell_key, cell_value=cell_value, previous_cell=torch.zeros_like(s0),
            has_previous=count.bool(), window_keys=window, window_values=window.clone(), window_length=count,
            review_keys=review_keys, review_values=review_values, review_length=count + 1,
        )

    def _review_key_value(self, cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.config.use_memory_review:
            empty = cells[..., :0]
            return empty, empty
        review = self.memory_review
        return review.act(review.kv(cells)).chunk(2, dim=-1)

    def _next_cell(self, c: torch.Tensor, previous_c: torch.Tensor, has_previous: torch.Tensor) -> torch.Tensor:
        """eq. 7: `s_i = norm(c_i + GLU(c_{i-1}))`, or `c_i` itself after the first window (per row)."""
        if not self.config.use_cell_residual:
            return c
        residual = self.cell_residual_norm(c + self.cell_glu(previous_c))
        return torch.where(has_previous[:, None], residual, c)

    def _forward_causal(
        self, hidden_states: torch.Tensor, layout: RANWindowLayout, state: RANLayerState, output_attentions: bool
    ) -> RANLayerOutput:
        """A chunk of tokens continuing `state`.

        The grid holds each row's current window from its start: the first `state.window_length` slots of window 0
        are tokens seen before (their hidden states here are placeholders; their keys and values come from the
        state), then the chunk's tokens. Tokens attend causally inside their window (the cell key always visible);
        the cell row reads its whole window; memory review of a token in window i reads `[s_0, c_1 .. c_{i-1}]`.
        """
        batch_size, num_windows, capacity, _ = hidden_states.shape
        config = self.config
        attention = self.window_attention
        num_heads, head_size, window_size = attention.num_heads, attention.head_size, config.window_size
        device = hidden_states.device

        z_tokens = self.dropout(self.concat_norm(hidden_states))
        q_tokens, k_tokens, v_tokens = attention.project(z_tokens)
        if self.rotary is not None:
            cos, sin = self.rotary(capacity, device, q_tokens.dtype)
            q_tokens = apply_rotary(q_tokens, cos, sin)
            k_tokens = apply_rotary(k_tokens, cos, sin)
        if bool((state.window_length > 0).any()):
            seen = (torch.arange(capacity, device=device)[None, :] < state.window_length[:, None])[..., None, None]
            first_keys = torch.where(seen, state.window_keys[:, :capacity].to(k_tokens.dtype), k_tokens[:, 0])
            first_values = torch.where(seen, state.window_values[:, :capacity].to(v_tokens.dtype), v_tokens[:, 0])
            k_tokens = torch.cat([first_keys[:, None], k_tokens[:, 1:]], dim=1)
            v_tokens = torch.cat([first_values[:, None], v_tokens[:, 1:]], dim=1)

        # the cell chain; a window is committed to the state only once it is full
        window_fill = layout.token_mask.sum(-1)  # (B, n)
        s, previous_c, has_previous = state.cell, state.previous_cell, state.has_previous
        committed_s, committed_c, committed_has_previous = s, previous_c, has_previous
        keys_by_window, values_by_window = k_tokens.unbind(1), v_tokens.unbind(1)
        masks_by_window = layout.token_mask.unbind(1)
        cell_keys, cell_values, history = [], [], []
        with sequential_threads(device):
            for i in range(num_windows):
                z_cell = self.dropout(self.concat_norm(s))
                q_cell, k_cell, v_cell = attention.project(z_cell)
                cell_keys.append(k_cell)
                cell_values.append(v_cell)
                c = self._cell_row(attention, z_cell, q_cell, k_cell, v_cell, keys_by_window[i],
                                   values_by_window[i], masks_by_window[i])
                new_s = self._next_cell(c, previous_c, has_previous)
                valid = layout.window_mask[:, i, None]
                s = torch.where(valid, new_s, s)
                previous_c = torch.where(valid, c, previous_c)
                has_previous = has_previous | layout.window_mask[:, i]
                full = (window_fill[:, i] == window_size)[:, None]
                committed_s = torch.where(full, s, committed_s)
                committed_c = torch.where(full, c, committed_c)
                committed_has_previous = committed_has_previous | full[:, 0]
                history.append(c)
        cells = torch.stack(history, dim=1) * layout.window_mask[..., None].to(hidden_states.dtype)

        # token attention: causal inside the window, the cell key (index 0) always visible
        keys = torch.cat([torch.stack(cell_keys, 1)[:, :, None], k_tokens], dim=2).transpose(2, 3).flatten(0, 1)
        values = torch.cat([torch.stack(cell_values, 1)[:, :, None], v_tokens], dim=2).transpose(2, 3).flatten(0, 1)
        query = q_tokens.transpose(2, 3).flatten(0, 1)
        slots = torch.arange(capacity, device=device)
        causal_mask = torch.cat([slots.new_ones(capacity, 1).bool(), slots[None, :] <= slots[:, None]], dim=1)
        implementation = "eager" if output_attentions else config._attn_implementation
        attention_forward = ATTENTION_FUNCTIONS.get(implementation, sdpa_attention_forward)
        attended, window_probs = attention_forward(
            query, keys, values, causal_mask[None, None], dropout=attention.attention_dropout, training=self.training
        )
        attended = attended.transpose(1, 2).reshape(batch_size, num_windows, capacity, num_heads * head_size)
        y_tokens = self.dropout(standard_normalize(attention.finish(attended, z_tokens), self.eps))

        # memory review over the state's history and the cells of this chunk's earlier windows
        new_review_keys, new_review_values = self._review_key_value(cells)
        review_probs = None
        if config.use_memory_review:
            history_size = state.review_keys.shape[1]
            old = torch.arange(history_size, device=device)[None, :] < state.review_length[:, None]  # (B, K0)
            window_of_slot = torch.arange(num_windows, device=device).repeat_interleave(capacity)  # (n*C,)
            new = torch.arange(num_windows, device=device)[None, :] < window_of_slot[:, None]  # (n*C, n)
            cell_mask = torch.cat([old[:, None, :].expand(-1, num_windows * capacity, -1),
                                   new[None].expand(batch_size, -1, -1)], dim=-1)
            review = self.memory_review
            query = review.act(review.q(y_tokens.reshape(batch_size, num_windows * capacity, -1)))
            out, review_probs = review.attend(
                query, torch.cat([state.review_keys.to(query.dtype), new_review_keys], 1),
                torch.cat([state.review_values.to(query.dtype), new_review_values], 1), cell_mask, output_attentions)
            out = out.reshape(batch_size, num_windows, capacity, -1)
        else:
            out = self.output_norm(y_tokens)

        new_state = self._update_state(state, layout, committed_s, committed_c, committed_has_previous,
                                       k_tokens, v_tokens, new_review_keys, new_review_values)
        if window_probs is not None:
            window_probs = window_probs.reshape(batch_size, num_windows, num_heads, capacity, capacity + 1)
        return RANLayerOutput(out, s, cells, window_probs, review_probs, new_state)

    def _update_state(self, state, layout, cell, previous_cell, has_previous, k_tokens, v_tokens, review_keys,
                      review_values) -> RANLayerState:
        """Commit the full windows of a chunk: new cell, review history, and the unfinished window's keys."""
        window_size = self.config.window_size
        batch_size, num_windows, capacity = k_tokens.shape[:3]
        device = k_tokens.device
        window_fill = layout.token_mask.sum(-1)
        finished = (window_fill == window_size).sum(-1)  # (B,) full windows in this chunk (always a prefix)
        open_window = finished.clamp(max=num_windows - 1)
        rows = torch.arange(batch_size, device=device)
        window_length = torch.where(finished < num_windows, window_fill[rows, open_window], 0)
        window_length = torch.where(layout.window_mask.any(-1), window_length, state.window_length)
        pad = window_size - capacity
        window_keys = F.pad(k_tokens[rows, open_window], (0, 0, 0, 0, 0, pad)) if pad else k_tokens[rows, open_window]
        window_values = (
            F.pad(v_tokens[rows, open_window], (0, 0, 0, 0, 0, pad)) if pad else v_tokens[rows, open_window]
        )
        _, cell_key, cell_value = self.window_attention.project(self.concat_norm(cell))

        # review history: row b keeps its old entries [0, old_len) and appends its `finished` new cells
        history_size = state.review_keys.shape[1]
        review_length = state.review_length + finished
        width = int(review_length.max())
        position = torch.arange(width, device=device)[None, :]
        source = torch.where(position < state.review_length[:, None], position,
                             history_size + position - state.review_length[:, None])
        source = source.clamp(max=history_size + num_windows - 1)
        all_keys = torch.cat([state.review_keys.to(review_keys.dtype), review_keys], 1)
        all_values = torch.cat([state.review_values.to(review_values.dtype), review_values], 1)
        gather = source[..., None].expand(-1, -1, all_keys.shape[-1])
        return RANLayerState(
            cell=cell, cell_key=cell_key, cell_value=cell_value, previous_cell=previous_cell,
            has_previous=has_previous, window_keys=window_keys, window_values=window_values,
            window_length=window_length, review_keys=torch.gather(all_keys, 1, gather),
            review_values=torch.gather(all_values, 1, gather), review_length=review_length,
        )

    def step(self, hidden: torch.Tensor, state: RANLayerState) -> tuple[torch.Tensor, RANLayerState]:
        """One new token per row (decoding): hidden (B, D) -> output (B, D) and the next state.
        Costs `O(W*A + n*D + D^2)`: the token reads the cell and its window's cached keys; a row whose window fills
        runs its cell row, pushes the cell to the review history and starts an empty window."""
        config = self.config
        attention = self.window_attention
        window_size = config.window_size
        batch_size = hidden.shape[0]
        device = hidden.device
        rows = torch.arange(batch_size, device=device)
        slot = state.window_length  # the new token's slot; rotary position slot + 1

        z = self.concat_norm(hidden)
        q, k, v = attention.project(z)  # (B, H, d)
        if self.rotary is not None:
            angles = (slot + 1).float()[:, None] * self.rotary.inv_freq.to(device)[None, :]
            angles = torch.cat([angles, angles], dim=-1)
            cos, sin = angles.cos().to(q.dtype)[:, None], angles.sin().to(q.dtype)[:, None]  # (B, 1, d)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        window_keys = state.window_keys.to(k.dtype).index_put((rows, slot), k)
        window_values = state.window_values.to(v.dtype).index_put((rows, slot), v)
        window_mask = torch.arange(window_size, device=device)[None, :] <= slot[:, None]  # (B, W)

        keys = torch.cat([state.cell_key[:, None], window_keys], 1).transpose(1, 2)  # (B, H, 1+W, d)
        values = torch.cat([state.cell_value[:, None], window_values], 1).transpose(1, 2)
        key_mask = torch.cat([window_mask.new_ones(batch_size, 1), window_mask], 1)[:, None, None, :]
        attended, _ = eager_attention_forward(q[:, :, None], keys, values, key_mask)
        y = standard_normalize(attention.finish(attended.reshape(batch_size, -1), z), self.eps)
        if config.use_memory_review:
            review = self.memory_review
            history = torch.arange(state.review_keys.shape[1], device=device)[None, :] < state.review_length[:, None]
            out, _ = review.attend(review.act(review.q(y))[:, None], state.review_keys.to(y.dtype),
                                   state.review_values.to(y.dtype), history)
            out = out[:, 0]
        else:
            out = self.output_norm(y)

        # rows whose window is now full: cell row over the whole window, eq. 7, push c to the history
        full = slot + 1 == window_size
        window_length = torch.where(full, 0, slot + 1)
        cell, previous_cell, has_previous = state.cell, state.previous_cell, state.has_previous
        review_keys, review_values, review_length = state.review_keys, state.review_values, state.review_length
        cell_key, cell_value = state.cell_key, state.cell_value
        if bool(full.any()):
            z_cell = self.concat_norm(cell)
            q_cell, k_cell, v_cell = attention.project(z_cell)
            c = self._cell_row(attention, z_cell, q_cell, k_cell, v_cell, window_keys, window_values, window_mask)
            new_cell = self._next_cell(c, previous_cell, has_previous)
            chosen = full[:, None]
            cell = torch.where(chosen, new_cell, cell)
            previous_cell = torch.where(chosen, c, previous_cell)
            has_previous = has_previous | full
            _, new_key, new_value = attention.project(self.concat_norm(cell))
            cell_key = torch.where(chosen[..., None], new_key, cell_key)
            cell_value = torch.where(chosen[..., None], new_value, cell_value)
            new_review_key, new_review_value = self._review_key_value(c)
            if int((review_length + full.long()).max()) > review_keys.shape[1]:
                review_keys = F.pad(review_keys, (0, 0, 0, 1))
                review_values = F.pad(review_values, (0, 0, 0, 1))
            target = torch.where(full, review_length, review_length.clamp(max=review_keys.shape[1] - 1))
            review_keys = torch.where(full[:, None, None], review_keys.index_put((rows, target), new_review_key),
                                      review_keys)
            review_values = torch.where(full[:, None, None],
                                        review_values.index_put((rows, target), new_review_value), review_values)
            review_length = review_length + full.long()
        new_state = RANLayerState(
            cell=cell, cell_key=cell_key, cell_value=cell_value, previous_cell=previous_cell,
            has_previous=has_previous, window_keys=window_keys, window_values=window_values,
            window_length=window_length, review_keys=review_keys, review_values=review_values,
            review_length=review_length,
        )
        return out, new_state

    def _cell_row(self, attention, z_cell, q_cell, k_cell, v_cell, k_window, v_window, window_mask) -> torch.Tensor:
        """The cell row of one window: attends over `[cell; window tokens]`, then output projection, GLU residual,
        norm and standard normalisation (eqs. 3-6). Shapes: q/k/v_cell (B, H, d), k/v_window (B, C, H, d),
        window_mask (B, C). Returns the new pre-residual cell c_i (B, D)."""
        scale = 1.0 / math.sqrt(attention.head_size)
        score_cell = (q_cell * k_cell).sum(-1, keepdim=True) * scale  # (B, H, 1)
        score_tokens = torch.einsum("bhd,bchd->bhc", q_cell, k_window) * scale  # (B, H, C)
        score_tokens = score_tokens.masked_fill(~window_mask[:, None, :], torch.finfo(score_tokens.dtype).min)
        probs = F.softmax(_upcast(torch.cat([score_cell, score_tokens], dim=-1)), dim=-1).to(q_cell.dtype)
        probs = F.dropout(probs, p=attention.attention_dropout, training=self.training)
        attended = probs[..., :1] * v_cell + torch.einsum("bhc,bchd->bhd", probs[..., 1:], v_window)
        out = attention.finish(attended.flatten(-2), z_cell)
        return self.dropout(standard_normalize(out, self.eps))


class RANPooler(nn.Module):
    """The authors' cell transform (paper eq. 10): `GLU(act(cell W_c + b_c)) + (pool(tokens) W_p + b_p)`.

    `pool` is a max (default) or mean over the real tokens of the last layer. With `pooler_type="average"` (the
    Table 4 ablation) the pooled output is the plain mean of the real token outputs instead.
    """

    def __init__(self, config: RANConfig):
        super().__init__()
        self.config = config
        if config.pooler_type == "cell":
            self.cell_dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.cell_glu = RANGLU(config.hidden_size)
            self.pooling_dense = nn.Linear(config.hidden_size, config.hidden_size)
            self.act = ACT2FN[config.hidden_act]
            self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, cell: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """cell (B, D); tokens (B, N, D) with token_mask (B, N) bool. Returns (B, D); an all-pad row pools to 0."""
        if self.config.pooler_type == "average" or self.config.pooler_pooling == "mean":
            pooled = _masked_mean(tokens, token_mask)
        else:
            pooled = _masked_max(tokens, token_mask)
        if self.config.pooler_type == "average":
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


# set while `from_pretrained` of a bidirectional class (everything but RANForCausalLM) builds its model
_LOADING_AS_ENCODER = contextvars.ContextVar("ran_loading_as_encoder", default=False)


class RANPreTrainedModel(PreTrainedModel):
    config_class = RANConfig
    config: RANConfig
    base_model_prefix = "ran"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RANLayer", "RANEmbeddings"]
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    # RANForCausalLM keeps the causal encoder of a causal checkpoint; every other class loads it bidirectional
    _is_causal_lm = False

    def __init__(self, config: RANConfig, *inputs, **kwargs):
        if config.is_decoder and _LOADING_AS_ENCODER.get():
            # `from_pretrained` hands the model a private deep copy of the config, so this changes nothing the caller
            # holds (tested)
            _log_bidirectional_notice(type(self).__name__)
            config.is_decoder = False
        super().__init__(config, *inputs, **kwargs)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, except that a causal checkpoint (e.g. `run_clm.py`'s output, saved with
        `is_decoder=True`) loads into every class but [`RANForCausalLM`] with the bidirectional encoder, with a logged
        notice: a classifier, tagger, QA or MLM head (or `AutoModel`) sees the whole document. Pass
        `is_decoder=True` to keep the causal encoder (e.g. `RANModel.from_pretrained(path, is_decoder=True)`)."""
        as_encoder = not cls._is_causal_lm and not kwargs.get("is_decoder", False)
        token = _LOADING_AS_ENCODER.set(as_encoder)
        try:
            return super().from_pretrained(*args, **kwargs)
        finally:
            _LOADING_AS_ENCODER.reset(token)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`save_pretrained`, writing every RAN head into `config.auto_map` (not only this model's class), so a
        checkpoint saved from one head (e.g. a pretrained masked LM) loads into any other head with
        `AutoModelFor*.from_pretrained(..., trust_remote_code=True)`."""
        if getattr(self, "_auto_class", None) is not None:
            self.config.auto_map = {**RAN_AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        return super().save_pretrained(save_directory, *args, **kwargs)

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
            head_size = self.config.attention_head_size
            exponent = torch.arange(0, head_size, 2, dtype=torch.float32) / head_size
            init.copy_(module.inv_freq, 1.0 / (self.config.rope_theta**exponent))
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
    cells (`torch.FloatTensor` of shape `(batch_size, num_windows, hidden_size)`):
        History `[c_1 .. c_n]` of the last layer (pre-residual cells); rows with fewer windows are zero after their
        last window.
    past_key_values (`RANCache`, *optional*):
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
    past_key_values: "RANCache | None" = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    memory_review_attentions: tuple[torch.FloatTensor, ...] | None = None


class RANCache(Cache):
    """Recurrent state of a causal RAN for `generate()` and chunked prefill (DESIGN section 5).

    Per layer it holds the incoming cell and its key/value, the previous pre-residual cell, the keys/values of the
    current window's tokens (at most `window_size`) and the memory-review history (one key and value per finished
    window). Its size grows only by that history: `O(n_layers * (W*A + n_windows*D))`, not with every token.

    A recurrent state cannot be cut back into a finished window, so `crop` raises.
    """

    is_compileable = False

    def __init__(self, config: RANConfig | None = None, **kwargs):
        super().__init__(layers=[])
        self.states: list[RANLayerState] = []
        self.seen_positions = 0

    def __len__(self) -> int:
        return len(self.states)

    def __repr__(self) -> str:
        return f"RANCache(layers={len(self.states)}, positions={self.seen_positions}, bytes={self.num_bytes()})"

    @property
    def batch_size(self) -> int:
        return self.states[0].cell.shape[0] if self.states else 0

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        """Input positions fed so far (padding included), which `generate()` uses to slice new inputs."""
        return self.seen_positions

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    def num_bytes(self) -> int:
        """Memory held by the state, in bytes."""
        return sum(state.num_bytes() for state in self.states)

    def _map(self, fn):
        self.states = [state.map_batch(fn) for state in self.states]

    def reorder_cache(self, beam_idx: torch.LongTensor):
        """Beam search: row i becomes row `beam_idx[i]`."""
        self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int):
        self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor):
        self._map(lambda t: t[indices.to(t.device)])

    def reset(self):
        self.states = []
        self.seen_positions = 0

    def crop(self, max_length: int):
        if max_length < 0:
            max_length = self.seen_positions + max_length
        if max_length >= self.seen_positions:
            return
        raise ValueError(
            f"RANCache cannot be cropped to {max_length} positions (it has seen {self.seen_positions}): a recurrent "
            "state cannot go back into a finished window. Re-run the prompt instead (assisted decoding and other "
            "rollback features are not supported by RAN)."
        )


class RANModel(RANPreTrainedModel):
    """The bare RAN encoder: embeddings, `num_hidden_layers` RAN layers, and the cell transform pooler.

    Bidirectional mode (this class): the layers share one window split per row, and layer `l + 1` starts from
    layer `l`'s last cell, as in the authors' code.
    """

    def __init__(self, config: RANConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = RANEmbeddings(config)
        self.layers = nn.ModuleList([RANLayer(config, i) for i in range(config.num_hidden_layers)])
        self.pooler = RANPooler(config) if add_pooling_layer else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        past_key_values: "RANCache | None" = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> RANModelOutput | tuple:
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
            past_key_values (`RANCache`, *optional*):
                Causal mode only (`config.is_decoder=True`): the recurrent state left by earlier calls; the input
                continues it. `attention_mask` may then cover the past and the new tokens (its last
                `sequence_length` columns are used).
            use_cache (`bool`, *optional*):
                Causal mode only: return the updated `RANCache` as `past_key_values`.

        Causal mode differs from the bidirectional one: tokens attend causally inside their window, the cell row
        reads its whole window (so context crosses windows), there is no `min_window_size` merge, memory review of
        a token in window i reads `[s_0, c_1 .. c_{i-1}]`, and every layer starts from its own initial cell
        (`initial_cell` seeds the first layer only). So the output at position t depends on tokens <= t only.
        """
        _check_forward_kwargs(self, kwargs)
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict

        if self.config.is_decoder:
            return self._forward_causal(input_ids, attention_mask, inputs_embeds, initial_cell, past_key_values,
                                        use_cache, output_hidden_states, output_attentions, return_dict)
        if past_key_values is not None:
            raise ValueError("RANModel: `past_key_values` needs a causal model (`config.is_decoder=True`).")
        sequence_mask = self._check_inputs(input_ids, attention_mask, inputs_embeds, initial_cell)
        layout = RANWindowLayout.from_mask(sequence_mask, self.config.window_size, self.config.min_window_size)

        hidden = layout.to_grid(self.embeddings(input_ids, inputs_embeds))
        cell = initial_cell
        all_hidden_states = (layout.to_sequence(hidden),) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        all_reviews = () if output_attentions and self.config.use_memory_review else None
        for layer in self.layers:
            layer_output = layer(hidden, cell, layout, output_attentions=output_attentions)
            hidden, cell = layer_output.hidden_states, layer_output.last_cell
            if output_hidden_states:
                all_hidden_states += (layout.to_sequence(hidden),)
            if output_attentions:
                all_attentions += (layer_output.window_attentions,)
                if all_reviews is not None:
                    all_reviews += (layer_output.memory_review_attentions,)

        cells = layer_output.cells
        last_cell = self._pool_cell(layer_output.last_cell, cells, layout.window_mask)
        last_hidden_state = all_hidden_states[-1] if output_hidden_states else layout.to_sequence(hidden)
        pooler_output = None
        if self.pooler is not None:
            flat_tokens = hidden.flatten(1, 2)
            pooler_output = self.pooler(last_cell, flat_tokens, layout.token_mask.flatten(1, 2))

        output = RANModelOutput(
            last_hidden_state=last_hidden_state,
            pooler_output=pooler_output,
            last_cell=last_cell,
            cells=cells,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
            memory_review_attentions=all_reviews,
        )
        return output if return_dict else output.to_tuple()

    def _forward_causal(self, input_ids, attention_mask, inputs_embeds, initial_cell, cache, use_cache,
                        output_hidden_states, output_attentions, return_dict) -> RANModelOutput | tuple:
        """Causal encoder over a chunk that continues `cache` (a fresh state when there is none)."""
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        if cache is not None and not isinstance(cache, RANCache):
            raise TypeError(
                f"RANModel: `past_key_values` must be a RANCache (got {type(cache).__name__}); RAN keeps a recurrent "
                "state, not per-token keys and values. Pass the cache a previous call returned, or None."
            )
        if attention_mask is not None:
            length = (input_ids if input_ids is not None else inputs_embeds).shape[1]
            if attention_mask.dim() == 2 and attention_mask.shape[1] > length and cache is not None:
                attention_mask = attention_mask[:, -length:]
        sequence_mask = self._check_inputs(input_ids, attention_mask, inputs_embeds, initial_cell)
        batch_size, length = sequence_mask.shape
        embeddings = self.embeddings(input_ids, inputs_embeds)
        if cache is None:
            cache = RANCache(self.config) if use_cache else None
        states = cache.states if cache is not None and cache.states else [None] * len(self.layers)
        if cache is not None and cache.states and cache.batch_size != batch_size:
            raise ValueError(f"RANModel: the cache holds {cache.batch_size} rows but the input has {batch_size}.")

        all_hidden_states = () if output_hidden_states else None
        all_attentions = () if output_attentions else None
        all_reviews = () if output_attentions and self.config.use_memory_review else None
        new_states = []
        decode_step = (
            length == 1 and states[0] is not None and bool(sequence_mask.all()) and not output_attentions
        )
        if decode_step:
            hidden = embeddings[:, 0]
            if output_hidden_states:
                all_hidden_states += (hidden[:, None],)
            with sequential_threads(hidden.device):
                for layer, state in zip(self.layers, states):
                    hidden, state = layer.step(hidden, state)
                    new_states.append(state)
                    if output_hidden_states:
                        all_hidden_states += (hidden[:, None],)
            last_hidden_state, last_cell, cells = hidden[:, None], new_states[-1].cell, None
        else:
            # each row's current window is laid out from its start: placeholders for the tokens already seen
            seen = states[0].window_length if states[0] is not None else sequence_mask.new_zeros(batch_size).long()
            prefix = int(seen.max())
            if prefix:
                prefix_mask = torch.arange(prefix, device=seen.device)[None, :] >= (prefix - seen)[:, None]
                sequence_mask = torch.cat([prefix_mask, sequence_mask], dim=1)
                embeddings = torch.cat([embeddings.new_zeros(batch_size, prefix, embeddings.shape[-1]), embeddings], 1)
            layout = RANWindowLayout.from_mask(sequence_mask, self.config.window_size, 0)
            hidden = layout.to_grid(embeddings)
            if output_hidden_states:
                all_hidden_states += (layout.to_sequence(hidden)[:, prefix:],)
            for i, (layer, state) in enumerate(zip(self.layers, states)):
                if state is None:
                    state = layer.initial_state(initial_cell if i == 0 else None, batch_size, hidden)
                layer_output = layer(hidden, None, layout, state, output_attentions=output_attentions)
                hidden = layer_output.hidden_states
                new_states.append(layer_output.state)
                if output_hidden_states:
                    all_hidden_states += (layout.to_sequence(hidden)[:, prefix:],)
                if output_attentions:
                    all_attentions += (layer_output.window_attentions,)
                    if all_reviews is not None:
                        all_reviews += (layer_output.memory_review_attentions,)
            last_hidden_state = layout.to_sequence(hidden)[:, prefix:]
            last_cell, cells = layer_output.last_cell, layer_output.cells
        if cache is not None:
            cache.states = new_states
            cache.seen_positions += length

        output = RANModelOutput(
            last_hidden_state=last_hidden_state,
            last_cell=last_cell,
            cells=cells,
            past_key_values=cache if use_cache else None,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
            memory_review_attentions=all_reviews,
        )
        return output if return_dict else output.to_tuple()

    def _pool_cell(self, last_cell: torch.Tensor, cells: torch.Tensor, window_mask: torch.Tensor) -> torch.Tensor:
        """`config.cell_pooling`: the final cell, or the mean / max of the history over the row's real windows."""
        if self.config.cell_pooling == "mean":
            return _masked_mean(cells, window_mask)
        if self.config.cell_pooling == "max":
            return _masked_max(cells, window_mask)
        return last_cell

    def _check_inputs(self, input_ids, attention_mask, inputs_embeds, initial_cell) -> torch.Tensor:
        """Validate the arguments (and the config, which may have been edited since construction) and return the
        (B, L) bool mask of real tokens."""
        if not _is_tracing():
            self.config._check_values()
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("RANModel: pass exactly one of `input_ids` and `inputs_embeds`.")
        if input_ids is not None:
            if not isinstance(input_ids, torch.Tensor) or input_ids.dtype.is_floating_point or input_ids.dim() != 2:
                raise TypeError(
                    "RANModel: `input_ids` must be an integer tensor of shape (batch_size, sequence_length), got "
                    f"{type(input_ids).__name__}{tuple(getattr(input_ids, 'shape', ()))}"
                    f"{' of ' + str(input_ids.dtype) if isinstance(input_ids, torch.Tensor) else ''}."
                )
            shape = tuple(input_ids.shape)
            if input_ids.numel() and not _is_tracing() and (
                int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size
            ):
                raise ValueError(
                    f"RANModel: `input_ids` must lie in [0, vocab_size={self.config.vocab_size}); got values in "
                    f"[{int(input_ids.min())}, {int(input_ids.max())}]. Check that the tokenizer matches the model "
                    "(or call `model.resize_token_embeddings(len(tokenizer))`)."
                )
        else:
            if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3 or (
                inputs_embeds.shape[-1] != self.config.hidden_size
            ):
                raise ValueError(
                    "RANModel: `inputs_embeds` must be a float tensor of shape (batch_size, sequence_length, "
                    f"hidden_size={self.config.hidden_size}), got {tuple(getattr(inputs_embeds, 'shape', ()))}."
                )
            expected_dtype = self.embeddings.word_embeddings.weight.dtype
            if inputs_embeds.dtype != expected_dtype and not (
                inputs_embeds.dtype.is_floating_point and torch.is_autocast_enabled(inputs_embeds.device.type)
            ):
                raise TypeError(
                    f"RANModel: `inputs_embeds` must have the model's dtype {expected_dtype}, got "
                    f"{inputs_embeds.dtype}; pass `inputs_embeds.to({expected_dtype})` (or cast the model with "
                    "`model.to(dtype)`)."
                )
            shape = tuple(inputs_embeds.shape[:2])
        if shape[0] == 0 or shape[1] == 0:
            raise ValueError(f"RANModel: the input is empty (shape {shape}); pass at least one token per row.")
        if initial_cell is not None and (
            not isinstance(initial_cell, torch.Tensor) or tuple(initial_cell.shape) != (shape[0], self.config.hidden_size)
        ):
            raise ValueError(
                f"RANModel: `initial_cell` must have shape (batch_size, hidden_size) = ({shape[0]}, "
                f"{self.config.hidden_size}); got {tuple(getattr(initial_cell, 'shape', ()))}."
            )
        device = input_ids.device if input_ids is not None else inputs_embeds.device
        if attention_mask is None:
            # causal LMs often share the pad id with a real token (eos): there the default is "all real", as in
            # Transformers' decoders; generate() passes the mask it builds
            if input_ids is not None and self.config.pad_token_id is not None and not self.config.is_decoder:
                return input_ids != self.config.pad_token_id
            return torch.ones(shape, dtype=torch.bool, device=device)
        if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != shape:
            raise ValueError(
                f"RANModel: `attention_mask` must have the shape of the input, (batch_size, sequence_length) = "
                f"{shape}; got {tuple(getattr(attention_mask, 'shape', ()))}."
            )
        if attention_mask.dtype != torch.bool and not _is_tracing() and bool(
            ((attention_mask != 0) & (attention_mask != 1)).any()
        ):
            raise ValueError("RANModel: `attention_mask` must hold only 0 (padding) and 1 (real token).")
        return attention_mask.to(device=device).bool()


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


def _is_tracing() -> bool:
    """True under `torch.compile` / `torch.export`, where checks that read tensor values are skipped (they would
    break the graph); eager calls get every check."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()


# keyword arguments a forward takes through `**kwargs` without naming them: Trainer's loss normaliser, and the
# cache position `generate()` may add (RAN's recurrent cache keeps its own count)
_PASS_THROUGH_KWARGS = frozenset({"num_items_in_batch", "cache_position"})
_KWARG_HINTS = {"token_type_ids": "RAN has no token types; call the tokenizer with `return_token_type_ids=False`",
                "position_ids": "RAN's positions are rotary and restart in every window; there are no position ids",
                "head_mask": "RAN has no head mask"}


def _check_forward_kwargs(model: nn.Module, kwargs: dict) -> None:
    """A keyword the forward does not know would otherwise vanish into `**kwargs` (`attn_mask=` for
    `attention_mask=`): raise a `TypeError` naming it, as Python does for a function without `**kwargs`."""
    unknown = [name for name in kwargs if name not in _PASS_THROUGH_KWARGS]
    if not unknown:
        return
    name = unknown[0]
    known = [p for p in inspect.signature(type(model).forward).parameters if p not in ("self", "kwargs")]
    close = difflib.get_close_matches(name, known + sorted(_PASS_THROUGH_KWARGS), n=1)
    hint = _KWARG_HINTS.get(name, f"did you mean `{close[0]}`?" if close else f"it takes {', '.join(known)}")
    raise TypeError(f"{type(model).__name__}.forward() got an unexpected keyword argument `{name}` ({hint}).")


def _log_bidirectional_notice(class_name: str) -> None:
    logger.warning(
        f"{class_name}: the config is causal (`is_decoder=True`, e.g. a RANForCausalLM checkpoint); {class_name} uses "
        "the bidirectional encoder instead, so every token sees the whole document. Load the checkpoint with "
        "`RANForCausalLM` for the causal language model."
    )


def _as_encoder_config(config: RANConfig, class_name: str) -> RANConfig:
    """The config a bidirectional head builds from: a copy with `is_decoder=False` when the given one is causal (the
    caller's object is never changed)."""
    if not config.is_decoder:
        return config
    _log_bidirectional_notice(class_name)
    config = copy.deepcopy(config)
    config.is_decoder = False
    return config


def _check_labels(model_name: str, name: str, labels, shapes: tuple, num_classes: int | None) -> None:
    """`labels` must be a tensor of one of `shapes`; with `num_classes`, integer class indices in
    `[0, num_classes)` or -100 (ignored)."""
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{model_name}: `{name}` must be a tensor, got {type(labels).__name__}.")
    if tuple(labels.shape) not in shapes:
        raise ValueError(
            f"{model_name}: `{name}` must have shape {' or '.join(str(shape) for shape in shapes)}, got "
            f"{tuple(labels.shape)}."
        )
    if num_classes is None:
        return
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"{model_name}: `{name}` must hold integer class indices, got {labels.dtype}.")
    if labels.numel() and not _is_tracing():
        bad = ((labels < 0) & (labels != -100)) | (labels >= num_classes)
        if bool(bad.any()):
            raise ValueError(
                f"{model_name}: `{name}` must lie in [0, {num_classes}) or be -100 (ignored); got "
                f"{int(labels[bad][0])}."
            )


def _check_sequence_labels(model_name: str, labels, config: RANConfig, batch_size: int) -> None:
    """Labels of [`RANForSequenceClassification`] for the problem type Transformers' loss will pick (set in
    `config.problem_type`, else regression for one label, single-label for integer labels, multi-label otherwise)."""
    num_labels = config.num_labels
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{model_name}: `labels` must be a tensor, got {type(labels).__name__}.")
    problem_type = config.problem_type
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type == "single_label_classification":
        _check_labels(model_name, "labels", labels, ((batch_size,), (batch_size, 1)), num_labels)
        return
    one_per_row = ((batch_size,), (batch_size, 1)) if num_labels == 1 else ()
    _check_labels(model_name, "labels", labels, one_per_row + ((batch_size, num_labels),), None)
    if not labels.dtype.is_floating_point:
        raise TypeError(
            f"{model_name}: `labels` must be floats for {problem_type} (num_labels={num_labels}), got {labels.dtype}; "
            "single-label classification takes torch.long class indices and num_labels >= 2."
        )
    if problem_type == "multi_label_classification" and labels.numel() and not _is_tracing():
        if bool(((labels < 0) | (labels > 1)).any()):
            raise ValueError(f"{model_name}: multi-label `labels` must lie in [0, 1] (one target per label).")


def _answer_positions(model_name: str, name: str, positions, batch_size: int, length: int) -> torch.Tensor:
    """QA positions, shape (B,) or (B, 1), as Transformers' loss takes them, with -100 moved past the end of the
    input (Transformers would clamp it to 0 and train towards the first token). Other negatives raise."""
    _check_labels(model_name, name, positions, ((batch_size,), (batch_size, 1)), None)
    if positions.dtype.is_floating_point or positions.dtype == torch.bool:
        raise TypeError(f"{model_name}: `{name}` must hold integer token indices, got {positions.dtype}.")
    if not _is_tracing() and bool(((positions < 0) & (positions != -100)).any()):
        raise ValueError(
            f"{model_name}: `{name}` must be token indices >= 0 (indices past the input, and -100, are ignored); got "
            f"{int(positions[(positions < 0) & (positions != -100)][0])}."
        )
    return positions.masked_fill(positions == -100, length)


def _encoder_kwargs(attention_mask, inputs_embeds, initial_cell, output_hidden_states, output_attentions) -> dict:
    return dict(attention_mask=attention_mask, inputs_embeds=inputs_embeds, initial_cell=initial_cell,
                output_hidden_states=output_hidden_states, output_attentions=output_attentions, return_dict=True)


class RANForMaskedLM(RANPreTrainedModel):
    """RAN with the authors' masked-LM head (bidirectional). Loads the MLM weights the converter keeps."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "ran.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }
    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\."]

    def __init__(self, config: RANConfig):
        config = _as_encoder_config(config, type(self).__name__)
        super().__init__(config)
        self.ran = RANModel(config, add_pooling_layer=False)
        self.lm_head = RANLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head.decoder = new_embeddings
        self.lm_head.bias = new_embeddings.bias

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Token ids to predict; -100 marks positions without a loss (and pads, if you like).
        """
        _check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, **_encoder_kwargs(attention_mask, inputs_embeds, initial_cell,
                                                         output_hidden_states, output_attentions))
        logits = self.lm_head(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            _check_labels(type(self).__name__, "labels", labels, (tuple(logits.shape[:2]),), self.config.vocab_size)
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                attentions=outputs.attentions)
        return output if _return_dict(return_dict, self.config) else output.to_tuple()


class RANForSequenceClassification(RANPreTrainedModel):
    """RAN with a linear classifier on the pooled document vector (eq. 10). `config.problem_type` selects
    regression (MSE), single-label (cross-entropy) or multi-label (BCE with logits) as in Transformers."""

    # a pretrained masked-LM checkpoint carries the LM head; fine-tuning from it drops that head quietly
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]

    def __init__(self, config: RANConfig):
        config = _as_encoder_config(config, type(self).__name__)
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ran = RANModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.Tensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        labels (`torch.Tensor` of shape `(batch_size,)`, or `(batch_size, num_labels)` for multi-label, *optional*):
            Class indices (single-label), floats (regression) or 0/1 floats per label (multi-label).
        """
        _check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, **_encoder_kwargs(attention_mask, inputs_embeds, initial_cell,
                                                         output_hidden_states, output_attentions))
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = None
        if labels is not None:
            _check_sequence_labels(type(self).__name__, labels, self.config, logits.shape[0])
            loss = self.loss_function(labels, logits, self.config, **kwargs)
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                          attentions=outputs.attentions)
        return output if _return_dict(return_dict, self.config) else output.to_tuple()


class RANForTokenClassification(RANPreTrainedModel):
    """RAN with a linear tagger over every token of the document (NER on whole documents)."""

    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\.", r"^lm_head\."]

    def __init__(self, config: RANConfig):
        config = _as_encoder_config(config, type(self).__name__)
        super().__init__(config)
        self.num_labels = config.num_labels
        self.ran = RANModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Tag indices in `[0, num_labels)`; -100 for positions without a loss (pads, continuation word pieces).
        """
        _check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, **_encoder_kwargs(attention_mask, inputs_embeds, initial_cell,
                                                         output_hidden_states, output_attentions))
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            _check_labels(type(self).__name__, "labels", labels, (tuple(logits.shape[:2]),), self.config.num_labels)
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                       attentions=outputs.attentions)
        return output if _return_dict(return_dict, self.config) else output.to_tuple()


class RANForQuestionAnswering(RANPreTrainedModel):
    """RAN with start/end span logits over the whole document (extractive QA). Pad positions get `-inf`-like
    logits so a span never starts or ends on padding."""

    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\.", r"^lm_head\."]

    def __init__(self, config: RANConfig):
        config = _as_encoder_config(config, type(self).__name__)
        super().__init__(config)
        self.ran = RANModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        initial_cell: torch.FloatTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput | tuple:
        r"""
        start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Token index of the answer's first and last token; positions past the end of the input, and -100, are
            ignored in the loss (give both or neither).
        """
        _check_forward_kwargs(self, kwargs)
        outputs = self.ran(input_ids, **_encoder_kwargs(attention_mask, inputs_embeds, initial_cell,
                                                         output_hidden_states, output_attentions))
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
                _answer_positions(type(self).__name__, name, positions, start_logits.shape[0], length)
                for name, positions in (("start_positions", start_positions), ("end_positions", end_positions))
            )
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        output = QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                              hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return output if _return_dict(return_dict, self.config) else output.to_tuple()


class RANForCausalLM(RANPreTrainedModel, GenerationMixin):
    """Causal RAN language model with an LM head tied to the input embeddings, and `generate()` on a constant-size
    recurrent cache ([`RANCache`]). The encoder runs in causal mode (see `RANModel.forward`) whatever
    `config.is_decoder` says when the model is built (it works on a copy; the caller's config is not changed)."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "ran.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }
    _keys_to_ignore_on_load_unexpected = [r"^ran\.pooler\."]
    _is_stateful = True
    _is_causal_lm = True

    def __init__(self, config: RANConfig):
        if not config.is_decoder:
            logger.info("RANForCausalLM: using a copy of the config with `is_decoder=True` (causal windows, no merge).")
            config = copy.deepcopy(config)
            config.is_decoder = True
        super().__init__(config)
        self.ran = RANModel(config, add_pooling_layer=False)
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

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        past_key_values: RANCache | None = None,
        use_cache: bool | None = None,
        initial_cell: torch.FloatTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The input ids themselves (the shift happens inside, Transformers style); -100 marks positions without
            a loss.
        past_key_values (`RANCache`, *optional*): state to continue from; returned updated when `use_cache`.
        logits_to_keep (`int`, *optional*): compute logits for the last `logits_to_keep` positions only (0: all).
        """
        _check_forward_kwargs(self, kwargs)
        outputs = self.ran(
            input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, initial_cell=initial_cell,
            past_key_values=past_key_values, use_cache=use_cache, output_hidden_states=output_hidden_states,
            output_attentions=output_attentions, return_dict=True,
        )
        hidden = outputs.last_hidden_state
        if labels is not None:
            _check_labels(type(self).__name__, "labels", labels, (tuple(hidden.shape[:2]),), self.config.vocab_size)
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
        output = CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=outputs.past_key_values,
                                        hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return output if _return_dict(return_dict, self.config) else output.to_tuple()


def _return_dict(return_dict: bool | None, config: RANConfig) -> bool:
    return return_dict if return_dict is not None else config.return_dict


# Auto class -> model class, written into `config.auto_map` of every saved checkpoint (remote code)
RAN_AUTO_MAP = {
    "AutoModel": "modeling_ran.RANModel",
    "AutoModelForMaskedLM": "modeling_ran.RANForMaskedLM",
    "AutoModelForCausalLM": "modeling_ran.RANForCausalLM",
    "AutoModelForSequenceClassification": "modeling_ran.RANForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_ran.RANForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_ran.RANForQuestionAnswering",
}
