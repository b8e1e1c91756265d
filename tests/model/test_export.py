"""torch.export, ONNX and torch.compile of the bidirectional encoder.

Under compile/export the window grid is sized from the sequence length alone (`RANWindowLayout.from_mask(...,
static=True)`) and the cell chain is one `while_loop`, so one exported program or compiled graph serves every
length and padding. Checked at the lengths that exercise the layout: shorter than a window, a multiple of the
window, a remainder merged into the window before (`min_window_size`), a remainder that stays, and padded rows.
"""

import copy
from unittest import mock

import pytest
import torch

from ran_hf import RANConfig, RANForCausalLM, RANForMaskedLM, RANForSequenceClassification, RANModel
from conftest import randomize, readme_block, tiny_config


# tiny_config: window_size 8, min_window_size 3
LENGTHS = {"shorter than W": 5, "2 W": 16, "merged remainder": 18, "kept remainder": 21, "5 W": 40}


def inputs(length, seed=3, rows=2, vocab=97):
    ids = torch.randint(1, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))
    return ids, torch.ones_like(ids)


def padded_inputs():
    """Row 0 left-padded (17 real tokens = 8 + 8 + 1: the remainder merges), row 1 right-padded (13 = 8 + 5: it
    stays a window)."""
    ids, mask = inputs(21, seed=1)
    mask[0, :4] = 0
    mask[1, 13:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def cases():
    return [inputs(length) for length in LENGTHS.values()] + [padded_inputs(), inputs(13, rows=1), inputs(30, rows=3)]


class Outputs(torch.nn.Module):
    """Plain tensor outputs for ONNX: last_hidden_state and pooler_output."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def dynamic_length():
    """A dynamic batch size and sequence length."""
    batch, length = torch.export.Dim("batch", max=1024), torch.export.Dim("length", min=2, max=4096)
    return {"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}


@pytest.fixture(scope="module")
def model():
    return randomize(RANModel(tiny_config())).eval()


def test_static_layout_gives_the_eager_outputs(model, one_thread):
    """The compile/export layout (grid from the shape, a spare window, `while_loop` chain), run eagerly."""
    with torch.no_grad():
        expected = [model(ids, attention_mask=mask) for ids, mask in cases()]
        with mock.patch("ran_hf.modeling_ran.is_compiling", return_value=True):
            got = [model(ids, attention_mask=mask) for ids, mask in cases()]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.last_hidden_state, e.last_hidden_state, atol=1e-5, rtol=0)
        torch.testing.assert_close(g.pooler_output, e.pooler_output, atol=1e-5, rtol=0)
        torch.testing.assert_close(g.last_cell, e.last_cell, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_class", [RANModel, RANForSequenceClassification, RANForMaskedLM])
def test_torch_export_with_a_dynamic_length_matches_eager(model_class, one_thread):
    model = randomize(model_class(tiny_config(num_labels=3))).eval()
    ids, mask = inputs(21)
    program = torch.export.export(model, (ids,), kwargs={"attention_mask": mask}, dynamic_shapes=dynamic_length())
    exported = program.module()
    for ids, mask in cases():
        with torch.no_grad():
            expected = model(ids, attention_mask=mask)[0]
        # the masked-LM logits reach |20| and sum products of that size, so the exported graph's fp32 rounding
        # differs from eager's by up to 1.4e-5 on some CPUs (measured on an AMD EPYC), small logits included:
        # the tolerance scales with the largest logit, still far below a real error
        scale = max(1.0, expected.abs().max().item())
        torch.testing.assert_close(exported(ids, attention_mask=mask)[0], expected, atol=1e-5 * scale, rtol=0)


def test_tracing_exporters_raise_a_clear_error(model):
    """`torch.jit.trace` (the legacy ONNX exporter) would bake one length's window grid into the graph."""
    ids, mask = inputs(21)
    with pytest.raises(RuntimeError, match="dynamo=True"):
        torch.jit.trace(Outputs(model), (ids, mask), check_trace=False)


def test_causal_export_raises_a_clear_error():
    model = RANForCausalLM(tiny_config(is_decoder=True)).eval()
    ids, _ = inputs(21)
    with pytest.raises(Exception, match="causal mode"):
        torch.export.export(model, (ids,), kwargs={"use_cache": False})


def test_compile_has_no_graph_break_and_recompiles_once_across_lengths(model, one_thread):
    """Dynamo-level behaviour (graph breaks, recompiles), checked with the `aot_eager` backend to stay fast."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    ids, mask = inputs(21)
    with torch.no_grad():
        assert torch._dynamo.explain(model)(ids, attention_mask=mask).graph_break_count == 0
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        for ids, mask in [case for case in cases() if case[0].shape[0] == 2]:  # (a new batch size recompiles too)
            torch.testing.assert_close(compiled(ids, attention_mask=mask).last_hidden_state,
                                       model(ids, attention_mask=mask).last_hidden_state, atol=1e-5, rtol=0)
    assert counters["stats"]["unique_graphs"] <= 2  # the first length, then one graph with a symbolic length
    torch._dynamo.reset()


def test_compiled_training_step_gives_the_eager_gradients(one_thread):
    import torch._dynamo

    torch._dynamo.reset()
    model = randomize(RANForSequenceClassification(tiny_config(num_labels=2))).train()
    reference = copy.deepcopy(model)
    ids, mask = padded_inputs()
    labels = torch.tensor([0, 1])
    torch.compile(model, backend="aot_eager")(ids, attention_mask=mask, labels=labels).loss.backward()
    reference(ids, attention_mask=mask, labels=labels).loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
    torch._dynamo.reset()


def test_readme_export_gives_the_eager_shapes_and_meaningful_onnx_names(model, tmp_path, monkeypatch, one_thread):
    """The README's export example, run verbatim on a tiny checkpoint: the exported program and the ONNX model in
    onnxruntime give every output with eager's shape (`cells` without the static grid's spare windows) and values
    (1e-4) at every length and padding, and the ONNX outputs carry the output's field names."""
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model.save_pretrained(tmp_path / "outputs" / "mlm")
    monkeypatch.chdir(tmp_path)
    namespace = {"torch": torch}
    exec(compile(readme_block("export-example"), "README.md:export-example", "exec"), namespace)
    program, names = namespace["program"], namespace["names"]
    assert names == ["last_hidden_state", "pooler_output", "last_cell", "cells"]
    session = onnxruntime.InferenceSession(str(tmp_path / "ran.onnx"), providers=["CPUExecutionProvider"])
    assert [output.name for output in session.get_outputs()] == names
    for ids, mask in cases():
        with torch.no_grad():
            eager = model(ids, attention_mask=mask)
            exported = program.module()(ids, attention_mask=mask)
        onnx_outputs = dict(zip(names, session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})))
        for name in names:
            assert exported[name].shape == eager[name].shape, (name, tuple(ids.shape))
            assert onnx_outputs[name].shape == tuple(eager[name].shape), (name, tuple(ids.shape))
            assert abs(torch.from_numpy(onnx_outputs[name]) - eager[name]).max().item() <= 1e-4, name


