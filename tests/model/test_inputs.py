"""What the models accept as input, and the clear errors for what they do not.

* Bad labels, `inputs_embeds` and keyword arguments get a clear error naming the argument before they reach torch;
  harmless variants (-100 QA positions) are accepted, and value checks skip accelerator training steps.
* BERT tokenizers return `token_type_ids` by default: the models take all-zero ones (and ignore them), so a pipeline
  with such a tokenizer works, and refuse non-zero ones with a clear error.
"""


import pytest
import torch
import torch.nn.functional as F
from transformers import BertTokenizerFast, pipeline

from ran_hf import (RANForCausalLM, RANForMaskedLM, RANForQuestionAnswering, RANForSequenceClassification,
                    RANForTokenClassification, RANModel)
from conftest import randomize, tiny_config


pytestmark = pytest.mark.usefixtures("one_thread")

HEADS = [RANModel, RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification, RANForQuestionAnswering]



# ---------------------------------------------------------------------------------------------------------------------
# labels, inputs_embeds and keyword arguments
# ---------------------------------------------------------------------------------------------------------------------


IDS = torch.randint(1, 97, (2, 11), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize(
    "cls, config, labels, error, match",
    [
        (RANForSequenceClassification, {}, torch.tensor([0, 2]), ValueError,
         r"`labels` must lie in \[0, 2\) or be -100"),
        (RANForSequenceClassification, {}, torch.tensor([0, -3]), ValueError, r"must lie in \[0, 2\).*got -3"),
        (RANForSequenceClassification, {}, torch.tensor([0, 1, 1]), ValueError,
         r"`labels` must have shape \(2,\) or \(2, 1\), got \(3,\)"),
        (RANForSequenceClassification, {}, torch.ones(2, 3), ValueError, r"shape \(2, 2\), got \(2, 3\)"),
        (RANForSequenceClassification, {}, torch.tensor([[0.0, 2.0], [1.0, 0.0]]), ValueError,
         r"multi-label `labels` must lie in \[0, 1\]"),
        (RANForSequenceClassification, dict(num_labels=1), torch.tensor([1, 0]), TypeError,
         "must be floats for regression"),
        (RANForSequenceClassification, dict(problem_type="single_label_classification"), torch.tensor([0.0, 1.0]),
         TypeError, "integer class indices"),
        (RANForTokenClassification, {}, torch.full((2, 11), 2), ValueError, r"must lie in \[0, 2\)"),
        (RANForTokenClassification, {}, torch.zeros(2, 10, dtype=torch.long), ValueError,
         r"`labels` must have shape \(2, 11\), got \(2, 10\)"),
        (RANForMaskedLM, {}, torch.full((2, 11), 97), ValueError, r"`labels` must lie in \[0, 97\) or be -100"),
        (RANForMaskedLM, {}, torch.zeros(11, dtype=torch.long), ValueError, r"shape \(2, 11\)"),
        (RANForCausalLM, {}, torch.full((2, 11), 500), ValueError, r"`labels` must lie in \[0, 97\)"),
        (RANForCausalLM, {}, torch.zeros(2, 12, dtype=torch.long), ValueError, r"shape \(2, 11\), got \(2, 12\)"),
    ],
)
def test_bad_labels_get_a_clear_error(cls, config, labels, error, match):
    model = cls(tiny_config(**config))
    with pytest.raises(error, match=match):
        model(IDS, labels=labels)


@pytest.mark.parametrize("cls", [RANForSequenceClassification, RANForTokenClassification, RANForMaskedLM,
                                 RANForCausalLM], ids=lambda c: c.__name__)
def test_minus_100_stays_the_ignore_index(cls):
    model = randomize(cls(tiny_config()), seed=2).eval()
    shape = (2,) if cls is RANForSequenceClassification else (2, 11)
    labels = torch.full(shape, -100)
    labels[0] = 1
    with torch.no_grad():
        loss = model(IDS, labels=labels).loss
    assert torch.isfinite(loss)


def test_question_answering_positions():
    model = randomize(RANForQuestionAnswering(tiny_config()), seed=2).eval()
    with torch.no_grad():
        out = model(IDS, start_positions=torch.tensor([3, -100]), end_positions=torch.tensor([[5], [-100]]))
        # -100 is ignored (Transformers alone would clamp it to position 0 and train towards the first token)
        expected = (F.cross_entropy(out.start_logits[:1], torch.tensor([3])) +
                    F.cross_entropy(out.end_logits[:1], torch.tensor([5]))) / 2
        torch.testing.assert_close(out.loss, expected)
    for kwargs, error, match in [
        (dict(start_positions=torch.tensor([3, -2]), end_positions=torch.tensor([5, 6])), ValueError,
         r"`start_positions` must be token indices >= 0.*got -2"),
        (dict(start_positions=torch.tensor([3, 1, 2]), end_positions=torch.tensor([5, 6, 7])), ValueError,
         r"`start_positions` must have shape \(2,\) or \(2, 1\)"),
        (dict(start_positions=torch.tensor([3.0, 1.0]), end_positions=torch.tensor([5, 6])), TypeError,
         "integer token indices"),
        (dict(start_positions=torch.tensor([3, 1])), ValueError, "pass both `start_positions` and `end_positions`"),
    ]:
        with pytest.raises(error, match=match):
            model(IDS, **kwargs)


@pytest.mark.parametrize("dtype, match", [(torch.long, "torch.int64"), (torch.float64, "torch.float64")])
def test_inputs_embeds_of_the_wrong_dtype(dtype, match):
    model = RANForSequenceClassification(tiny_config())
    with pytest.raises(TypeError, match=rf"`inputs_embeds` must have the model's dtype torch.float32, got {match}"):
        model(inputs_embeds=torch.ones(2, 5, 32, dtype=dtype))
    # the matching dtype works, in float64 too once the model is cast
    model.double()(inputs_embeds=torch.ones(2, 5, 32, dtype=torch.float64))


@pytest.mark.parametrize("cls", HEADS + [RANForCausalLM], ids=lambda c: c.__name__)
def test_unknown_keyword_arguments_are_rejected(cls):
    model = cls(tiny_config())
    with pytest.raises(TypeError, match=r"unexpected keyword argument `attn_mask` \(did you mean `attention_mask`\?\)"):
        model(IDS, attn_mask=torch.ones_like(IDS))
    with pytest.raises(TypeError, match="`position_ids`.*no position ids"):
        model(IDS, position_ids=torch.arange(11).expand(2, -1))
    if cls not in (RANModel, RANForCausalLM):  # these take it as a deprecated alias of `cache`
        with pytest.raises(TypeError, match="`past_key_values`.*passed as `cache`"):
            model(IDS, past_key_values=None)


def test_keywords_trainer_and_generate_pass_are_accepted():
    model = randomize(RANForSequenceClassification(tiny_config()), seed=1)
    labels = torch.tensor([0, 1])
    loss = model(IDS, labels=labels, num_items_in_batch=torch.tensor(2)).loss
    assert torch.isfinite(loss)
    lm = randomize(RANForCausalLM(tiny_config()), seed=1).eval()
    out = lm.generate(IDS, attention_mask=torch.ones_like(IDS), max_new_tokens=3, do_sample=False)
    assert out.shape == (2, 14)
    lm(IDS, cache_position=torch.arange(11))


def test_value_checks_skip_accelerator_training_steps():
    """Checks that read tensor values sync the host with the device: they run on CPU tensors and without gradients
    (pipelines, evaluation), never in an accelerator training step."""
    from ran_hf.input_checks import reads_values

    on_cpu, on_accelerator = torch.zeros(2), torch.zeros(2, device="meta")
    assert reads_values(on_cpu) and not reads_values(on_accelerator)
    with torch.no_grad():
        assert reads_values(on_cpu) and reads_values(on_accelerator)


# ---------------------------------------------------------------------------------------------------------------------
# token_type_ids
# ---------------------------------------------------------------------------------------------------------------------


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far"]
EVERY_HEAD = [RANModel, RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification,
         RANForQuestionAnswering, RANForCausalLM]
TOKEN_IDS = torch.randint(5, len(VOCAB), (2, 13), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path))
    assert "token_type_ids" in tokenizer("the cat sat")  # the tokenizer this test is about
    return tokenizer


@pytest.mark.parametrize("cls", EVERY_HEAD, ids=lambda c: c.__name__)
def test_all_zero_token_type_ids_are_ignored(cls):
    model = randomize(cls(tiny_config(vocab_size=len(VOCAB))), seed=1).eval()
    with torch.no_grad():
        plain = model(TOKEN_IDS)
        with_types = model(TOKEN_IDS, token_type_ids=torch.zeros_like(TOKEN_IDS))
    assert torch.equal(plain[0], with_types[0])


@pytest.mark.parametrize("cls", EVERY_HEAD, ids=lambda c: c.__name__)
def test_non_zero_token_type_ids_raise_a_clear_error(cls):
    model = cls(tiny_config(vocab_size=len(VOCAB))).eval()
    token_types = torch.zeros_like(TOKEN_IDS)
    token_types[1, 7:] = 1
    with pytest.raises(ValueError, match="`token_type_ids` must be all zero: RAN has no token types"):
        model(TOKEN_IDS, token_type_ids=token_types)
    with pytest.raises(ValueError, match=r"`token_type_ids` must have the shape of the input"):
        model(TOKEN_IDS, token_type_ids=token_types[:, :5])


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
