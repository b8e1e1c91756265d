"""RANForCausalLM: no leakage of later tokens, context across windows, incremental == full, generate() against a
slow reference that re-runs the whole prefix every step, and the cache's batch operations."""

import pytest
import torch

from ran_hf import RANCache, RANCacheLayer, RANForCausalLM
from conftest import DEVICE, random_ids, randomize, tiny_config


def make_lm(seed=0, dtype=torch.float64, **overrides):
    torch.manual_seed(seed)
    model = randomize(RANForCausalLM(tiny_config(window_size=8, **overrides)), seed=seed).eval()
    return model.to(device=DEVICE, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------------
# causality
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("memory_review", [True, False])
@pytest.mark.parametrize("train", [False, True])
def test_no_leakage_from_later_tokens(layers, memory_review, train):
    """Changing the token at p leaves every logit before p bit-for-bit unchanged (first window, mid-window, window
    boundary), and changes logits at p and after."""
    model = make_lm(num_hidden_layers=layers, use_memory_review=memory_review, dtype=torch.float32)
    model.train(train)  # dropout is 0: train mode must be just as causal
    ids = random_ids(2, 37)
    with torch.no_grad():
        base = model(ids).logits
        for p in (3, 12, 16, 30):  # window 1, mid window 2, first token of window 3, window 4
            changed = ids.clone()
            changed[:, p] = (changed[:, p] % 96) + 1
            logits = model(changed).logits
            assert torch.equal(logits[:, :p], base[:, :p]), f"leak into positions < {p}"
            assert float((logits[:, p:] - base[:, p:]).abs().max()) > 1e-3


def test_context_crosses_windows():
    model = make_lm()
    ids = random_ids(1, 32)
    changed = ids.clone()
    changed[0, 2] = (changed[0, 2] % 96) + 1  # window 1 (W = 8)
    with torch.no_grad():
        delta = (model(changed).logits - model(ids).logits)[0, 16:24].abs().max()  # window 3
    assert float(delta) > 1e-2


def test_prefix_outputs_do_not_depend_on_total_length():
    """The authors' causal mode leaks the total length (merge, history size, cell passing); ours must not."""
    model = make_lm(min_window_size=4)
    ids = random_ids(1, 45)
    with torch.no_grad():
        full = model(ids).logits
        for length in (9, 18, 26, 35):
            assert float((model(ids[:, :length]).logits - full[:, :length]).abs().max()) < 1e-12


# ---------------------------------------------------------------------------------------------------------------------
# incremental == full
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_token_by_token_and_chunked_prefill_equal_one_forward(dtype, tolerance):
    """Exact in float64; in float32 within 1e-5 relative to the logits' scale (they reach ~20 with these random
    weights, and fp32 rounds at ~1e-7 relative per operation)."""
    model = make_lm(dtype=dtype)
    ids = random_ids(2, 43, seed=2)
    with torch.no_grad():
        full = model(ids).logits
    tolerance = tolerance * max(1.0, float(full.abs().max()))
    with torch.no_grad():
        out = model(ids[:, :1], use_cache=True)
        steps = [out.logits]
        for t in range(1, ids.shape[1]):
            out = model(ids[:, t : t + 1], cache=out.cache, use_cache=True)
            steps.append(out.logits)
        cache, chunks = None, []
        for start, end in [(0, 5), (5, 13), (13, 14), (14, 31), (31, 32), (32, 43)]:
            out = model(ids[:, start:end], cache=cache, use_cache=True)
            cache = out.cache
            chunks.append(out.logits)
    assert float((torch.cat(steps, 1) - full).abs().max()) <= tolerance
    assert float((torch.cat(chunks, 1) - full).abs().max()) <= tolerance
    assert cache.get_seq_length() == 43 and isinstance(cache, RANCache)


def test_a_decoding_step_inside_a_window_projects_only_its_token():
    """The open window's cell key and value stay in the cache between the decoding steps of one window. A step
    inside the window normalizes and projects its own token only (one call of each layer's row norm); the first
    step after a commit, and a step that finishes a window, also project the window's cell (two)."""
    model = make_lm()
    ids = random_ids(2, 18, seed=3)
    calls = []
    for layer in model.base_model.layers:
        layer.window_block.input_norm.register_forward_hook(lambda *args: calls.append(1))
    per_step, review_shapes = [], []
    with torch.no_grad():
        cache = model(ids[:, :9], use_cache=True).cache  # windows of 8: the second holds token 8
        for t in range(9, 18):
            calls.clear()
            out = model.base_model(ids[:, t : t + 1], cache=cache, use_cache=True, output_attentions=True)
            cache = out.cache
            per_step.append(len(calls) // len(model.base_model.layers))
            review_shapes.append(tuple(out.memory_review_attentions[0].shape))
    # tokens 9-14 continue window 2 (token 9 projects its cell), 15 finishes it, 16 opens window 3 (a new cell)
    assert per_step == [2, 1, 1, 1, 1, 1, 2, 2, 1]
    # the review attention keeps its documented width (history + this call's windows) in every step
    assert review_shapes[:6] == [(2, 1, 3)] * 6 and review_shapes[6] == (2, 1, 3) and review_shapes[7:] == [(2, 1, 4)] * 2


def test_a_decoding_step_inside_a_window_reads_the_review_history_without_projecting():
    """Only a step that finishes a window projects a review entry (one call of each layer's review key-value
    projection); the others read the history as it is, cast to the dtype a projection would have had, also when
    autocast is switched on or off between calls."""
    model = make_lm(dtype=torch.float32)
    ids = random_ids(1, 18, seed=3)
    calls = []
    for layer in model.base_model.layers:
        layer.memory_review.kv.register_forward_hook(lambda *args: calls.append(1))
    per_step, logits = [], []
    with torch.no_grad():
        cache = model(ids[:, :9], use_cache=True).cache
        for t in range(9, 18):
            calls.clear()
            with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=t % 2 == 1):
                out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.cache
            per_step.append(len(calls) // len(model.base_model.layers))
            logits.append(out.logits.float())
        whole = model(ids).logits
    assert per_step == [0, 0, 0, 0, 0, 0, 1, 0, 0]  # token 15 finishes the second window of 8
    stepped = torch.cat(logits, 1)
    assert torch.isfinite(stepped).all()
    assert float((stepped - whole[:, 9:]).norm() / whole[:, 9:].norm()) < 0.05  # bf16 on every second step


def test_left_padded_rows_equal_their_unpadded_selves():
    model = make_lm()
    a, b = random_ids(1, 19, seed=3)[0], random_ids(1, 30, seed=4)[0]
    batch = torch.zeros(2, 30, dtype=torch.long, device=DEVICE)
    batch[0, 11:], batch[1] = a, b
    with torch.no_grad():
        logits = model(batch, attention_mask=(batch != 0).long()).logits
        assert float((logits[0, 11:] - model(a[None]).logits[0]).abs().max()) < 1e-10
        assert float((logits[1] - model(b[None]).logits[0]).abs().max()) < 1e-10


def test_loss_shifts_labels_and_honours_num_items_in_batch():
    model = make_lm(dtype=torch.float32)
    ids = random_ids(2, 20, seed=5)
    labels = ids.clone()
    labels[0, :7] = -100
    out = model(ids, labels=labels)
    logits = out.logits[:, :-1].reshape(-1, 97)
    target = labels[:, 1:].reshape(-1)
    expected = torch.nn.functional.cross_entropy(logits, target, ignore_index=-100)
    assert torch.allclose(out.loss, expected, atol=1e-6)
    summed = torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
    assert torch.allclose(model(ids, labels=labels, num_items_in_batch=torch.tensor(100)).loss, summed / 100,
                          atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# generate()
# ---------------------------------------------------------------------------------------------------------------------

GENERATE = dict(max_new_tokens=27, pad_token_id=0)  # 27 new tokens cross three window boundaries (W = 8)


def test_greedy_generation_equals_full_recompute_reference():
    model = make_lm()
    prompt = random_ids(1, 11, seed=6)
    ids = prompt
    with torch.no_grad():
        for _ in range(GENERATE["max_new_tokens"]):
            next_token = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, next_token], 1)
    assert torch.equal(model.generate(prompt, do_sample=False, **GENERATE), ids)


@pytest.mark.parametrize(
    "options",
    [
        dict(do_sample=True, top_k=20),
        dict(do_sample=False, num_beams=4, num_return_sequences=2),
        dict(do_sample=True, num_return_sequences=3),
    ],
)
def test_generate_with_cache_equals_generate_without(options):
    """`use_cache=False` makes generate() re-run the full forward over the whole prefix at every step."""
    model = make_lm()
    prompt = random_ids(2, 10, seed=7)
    torch.manual_seed(11)
    cached = model.generate(prompt, **GENERATE, **options)
    torch.manual_seed(11)
    reference = model.generate(prompt, use_cache=False, **GENERATE, **options)
    assert torch.equal(cached, reference)
    assert cached.shape[1] == prompt.shape[1] + GENERATE["max_new_tokens"]


def test_batched_left_padded_generation_equals_one_prompt_at_a_time():
    model = make_lm()
    prompts = [random_ids(1, n, seed=n)[0] for n in (5, 13, 9)]
    width = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long, device=DEVICE)
    for i, p in enumerate(prompts):
        batch[i, width - len(p):] = p
    together = model.generate(batch, attention_mask=(batch != 0).long(), do_sample=False, **GENERATE)
    for i, p in enumerate(prompts):
        alone = model.generate(p[None], do_sample=False, **GENERATE)
        assert torch.equal(together[i, width:], alone[0, len(p):]), f"prompt {i}"


