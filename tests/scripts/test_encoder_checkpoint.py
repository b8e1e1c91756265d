# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""A converted encoder (`python -m ran_hf.convert_encoder`) fine-tuned by the scripts: classification and NER start
from its folder, its tokenizer comes with it, and `--head_learning_rate` reaches what RAN adds to the encoder."""

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, BertConfig, BertModel

from ran_hf.convert_encoder import main as convert_main
from run_scripts import run_classification, run_ner
from run_scripts.helpers import tokenizer as tokenizer_helpers
from script_data import TINY, data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")
# TINY's training flags (its size flags are for models from scratch, so they are left out)
SIZE_FLAGS = ("--hidden_size", "--num_hidden_layers", "--num_attention_heads", "--attention_head_size",
              "--window_size", "--min_window_size")
FLAGS = [arg for i, arg in enumerate(TINY) if arg not in SIZE_FLAGS and (i == 0 or TINY[i - 1] not in SIZE_FLAGS)]


@pytest.fixture(scope="module")
def converted_encoder(data_dir, tmp_path_factory):
    """A tiny BERT with a WordPiece tokenizer trained on the test corpus, converted into a RAN of 16-token windows."""
    folder = tmp_path_factory.mktemp("encoder")
    texts = (data_dir / "corpus.txt").read_text().splitlines() + ["John Smith visited Paris in Germany ."] * 5
    tokenizer = tokenizer_helpers.train_wordpiece_tokenizer(texts, vocab_size=300, min_frequency=1)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, pad_token_id=tokenizer.pad_token_id)
    BertModel(config).save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    convert_main(["--encoder", str(folder / "bert"), "--output", str(folder / "ran"), "--window_size", "16"])
    return folder / "ran"


def test_classification_fine_tunes_a_converted_encoder(converted_encoder, data_dir, tmp_path, capsys):
    out = tmp_path / "cls"
    results = run_classification.main([
        "--model_name_or_path", str(converted_encoder), "--train_file", str(data_dir / "train.jsonl.gz"),
        "--test_file", str(data_dir / "test.jsonl"), "--output_dir", str(out), "--num_train_epochs", "1",
        "--head_learning_rate", "1e-3", *FLAGS])
    assert 0.0 <= results["test"]["test_accuracy"] <= 1.0
    head_rates = next(line for line in capsys.readouterr().out.splitlines() if "--head_learning_rate 0.001" in line)
    assert "cell_gate" in head_rates and "memory_review.gate" in head_rates and "window_block.query" not in head_rates
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.window_block == "bert"
    assert any(layer.window_block.cell_gate.abs().sum() > 0 for layer in model.ran.layers)  # the gates trained


def test_ner_fine_tunes_a_converted_encoder(converted_encoder, data_dir, tmp_path):
    out = tmp_path / "ner"
    results = run_ner.main(["--model_name_or_path", str(converted_encoder),
                            "--train_file", str(data_dir / "ner_train.txt"),
                            "--test_file", str(data_dir / "ner_test.txt"), "--output_dir", str(out),
                            "--num_train_epochs", "1", "--per_device_train_batch_size", "2", *FLAGS])
    assert 0.0 <= results["test"]["test_f1"] <= 1.0
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.window_block == "bert" and model.config.num_labels == len(results["labels"])
    assert json.loads((out / "config.json").read_text())["window_size"] == 16
