# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""End to end: run_sentence_classification.py on tiny synthetic documents with a tiny BERT sentence encoder (built
from a config, saved as a sentence-transformers folder): it trains, reports, caches the frozen sentence vectors, and
saves a model that classifies raw documents."""

import json
import random

import pytest
import torch

from conftest import readme_block
from run_scripts import run_sentence_classification
from tests.model.test_sentence_models import make_tiny_sentence_encoder


pytest.importorskip("pysbd")
pytestmark = pytest.mark.usefixtures("restore_script_globals")

WORDS = {"sports": "match goal team coach league score season player".split(),
         "politics": "vote senate election party law minister policy debate".split()}
COMMON = ["the ", "a ", "and the "]


def document(rng, label, sentences):
    return " ".join(f"{rng.choice(COMMON).capitalize()}{rng.choice(WORDS[label])} {rng.choice(WORDS[label])} "
                    f"{rng.choice(WORDS[label])}." for _ in range(sentences))


def write_split(path, rng, n):
    with open(path, "w") as f:
        for i in range(n):
            label = ["sports", "politics"][i % 2]
            f.write(json.dumps({"text": document(rng, label, rng.randint(2, 6)), "label": label}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sentence_data")
    rng = random.Random(0)
    return {"encoder": make_tiny_sentence_encoder(root / "encoder"),
            "train": write_split(root / "train.jsonl", rng, 16), "validation": write_split(root / "dev.jsonl", rng, 6),
            "test": write_split(root / "test.jsonl", rng, 6), "cache": str(root / "cache")}


def run(data, output_dir, *flags):
    return run_sentence_classification.main([
        "--train_file", data["train"], "--validation_file", data["validation"], "--test_file", data["test"],
        "--encoder", data["encoder"], "--embedding_cache_dir", data["cache"], "--output_dir", str(output_dir),
        "--num_train_epochs", "2", "--use_cpu", "--report_to", "none", "--disable_tqdm", "True",
        "--ran_hidden_size", "8", "--ran_heads", "2", "--sentence_window", "2", "--learning_rate", "1e-2", *flags])


def test_frozen_run_reports_caches_and_saves_a_raw_text_classifier(data, tmp_path, monkeypatch):
    output_dir = tmp_path / "outputs" / "sentences"
    results = run(data, output_dir, "--head", "ran")
    test = results["test"]
    for key in ("test_accuracy", "test_macro_f1", "baseline_accuracy", "baseline_macro_f1"):
        assert 0.0 <= test[key] <= 1.0
    assert test["test_samples"] == 6 and test["test_le_512_samples"] == 6
    assert results["freeze_encoder"] and results["head"] == "ran"
    assert len(list((output_dir / "test_predictions.jsonl").read_text().splitlines())) == 6
    sentences = results["sentence_statistics"]["test"]  # counted in sentences; "> 63": documents at the cap of 64
    assert sentences["sentences"] >= sentences["documents"] == 6 and "over_63" in sentences

    # the README's lines classify raw documents with the saved folder alone
    monkeypatch.chdir(tmp_path)
    namespace = {"torch": torch, "long_text": "The goal of the team. A match and a score."}
    exec(compile(readme_block("sentence-example"), "README.md:sentence-example", "exec"), namespace)
    assert namespace["labels"][0] in ("sports", "politics")
    # ... and so does the model card's pipeline, with the same label
    from transformers import pipeline

    classify = pipeline("text-classification", model="outputs/sentences", trust_remote_code=True)
    assert classify(namespace["long_text"])[0]["label"] == namespace["labels"][0]
    assert 'pipeline("text-classification"' in (output_dir / "README.md").read_text()

    # a second run reads the cached sentence vectors: no encoder is loaded
    import sentence_transformers

    def no_encoding(*args, **kwargs):
        raise AssertionError("the sentence vectors were encoded again instead of read from the cache")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", no_encoding)
    again = run(data, tmp_path / "aose", "--head", "aose")
    assert again["head"] == "aose" and again["test"]["test_samples"] == 6


def test_fine_tuned_encoder_moves(data, tmp_path):
    from ran_hf import RANSentenceForSequenceClassification

    results = run(data, tmp_path / "tuned", "--head", "aose", "--no_freeze_encoder", "--num_train_epochs", "1",
                  "--encoder_batch_size", "2")
    assert not results["freeze_encoder"]
    start = RANSentenceForSequenceClassification.from_sentence_encoder(data["encoder"], num_labels=2)
    tuned = RANSentenceForSequenceClassification.from_pretrained(tmp_path / "tuned")
    assert not tuned.config.freeze_encoder and tuned.config.encoder_batch_size == 2
    moved = [not torch.equal(a, b) for a, b in zip(start.encoder.parameters(), tuned.encoder.parameters())]
    assert any(moved)


def test_bad_input_errors(data, tmp_path):
    with pytest.raises(ValueError, match="not a sentence-transformers or Transformers model folder"):
        run(data, tmp_path / "x", "--encoder", str(tmp_path / "no_such_encoder"))
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"text": "Hi.", "label": "sports"}) + "\n")
    with pytest.raises(ValueError, match=r"--test_file '.*short.jsonl': 1 document\(s\) too short to split into a "
                                         r"sentence \(fewer than min_sentence_tokens=5 encoder tokens\): line 1"):
        run({**data, "test": str(short)}, tmp_path / "y", "--head", "aose")


def test_fine_tuned_encoder_has_its_own_learning_rate(data, tmp_path):
    from transformers import TrainingArguments

    from ran_hf import RANSentenceForSequenceClassification
    from run_scripts.helpers.sentences import SentenceTrainer

    model = RANSentenceForSequenceClassification.from_sentence_encoder(data["encoder"], num_labels=2,
                                                                       freeze_encoder=False)
    args = TrainingArguments(str(tmp_path), learning_rate=1e-3, report_to="none", use_cpu=True)
    optimizer = SentenceTrainer(model=model, args=args, encoder_learning_rate=2e-5).create_optimizer()
    encoder = {id(p) for p in model.encoder.parameters()}
    for group in optimizer.param_groups:
        on_encoder = {id(p) in encoder for p in group["params"]}
        assert len(on_encoder) == 1 and group["lr"] == (2e-5 if on_encoder.pop() else 1e-3)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == sum(1 for _ in model.parameters())


@pytest.mark.parametrize("other_run", ["finishes its chunk", "dies"])
def test_concurrent_runs_share_the_encoding(data, tmp_path, monkeypatch, other_run):
    """A chunk locked by another run is skipped and come back to at the end: read from the other run's file when it
    wrote one, encoded here when the other run died (its lock is free again). Either way the vectors equal an
    uncontended run's."""
    import threading

    import numpy as np
    from filelock import FileLock
    from transformers import AutoTokenizer

    from ran_hf import DocumentSentenceProcessor
    from ran_hf.processing_sentences import read_sentence_encoder_settings
    from run_scripts.helpers import sentences

    rng = random.Random(1)
    texts = [document(rng, "sports", 3) for _ in range(5)]
    lines = list(range(1, 6))
    tokenizer = AutoTokenizer.from_pretrained(read_sentence_encoder_settings(data["encoder"])["transformer_path"])
    processor = DocumentSentenceProcessor(tokenizer)
    alone = sentences.cached_sentence_embeddings(texts, lines, "docs", processor, data["encoder"],
                                                 str(tmp_path / "alone"), chunk_size=2)

    cache_dir = str(tmp_path / "shared")
    folder = sentences.cache_folder(cache_dir, data["encoder"], processor, texts)
    folder.mkdir(parents=True)
    first, last = folder / "part-00000.npz", folder / "part-00002.npz"
    encoded = []
    split_documents = sentences.split_documents
    monkeypatch.setattr(sentences, "split_documents", lambda *a, desc, **k: encoded.append(desc) or
                        split_documents(*a, desc=desc, **k))

    holding = threading.Event()

    def other():  # the other run: holds chunk 0 until this run has done the chunks after it
        held = FileLock(f"{first}.lock")
        held.acquire()
        holding.set()
        for _ in range(1200):  # at most a minute
            if last.is_file():
                break
            threading.Event().wait(0.05)
        if other_run == "finishes its chunk":
            first_two = np.concatenate(alone[:2])
            sentences._save_npz_atomic(first, embeddings=first_two, counts=np.array([len(a) for a in alone[:2]]))
        held.release()

    thread = threading.Thread(target=other)
    thread.start()
    holding.wait()
    shared = sentences.cached_sentence_embeddings(texts, lines, "docs", processor, data["encoder"], cache_dir,
                                                  chunk_size=2)
    thread.join()
    expected_order = ["docs [2/3]", "docs [3/3]"] + (["docs [1/3]"] if other_run == "dies" else [])
    assert [desc.removeprefix("splitting ") for desc in encoded] == expected_order
    assert len(shared) == len(alone) == 5
    for a, b in zip(shared, alone):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_short_documents_are_listed_before_any_encoding(data, tmp_path, monkeypatch):
    """Every document too short for one sentence is named in one error, before the encoder is loaded."""
    import sentence_transformers

    rows = [json.loads(line) for line in open(data["train"])]
    rows[1]["text"], rows[4]["text"] = "Hi.", "Ok."  # under min_sentence_tokens 5 encoder tokens
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))

    def no_encoding(*args, **kwargs):
        raise AssertionError("the encoder was loaded before the short documents were reported")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", no_encoding)
    with pytest.raises(ValueError, match=r"--train_file '.*train.jsonl': 2 document\(s\) too short .*: line 2 \(\d "
                                         r"tokens\), line 5 \(\d tokens\)\. .*--min_sentence_tokens of at most \d"):
        run({**data, "train": str(train)}, tmp_path / "short", "--embedding_cache_dir", str(tmp_path / "cache"))


