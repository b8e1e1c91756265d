"""Task heads: masked-LM parity with the authors' package, and the Transformers loss conventions of every head
(problem types, -100, `num_items_in_batch` through `self.loss_function`), QA spans never on padding."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ran_hf import (
    RANForMaskedLM,
    RANForQuestionAnswering,
    RANForSequenceClassification,
    RANForTokenClassification,
)
from conftest import FIXTURES, convert_fixture, randomize, tiny_config


MLM_FIXTURE = os.path.join(FIXTURES, "fixture_mlm.npz")
MLM_CASES = ["b2_l70", "b1_l10", "b1_l16", "b1_l32", "b1_l66"]
# The fixture's logits reach |28|. The same model run in float64 differs from the fixture by up to 2.5e-5: that is
# the fixture's own float32 rounding (TensorFlow, two RAN layers, the MLM head and a 128-way embedding matching at a
# magnitude where one float32 ulp is ~2e-6), not a modelling error. So the bound here is 4e-5, not the encoder's 1e-5.
MLM_TOLERANCE = 4e-5
HEADS = [RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification, RANForQuestionAnswering]


pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------------------------------------------------------
# data helpers
# ---------------------------------------------------------------------------------------------------------------------


def padded_batch(lengths, vocab=97, seed=0, left=()):
    """Random documents of the given lengths in one batch, right-padded (left-padded for the rows in `left`)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        doc = torch.randint(1, vocab, (n,), generator=generator)
        if row in left:
            ids[row, width - n:] = doc
        else:
            ids[row, :n] = doc
    return ids, (ids != 0).long()


