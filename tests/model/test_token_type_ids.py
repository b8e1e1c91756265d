"""BERT tokenizers return `token_type_ids` by default: the models take all-zero ones (and ignore them), so a
pipeline with such a tokenizer works, and refuse non-zero ones with a clear error."""

import pytest
import torch
from transformers import BertTokenizerFast, pipeline

from ran_hf import (RANForCausalLM, RANForMaskedLM, RANForQuestionAnswering, RANForSequenceClassification,
                    RANForTokenClassification, RANModel)
from conftest import randomize, tiny_config


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far"]
HEADS = [RANModel, RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification,
         RANForQuestionAnswering, RANForCausalLM]
IDS = torch.randint(5, len(VOCAB), (2, 13), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path))
    assert "token_type_ids" in tokenizer("the cat sat")  # the tokenizer this test is about
    return tokenizer


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_all_zero_token_type_ids_are_ignored(cls):
    model = randomize(cls(tiny_config(vocab_size=len(VOCAB))), seed=1).eval()
    with torch.no_grad():
        plain = model(IDS)
        with_types = model(IDS, token_type_ids=torch.zeros_like(IDS))
    assert torch.equal(plain[0], with_types[0])


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_non_zero_token_type_ids_raise_a_clear_error(cls):
    model = cls(tiny_config(vocab_size=len(VOCAB))).eval()
    token_types = torch.zeros_like(IDS)
    token_types[1, 7:] = 1
    with pytest.raises(ValueError, match="`token_type_ids` must be all zero: RAN has no token types"):
        model(IDS, token_type_ids=token_types)
    with pytest.raises(ValueError, match=r"`token_type_ids` must have the shape of the input"):
        model(IDS, token_type_ids=token_types[:, :5])


def test_pipelines_with_a_bert_tokenizer(bert_tokenizer, tmp_path):
    model = randomize(RANForSequenceClassification(tiny_config(vocab_size=len(VOCAB))), seed=2).eval()
    classify = pipeline("text-classification", model=model, tokenizer=bert_tokenizer)
    text = "the cat sat on a mat " * 20
    result = classify(text)
    expected = model(**bert_tokenizer(text, return_tensors="pt", return_token_type_ids=False)).logits.softmax(-1)
    assert result[0]["score"] == pytest.approx(float(expected.max()), abs=1e-5)

    model = randomize(RANForMaskedLM(tiny_config(vocab_size=len(VOCAB))), seed=3).eval()
    fill = pipeline("fill-mask", model=model, tokenizer=bert_tokenizer)
    assert len(fill("the cat [MASK] on a mat", top_k=3)) == 3

    model = randomize(RANModel(tiny_config(vocab_size=len(VOCAB))), seed=4).eval()
    features = pipeline("feature-extraction", model=model, tokenizer=bert_tokenizer)
    assert torch.tensor(features("the dog ran far")).shape[-1] == 32