def test_generate_resumes_from_a_cache_the_user_passes():
    model = make_lm()
    prompt = random_ids(1, 14, seed=8)
    with torch.no_grad():
        cache = model(prompt[:, :-1], use_cache=True).cache
    resumed = model.generate(prompt, cache=cache, do_sample=False, **GENERATE)
    fresh = model.generate(prompt, do_sample=False, **GENERATE)
    assert torch.equal(resumed, fresh)


# ---------------------------------------------------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------------------------------------------------


def test_cache_batch_operations_and_size():
    model = make_lm()
    ids = random_ids(3, 21, seed=9)
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
        next_ids = random_ids(3, 1, seed=10)
        reference = model(next_ids, cache=cache, use_cache=True).logits

        cache = model(ids, use_cache=True).cache
        cache.reorder_cache(torch.tensor([2, 0, 1]))
        reordered = model(next_ids[[2, 0, 1]], cache=cache, use_cache=True).logits
        assert torch.equal(reordered, reference[[2, 0, 1]])

        cache = model(ids, use_cache=True).cache
        cache.batch_repeat_interleave(2)
        assert cache.batch_size == 6
        repeated = model(next_ids.repeat_interleave(2, 0), cache=cache, use_cache=True).logits
        assert torch.allclose(repeated, reference.repeat_interleave(2, 0), atol=1e-10, rtol=0)  # other batch size

        cache = model(ids, use_cache=True).cache
        cache.batch_select_indices(torch.tensor([1]))
        selected = model(next_ids[1:2], cache=cache, use_cache=True).logits
        assert torch.allclose(selected, reference[1:2], atol=1e-10, rtol=0)

    with torch.no_grad():
        short = model(random_ids(1, 16, seed=1), use_cache=True).cache
        long = model(random_ids(1, 160, seed=1), use_cache=True).cache
    # 18 more finished windows: only the review history grows (one key and value of D per window and layer)
    per_window = 2 * 2 * 32 * 8  # layers x (key + value) x D x bytes (float64)
    assert long.num_bytes() - short.num_bytes() == 18 * per_window