def test_labels_are_named_with_class_names_as_run_classification_names_them(data, tmp_path):
    from ran_hf import RANSentenceForSequenceClassification

    results = run(data, tmp_path / "named", "--head", "aose", "--num_train_epochs", "1",
                  "--class_names", "sports=Sports,politics=Politics")
    assert results["labels"] == ["Politics", "Sports"]  # the sorted values, renamed
    config = RANSentenceForSequenceClassification.config_class.from_pretrained(tmp_path / "named")
    assert config.id2label == {0: "Politics", 1: "Sports"}
    assert {json.loads(line)["prediction"] for line in open(tmp_path / "named" / "test_predictions.jsonl")} <= {
        "Politics", "Sports"}
    with pytest.raises(ValueError, match=r"--class_names names the values \['sports'\] but not the training "
                                         r"label\(s\) \['politics'\]"):
        run(data, tmp_path / "partial", "--class_names", "sports=Sports")


def test_the_default_job_names_the_hyperpartisan_labels(data, tmp_path):
    """No data file: the shipped Hyperpartisan files (a slice), named as run_classification.py names them."""
    results = run_sentence_classification.main([
        "--encoder", data["encoder"], "--embedding_cache_dir", data["cache"], "--output_dir", str(tmp_path / "hp"),
        "--max_train_samples", "30", "--max_predict_samples", "4", "--max_sentences", "4", "--num_train_epochs", "1",
        "--use_cpu", "--report_to", "none", "--disable_tqdm", "True"])
    assert results["labels"] == ["not-hyperpartisan", "hyperpartisan"]
    from ran_hf import RANSentenceForSequenceClassification

    config = RANSentenceForSequenceClassification.config_class.from_pretrained(tmp_path / "hp")
    assert config.id2label == {0: "not-hyperpartisan", 1: "hyperpartisan"}


