"""The one layer schedule: gradient checkpointing in both modes, the attention implementations, a cell-chain step
that compiles without graph breaks, the chain's dtype under autocast, and a forward that leaves the process's thread
count alone."""

from unittest import mock

import pytest
import torch

from ran_hf import RANForCausalLM, RANModel
from ran_hf.modeling_ran import RANLayer
from conftest import DEVICE, randomize, tiny_config


def padded_ids(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(1, 97, (length,), generator=generator)
    return ids.to(DEVICE), (ids != 0).long().to(DEVICE)


def loss_of(model, ids, mask):
    out = model(ids, attention_mask=mask)
    if isinstance(model, RANForCausalLM):
        return out.logits.square().mean()
    return out.last_hidden_state.square().mean() + out.pooler_output.square().mean()


@pytest.mark.parametrize("model_class", [RANModel, RANForCausalLM])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_every_checkpointing_mode_gives_every_weight_its_gradient(model_class, use_reentrant):
    """Reentrant checkpointing only tracks tensors a layer returns: the layers return tuples, not a ModelOutput."""
    ids, mask = padded_ids([29, 17], seed=7)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = randomize(model_class(tiny_config()), seed=0).to(DEVICE).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
        loss_of(model, ids, mask).backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    reference, checkpointed = grads
    layer_weights = [name for name in reference if "layers." in name]
    assert len(layer_weights) > 30 and all(reference[name] is not None for name in layer_weights)
    for name, grad in reference.items():
        if grad is None:  # e.g. the tied LM decoder bias alias: then it has none either way
            assert checkpointed[name] is None, name
            continue
        assert checkpointed[name] is not None, f"{name}: no gradient with use_reentrant={use_reentrant}"
        assert torch.allclose(checkpointed[name], grad, atol=1e-6, rtol=1e-5), name


def implementation_outputs(implementation, model_class):
    torch.manual_seed(0)
    model = randomize(model_class(tiny_config()), seed=1).to(DEVICE).eval()
    model.config._attn_implementation = implementation
    ids, mask = padded_ids([29, 9, 17], seed=2)
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
    return out.logits if isinstance(model, RANForCausalLM) else out.last_hidden_state


@pytest.mark.parametrize("model_class", [RANModel, RANForCausalLM])
def test_eager_sdpa_and_flex_attention_agree(model_class):
    eager = implementation_outputs("eager", model_class)
    sdpa = implementation_outputs("sdpa", model_class)
    tolerance = 1e-5 * max(1.0, float(sdpa.abs().max()))  # causal logits reach ~10 with random weights
    assert float((eager - sdpa).abs().max()) <= tolerance
    try:
        flex = implementation_outputs("flex_attention", model_class)
    except Exception:
        # the compiled CPU flex kernel of torch 2.13 fails on a score mask ("index out of bounds ... qSplitSize");
        # flex's uncompiled reference still checks how the model hands its masks to flex attention
        from torch.nn.attention.flex_attention import flex_attention

        import transformers.integrations.flex_attention as flex_integration

        def uncompiled(query, key, value, training=False, **kwargs):
            return flex_attention(query, key, value, **kwargs)

        with mock.patch.object(flex_integration, "compile_friendly_flex_attention", uncompiled):
            flex = implementation_outputs("flex_attention", model_class)
    assert float((flex - sdpa).abs().max()) <= tolerance


def test_an_attention_implementation_the_model_cannot_honour_raises():
    model = RANModel(tiny_config()).to(DEVICE).eval()
    ids, mask = padded_ids([12])
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="cannot run `attn_implementation='flash_attention_2'`"):
        model(ids, attention_mask=mask)
    with pytest.raises(ValueError):  # and Transformers refuses it up front
        RANModel(tiny_config()).set_attn_implementation("flash_attention_2")


def test_a_cell_chain_step_compiles_without_graph_breaks():
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile is unavailable")
    torch.manual_seed(0)
    layer = randomize(RANModel(tiny_config()), seed=0).eval().layers[0]
    generator = torch.Generator().manual_seed(0)
    batch, keys, heads, head_size, hidden = 2, 8, 4, 8, 32
    carry = (torch.randn(batch, hidden, generator=generator), torch.randn(batch, hidden, generator=generator))
    window = (torch.randn(batch, keys, heads, head_size, generator=generator),
              torch.randn(batch, keys, heads, head_size, generator=generator),
              torch.rand(batch, keys, generator=generator) > 0.3, torch.tensor([True, False]),
              torch.tensor([False, True]), None)
    torch._dynamo.reset()
    compiled = torch.compile(layer.chain_window, fullgraph=True, backend="aot_eager")  # a graph break raises
    with torch.no_grad():
        got, expected = compiled(carry, window), layer.chain_window(carry, window)
    for a, b in zip((*got[0], *got[1]), (*expected[0], *expected[1]), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("model_class", [RANModel, RANForCausalLM])
def test_under_bf16_autocast_the_cell_chain_runs_in_the_weights_dtype(model_class):
    """Autocast would run the chain's mat-vecs in bf16 and round the cell at every window, a rounding that compounds
    through eq. 7 and the layers; the chain runs in float32 instead (its inputs, its carried cell, the last cell and
    the causal state's cell), while the tokens' attention still runs in bf16."""
    model = randomize(model_class(tiny_config()), seed=3).to(DEVICE).eval()
    ids, mask = padded_ids([61, 40], seed=4)
    seen = []
    original = RANLayer.chain_window

    def recording_chain_window(self, carry, window):
        seen.append((carry[0].dtype, carry[1].dtype, window[0].dtype, window[1].dtype, torch.is_autocast_enabled(
            DEVICE.type)))
        return original(self, carry, window)

    with mock.patch.object(RANLayer, "chain_window", recording_chain_window), torch.no_grad(), torch.autocast(
            DEVICE.type, dtype=torch.bfloat16):
        out = model(ids, attention_mask=mask, **({"use_cache": True} if model_class is RANForCausalLM else {}))
        if model_class is RANForCausalLM:  # a decoding step from the cached state
            step = model(ids[:, :1], cache=out.cache, use_cache=True)
            assert torch.isfinite(step.logits).all()
            assert all(state.cell.dtype == torch.float32 for state in step.cache.states)
        else:
            assert out.last_cell.dtype == torch.float32
            assert out.last_hidden_state.dtype == torch.bfloat16  # the tokens' path still runs in bf16
    assert len(seen) >= 2 * model.config.num_hidden_layers
    assert set(seen) == {(torch.float32, torch.float32, torch.float32, torch.float32, False)}


def test_forward_leaves_the_thread_count_alone(monkeypatch):
    """`torch.set_num_threads` is process-wide: a forward must not change it (two models may run in two threads)."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    ids, mask = padded_ids([40, 21])
    for model_class in (RANModel, RANForCausalLM):
        model = model_class(tiny_config()).to(DEVICE).eval()
        with torch.no_grad():
            out = model(ids, attention_mask=mask, use_cache=True) if model_class is RANForCausalLM else None
            if out is not None:  # a decoding step too
                model(ids[:, :1], cache=out.cache, use_cache=True)
            else:
                model(ids, attention_mask=mask)
    assert calls == []