def test_the_cache_holds_one_cache_layer_per_ran_layer():
    """RANCache is a `transformers.Cache` of `RANCacheLayer`s: Transformers' per-layer API sees every RAN layer."""
    model = make_lm(num_hidden_layers=3)
    ids = random_ids(2, 21)
    with torch.no_grad():
        cache = model(ids[:, :13], use_cache=True).cache
        reference = model(ids[:, 13:], cache=cache, use_cache=True).logits
        assert len(cache) == 3 and all(isinstance(layer, RANCacheLayer) for layer in cache.layers)
        assert [cache.get_seq_length(i) for i in range(3)] == [21, 21, 21]
        assert cache.get_max_length() == -1 and not cache.is_compileable and not cache.is_croppable
        assert all(layer.state is not None for layer in cache.layers)
        assert cache.num_bytes() == sum(layer.num_bytes() for layer in cache.layers) > 0
        with pytest.raises(NotImplementedError, match="recurrent state"):
            cache.update(torch.zeros(2, 1, 1, 8), torch.zeros(2, 1, 1, 8), 0)
        cache.reset()  # back to a fresh state: the same logits as a fresh cache
        assert cache.get_seq_length() == 0 and cache.num_bytes() == 0 and len(cache) == 3
        model(ids[:, :13], cache=cache, use_cache=True)
        assert torch.equal(model(ids[:, 13:], cache=cache, use_cache=True).logits, reference)
        empty = RANCache()  # built without a config: the layers come with the first call
        model(ids[:, :13], cache=empty, use_cache=True)
        assert len(empty) == 3 and torch.equal(model(ids[:, 13:], cache=empty, use_cache=True).logits, reference)


