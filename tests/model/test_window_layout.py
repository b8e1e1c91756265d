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
