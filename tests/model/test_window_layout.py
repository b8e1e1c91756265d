"""RANWindowLayout: the work plan of a long input does not change shape at particular lengths.

A forward of 196,608, 200,000 and 200,001 tokens (hidden 32, one layer, window 256, batch 1, no_grad) peaked at
773-898 MB of resident memory from run to run with glibc's default (dynamic) mmap threshold, and at 696-697 MB for
all three lengths with a fixed one (`MALLOC_MMAP_THRESHOLD_=4194304`): the spread is the allocator's, not the
model's. These checks pin the model's side: the same grid path and the same chunk sizes, whatever the remainder of
the last window.
"""

import pytest
import torch

from ran_hf.window_layout import CPU_TOKEN_CHUNK, RANWindowLayout, window_chunks


LENGTHS = [196_608, 200_000, 200_001, 200_192]


@pytest.mark.parametrize("length", LENGTHS)
def test_a_long_row_is_a_plain_reshape_cut_into_equal_chunks(length):
    layout = RANWindowLayout.from_mask(torch.ones(1, length, dtype=torch.bool), window_size=256, min_window_size=16)
    assert layout.gather_index is None and layout.all_real  # no index tensor of the input's length
    assert layout.window_capacity == 256 and layout.num_windows == -(-length // 256)
    chunks = window_chunks(layout.num_windows, layout.window_capacity, torch.device("cpu"))
    sizes = [chunk.stop - chunk.start for chunk in chunks]
    assert sum(sizes) == layout.num_windows and chunks[0].start == 0
    assert all(a.stop == b.start for a, b in zip(chunks, chunks[1:]))
    assert set(sizes[:-1]) == {CPU_TOKEN_CHUNK // 256} and 0 < sizes[-1] <= CPU_TOKEN_CHUNK // 256


def test_the_grid_of_a_long_row_holds_its_tokens_in_order():
    length = 200_001
    layout = RANWindowLayout.from_mask(torch.ones(1, length, dtype=torch.bool), window_size=256, min_window_size=16)
    positions = torch.arange(length, dtype=torch.float32)[None, :, None]
    grid = layout.to_grid(positions)
    assert grid.shape == (1, layout.num_windows, 256, 1)
    torch.testing.assert_close(layout.to_sequence(grid), positions, rtol=0, atol=0)


def naive_windows(real_positions: list[int], window_size: int, min_window_size: int, offset: int) -> list[list[int]]:
    """The split of one row, by hand: its real positions in windows of W, the first shortened by `offset`, a short
    last window merged into the one before (bidirectional)."""
    windows, current, room = [], [], window_size - offset
    for position in real_positions:
        current.append(position)
        if len(current) == room:
            windows.append(current)
            current, room = [], window_size
    if current:
        windows.append(current)
    if len(windows) > 1 and len(windows[-1]) < min_window_size:
        windows[-2:] = [windows[-2] + windows[-1]]
    return windows


def random_mask(generator: torch.Generator, batch_size: int, length: int) -> torch.Tensor:
    """Rows right-padded, left-padded, with holes, full or empty."""
    mask = torch.ones(batch_size, length, dtype=torch.bool)
    for row in range(batch_size):
        kind = int(torch.randint(5, (1,), generator=generator))
        cut = int(torch.randint(length + 1, (1,), generator=generator))
        if kind == 0:
            mask[row, cut:] = False
        elif kind == 1:
            mask[row, :cut] = False
        elif kind == 2:
            mask[row] = torch.rand(length, generator=generator) < 0.7
        elif kind == 3 and row:
            mask[row] = False
    return mask


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("trial", range(12))
def test_the_values_read_in_one_transfer_match_the_grid(trial, causal):
    generator = torch.Generator().manual_seed(trial)
    window_size = int(torch.randint(2, 9, (1,), generator=generator))
    min_window_size = 0 if causal else int(torch.randint(0, window_size, (1,), generator=generator))
    batch_size = int(torch.randint(1, 4, (1,), generator=generator))
    length = int(torch.randint(1, 40, (1,), generator=generator))
    mask = random_mask(generator, batch_size, length) if trial % 3 else torch.ones(batch_size, length, dtype=torch.bool)
    offset = torch.randint(0, window_size, (batch_size,), generator=generator) if causal and trial % 2 else None
    layout = RANWindowLayout.from_mask(mask, window_size, min_window_size, causal=causal, offset=offset)

    grid = layout.to_grid(torch.arange(1, length + 1)[None, :, None].expand(batch_size, length, 1))[..., 0]
    for row in range(batch_size):
        real = (torch.nonzero(mask[row])[:, 0] + 1).tolist()
        row_offset = int(offset[row]) if offset is not None else 0
        windows = naive_windows(real, window_size, min_window_size, row_offset) if real else []
        placed = [[p for p in window.tolist() if p] for window in grid[row]]
        assert placed == windows + [[]] * (layout.num_windows - len(windows)), (row, mask[row], row_offset)
        assert layout.token_mask[row].sum(-1).tolist() == [len(w) for w in placed]
    assert layout.num_windows == max(int(layout.windows_per_row.max()), 1)
    assert layout.window_capacity >= int(layout.token_mask.sum(-1).max())
    assert layout.all_real == bool(mask.all())
    assert layout.every_slot_real == (layout.offset is None and bool(layout.token_mask.all()))
    assert layout.last_window_unfinished == (causal and not bool(layout.window_full[:, -1].any()))
    assert layout.num_past == (int(offset.max()) if offset is not None else 0)
    assert (layout.offset is None) == (offset is None or not bool(offset.any()))
    torch.testing.assert_close(layout.to_sequence(layout.to_grid(mask[..., None].float())), mask[..., None].float())
