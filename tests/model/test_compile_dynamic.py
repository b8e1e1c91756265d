"""`torch.compile(model, dynamic=True)`: Dynamo traces every float attribute (norm eps, dropout p, attention
scaling) as a symbolic float, which `torch._higher_order_ops.while_loop` does not take into its body in torch 2.13,
so the cell chain runs as a Python loop outside the graph there (`run_chain_while_loop`). Checked with the `eager`
backend: the outputs equal the uncompiled model's at several lengths."""

import pytest
import torch

from ran_hf import RANConfig, RANModel
from conftest import randomize


def config(**overrides):
    return RANConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     attention_head_size=16, window_size=16, **overrides)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def ids(length, rows=2, seed=0):
    return torch.randint(1, 500, (rows, length), generator=torch.Generator().manual_seed(seed))


def test_dynamic_compile_gives_the_eager_outputs_at_two_lengths(one_thread):
    model = randomize(RANModel(config())).eval()
    compiled = torch.compile(model, backend="eager", dynamic=True)
    with torch.no_grad():
        for length, seed in ((100, 0), (37, 1)):
            got, expected = compiled(ids(length, seed=seed)), model(ids(length, seed=seed))
            torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)
            torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=0)


def test_dynamic_compile_serves_a_second_length_without_recompiling(one_thread):
    model = randomize(RANModel(config())).eval()
    compiled = torch.compile(model, backend="eager", dynamic=True)
    with torch.no_grad():
        compiled(ids(100))
        with torch.compiler.set_stance("fail_on_recompile"):
            compiled(ids(37, seed=1))
