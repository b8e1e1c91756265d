# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""run_ner.py end to end on tiny CoNLL files: whole documents, label alignment, tag errors, and predicting on words
without tags."""

import json

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from run_scripts import run_ner
from run_scripts.helpers import tokenizer as tokenizer_helpers
from script_data import TINY, document, data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def test_read_conll_keeps_documents_whole(data_dir):
    docs = run_ner.read_conll(data_dir / "ner_train.txt", "train_file")
    assert len(docs) == 8  # one example per -DOCSTART- document
    assert all(len(d["sentence_lengths"]) >= 3 and sum(d["sentence_lengths"]) == len(d["words"]) for d in docs)
    sentences = run_ner.read_conll(data_dir / "ner_train.txt", "train_file", document_level=False)
    assert len(sentences) == sum(len(d["sentence_lengths"]) for d in docs)


def test_label_alignment_first_piece():
    tok = tokenizer_helpers.train_wordpiece_tokenizer(["Ab cd", "Abcdef"] * 5, vocab_size=40, min_frequency=1,
                                              lowercase=False)
    example = {"words": ["Abfed", "cd", "\x00"], "tags": ["B-PER", "O", "O"], "sentence_lengths": [3]}
    ds, lengths, cut = run_ner.tokenize_and_align([example], tok, {"O": 0, "B-PER": 1}, None)
    labels, ids = ds[0]["labels"], ds[0]["input_ids"]
    assert labels[0] == -100 and labels[-1] == -100  # [CLS], [SEP]
    assert [x for x in labels if x != -100] == [1, 0, 0]  # one label per word, the unpieceable word kept as [UNK]
    assert len(ids) > 5 and labels[1] == 1 and labels[2] == -100  # "Abfed" (unseen) has several pieces: only the
    # first is labelled
    assert tok.unk_token_id in ids and cut == 0


def test_ner(data_dir, tmp_path, capsys):
    out = tmp_path / "ner"
    results = run_ner.main(["--train_file", str(data_dir / "ner_train.txt"),
                            "--validation_file", str(data_dir / "ner_valid.txt"),
                            "--test_file", str(data_dir / "ner_test.txt"), "--output_dir", str(out),
                            "--num_train_epochs", "2", "--per_device_train_batch_size", "2", *TINY])
    assert set(results["labels"]) == {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC"}
    for key in ("test_precision", "test_recall", "test_f1", "test_accuracy"):
        assert 0.0 <= results["test"][key] <= 1.0
    assert results["test"]["test_documents"] == 3
    assert "precision" in capsys.readouterr().out
    predictions = (out / "test_predictions.txt").read_text()
    assert predictions.count("-DOCSTART-") == 3
    assert "test" in (out / "README.md").read_text() and "f1" in (out / "README.md").read_text()

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    enc = tok(["John", "Smith", "visited", "Paris", "."] * 50, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (1, enc["input_ids"].shape[1], len(results["labels"]))


def test_conll_errors(data_dir, tmp_path):
    bad_tag = tmp_path / "test.txt"
    bad_tag.write_text("-DOCSTART- -X- -X- O\n\nRome NNP B-NP B-CITY\n\n")
    with pytest.raises(ValueError, match=r"tag\(s\) never seen in the training data: 'B-CITY'"):
        run_ner.main(["--train_file", str(data_dir / "ner_train.txt"), "--test_file", str(bad_tag),
                      "--output_dir", str(tmp_path / "o"), *TINY])
    one_column = tmp_path / "one.txt"
    one_column.write_text("-DOCSTART- -X- -X- O\n\nRome\n")
    with pytest.raises(ValueError, match=r"one\.txt', line 3: expected at least two"):
        run_ner.read_conll(one_column, "train_file")
    empty_doc = tmp_path / "emptydoc.txt"
    empty_doc.write_text("-DOCSTART- -X- -X- O\n\nRome NNP B-NP B-LOC\n\n-DOCSTART- -X- -X- O\n\n"
                         "-DOCSTART- -X- -X- O\n\nParis NNP B-NP B-LOC\n")
    with pytest.raises(ValueError, match=r"emptydoc\.txt': empty document .* line\(s\) 5\."):
        run_ner.read_conll(empty_doc, "train_file")
    assert len(run_ner.read_conll(empty_doc, "train_file", skip_empty=True)) == 2


def test_ner_predicts_words_without_tags_and_names_its_tags(data_dir, tmp_path, capsys):
    from transformers import pipeline

    out = tmp_path / "ner"
    results = run_ner.main(["--train_file", str(data_dir / "ner_train.txt"), "--output_dir", str(out),
                            "--num_train_epochs", "1", "--per_device_train_batch_size", "4", *TINY])
    tags = set(results["labels"])
    assert set(json.loads((out / "config.json").read_text())["id2label"].values()) == tags
    tagger = pipeline("token-classification", model=str(out), device="cpu")
    tokens = tagger("John Smith visited Paris . " * 40, ignore_labels=[])  # every word piece with its tag name
    assert len(tokens) >= 200 and {t["entity"] for t in tokens} <= tags
    assert isinstance(tagger("John Smith flew to Paris.", aggregation_strategy="simple"), list)  # the card's call
    card = (out / "README.md").read_text()
    assert f'pipeline("token-classification", model="{out}")' in card
    assert f"--model_name_or_path {out} --do_predict --test_file new.txt" in card

    # the test file without its tag column: the words of each document, in their sentences
    words_only = tmp_path / "new.txt"
    lines = (data_dir / "ner_test.txt").read_text().splitlines()
    words_only.write_text("\n".join(line.split()[0] if line.strip() else "" for line in lines) + "\n")
    capsys.readouterr()
    results = run_ner.main(["--model_name_or_path", str(out), "--do_predict", "--test_file", str(words_only),
                            "--output_dir", str(tmp_path / "predicted"), *TINY])
    assert "test" not in results and results["predict"] == {"predict_documents": 3, "labelled": False}
    assert "no test metrics are computed" in capsys.readouterr().out
    predicted = (tmp_path / "predicted" / "test_predictions.txt").read_text().splitlines()
    assert predicted.count("-DOCSTART- O") == 3  # the columns of the words below it
    rows = [line.split() for line in predicted if line and not line.startswith("-DOCSTART-")]
    expected_words = [line.split()[0] for line in lines if line.strip() and not line.startswith("-DOCSTART-")]
    assert [row[0] for row in rows] == expected_words  # every word, in order, sentences kept
    assert all(len(row) == 2 and row[1] in tags for row in rows)
    assert predicted.count("") == lines.count("")  # a blank line after each -DOCSTART- and each sentence, as read

    mixed = tmp_path / "mixed.txt"
    mixed.write_text("-DOCSTART- -X- -X- O\n\nRome NNP B-NP B-LOC\nis\n")
    with pytest.raises(ValueError, match=r"mixed\.txt': line 3 has a tag column but line 4 has only the word"):
        run_ner.read_conll(mixed, "test_file", allow_untagged=True)


def test_head_learning_rate_refuses_a_checkpoint_that_holds_every_weight(data_dir, tmp_path):
    """A token-classification checkpoint with the same tags leaves no new weight for --head_learning_rate."""
    out = tmp_path / "ner"
    train = ["--train_file", str(data_dir / "ner_train.txt"), "--num_train_epochs", "1",
             "--per_device_train_batch_size", "4", "--save_strategy", "no", *TINY]
    run_ner.main([*train, "--output_dir", str(out)])
    with pytest.raises(ValueError, match="holds every weight"):
        run_ner.main([*train, "--output_dir", str(tmp_path / "again"), "--model_name_or_path", str(out),
                      "--head_learning_rate", "1e-3"])
