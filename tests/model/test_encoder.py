"""RANModel: fast path against the window-by-window oracle, padding and batch invariance, gradient checkpointing,
and clear errors for bad input."""

import pytest
import torch

from ran_hf import RANConfig, RANModel
from conftest import DEVICE, make_encoder, max_abs_error, pad_batch, random_documents, tiny_config
from ran_hf import reference as oracle
from run_scripts.helpers.recipes import RECIPES


TOLERANCE = 1e-5


def assert_close(a, b, what):
    err = max_abs_error(a, b)
    assert err <= TOLERANCE, f"{what}: max abs error {err:.3g}"


# ---------------------------------------------------------------------------------------------------------------------
# fast path == oracle
# ---------------------------------------------------------------------------------------------------------------------

CONFIGS = {
    "default": dict(),
    "H*d != D": dict(num_attention_heads=3, attention_head_size=6),
    "one layer, no merge": dict(num_hidden_layers=1, min_window_size=0),
    "no memory review": dict(use_memory_review=False),
    "ablations": dict(use_rotary=False, use_cell_residual=False, pooler_mode="token_mean"),
    "pooling mean/max": dict(cell_pooling="max", pooler_mode="cell_mean", num_hidden_layers=3),
    "large merge": dict(window_size=16, min_window_size=16, cell_pooling="mean"),
}
# L < W, L = W, L = k*W, remainders below and above min_window_size, W < L < W + mws
LENGTHS = [5, 8, 9, 10, 11, 24, 26, 29, 47]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fast_path_equals_window_by_window_oracle(name):
    model = make_encoder(**CONFIGS[name])
    docs = random_documents(LENGTHS)
    for doc in docs:
        with torch.no_grad():
            out = model(doc[None])
        ref = oracle.encode(model, doc)
        assert_close(out.last_hidden_state[0], ref["last_hidden_state"], f"{name} L={len(doc)} tokens")
        assert_close(out.last_cell[0], ref["last_cell"], f"{name} L={len(doc)} last_cell")
        assert_close(out.cells[0], ref["cells"], f"{name} L={len(doc)} cells")
        assert_close(out.pooler_output[0], ref["pooler_output"], f"{name} L={len(doc)} pooler")


def test_fast_path_equals_oracle_on_a_padded_batch_and_with_eager_attention():
    model = make_encoder(num_attention_heads=3, attention_head_size=6)
    docs = random_documents(LENGTHS, seed=1)
    ids, mask = pad_batch(docs)
    with torch.no_grad():
        fast = model(ids, attention_mask=mask)
        eager = model(ids, attention_mask=mask, output_attentions=True)
    for i, doc in enumerate(docs):
        ref = oracle.encode(model, doc)
        for out in (fast, eager):
            assert_close(out.last_hidden_state[i, : len(doc)], ref["last_hidden_state"], f"row {i}")
            assert_close(out.pooler_output[i], ref["pooler_output"], f"row {i} pooler")
            assert_close(out.cells[i, : len(ref["cells"])], ref["cells"], f"row {i} cells")
    assert len(eager.attentions) == 2 and eager.attentions[0].shape[:3] == (len(docs), fast.cells.shape[1], 3)
    probs = eager.attentions[0]
    assert torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-5)


