"""`config.chain_implementation="cuda_graphs"`: each layer's whole cell chain replayed from a capture gives eager's
outputs and gradients, pads its windows, keeps a bounded number of captures, and never lets a replay corrupt a
backward still to come.

On a CPU, `torch.cuda.make_graphed_callables` is replaced by `benchmarks.static_replay.StaticReplay`, which keeps
its documented contract without CUDA (static inputs and outputs; the backward reads what the last forward left).
With `RAN_TEST_DEVICE=cuda` the real function captures."""

import functools

import pytest
import torch

from ran_hf import chain_cuda_graphs
from benchmarks.static_replay import StaticReplay
from ran_hf import RANForCausalLM, RANForSequenceClassification, RANModel
from conftest import (DEVICE, assert_gradients_close, chain_twins, loss_and_gradients, pad_batch, random_documents,
                      tiny_config, aot_eager_chain_blocks)


pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile is unavailable")


@pytest.fixture
def captured_chain(monkeypatch, one_thread):
    """The compiled chain run by eager kernels in blocks of 2 windows (`aot_eager_chain_blocks`), captures padded to
    multiples of 4 windows and kept 2 per layer; on a CPU, captures by `StaticReplay`."""
    monkeypatch.setattr(chain_cuda_graphs, "GRAPH_WINDOWS", 4)
    if DEVICE.type != "cuda":
        monkeypatch.setattr(torch.cuda, "make_graphed_callables", StaticReplay)
        monkeypatch.setattr(chain_cuda_graphs, "GRAPH_DEVICES", ("cuda", DEVICE.type))
    StaticReplay.captures = 0
    with aot_eager_chain_blocks():
        yield


twins = functools.partial(chain_twins, chain="cuda_graphs")


def captures(model) -> int:
    """Captures the model's layers hold now."""
    return chain_cuda_graphs.num_captures(model)


@pytest.mark.parametrize("model_class", [RANModel, RANForCausalLM], ids=["bidirectional", "causal"])
def test_captured_chain_gives_the_eager_outputs_and_gradients(captured_chain, model_class):
    """Padded batches of 3 to 8 windows: padded to 4 or 8 windows (so some captures run windows no row has), a
    capture reused by a second batch of the same padded count, and the oldest of 3 counts dropped."""
    eager, graphed = twins(model_class)
    for lengths, seed in (([53, 20], 3), ([45, 13], 4), ([29, 13], 5), ([61, 29], 6), ([20, 5], 7)):
        ids, mask = pad_batch(random_documents(lengths, seed=seed))
        expected, expected_grads = loss_and_gradients(eager, ids, mask)
        got, got_grads = loss_and_gradients(graphed, ids, mask)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
        assert_gradients_close(got_grads, expected_grads, 1e-6)
        assert captures(graphed) <= 3 * chain_cuda_graphs.GRAPHS_PER_LAYER
    if DEVICE.type != "cuda":  # 8 windows, 8 again, 4, 8 again and 4 again: 2 captures a layer, none dropped
        assert StaticReplay.captures == 2 * 3


def test_a_dropped_capture_warns_how_to_keep_one(captured_chain, monkeypatch, caplog):
    monkeypatch.setattr(chain_cuda_graphs, "GRAPHS_PER_LAYER", 1)
    chain_cuda_graphs.logger.warning_once.cache_clear()
    _, graphed = twins(RANModel)
    with caplog.at_level("WARNING"), torch.no_grad():
        for lengths in ([53, 20], [20, 5]):  # 8 windows, then 4
            graphed.eval()(*pad_batch(random_documents(lengths, seed=3)))
    assert "dropped a capture to make room for a new one" in caplog.text and "max_length" in caplog.text
    assert captures(graphed) == 3


def test_a_second_forward_before_the_first_backward_runs_the_compiled_chain(captured_chain):
    """Two forwards, then one backward of both: a replay between a forward and its backward would leave that
    backward reading the second call's activations (with `StaticReplay` as with a CUDA graph)."""
    eager, graphed = twins(RANModel)
    first, second = (pad_batch(random_documents([53, 20], seed=seed)) for seed in (3, 4))  # one capture serves both
    gradients = []
    for model in (eager, graphed):
        model.zero_grad(set_to_none=True)
        loss = sum(model(ids, attention_mask=mask).last_hidden_state.square().sum() for ids, mask in (first, second))
        loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters() if p.grad is not None})
    assert_gradients_close(gradients[1], gradients[0], 1e-6)
    if DEVICE.type != "cuda":
        assert StaticReplay.captures == 3  # the second forward of each layer ran compiled, not replayed
    # after that backward every capture is free again: the next step replays
    loss_and_gradients(graphed, *first)
    assert chain_cuda_graphs.pending_backwards(graphed) == 0