def test_a_forced_collapse_is_a_warning_in_the_card(data, tmp_path):
    results = run(data, tmp_path / "collapsed", "--head", "aose", "--learning_rate", "30", "--early_stopping_patience",
                  "0")
    assert results["collapse"] is not None and results["eval"]["eval_predicted_classes"] == 1
    card = (tmp_path / "collapsed" / "README.md").read_text()
    assert card.index("## Warning: training collapsed") < card.index("## Test results")
    assert "Try a lower --learning_rate" in card


def test_each_head_has_the_learning_rate_chosen_on_dev_and_a_flag_overrides_it(tmp_path):
    """research/sentence_classification/README.md: at 1e-3 RAN over sentences collapsed on IMDB's dev, at 2e-4 AoSE
    stalled on Hyperpartisan's; a saved model's own head decides when training goes on from it."""
    from run_scripts.run_sentence_classification import parse_job_arguments

    def learning_rate(*flags):
        return parse_job_arguments(["--output_dir", str(tmp_path / "out"), *flags])[2].learning_rate

    assert learning_rate("--head", "ran") == 2e-4 and learning_rate("--head", "aose") == 1e-3
    assert learning_rate("--head", "ran", "--learning_rate", "1e-3") == 1e-3
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "config.json").write_text(json.dumps({"head": "ran"}))
    assert learning_rate("--model_name_or_path", str(saved)) == 2e-4