# ---------------------------------------------------------------------------------------------------------------------
# torch.compile(dynamic=True)
# ---------------------------------------------------------------------------------------------------------------------
# `torch.compile(model, dynamic=True)`: Dynamo traces every float attribute (norm eps, dropout p, attention
# scaling) as a symbolic float, which `torch._higher_order_ops.while_loop` does not take into its body in torch 2.13,
# so the cell chain runs as a Python loop between compiled graphs there (`ran_hf/chain_while_loop.py`); the graphs around it
# are dynamic in the number of windows. Checked with the `eager` backend: the outputs equal the uncompiled model's at
# two lengths, and the second length runs without a recompilation.


def dynamic_compile_config(**overrides):
    return RANConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     attention_head_size=16, window_size=16, **overrides)


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_dynamic_compile_gives_the_eager_outputs_at_two_lengths(fresh_dynamo, one_thread):
    model = randomize(RANModel(dynamic_compile_config())).eval()
    compiled = torch.compile(model, backend="eager", dynamic=True)
    with torch.no_grad():
        for length, seed in ((100, 0), (37, 1)):
            got, expected = compiled(inputs(length, seed, vocab=500)[0]), model(inputs(length, seed, vocab=500)[0])
            torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)
            torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=0)


def test_dynamic_compile_serves_a_second_length_without_recompiling(fresh_dynamo, one_thread):
    model = randomize(RANModel(dynamic_compile_config())).eval()
    compiled = torch.compile(model, backend="eager", dynamic=True)
    with torch.no_grad():
        compiled(inputs(100, seed=0, vocab=500)[0])
        with torch.compiler.set_stance("fail_on_recompile"):
            compiled(inputs(37, seed=1, vocab=500)[0])
