"""Transformers pipelines on a saved tiny model plus the converter's tokenizer: fill-mask, text-classification and
token-classification on documents of a few thousand tokens, with nothing truncated at 512; the README's
quickstart run verbatim."""


from pathlib import Path

import pytest
import torch
from transformers import pipeline

from ran_hf import RANForCausalLM, RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification
from ran_hf.convert_official_checkpoint import _save_tokenizer
from conftest import randomize, readme_block, tiny_config


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "long", "document", "model", "reads", "every", "word", "of",
         "river", "town", "##s", "##ing", "."]
VOCAB = SPECIALS + WORDS
LABELS = {0: "O", 1: "ENT"}


pytestmark = pytest.mark.usefixtures("one_thread")


def long_text(num_words, seed=0):
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, 16, (num_words,), generator=generator).tolist()
    return " ".join(WORDS[i] for i in picks)


@pytest.fixture(scope="module")
def saved_dirs(tmp_path_factory):
    """MLM, sequence- and token-classification models saved with the converter's tokenizer, one directory each."""
    root = tmp_path_factory.mktemp("pipelines")
    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    config = dict(vocab_size=len(VOCAB), window_size=16, min_window_size=4, num_labels=2, id2label=LABELS,
                  label2id={v: k for k, v in LABELS.items()})
    dirs = {}
    for seed, cls in enumerate([RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification]):
        torch.manual_seed(seed)
        model = randomize(cls(tiny_config(**config)), seed=seed, bias_scale=0.5)
        path = root / cls.__name__
        model.save_pretrained(path)
        _save_tokenizer(str(root / "vocab.txt"), str(path))
        dirs[cls] = str(path)
    return dirs


def record_input_lengths(model):
    """Forward hook: the sequence length of every batch the pipeline feeds the model."""
    lengths = []

    def hook(module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        lengths.append(ids.shape[-1])

    model.register_forward_hook(hook, with_kwargs=True)
    return lengths


def test_fill_mask_sees_a_mask_far_beyond_512_tokens(saved_dirs):
    path = saved_dirs[RANForMaskedLM]
    fill = pipeline("fill-mask", model=path, tokenizer=path)
    lengths = record_input_lengths(fill.model)
    text = long_text(1500) + " [MASK] " + long_text(500, seed=1)
    encoded = fill.tokenizer(text, return_tensors="pt")
    position = int((encoded["input_ids"][0] == fill.tokenizer.mask_token_id).nonzero())
    assert encoded["input_ids"].shape[1] == 2003 and position == 1501

    predictions = fill(text, top_k=3)
    assert lengths == [2003]  # the whole document, not 512 tokens
    with torch.no_grad():  # (the pipeline puts the model on a GPU when there is one)
        probs = fill.model(**encoded.to(fill.model.device)).logits[0, position].softmax(-1).cpu()
    top = probs.topk(3)
    assert [p["token"] for p in predictions] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([p["score"] for p in predictions]), top.values, rtol=1e-5, atol=1e-6)


def test_text_classification_reads_the_whole_document(saved_dirs):
    path = saved_dirs[RANForSequenceClassification]
    classify = pipeline("text-classification", model=path, tokenizer=path)
    lengths = record_input_lengths(classify.model)
    text = long_text(3000)
    scores = {s["label"]: s["score"] for s in classify(text, top_k=None)}
    assert lengths == [3002]
    model = classify.model
    ids = classify.tokenizer(text, return_tensors="pt")["input_ids"].to(model.device)
    with torch.no_grad():
        full = model(ids).logits[0].softmax(-1).cpu()
        first_512 = model(ids[:, :512]).logits[0].softmax(-1).cpu()
    got = torch.tensor([scores[LABELS[i]] for i in range(2)])
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)
    assert float((full - first_512).abs().max()) > 1e-4  # the tail of the document matters, so the check can fail


def test_token_classification_tags_tokens_beyond_512(saved_dirs):
    path = saved_dirs[RANForTokenClassification]
    tagger = pipeline("token-classification", model=path, tokenizer=path)
    with torch.no_grad():  # force the ENT label everywhere: every token comes back as an entity
        tagger.model.classifier.bias.copy_(torch.tensor([0.0, 100.0]))
    lengths = record_input_lengths(tagger.model)
    text = long_text(2500)
    entities = tagger(text)
    assert lengths == [2502]
    assert len(entities) == 2500 and all(e["entity"] == "ENT" for e in entities)
    assert max(e["index"] for e in entities) == 2500  # token positions far past 512
    last = entities[-1]
    assert last["word"] == text.split()[-1] and text[last["start"]:last["end"]] == last["word"]
