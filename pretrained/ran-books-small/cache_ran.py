# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The recurrent state of causal RAN layers between calls: one layer's state (`RANLayerState`) and the
`transformers.Cache` that holds a state per layer for `generate()` and chunked prefill (`RANCache`).

A layer commits the windows a call finishes (`RANLayerState.advance`); the bookkeeping of which slots and windows
that is comes from the call's `RANWindowLayout`. The state does not depend on the layer's window block.
"""

from dataclasses import dataclass, replace

import torch

from transformers.cache_utils import Cache, CacheLayerMixin

from .configuration_ran import RANConfig
from .window_layout import OpenWindowWrites, RANWindowLayout, pick_window


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

    def history_and(self, review_memory: tuple[torch.Tensor, torch.Tensor] | None,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The review keys and values (B, K, D) a causal call's tokens read: the history followed by this call's
        windows' `review_memory`, or the history alone, in `dtype` (what a projection gives now), when no window of
        the call has an entry (a decoding step inside a window)."""
        history = (self.review_keys, self.review_values)
        if review_memory is None:
            return tuple(t.to(dtype) for t in history)
        return tuple(torch.cat([old.to(new.dtype), new], 1) for old, new in zip(history, review_memory))

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
