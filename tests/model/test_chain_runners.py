"""The cell chain's runners (`ran_hf/cell_chain.py`) against the eager reference, behind their one signature: the
traced `while_loop`, the compiled blocks and the CUDA-graph capture give the eager loop's last carry, outputs and
gradients on the same layer and windows; the blocks visit every window once, in order."""

import pytest
import torch

from benchmarks.static_replay import StaticReplay
from ran_hf import RANLayer, chain_compiled, chain_cuda_graphs
from ran_hf.cell_chain import ChainWindows
from ran_hf.chain_compiled import chain_compiled as run_compiled
from ran_hf.chain_cuda_graphs import chain_cuda_graphs as run_captured
from ran_hf.chain_eager import chain_eager
from ran_hf.chain_while_loop import chain_while_loop
from conftest import aot_eager_chain_blocks, tiny_config


pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile is unavailable")


def layer_and_windows(num_windows=5, batch_size=2, seed=0):
    """A tiny layer in eval mode and chain inputs of `num_windows` windows in two chunks, the second row ending
    inside its fourth window (key mask and `valid`), with leaves that need a gradient."""
    config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    layer = RANLayer(config, 0).eval()
    heads, head_size, capacity = config.num_attention_heads, config.attention_head_size, config.window_size
    keys = torch.randn(batch_size, num_windows, capacity, heads, head_size, requires_grad=True)
    values = torch.randn(batch_size, num_windows, capacity, heads, head_size, requires_grad=True)
    key_mask = torch.ones(num_windows, batch_size, capacity, dtype=torch.bool)
    key_mask[3, 1, capacity // 2:] = False
    valid = torch.ones(num_windows, batch_size, dtype=torch.bool)
    valid[4:, 1] = False
    has_previous = torch.arange(num_windows)[:, None].expand(num_windows, batch_size) > 0
    windows = ChainWindows(list(keys.split([2, num_windows - 2], 1)), list(values.split([2, num_windows - 2], 1)),
                           key_mask, valid, has_previous, None, num_steps=num_windows)
    s = torch.randn(batch_size, config.hidden_size, requires_grad=True)
    return layer, (s, torch.zeros_like(s)), windows, (keys, values, s)


def run(runner, layer, carry, windows, leaves):
    """The runner's last cell and outputs, and the gradients of their sum of squares w.r.t. the leaves and the
    layer's parameters."""
    (s, _), outputs = runner(type(layer).chain_window, layer, carry, windows)
    results = (s, *outputs)
    if not torch.is_grad_enabled():
        return results, None
    loss = sum(t.square().sum() for t in results)
    gradients = torch.autograd.grad(loss, leaves + tuple(layer.parameters()), allow_unused=True)
    return results, gradients


def assert_same(got, expected, tolerance=1e-6):
    for a, b in zip(got, expected, strict=True):
        if a is None or b is None:
            assert a is None and b is None
        else:
            torch.testing.assert_close(a, b, atol=tolerance, rtol=tolerance)


def test_the_traced_loop_gives_the_eager_chain():
    layer, carry, windows, leaves = layer_and_windows()
    with torch.no_grad():
        expected, _ = run(chain_eager, layer, carry, windows, leaves)
        got, _ = run(chain_while_loop, layer, carry, windows, leaves)
    assert_same(got, expected)


@pytest.mark.parametrize("block_size", [2, 3, 8])
def test_the_compiled_blocks_give_the_eager_chain_and_gradients(block_size, one_thread):
    layer, carry, windows, leaves = layer_and_windows()
    expected, expected_grads = run(chain_eager, layer, carry, windows, leaves)
    with aot_eager_chain_blocks(block_size):
        got, grads = run(run_compiled, layer, carry, windows, leaves)
    assert_same(got, expected)
    assert_same(grads, expected_grads, 1e-5)  # AOTAutograd decomposes the backward: float rounding


def test_the_captured_chain_gives_the_eager_chain_and_gradients(monkeypatch, one_thread):
    """On a CPU through `StaticReplay` (the buffer semantics of `make_graphed_callables`): 5 windows padded to 8."""
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", StaticReplay)
    monkeypatch.setattr(chain_cuda_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(chain_cuda_graphs, "GRAPH_WINDOWS", 8)
    layer, carry, windows, leaves = layer_and_windows()
    expected, expected_grads = run(chain_eager, layer, carry, windows, leaves)
    with aot_eager_chain_blocks(2):
        got, grads = run(run_captured, layer, carry, windows, leaves)
        assert chain_cuda_graphs.num_captures(layer) == 1
    assert_same(got, expected)
    assert_same(grads, expected_grads, 1e-5)  # AOTAutograd decomposes the backward: float rounding


def toy_step(layer, carry, window):
    x, m = window[:2]
    carry = 0.5 * carry + x * m
    return carry, (carry, 2 * x)


@pytest.mark.parametrize("num_steps", [0, 1, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("block_size", [2, 3, 4])
def test_the_blocks_visit_every_window_once_in_order(num_steps, block_size):
    """Blocks of `block_size` windows, the rest one at a time, a last window left out (`num_steps` < 8): the same
    carry, outputs and input gradients as one window at a time, with one block call per whole block."""
    from ran_hf.chain_eager import run_windows

    x = torch.randn(8, 3, requires_grad=True)
    m = torch.rand(8, 3)
    start = torch.zeros(3)
    expected_carry, expected = run_windows(toy_step, None, start, [x, m, None], num_steps)
    torch._dynamo.reset()
    chain_compiled.configure(block_size=block_size, backend="eager")
    try:
        carry, got = chain_compiled.run_blocks(toy_step, None, start, [x, m, None], num_steps)
    finally:
        chain_compiled.configure()
        torch._dynamo.reset()
    assert len(got) == num_steps
    torch.testing.assert_close(carry, expected_carry)
    for y, z in zip(got, expected):
        torch.testing.assert_close(torch.stack(y), torch.stack(z))
    if num_steps:
        loss = lambda c, ys: c.sum() + sum(a.square().sum() + b.sum() for a, b in ys)  # noqa: E731
        (grad,) = torch.autograd.grad(loss(carry, got), x)
        (expected_grad,) = torch.autograd.grad(loss(expected_carry, expected), x)
        torch.testing.assert_close(grad, expected_grad)


def test_configure_rejects_a_bad_block_size():
    with pytest.raises(ValueError, match="`block_size` must be a positive int"):
        chain_compiled.configure(block_size=0)