@pytest.mark.parametrize("chunk_tokens", [1, 20])  # one window per chunk; 2 or 3 windows per chunk
def test_window_chunks_on_cpu_change_nothing(monkeypatch, chunk_tokens):
    """The CPU path runs the token-parallel stages in chunks of windows; outputs, attentions and gradients must be
    those of a single chunk (and of the oracle), with padding and merged windows in the batch."""
    from ran_hf import window_layout

    docs = random_documents([47, 29, 9, 26], seed=3)
    ids, mask = pad_batch(docs)
    results = {}
    for chunk in (10**9, chunk_tokens):
        monkeypatch.setattr(window_layout, "CPU_TOKEN_CHUNK", chunk)
        model = make_encoder(num_attention_heads=3, attention_head_size=6, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0).train()
        out = model(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
        (out.last_hidden_state.square().mean() + out.pooler_output.square().mean()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[chunk] = (out, grads)
    (whole, whole_grads), (chunked, chunked_grads) = results[10**9], results[chunk_tokens]
    for name in ("last_hidden_state", "pooler_output", "last_cell", "cells"):
        assert_close(chunked[name], whole[name], f"{name}, chunks of {chunk_tokens} tokens")
    for a, b in zip(chunked.attentions + chunked.hidden_states, whole.attentions + whole.hidden_states):
        assert_close(a, b, "attentions / hidden states")
    for name in whole_grads:
        assert torch.allclose(chunked_grads[name], whole_grads[name], atol=1e-6, rtol=1e-5), name
    ref = oracle.encode(model.eval(), docs[0])
    assert_close(chunked.last_hidden_state[0, : len(docs[0])].detach(), ref["last_hidden_state"], "oracle")


def test_inputs_embeds_and_initial_cell_match_oracle():
    model = make_encoder()
    embeds = torch.randn(1, 29, 32).to(DEVICE)
    cell = torch.randn(1, 32).to(DEVICE)
    with torch.no_grad():
        out = model(inputs_embeds=embeds, initial_cell=cell)
    ref = oracle.encode(model, embeds=embeds[0], initial_cell=cell[0])
    assert_close(out.last_hidden_state[0], ref["last_hidden_state"], "inputs_embeds + initial_cell")
    assert_close(out.pooler_output[0], ref["pooler_output"], "pooler")


def test_initial_cell_is_decided_per_row():
    """A zero initial cell means 'none' for that row only (the authors decide for the whole batch)."""
    model = make_encoder()
    ids = random_documents([20, 20], seed=3)
    ids = torch.stack(ids)
    cell = torch.zeros(2, 32)
    cell[1] = torch.randn(32)
    cell = cell.to(DEVICE)
    with torch.no_grad():
        batched = model(ids, initial_cell=cell)
        alone = model(ids[:1])
        seeded = model(ids[1:], initial_cell=cell[1:])
    assert_close(batched.last_hidden_state[0], alone.last_hidden_state[0], "row without a cell")
    assert_close(batched.last_hidden_state[1], seeded.last_hidden_state[0], "row with a cell")
    assert float((alone.last_hidden_state[0] - seeded.last_hidden_state[0]).abs().max()) > 1e-3


# ---------------------------------------------------------------------------------------------------------------------
# padding and batch invariance
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [7, 26, 29])
@pytest.mark.parametrize("options", [{}, RECIPES["from-scratch-average"].config],
                         ids=["authors", "from-scratch-average"])
def test_outputs_do_not_depend_on_padding_or_batch_mates(length, options):
    """One document alone, right-padded across window and merge boundaries, left-padded, and batched with longer
    documents: identical real-token outputs, last_cell, cells and pooler_output (the authors' cell transform, and
    the mean of the token outputs that the `from-scratch-average` recipe uses as the document vector)."""
    model = make_encoder(num_hidden_layers=2, **options)
    (doc,), others = random_documents([length], seed=5), random_documents([40, 63], seed=6)
    with torch.no_grad():
        alone = model(doc[None])
    n_windows = alone.cells.shape[1]
    variants = [pad_batch([doc], length + extra) for extra in (1, 2, 3, 8, 11, 33)]
    variants += [pad_batch([doc], length + 9, left=True), pad_batch([doc] + others),
                 pad_batch(others + [doc], left=True)]
    for ids, mask in variants:
        row = next(i for i in range(len(ids)) if int(mask[i].sum()) == length)
        with torch.no_grad():
            out = model(ids, attention_mask=mask)
        real = mask[row].bool()
        assert_close(out.last_hidden_state[row][real], alone.last_hidden_state[0], f"tokens, {tuple(ids.shape)}")
        assert_close(out.last_cell[row], alone.last_cell[0], "last_cell")
        assert_close(out.pooler_output[row], alone.pooler_output[0], "pooler_output")
        assert_close(out.cells[row, :n_windows], alone.cells[0], "cells")
        assert float(out.cells[row, n_windows:].abs().sum()) == 0.0
        assert float(out.last_hidden_state[row][~real].abs().sum()) == 0.0


def test_default_mask_comes_from_pad_token_id():
    model = make_encoder()
    ids, mask = pad_batch(random_documents([12, 30], seed=2))
    with torch.no_grad():
        assert_close(model(ids).last_hidden_state, model(ids, attention_mask=mask).last_hidden_state, "default mask")


def test_all_pad_row_is_finite_and_does_not_disturb_the_batch():
    model = make_encoder()
    doc = random_documents([21], seed=4)[0]
    ids = torch.zeros(2, 21, dtype=torch.long, device=DEVICE)
    ids[1] = doc
    with torch.no_grad():
        out = model(ids)
        alone = model(doc[None])
    for value in out.to_tuple():
        assert torch.isfinite(value).all()
    assert float(out.last_hidden_state[0].abs().max()) == 0.0  # no real token: zero outputs
    assert float(out.cells[0].abs().max()) == 0.0  # no window: empty history
    assert_close(out.last_hidden_state[1], alone.last_hidden_state[0], "batch-mate of an all-pad row")


# ---------------------------------------------------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------------------------------------------------


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = pad_batch(random_documents([29, 17], seed=7))
    grads = []
    for checkpointing in (False, True):
        model = make_encoder()
        model.train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in model.layers)
        out = model(ids, attention_mask=mask)
        (out.last_hidden_state.square().mean() + out.pooler_output.square().mean()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 20
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5), name


