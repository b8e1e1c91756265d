"""Checkpoints saved by earlier versions of ran_hf (`tests/fixtures/make_saved_checkpoints.py`, which names the
commit that wrote each) load with the current code and compute the outputs they computed then, to float32 rounding
(1e-5, the tolerance of parity with the authors' package): the code may reorder a computation (the norms run as
`F.rms_norm` minus its mean, which moved outputs by at most 3e-6), never change it."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from conftest import FIXTURES
from ran_hf import RANConfig, RANForCausalLM, RANForSequenceClassification, RANModel


SAVED = os.path.join(FIXTURES, "saved_checkpoints")


def load(name, cls):
    directory = os.path.join(SAVED, name)
    with open(os.path.join(directory, "expected.json")) as f:
        meta = json.load(f)
    assert meta["class_name"] == cls.__name__
    model = cls.from_pretrained(directory).eval()
    return model, load_file(os.path.join(directory, "expected.safetensors")), meta


def assert_same(actual, expected, name):
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=lambda detail: f"{name}: {detail}")


def test_encoder_with_mean_cell_and_mean_token_pooling():
    model, expected, _ = load("encoder_mean_pooling", RANModel)
    with torch.no_grad():
        out = model(expected["input_ids"], attention_mask=expected["attention_mask"])
    for name in ("last_hidden_state", "pooler_output", "last_cell", "cells"):
        assert_same(getattr(out, name), expected[name], name)


def test_classifier_with_the_average_pooler():
    model, expected, _ = load("classifier_average_pooler", RANForSequenceClassification)
    with torch.no_grad():
        logits = model(expected["input_ids"], attention_mask=expected["attention_mask"]).logits
    assert_same(logits, expected["logits"], "logits")


def test_classifier_with_the_cell_max_pooler_written_with_the_old_pooling_fields():
    model, expected, _ = load("classifier_cell_max_pooler", RANForSequenceClassification)
    assert model.config.pooler_mode == "cell_max" and model.config.cell_pooling == "mean"
    with torch.no_grad():
        logits = model(expected["input_ids"], attention_mask=expected["attention_mask"]).logits
    assert_same(logits, expected["logits"], "logits")


@pytest.mark.parametrize("name, pooler_mode", [("encoder_mean_pooling", "cell_mean"),
                                               ("classifier_average_pooler", "token_mean"),
                                               ("classifier_cell_max_pooler", "cell_max"), ("causal_lm", "cell_max")])
def test_old_pooling_fields_are_read_as_pooler_mode_and_saved_as_it(name, pooler_mode, tmp_path):
    config = RANConfig.from_pretrained(os.path.join(SAVED, name))
    assert config.pooler_mode == pooler_mode
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["pooler_mode"] == pooler_mode and "pooler_type" not in saved and "pooler_pooling" not in saved


def test_causal_lm_logits_and_greedy_generation():
    model, expected, meta = load("causal_lm", RANForCausalLM)
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
        prompt = expected["input_ids"][:, : meta["prompt_length"]]
        generated = model.generate(prompt, max_new_tokens=meta["max_new_tokens"], do_sample=False, pad_token_id=0)
    assert_same(logits, expected["logits"], "logits")
    assert_same(generated, expected["generated"], "generated")


@pytest.mark.parametrize("name", ["encoder_mean_pooling", "classifier_average_pooler", "classifier_cell_max_pooler",
                                  "causal_lm"])
def test_saved_configs_load_and_save_again(name, tmp_path):
    cls = {"encoder_mean_pooling": RANModel, "classifier_average_pooler": RANForSequenceClassification,
           "classifier_cell_max_pooler": RANForSequenceClassification, "causal_lm": RANForCausalLM}[name]
    model, expected, _ = load(name, cls)
    model.save_pretrained(tmp_path)
    reloaded = cls.from_pretrained(tmp_path).eval()
    ids = expected["input_ids"]
    with torch.no_grad():
        first, second = model(ids), reloaded(ids)
    assert torch.equal(first[0], second[0])
