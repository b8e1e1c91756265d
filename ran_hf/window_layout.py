# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Window bookkeeping of RAN: which token of which row sits in which window slot.

No parameters, only index arithmetic (the counterpart of Transformers' `masking_utils.py`). `RANWindowLayout` cuts a
batch into windows, row by row, and maps the (B, L) sequence to the (B, n, C) window grid and back;
`window_chunks` splits the window axis for CPU runs.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F


# Token-parallel work on CPU runs in chunks of about this many tokens: intermediates then stay below glibc's mmap
# threshold (32 MiB) and in cache, instead of being fresh, page-faulted allocations (measured: a 32k-token forward
# spent a third of its CPU time in the kernel zeroing pages).
CPU_TOKEN_CHUNK = 2048


def window_chunks(num_windows: int, capacity: int, device: torch.device) -> list[slice]:
    """Slices of the window axis processed together: all windows on accelerators, about CPU_TOKEN_CHUNK tokens on
    CPU."""
    if device.type != "cpu":
        return [slice(0, num_windows)]
    step = max(1, CPU_TOKEN_CHUNK // max(capacity, 1))
    return [slice(start, min(start + step, num_windows)) for start in range(0, num_windows, step)]


def pick_window(x: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(B, n, ...) -> (B, ...): window `index[b]` of each row b (window 0 without indexing when n is 1); `rows` is
    `arange(B)`."""
    return x[:, 0] if x.shape[1] == 1 else x[rows, index]


class OpenWindowWrites(NamedTuple):
    """Causal: what a call leaves in the open window (the first unfinished one) of each row, the same for every
    layer (`RANWindowLayout.open_window_writes`)."""

    rows: torch.Tensor  # (B,) arange(B)
    finished: torch.Tensor  # (B,) windows the row finishes in this call: always a prefix of its windows
    open_window: torch.Tensor  # (B,) index of the open window among this call's windows (clamped to the last)
    slot_mask: torch.Tensor  # (B, C) bool: the open window's slots that hold a token of this call
    window_length: torch.Tensor  # (B,) tokens in the open window after this call
    cache_index: tuple[torch.Tensor, torch.Tensor]  # (row, cache slot) of each True entry of `slot_mask`


@dataclass
class RANWindowLayout:
    """How a batch is cut into windows. Every row is split by its own real length, the same way for every layer.

    The windows of all rows live on one grid of `num_windows` windows x `window_capacity` slots. Bidirectional: window
    `i` of a row covers its real tokens `[i*W, (i+1)*W)`; the last window takes the remainder, merged into the window
    before when shorter than `min_window_size` (so a slot index can reach `W + min_window_size - 2`). Causal
    (`causal=True`, no merge): a row may continue an open window that already holds `offset` tokens (kept as keys
    in the cache); its first window then takes `W - offset` new tokens, in slots `0..`, at window positions
    `offset + slot`.

    Attributes:
        token_mask: (B, num_windows, window_capacity) bool, True on slots that hold a real token.
        window_mask: (B, num_windows) bool, True on windows that hold at least one real token.
        window_full: (B, num_windows) bool, True on windows that end inside the input (all W positions seen).
        lengths: (B,) number of real tokens per row.
        windows_per_row: (B,) number of real windows per row.
        offset: (B,) tokens of the first window seen before this input (causal continuation), or None.
        gather_index: (B * num_windows * window_capacity,) flat index into the (B * L) input positions for each slot,
            or None when the grid is a plain reshape of the padded input.
        scatter_index: (B * L,) flat index into the grid for each input position (pads point at slot 0 and are
            zeroed by `sequence_mask`), or None as above.
        sequence_mask: (B, L) bool mask of real input positions.
    """

    token_mask: torch.Tensor
    window_mask: torch.Tensor
    window_full: torch.Tensor
    lengths: torch.Tensor
    windows_per_row: torch.Tensor
    offset: torch.Tensor | None
    sequence_mask: torch.Tensor
    gather_index: torch.Tensor | None
    scatter_index: torch.Tensor | None
    num_windows: int
    window_capacity: int
    window_size: int
    causal: bool
    all_real: bool
    static: bool = False
    # values the layers read, all read from the device in one transfer by `from_mask` (none for a static layout)
    num_past: int = 0  # key slots in front of each window for the open window's earlier tokens
    last_window_unfinished: bool = False  # causal: no row finishes the last window (the chain stops)
    every_slot_real: bool = False  # eager, no offset: every slot holds a real token (no key mask)
    # values every layer of a forward reads alike (masks, positions, the open window's writes), built once (`once`)
    _built: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_mask(
        cls, sequence_mask: torch.Tensor, window_size: int, min_window_size: int = 0, causal: bool = False,
        offset: torch.Tensor | None = None, static: bool = False,
    ) -> "RANWindowLayout":
        """Layout of the real tokens `sequence_mask` (B, L); `offset` (B,) continues open windows (causal only).

        The windows are first laid out on a grid sized from the tensor shape alone, `ceil(L / W) + 1` windows (an
        offset is below W, so it adds at most one). Eager, every value the grid's final size and the layers depend
        on (window count and capacity, whether the plain reshape serves, the causal flags) is then read from the
        device in one transfer, and the grid is trimmed to the batch's real lengths.

        `static=True` (bidirectional only; used under `torch.compile` / `torch.export`) reads nothing: it keeps the
        shape-sized grid, with `W + min_window_size - 1` slots (room for a merged remainder), pad-only windows and
        slots masked out. The outputs are the same; the grid is just not trimmed.
        """
        seq_len = sequence_mask.shape[1]
        if causal:
            min_window_size = 0
        if static and (causal or offset is not None):
            raise ValueError("RANWindowLayout: a static layout is bidirectional (no causal mode, no offset).")
        lengths = sequence_mask.sum(-1)
        start = offset if offset is not None else torch.zeros_like(lengths)
        stream_length = start + lengths  # the row's positions counted from the start of its first window
        windows_per_row = _windows_per_row(stream_length, window_size, min_window_size)
        windows_per_row = torch.where(lengths > 0, windows_per_row, 0)

        # one spare (pad-only) window keeps a static window axis >= 2: size 1 would be specialized on
        num_windows = (seq_len + 2 * window_size - 1) // window_size  # ceil(L / W) + 1, as one floor division
        window_sizes, window_full, first_token = _split_rows(start, stream_length, windows_per_row, num_windows,
                                                             window_size)
        if static:
            window_capacity, read = window_size + max(min_window_size - 1, 0), {}
        else:
            read = _read_eager_sizes(sequence_mask, lengths, offset, windows_per_row, window_sizes, window_full,
                                     first_token, window_size, causal)
            num_windows, window_capacity = read["num_windows"], read["window_capacity"]
            window_sizes, window_full, first_token = (
                window_sizes[:, :num_windows], window_full[:, :num_windows], first_token[:, :num_windows])
            if read["num_past"] == 0:
                offset = None
        slot_index = torch.arange(window_capacity, device=sequence_mask.device)
        token_mask = slot_index[None, None, :] < window_sizes[:, :, None]

        layout = dict(token_mask=token_mask, window_mask=window_sizes > 0, window_full=window_full, lengths=lengths,
                      windows_per_row=windows_per_row, offset=offset, sequence_mask=sequence_mask,
                      num_windows=num_windows, window_capacity=window_capacity, window_size=window_size, causal=causal,
                      static=static, all_real=read.get("all_real", False), num_past=read.get("num_past", 0),
                      last_window_unfinished=causal and not read.get("last_window_finished", True),
                      every_slot_real=offset is None and read.get("every_slot_real", False))
        if read.get("plain_reshape"):  # eager: the common cases skip the index arithmetic
            return cls(gather_index=None, scatter_index=None, **layout)

        gather_index, scatter_index = _grid_indices(sequence_mask, start, windows_per_row, first_token, num_windows,
                                                    window_capacity, window_size)
        return cls(gather_index=gather_index, scatter_index=scatter_index, **layout)

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

    @property
    def varying_window_mask(self) -> torch.Tensor | None:
        """`window_mask`, or None when every row has every window (all tokens real, bidirectional): the cell chain
        then advances every row in every window."""
        return None if self.all_real and not self.causal else self.window_mask

    @property
    def cell_mask(self) -> torch.Tensor | None:
        """(B, n) windows that have a cell to report: the finished ones (causal) or the real ones; None if all."""
        if self.causal:
            return self.window_full
        return None if self.all_real else self.window_mask

    @property
    def review_entries(self) -> int:
        """How many of this call's windows get a memory-review entry: all, except a causal call's last window when no
        row finishes it (its cell is read by no token of the call, and committed by none)."""
        return self.num_windows - self.last_window_unfinished

    @property
    def no_window_finishes(self) -> bool:
        """Causal: this call's only window is unfinished in every row (most decoding steps), so no cell is committed
        and none gets a memory-review entry. (A static layout is bidirectional, so its symbolic window count is
        never compared.)"""
        return self.last_window_unfinished and self.num_windows == 1

    def trim_windows(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n, ...) per-window values -> the eager grid's windows, `max(windows_per_row)` (at least 1): a static
        layout's spare windows are dropped, so exported outputs have eager's shapes. Under `torch.compile` (where
        reading the count would break the graph) the static grid's windows stay, zero past each row's own count."""
        if not self.static or (torch.compiler.is_compiling() and not torch.compiler.is_exporting()):
            return x
        count = self.windows_per_row.max().clamp(min=1).item()
        torch._check(count >= 1)
        torch._check(count <= x.shape[1])
        return x.narrow(1, 0, count)

    def window_chunks(self) -> list[slice]:
        """Slices of the window axis that a layer projects and attends together (`window_chunks`); a static layout
        (compile / export) has a symbolic number of windows: one chunk."""
        if self.static:
            return [slice(0, self.num_windows)]
        return window_chunks(self.num_windows, self.window_capacity, self.token_mask.device)

    def once(self, key, build, *args):
        """`build(*args)` the first time `key` is asked for; every layer of a forward then reads the same value (the
        layout's masks and positions, the layers' rotary cos/sin, the causal review mask and open-window writes).
        Under `torch.compile` / `torch.export` every call builds (the compiler removes the repeats; a dict of tensors
        on the layout would become a guard, and a static layout's chunk bounds are symbolic)."""
        if self.static or torch.compiler.is_compiling():
            return build(*args)
        if key not in self._built:
            self._built[key] = build(*args)
        return self._built[key]

    def rotary_positions(self) -> torch.Tensor:
        """Rotary position of every slot: (C,) `1..C` shared by all windows, or (B, n, C) when continuing."""
        return self.once("rotary_positions", self._rotary_positions)

    def _rotary_positions(self) -> torch.Tensor:
        positions = torch.arange(1, self.window_capacity + 1, device=self.token_mask.device)
        if self.offset is None:
            return positions
        first = (torch.arange(self.num_windows, device=positions.device) == 0)[None, :, None]
        return positions[None, None, :] + torch.where(first, self.offset[:, None, None], 0)

    def after_first_window(self) -> torch.Tensor:
        """(B, n) bool: whether the row has a real window before window i of this call."""
        return self.once("after_first_window", self._after_first_window)

    def _after_first_window(self) -> torch.Tensor:
        real = self.window_mask.long()
        return (real.cumsum(1) - real) > 0

    def open_window_writes(self) -> OpenWindowWrites:
        """Causal: the open window of each row after this call ([`OpenWindowWrites`]): its new tokens go after the
        `offset` earlier ones when it is window 0 (a continued window), at slot 0 otherwise."""
        return self.once("open_window_writes", self._open_window_writes)

    def _open_window_writes(self) -> OpenWindowWrites:
        device = self.token_mask.device
        rows = torch.arange(self.token_mask.shape[0], device=device)
        finished = self.window_full.sum(-1)
        open_window = finished.clamp(max=self.num_windows - 1)
        has_open = finished < self.num_windows
        slot_mask = pick_window(self.token_mask, open_window, rows) & has_open[:, None]
        offset = self.offset if self.offset is not None else torch.zeros_like(finished)
        offset = torch.where(open_window == 0, offset, 0)
        window_length = torch.where(has_open, offset + slot_mask.sum(-1), 0)
        target = offset[:, None] + torch.arange(slot_mask.shape[1], device=device)[None, :]
        cache_index = (rows[:, None].expand_as(target)[slot_mask], target[slot_mask])
        return OpenWindowWrites(rows, finished, open_window, slot_mask, window_length, cache_index)

    def key_mask(self) -> torch.Tensor | None:
        """(B, n, P + C) bool: the keys of each window, past slots (first window only) then slots; None if all real."""
        return self.once("key_mask", self._key_mask)

    def _key_mask(self) -> torch.Tensor | None:
        if self.offset is None:
            return None if self.every_slot_real else self.token_mask
        past = torch.arange(self.num_past, device=self.token_mask.device)[None, :] < self.offset[:, None]
        first = (torch.arange(self.num_windows, device=past.device) == 0)[None, :, None]
        return torch.cat([past[:, None, :] & first, self.token_mask], dim=-1)

    def attention_mask(self, chunk: slice) -> torch.Tensor | None:
        """Mask of the token attention of the windows in `chunk`: (B*m, C|1, 1 + P + C) bool over `[cell; past;
        slots]`, or None. Bidirectional: every real key (`key_mask`); causal: also only slots at or before the
        query's."""
        return self.once(("attention_mask", chunk.start, chunk.stop), self._attention_mask, chunk)

    def _attention_mask(self, chunk: slice) -> torch.Tensor | None:
        key_mask = self.key_mask()
        batch_size, capacity = self.token_mask.shape[0], self.window_capacity
        num_windows = chunk.stop - chunk.start
        device = self.token_mask.device
        if key_mask is None and not self.causal:
            return None
        num_keys = self.num_past + capacity
        keys = key_mask[:, chunk] if key_mask is not None else torch.ones(
            batch_size, num_windows, num_keys, dtype=torch.bool, device=device)
        keys = torch.cat([keys.new_ones(batch_size, num_windows, 1), keys], dim=-1)[:, :, None, :]
        if self.causal:
            slots = torch.arange(capacity, device=device)
            order = torch.cat([slots.new_full((1 + self.num_past,), -1), slots])  # cell and past come first
            keys = keys & (order[None, :] <= slots[:, None])
        return keys.flatten(0, 1)


def _windows_per_row(lengths: torch.Tensor, window_size: int, min_window_size: int) -> torch.Tensor:
    """Number of windows of a row of `lengths` real tokens (the authors' split): ceil(L / W), minus one
    when L > W and the remainder is shorter than `min_window_size` (it is merged into the window before)."""
    count = torch.div(lengths + window_size - 1, window_size, rounding_mode="floor")
    remainder = lengths - (count - 1).clamp(min=0) * window_size
    merge = (count > 1) & (remainder < min_window_size)
    return count - merge.long()


def _split_rows(
    start: torch.Tensor, stream_length: torch.Tensor, windows_per_row: torch.Tensor, num_windows: int, window_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's windows on a grid of `num_windows` (at least the most any row has): (B, n) real tokens per window,
    whether the window ends inside the input (all W positions seen), and the index of its first token among the row's
    real tokens. A row's stream starts at `start` (its offset) and ends at `stream_length`."""
    window_index = torch.arange(num_windows, device=start.device)[None, :]
    window_begin = torch.maximum(window_index * window_size, start[:, None])
    is_last = window_index == windows_per_row[:, None] - 1  # the last window of a row runs to the row's end
    window_end = torch.where(is_last, stream_length[:, None], (window_index + 1) * window_size)
    window_sizes = torch.where(window_index < windows_per_row[:, None], window_end - window_begin, 0)
    window_full = (window_sizes > 0) & (window_end - window_index * window_size >= window_size)
    return window_sizes, window_full, window_begin - start[:, None]


def _grid_indices(
    sequence_mask: torch.Tensor, start: torch.Tensor, windows_per_row: torch.Tensor, first_token: torch.Tensor,
    num_windows: int, window_capacity: int, window_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`RANWindowLayout.gather_index` and `scatter_index`: each real token's window and slot from its rank among the
    row's real tokens (pure index arithmetic, so the shapes never depend on the mask's values)."""
    batch_size, seq_len = sequence_mask.shape
    device = sequence_mask.device
    rank = sequence_mask.long().cumsum(-1) - 1
    window = torch.div(rank + start[:, None], window_size, rounding_mode="floor")
    window = torch.minimum(window.clamp(min=0), (windows_per_row - 1).clamp(min=0)[:, None])
    slot = rank - torch.gather(first_token, 1, window)
    grid_size = num_windows * window_capacity
    grid_slot = window * window_capacity + slot  # (B, L) slot of each real token in its row's grid
    grid_offset = torch.arange(batch_size, device=device)[:, None] * grid_size
    scatter = torch.where(sequence_mask, grid_offset + grid_slot, 0)
    # the inverse map: every grid slot's input position (empty slots read the row's first position, then are
    # zeroed by `token_mask`); pads write to one extra slot per row that is dropped
    row_offset = torch.arange(batch_size, device=device)[:, None] * seq_len
    source = row_offset.expand(batch_size, grid_size + 1)
    positions = row_offset + torch.arange(seq_len, device=device)[None, :]
    gather_index = source.scatter(1, torch.where(sequence_mask, grid_slot, grid_size), positions)
    return gather_index[:, :grid_size].reshape(-1), scatter.reshape(-1)


def _read_eager_sizes(
    sequence_mask: torch.Tensor, lengths: torch.Tensor, offset: torch.Tensor | None, windows_per_row: torch.Tensor,
    window_sizes: torch.Tensor, window_full: torch.Tensor, first_token: torch.Tensor, window_size: int, causal: bool,
) -> dict:
    """What an eager layout reads from the device, computed there from the shape-sized grid (B, n_max) and read in
    one `tolist` (one wait for the device per forward, where each read would be one wait):

    num_windows: `max(windows_per_row)`, at least 1; window_capacity: the largest window (bidirectional: at least
    `min(W, L)`, and W when there are several windows); plain_reshape: the input is right-padded and every real
    window starts at `window * capacity`, so the grid is a reshape of the padded input; all_real: no pad;
    every_slot_real: every window of the trimmed grid is full to capacity; last_window_finished: some row finishes
    the grid's last window; num_past: the largest offset (0: no row continues an open window)."""
    batch_size, seq_len = sequence_mask.shape
    count = windows_per_row.max().clamp(min=1)
    capacity = window_sizes.max().clamp(min=1)
    if not causal:
        capacity = capacity.clamp(min=min(window_size, seq_len))
        capacity = torch.where(count > 1, capacity.clamp(min=window_size), capacity)
    window_index = torch.arange(window_sizes.shape[1], device=sequence_mask.device)
    starts_on_grid = torch.where(window_sizes > 0, first_token == window_index * capacity, True).all()
    right_padded = (sequence_mask == (torch.arange(seq_len, device=sequence_mask.device) < lengths[:, None])).all()
    in_grid = window_index < count  # the windows kept after trimming; the later ones are empty in every row
    every_slot_real = torch.where(in_grid, window_sizes, capacity).min() >= capacity
    last_window_finished = window_full.gather(1, (count - 1).expand(batch_size, 1)).any()
    num_past = offset.max() if offset is not None else torch.zeros_like(count)
    names = ("num_windows", "window_capacity", "starts_on_grid", "right_padded", "all_real", "every_slot_real",
             "last_window_finished", "num_past")
    values = (count, capacity, starts_on_grid, right_padded, sequence_mask.all(), every_slot_real,
              last_window_finished, num_past)
    read = dict(zip(names, torch.stack([v.long() for v in values]).tolist()))
    for name in names[2:-1]:
        read[name] = bool(read[name])
    fits = seq_len <= read["num_windows"] * read["window_capacity"]
    read["plain_reshape"] = read.pop("right_padded") & read.pop("starts_on_grid") & fits
    return read