def test_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    model = RANModel(tiny_config(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)).to(DEVICE)
    ids = random_documents([30], seed=8)[0][None]
    model.train()
    with torch.no_grad():
        a, b = model(ids).last_hidden_state, model(ids).last_hidden_state
    assert float((a - b).abs().max()) > 1e-4
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


# ---------------------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(), ValueError, "exactly one of `input_ids` and `inputs_embeds`"),
        (dict(input_ids=torch.ones(1, 5, dtype=torch.long), inputs_embeds=torch.zeros(1, 5, 32)), ValueError,
         "exactly one"),
        (dict(input_ids=torch.ones(1, 5, dtype=torch.long), attention_mask=torch.ones(1, 6)), ValueError,
         "`attention_mask` must have the shape"),
        (dict(input_ids=torch.full((1, 5), 97)), ValueError, r"`input_ids` must lie in \[0, vocab_size=97\)"),
        (dict(input_ids=torch.full((1, 5), -1)), ValueError, "`input_ids` must lie"),
        (dict(input_ids=torch.ones(1, 0, dtype=torch.long)), ValueError, "the input is empty"),
        (dict(input_ids=torch.ones(5, dtype=torch.long)), TypeError, "`input_ids` must be an integer tensor"),
        (dict(input_ids=torch.ones(1, 5)), TypeError, "`input_ids` must be an integer tensor"),
        (dict(input_ids=torch.ones(2, 5, dtype=torch.long), initial_cell=torch.zeros(2, 31)), ValueError,
         "`initial_cell` must have shape"),
        (dict(input_ids=torch.ones(2, 5, dtype=torch.long), initial_cell=torch.zeros(32)), ValueError,
         "`initial_cell` must have shape"),
        (dict(inputs_embeds=torch.zeros(1, 5, 31)), ValueError, "`inputs_embeds` must be"),
        (dict(input_ids=torch.ones(1, 5, dtype=torch.long), attention_mask=torch.full((1, 5), 2)), ValueError,
         "only 0"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_encoder()(**kwargs)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(window_size=0), "window_size"),
        (dict(hidden_size=-4), "hidden_size"),
        (dict(min_window_size=9), "min_window_size"),
        (dict(attention_head_size=7), "attention_head_size"),
        (dict(cell_pooling="first"), "cell_pooling"),
        (dict(pooler_pooling="sum"), "pooler_pooling"),
        (dict(pooler_type="cls"), "pooler_type"),
        (dict(pooler_mode="cls"), "pooler_mode"),
        (dict(pooler_mode="token_mean", pooler_pooling="mean"), "pooler_mode"),
        (dict(hidden_act="nope"), "hidden_act"),
        (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps"),
        (dict(pad_token_id=500), "pad_token_id"),
    ],
)
def test_invalid_config_values_raise_at_construction(overrides, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**overrides)


def test_config_round_trip_and_auto_classes(tmp_path):
    from transformers import AutoConfig, AutoModel

    model = make_encoder(use_memory_review=False, cell_pooling="mean")
    model.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, RANConfig) and config.cell_pooling == "mean" and not config.use_memory_review
    loaded = AutoModel.from_pretrained(tmp_path).to(DEVICE).eval()
    assert isinstance(loaded, RANModel)
    ids = random_documents([19])[0][None]
    with torch.no_grad():
        assert_close(loaded(ids).last_hidden_state, model(ids).last_hidden_state, "reloaded model")
