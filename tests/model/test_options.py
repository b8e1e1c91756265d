"""Opt-in architecture options that are not the authors': `memory_review_residual`.

Each option: fast path == window-by-window oracle, padding invariance, causal no-leak and incremental == full where
it applies, the default leaves the authors' computation untouched, and bad values raise a `ValueError` naming it."""

import pytest
import torch

from ran_hf import RANConfig, RANForCausalLM
from ran_hf import reference as oracle
from conftest import DEVICE, make_encoder, max_abs_error, pad_batch, random_documents, randomize, tiny_config


TOLERANCE = 1e-5
LENGTHS = [5, 8, 11, 26, 29]  # below W, = W, merged remainder (min_window_size 3), several windows


@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_memory_review_residual_fast_path_equals_oracle(pooling):
    model = make_encoder(memory_review_residual=True, pooler_mode=f"cell_{pooling}", num_hidden_layers=3)
    for doc in random_documents(LENGTHS):
        with torch.no_grad():
            out = model(doc[None])
        ref = oracle.encode(model, doc)
        assert max_abs_error(out.last_hidden_state[0], ref["last_hidden_state"]) <= TOLERANCE
        assert max_abs_error(out.pooler_output[0], ref["pooler_output"]) <= TOLERANCE


def test_memory_review_residual_changes_the_output_and_the_default_is_the_authors():
    """Same weights: the option moves the outputs (so the test above is not vacuous), and off is the authors' model."""
    doc = random_documents([29])[0][None]
    plain, residual = make_encoder(), make_encoder(memory_review_residual=True)
    residual.load_state_dict(plain.state_dict())  # the option adds no weight
    with torch.no_grad():
        assert max_abs_error(plain(doc).last_hidden_state, residual(doc).last_hidden_state) > 1e-2
        reference = oracle.encode(plain, doc[0])["last_hidden_state"]
        assert max_abs_error(plain(doc).last_hidden_state, reference) <= TOLERANCE
    assert RANConfig().memory_review_residual is False


@pytest.mark.parametrize("left", [False, True])
def test_memory_review_residual_padding_invariance(left):
    model = make_encoder(memory_review_residual=True)
    docs = random_documents(LENGTHS, seed=1)
    width = max(map(len, docs)) + 3
    ids, mask = pad_batch(docs, width, left=left)
    with torch.no_grad():
        batched = model(ids, attention_mask=mask)
        for i, d in enumerate(docs):
            alone = model(d[None])
            rows = slice(width - len(d), width) if left else slice(0, len(d))
            assert max_abs_error(batched.last_hidden_state[i, rows], alone.last_hidden_state[0]) <= TOLERANCE
            assert max_abs_error(batched.pooler_output[i], alone.pooler_output[0]) <= TOLERANCE


def test_memory_review_residual_causal_no_leak_and_incremental_equals_full():
    torch.manual_seed(0)
    config = tiny_config(window_size=8, memory_review_residual=True, num_hidden_layers=2)
    model = randomize(RANForCausalLM(config), seed=0).eval().to(device=DEVICE, dtype=torch.float64)
    ids = torch.randint(1, 97, (2, 30), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        full = model(ids).logits
        changed = ids.clone()
        changed[:, 17] = changed[:, 17] % 96 + 1
        assert torch.equal(model(changed).logits[:, :17], full[:, :17])
        out = model(ids[:, :1], use_cache=True)
        steps = [out.logits]
        for t in range(1, ids.shape[1]):
            out = model(ids[:, t: t + 1], cache=out.cache, use_cache=True)
            steps.append(out.logits)
    assert max_abs_error(torch.cat(steps, 1), full) < 1e-10


@pytest.mark.parametrize(
    "overrides, option",
    [
        (dict(memory_review_residual=True, use_memory_review=False), "memory_review_residual"),
        (dict(pooler_pooling="median"), "pooler_pooling"),
        (dict(pooler_mode="median"), "pooler_mode"),
        (dict(initializer_range=-0.02), "initializer_range"),
        (dict(initializer_range=0), "initializer_range"),
    ],
)
def test_bad_option_values_name_the_option(overrides, option):
    with pytest.raises(ValueError, match=option):
        RANConfig(**overrides)