def test_an_output_held_by_the_caller_survives_the_next_replay(captured_chain):
    eager, graphed = twins(RANModel)
    ids, mask = pad_batch(random_documents([53, 20], seed=3))
    other_ids, other_mask = pad_batch(random_documents([53, 20], seed=4))  # the same capture
    with torch.no_grad():
        held = graphed.eval()(ids, attention_mask=mask, output_hidden_states=True)
        graphed(other_ids, attention_mask=other_mask)
        expected = eager.eval()(ids, attention_mask=mask, output_hidden_states=True)
    for name in ("last_cell", "cells", "pooler_output"):  # the first two are the chain's own outputs
        torch.testing.assert_close(held[name], expected[name], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(held.hidden_states, expected.hidden_states, atol=1e-6, rtol=1e-6)


def test_checkpointing_and_a_cpu_run_the_compiled_chain_with_a_warning(captured_chain, monkeypatch, caplog):
    eager, graphed = twins(RANForSequenceClassification, num_labels=2)
    for model in (eager, graphed):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids, mask = pad_batch(random_documents([53, 20], seed=3))
    labels = torch.tensor([0, 1], device=DEVICE)
    chain_cuda_graphs.logger.warning_once.cache_clear()
    with caplog.at_level("WARNING"):
        graphed(ids, attention_mask=mask, labels=labels).loss.backward()
    eager(ids, attention_mask=mask, labels=labels).loss.backward()
    assert_gradients_close({name: p.grad for name, p in graphed.named_parameters()},
                           {name: p.grad for name, p in eager.named_parameters()}, 1e-6)
    assert captures(graphed) == 0
    assert "checkpointing True) the chain runs compiled" in caplog.text
    monkeypatch.setattr(chain_cuda_graphs, "GRAPH_DEVICES", ())
    chain_cuda_graphs.logger.warning_once.cache_clear()
    with caplog.at_level("WARNING"), torch.no_grad():
        graphed.eval()(ids, attention_mask=mask)
    assert f"(device {DEVICE.type}, checkpointing False) the chain runs compiled" in caplog.text
    assert captures(graphed) == 0


def test_a_dropped_model_drops_its_captures(captured_chain):
    import gc

    _, graphed = twins(RANModel)
    ids, mask = pad_batch(random_documents([53, 20], seed=3))
    with torch.no_grad():
        graphed.eval()(ids, attention_mask=mask)
    assert captures(graphed) == 3
    del graphed
    gc.collect()
    assert len(chain_cuda_graphs._GRAPHS) == 0


def test_cuda_graphs_is_a_chain_implementation():
    assert tiny_config(chain_implementation="cuda_graphs").chain_implementation == "cuda_graphs"


def test_gradients_accumulated_over_two_backwards_match_eager(captured_chain):
    """Two micro-batches of the same shape, one backward each, no zeroing between: the captured backward writes
    every gradient into the same buffers, so each must be copied out before the next replay."""
    eager, graphed = twins(RANModel)
    batches = [pad_batch(random_documents([53, 20], seed=seed)) for seed in (3, 4)]
    gradients = []
    for model in (eager, graphed):
        model.zero_grad(set_to_none=True)
        for ids, mask in batches:
            model(ids, attention_mask=mask).last_hidden_state.square().sum().backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert_gradients_close(gradients[1], gradients[0], 1e-6)


@pytest.mark.skipif(DEVICE.type == "cuda", reason="on CUDA every test above runs the real capture")
def test_the_real_make_graphed_callables_takes_the_chain_module(captured_chain, monkeypatch):
    """`torch.cuda.make_graphed_callables` itself (not the stand-in), its CUDA calls replaced by no-ops: a capture
    runs eagerly and a replay runs nothing, so a replay returns what the capture computed from the same inputs. It
    checks what passes between ran_hf and torch (the module, its parameters, bool inputs, unused parameters, the
    bf16 autocast around the layer), not the values of a backward."""
    import contextlib

    import torch.cuda.graphs

    class NoGraph:
        def replay(self):
            pass

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", torch.cuda.graphs.make_graphed_callables)
    for name, value in (("synchronize", lambda *args: None), ("Stream", lambda *args: None),
                        ("stream", lambda stream: contextlib.nullcontext()), ("CUDAGraph", NoGraph),
                        ("graph", lambda graph, pool=None: contextlib.nullcontext())):
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(torch.cuda.graphs, "graph_pool_handle", lambda: None)
    eager, graphed = twins(RANModel)
    ids, mask = pad_batch(random_documents([53, 20], seed=3))
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):  # the chain turns autocast off, as the function needs
        graphed(ids, attention_mask=mask)  # the capture
        out = graphed(ids, attention_mask=mask)  # a replay: the outputs the capture left for these inputs
        expected = eager(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(out.last_hidden_state, expected, atol=1e-6, rtol=1e-6)
    for hidden in (out.last_hidden_state, expected):
        hidden.float().square().sum().backward()
    # the same parameters get a gradient (those of the chain through the captured backward)
    assert [n for n, p in graphed.named_parameters() if p.grad is not None] == [
        n for n, p in eager.named_parameters() if p.grad is not None]
    assert chain_cuda_graphs.num_captures(graphed) > 0 and chain_cuda_graphs.pending_backwards(graphed) == 0