def test_cache_refuses_to_crop_and_bad_cache_types():
    model = make_lm()
    with torch.no_grad():
        cache = model(random_ids(1, 12), use_cache=True).cache
    cache.crop(12)  # a no-op is fine
    with pytest.raises(ValueError, match="cannot be cropped"):
        cache.crop(5)
    from transformers import DynamicCache

    with pytest.raises(TypeError, match="must be a RANCache"):
        model(random_ids(1, 3), cache=DynamicCache(), use_cache=True)
    with pytest.raises(ValueError, match="holds 1 rows"):
        model(random_ids(2, 3), cache=cache, use_cache=True)


def test_past_key_values_is_a_deprecated_alias_of_cache():
    """Transformers 5.24 names the generation state `cache`; the older `past_key_values` still works, with a
    deprecation warning, in RANModel and RANForCausalLM; both names at once raise."""
    model = make_lm()
    ids = random_ids(1, 40)
    with torch.no_grad():
        output = model.ran(ids[:, :30], use_cache=True)
        cache = model(ids[:, :30], use_cache=True).cache
        continued = model(ids[:, 30:], cache=cache, use_cache=True).logits
    assert isinstance(output.cache, RANCache)
    assert continued.shape == (1, 10, model.config.vocab_size)
    for module in (model, model.ran):
        old_cache = module(ids[:, :30], use_cache=True).cache
        with torch.no_grad(), pytest.warns(FutureWarning, match="`past_key_values` is deprecated"):
            old = module(ids[:, 30:], past_key_values=old_cache, use_cache=True)
        if module is model:
            torch.testing.assert_close(old.logits, continued, atol=0, rtol=0)
        assert old.cache.get_seq_length() == 40
    with pytest.raises(ValueError, match="past_key_values"):
        model(ids[:, 30:], past_key_values=cache, cache=cache, use_cache=True)


def test_causal_lm_save_load_keeps_ties_and_generates(tmp_path):
    from transformers import AutoModelForCausalLM

    model = make_lm(dtype=torch.float32)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).to(DEVICE).eval()
    assert isinstance(loaded, RANForCausalLM) and loaded.config.is_decoder
    assert loaded.lm_head.decoder.weight is loaded.ran.embeddings.word_embeddings.weight
    prompt = random_ids(1, 9)
    assert torch.equal(loaded.generate(prompt, do_sample=False, **GENERATE),
                       model.generate(prompt, do_sample=False, **GENERATE))