def make_head(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return randomize(cls(tiny_config(**overrides)), seed=seed).eval()


def token_labels(ids, num_classes, keep_counts, seed=1):
    """Labels for every row of `ids`: `keep_counts[row]` labelled real positions, -100 elsewhere (pads included)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.full_like(ids, -100)
    for row, count in enumerate(keep_counts):
        real = (ids[row] != 0).nonzero().flatten()
        chosen = real[torch.randperm(len(real), generator=generator)[:count]]
        labels[row, chosen] = torch.randint(0, num_classes, (count,), generator=generator)
    return labels


# ---------------------------------------------------------------------------------------------------------------------
# masked LM: parity with rannet==0.3.1 through the converter
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlm_fixture(tmp_path_factory):
    """Convert the MLM fixture through the converter CLI."""
    return convert_fixture(MLM_FIXTURE, tmp_path_factory.mktemp("converted_mlm"))


def test_converted_mlm_loads_every_weight_with_tied_decoder(mlm_fixture):
    path, _ = mlm_fixture
    model, info = RANForMaskedLM.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.lm_head.decoder.weight is model.ran.embeddings.word_embeddings.weight
    assert model.lm_head.decoder.bias is model.lm_head.bias
    assert float(model.lm_head.bias.detach().abs().max()) > 0  # the converted matching bias, not a fresh zero init


@pytest.mark.parametrize("case", MLM_CASES)
def test_masked_lm_logits_match_rannet(mlm_fixture, case):
    path, fixture = mlm_fixture
    model = RANForMaskedLM.from_pretrained(path).eval()
    ids = torch.from_numpy(fixture[f"{case}/input_ids"]).long()
    expected = fixture[f"{case}/mlm_logits"]  # (causal_mlm_logits: our causal mode differs on purpose)
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == expected.shape
    error = float(np.abs(logits.numpy() - expected).max())
    assert error <= MLM_TOLERANCE, f"{case}: max abs error {error:.3g} (|logits| up to {np.abs(expected).max():.1f})"


def test_masked_lm_loss_ignores_minus_100(mlm_fixture):
    path, fixture = mlm_fixture
    model = RANForMaskedLM.from_pretrained(path).eval()
    ids = torch.from_numpy(fixture["b2_l70/input_ids"]).long()
    labels = ids.clone()
    labels[:, ::3] = -100
    labels[1, 40:] = -100
    with torch.no_grad():
        out = model(ids, labels=labels)
        logits = out.logits
    keep = labels != -100
    expected = F.cross_entropy(logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, expected, rtol=1e-6, atol=1e-6)
    # the -100 positions really are left out: the mean over every position is a different number
    assert abs(float(F.cross_entropy(logits.flatten(0, 1), ids.flatten()) - expected)) > 1e-3
    # a tuple return carries the loss first
    with torch.no_grad():
        as_tuple = model(ids, labels=labels, return_dict=False)
    torch.testing.assert_close(as_tuple[0], out.loss)


# ---------------------------------------------------------------------------------------------------------------------
# sequence classification: problem types exactly as Transformers defines them
# ---------------------------------------------------------------------------------------------------------------------


def _classification_case(problem_type, num_labels, batch_size, generator):
    if problem_type == "regression":
        shape = (batch_size,) if num_labels == 1 else (batch_size, num_labels)
        labels = torch.randn(shape, generator=generator)
        return labels, lambda logits: F.mse_loss(logits.squeeze(-1) if num_labels == 1 else logits, labels)
    if problem_type == "single_label_classification":
        labels = torch.randint(0, num_labels, (batch_size,), generator=generator)
        return labels, lambda logits: F.cross_entropy(logits, labels)
    labels = torch.randint(0, 2, (batch_size, num_labels), generator=generator).float()
    return labels, lambda logits: F.binary_cross_entropy_with_logits(logits, labels)


@pytest.mark.parametrize(
    "problem_type, num_labels, explicit",
    [
        ("regression", 1, True),
        ("regression", 1, False),  # inferred from num_labels == 1
        ("regression", 3, True),  # (never inferred for num_labels > 1)
        ("single_label_classification", 3, True),
        ("single_label_classification", 3, False),  # inferred from integer labels
        ("multi_label_classification", 3, True),
        ("multi_label_classification", 3, False),  # inferred from float labels
    ],
)
def test_sequence_classification_losses(problem_type, num_labels, explicit):
    model = make_head(RANForSequenceClassification, num_labels=num_labels,
                      problem_type=problem_type if explicit else None)
    ids, mask = padded_batch([30, 17, 9, 41], left=(1,))
    labels, hand_loss = _classification_case(problem_type, num_labels, 4, torch.Generator().manual_seed(3))
    out = model(ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (4, num_labels)
    torch.testing.assert_close(out.loss, hand_loss(out.logits), rtol=1e-6, atol=1e-6)
    assert model.config.problem_type == problem_type
    out.loss.backward()
    assert model.classifier.weight.grad.abs().sum() > 0 and model.ran.embeddings.word_embeddings.weight.grad is not None


def test_sequence_classification_logits_do_not_depend_on_padding():
    model = make_head(RANForSequenceClassification, num_labels=3)
    ids, mask = padded_batch([30, 17, 9], left=(1,))
    with torch.no_grad():
        batched = model(ids, attention_mask=mask).logits
        for row in range(3):
            alone = model(ids[row][mask[row].bool()][None]).logits
            torch.testing.assert_close(batched[row], alone[0], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# token classification and question answering
# ---------------------------------------------------------------------------------------------------------------------


def test_token_classification_forward_and_loss():
    model = make_head(RANForTokenClassification, num_labels=5)
    ids, mask = padded_batch([30, 17, 9], left=(1,))
    labels = token_labels(ids, 5, [20, 3, 9])
    out = model(ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (3, 30, 5)
    keep = labels != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[keep], labels[keep]), rtol=1e-6, atol=1e-6)
    # per-token logits of a padded row are those of the document alone
    with torch.no_grad():
        alone = model(ids[1][mask[1].bool()][None]).logits[0]
    torch.testing.assert_close(out.logits[1][mask[1].bool()].detach(), alone, rtol=1e-5, atol=1e-5)
    out.loss.backward()
    assert model.classifier.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("pass_mask", [True, False], ids=["attention_mask", "mask_from_pad_id"])
def test_question_answering_never_picks_padding(pass_mask):
    model = make_head(RANForQuestionAnswering)
    with torch.no_grad():  # pads' hidden states are zero, so without masking their logits would be this bias
        model.qa_outputs.bias.fill_(50.0)
    ids, mask = padded_batch([30, 12, 20], left=(1,))
    out = model(ids, attention_mask=mask if pass_mask else None)
    assert out.start_logits.shape == out.end_logits.shape == (3, 30)
    pads = mask == 0
    floor = torch.finfo(out.start_logits.dtype).min
    assert bool((out.start_logits[pads] == floor).all()) and bool((out.end_logits[pads] == floor).all())
    assert bool(torch.isfinite(out.start_logits).all())
    for logits in (out.start_logits, out.end_logits):
        picked = logits.argmax(-1)
        assert bool(mask.gather(1, picked[:, None]).all()), f"a span bound on a pad position: {picked.tolist()}"


def test_question_answering_loss():
    model = make_head(RANForQuestionAnswering)
    ids, mask = padded_batch([30, 12, 20], left=(1,))
    start = torch.tensor([3, 25, 4])
    end = torch.tensor([7, 29, 99])  # 99 lies outside the input: that term is ignored, as in Transformers
    out = model(ids, attention_mask=mask, start_positions=start, end_positions=end)
    start_loss = F.cross_entropy(out.start_logits, start)
    end_loss = F.cross_entropy(out.end_logits[:2], end[:2])
    torch.testing.assert_close(out.loss, (start_loss + end_loss) / 2, rtol=1e-6, atol=1e-6)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)


# ---------------------------------------------------------------------------------------------------------------------
# losses go through `self.loss_function` with the caller's kwargs (Trainer's `num_items_in_batch`)
# ---------------------------------------------------------------------------------------------------------------------


def _loss_inputs(cls, ids):
    generator = torch.Generator().manual_seed(5)
    if cls is RANForMaskedLM:
        return {"labels": token_labels(ids, 97, [10, 4])}
    if cls is RANForTokenClassification:
        return {"labels": token_labels(ids, 2, [10, 4])}
    if cls is RANForSequenceClassification:
        return {"labels": torch.randint(0, 2, (len(ids),), generator=generator)}
    return {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([4, 6])}


@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_every_head_computes_its_loss_through_loss_function_with_kwargs(cls):
    model = make_head(cls)
    ids, mask = padded_batch([20, 11])
    calls = []
    original = model.loss_function

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    model.loss_function = spy
    out = model(ids, attention_mask=mask, num_items_in_batch=torch.tensor(7), **_loss_inputs(cls, ids))
    assert len(calls) == 1 and int(calls[0]["num_items_in_batch"]) == 7
    assert torch.isfinite(out.loss)


@pytest.mark.parametrize("cls", [RANForMaskedLM, RANForTokenClassification], ids=lambda c: c.__name__)
def test_num_items_in_batch_makes_two_half_batches_equal_the_full_batch(cls):
    """Gradient accumulation over two half-batches with uneven numbers of labelled tokens equals the full batch
    when each half's loss is a sum divided by the full batch's `num_items_in_batch` (as the Trainer does)."""
    num_classes = 97 if cls is RANForMaskedLM else 4
    ids, mask = padded_batch([26, 19, 30, 14], seed=2, left=(3,))
    labels = token_labels(ids, num_classes, [24, 18, 2, 1])  # 42 labelled tokens in the first half, 3 in the second
    total = (labels != -100).sum()
    model = make_head(cls, num_labels=num_classes)

    full = model(ids, attention_mask=mask, labels=labels).loss
    full.backward()
    full_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    halves, naive = [], []
    for part in (slice(0, 2), slice(2, 4)):
        loss = model(ids[part], attention_mask=mask[part], labels=labels[part], num_items_in_batch=total).loss
        loss.backward()
        halves.append(loss.detach())
        with torch.no_grad():
            naive.append(model(ids[part], attention_mask=mask[part], labels=labels[part]).loss)
    torch.testing.assert_close(halves[0] + halves[1], full.detach(), rtol=1e-5, atol=1e-6)
    for p, expected in zip(model.parameters(), full_grads):
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-5)
    # the test can fail: the naive mean of the two halves' means is a different loss
    assert abs(float((naive[0] + naive[1]) / 2 - full.detach())) > 1e-2
