# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""A saved model carries the `--max_length` it was trained and selected at (`config.max_length_trained`), and
prediction without training reads documents at that length unless `--max_length` is given, logging which."""

import json

import pytest
from transformers import AutoConfig
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from run_scripts import run_classification, run_ner
from script_data import TINY, data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")


@pytest.fixture(scope="module")
def short_classifier(data_dir, tmp_path_factory):
    """A tiny classifier trained at --max_length 64 on documents of up to ~900 tokens."""
    out = tmp_path_factory.mktemp("short") / "cls"
    run_classification.main(["--train_file", str(data_dir / "train.jsonl.gz"), "--output_dir", str(out),
                             "--max_length", "64", "--num_train_epochs", "1", "--validation_split_percentage", "0",
                             "--save_strategy", "epoch", *TINY])
    return out


def predicted(out):
    return [json.loads(line) for line in (out / "test_predictions.jsonl").read_text().splitlines()]


def test_the_saved_config_carries_the_trained_length_through_save_and_load(short_classifier):
    assert json.loads((short_classifier / "config.json").read_text())["max_length_trained"] == 64
    checkpoint = next(short_classifier.glob("checkpoint-*"))
    assert json.loads((checkpoint / "config.json").read_text())["max_length_trained"] == 64
    assert AutoConfig.from_pretrained(short_classifier).max_length_trained == 64
    # the folder's own code (what trust_remote_code loads where ran_hf is not installed), strict config included
    remote_class = get_class_from_dynamic_module("modeling_ran.RANForSequenceClassification", str(short_classifier))
    remote = remote_class.from_pretrained(short_classifier)
    assert type(remote.config).__module__.startswith("transformers_modules")
    assert remote.config.max_length_trained == 64
    remote.config.save_pretrained(short_classifier / "again")
    assert AutoConfig.from_pretrained(short_classifier / "again").max_length_trained == 64


def test_prediction_reads_the_trained_length_unless_max_length_is_given(short_classifier, data_dir, tmp_path, capsys):
    predict = ["--model_name_or_path", str(short_classifier), "--do_predict", "--test_file",
               str(data_dir / "test.jsonl"), *TINY]
    run_classification.main([*predict, "--output_dir", str(tmp_path / "default")])
    logged = capsys.readouterr().out
    assert f"Reading 64 tokens per document, the length {short_classifier} was trained and selected at" in logged
    run_classification.main([*predict, "--output_dir", str(tmp_path / "at64"), "--max_length", "64"])
    run_classification.main([*predict, "--output_dir", str(tmp_path / "at8192"), "--max_length", "8192"])
    logged = capsys.readouterr().out
    assert "--max_length: reading 8192 tokens per document, but" in logged and "trained and selected at 64" in logged
    default, at64, at8192 = (predicted(tmp_path / name) for name in ("default", "at64", "at8192"))
    assert [p["probabilities"] for p in default] == [p["probabilities"] for p in at64]
    long = [i for i, p in enumerate(default) if p["tokens"] > 64]
    assert long and all(default[i]["probabilities"] != at8192[i]["probabilities"] for i in long)


def test_ner_prediction_reads_the_trained_length(data_dir, tmp_path, capsys):
    out = tmp_path / "ner"
    run_ner.main(["--train_file", str(data_dir / "ner_train.txt"), "--output_dir", str(out), "--max_length", "24",
                  "--num_train_epochs", "1", "--save_strategy", "no", *TINY])
    assert json.loads((out / "config.json").read_text())["max_length_trained"] == 24
    capsys.readouterr()
    run_ner.main(["--model_name_or_path", str(out), "--do_predict", "--test_file", str(data_dir / "ner_test.txt"),
                  "--output_dir", str(tmp_path / "predicted"), *TINY])
    logged = capsys.readouterr().out
    assert f"Reading 24 tokens per document, the length {out} was trained and selected at" in logged
    assert "test: --max_length 24 cut" in logged  # the test documents are cut as the training ones were
