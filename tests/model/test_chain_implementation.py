"""`config.chain_implementation="compiled"`: the cell chain's window step through `torch.compile` gives eager's
outputs and gradients (bidirectional with padding, causal, checkpointed), compiles one graph for every layer, and
leaves the eager default alone."""

import functools

import pytest
import torch

from ran_hf import chain_compiled
from ran_hf import RANForCausalLM, RANForSequenceClassification, RANModel
from conftest import (DEVICE, assert_gradients_close, chain_twins, loss_and_gradients, pad_batch, random_documents,
                      randomize, tiny_config, aot_eager_chain_blocks)


pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile is unavailable")


@pytest.fixture
def aot_eager_chain():
    """The compiled chain run by eager kernels, in blocks of 2 windows (`aot_eager_chain_blocks`); yields Dynamo's
    counters."""
    from torch._dynamo.utils import counters

    with aot_eager_chain_blocks():
        counters.clear()
        yield counters


twins = functools.partial(chain_twins, chain="compiled")


def padded_batch():
    """Two rows: one of 3 full windows and a remainder, one ending inside its second window (pads on the right)."""
    return pad_batch(random_documents([29, 13], seed=3))


@pytest.mark.parametrize("model_class", [RANModel, RANForCausalLM], ids=["bidirectional", "causal"])
def test_compiled_chain_gives_the_eager_outputs_and_gradients(aot_eager_chain, model_class, one_thread):
    """Padded batches of 5 to 8 windows: blocks of 2 and a window left over or not. A block graph sums a weight's
    gradient over its windows before autograd adds the blocks, so gradients agree up to that reordering."""
    eager, compiled = twins(model_class)
    graphs = []
    for lengths, seed in (([53, 20], 3), ([45, 13], 4), ([61, 29], 5)):
        ids, mask = pad_batch(random_documents(lengths, seed=seed))
        expected, expected_grads = loss_and_gradients(eager, ids, mask)
        got, got_grads = loss_and_gradients(compiled, ids, mask)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
        assert_gradients_close(got_grads, expected_grads, 1e-6)  # (gradients reach 1e4 in the causal case)
        graphs.append(aot_eager_chain["stats"]["unique_graphs"])
    # every layer's chain went through the two compiled functions: a block graph for each layer's first block (its
    # incoming `c_0` needs no gradient) and one for the later blocks, and a one-window graph for the window left
    # over; shared by the three layers and reused by every number of windows
    assert graphs[1:] == [3, 3]


def test_compiled_chain_serves_inference_and_a_checkpointed_training_step(aot_eager_chain, one_thread):
    eager, compiled = twins(RANForSequenceClassification, num_labels=2)
    ids, mask = padded_batch()
    with torch.inference_mode():
        torch.testing.assert_close(compiled.eval()(ids, attention_mask=mask).logits,
                                   eager.eval()(ids, attention_mask=mask).logits, atol=1e-6, rtol=1e-6)
    for model in (eager, compiled):
        model.train().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    labels = torch.tensor([0, 1], device=DEVICE)
    compiled(ids, attention_mask=mask, labels=labels).loss.backward()
    eager(ids, attention_mask=mask, labels=labels).loss.backward()
    assert_gradients_close({name: p.grad for name, p in compiled.named_parameters()},
                           {name: p.grad for name, p in eager.named_parameters()}, 1e-6)


def test_a_longer_single_row_reuses_the_compiled_graph(aot_eager_chain, one_thread):
    """Each window's (and block's) inputs get fresh strides, also with a batch of one (whose batch axis keeps any
    stride): one block graph and one one-window graph serve 3 and 6 windows."""
    eager, compiled = twins(RANModel)
    with torch.no_grad():
        for length in (20, 45):
            ids, mask = pad_batch(random_documents([length], seed=length))
            torch.testing.assert_close(compiled.eval()(ids, attention_mask=mask).last_hidden_state,
                                       eager.eval()(ids, attention_mask=mask).last_hidden_state, atol=1e-6, rtol=1e-6)
    assert aot_eager_chain["stats"]["unique_graphs"] == 2


def test_compiled_chain_with_inductor_matches_eager_up_to_rounding(monkeypatch, one_thread):
    """The shipped path (inductor kernels), in blocks of 2 windows and one window left over: float32 within
    rounding of eager, forward and every gradient."""
    import torch._dynamo

    torch._dynamo.reset()
    chain_compiled.configure(block_size=2)
    try:
        eager, compiled = twins(RANModel)
        ids, mask = pad_batch(random_documents([37, 13], seed=3))  # 5 windows
        expected, expected_grads = loss_and_gradients(eager, ids, mask)
        got, got_grads = loss_and_gradients(compiled, ids, mask)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        assert_gradients_close(got_grads, expected_grads, 1e-5)  # measured: 1.4e-6 at most
    finally:
        chain_compiled.configure()
        torch._dynamo.reset()


def test_eager_is_the_default_and_never_compiles(monkeypatch, one_thread):
    def fail(*args):
        raise AssertionError("the eager chain reached the compiled one")

    monkeypatch.setattr(chain_compiled, "chain_compiled", fail)
    model = randomize(RANModel(tiny_config())).to(DEVICE).eval()
    assert model.config.chain_implementation == "eager"
    ids, mask = padded_batch()
    model(ids, attention_mask=mask)


def test_an_unknown_chain_implementation_raises_naming_the_choices():
    with pytest.raises(ValueError, match=r"`chain_implementation` must be one of \('eager', 'compiled', 'cuda_graphs'\)"):
        tiny_config(chain_implementation="graphs")
