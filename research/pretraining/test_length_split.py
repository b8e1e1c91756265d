# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
import json
from pathlib import Path

import pytest

from research.pretraining.length_split import main

TOKENIZER = str(Path(__file__).parent / "tokenizer-16k")


def test_predictions_are_rescored_on_the_split_of_another_tokenizer(tmp_path):
    texts = ["a short text.", "the river ran " * 300, "word " * 505, "word " * 511]  # [CLS] and [SEP] count
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"text": t, "label": "x"}) + "\n" for t in texts))
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"line": i + 1, "tokens": 0, "label": label, "prediction": prediction}
            for i, (label, prediction) in enumerate([("a", "a"), ("a", "b"), ("b", "b"), ("b", "a")])]
    (run / "test_predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    scores = main([str(run), "--tokenizer", TOKENIZER, "--test_file", str(tmp_path / "test.jsonl")])[str(run)]
    # lengths 6, 902, 507 and 513 tokens: documents 1 and 3 are at most 512, documents 2 and 4 over it
    assert scores["all"] == {"documents": 4, "accuracy": 0.5, "macro_f1": 0.5}
    assert scores["le_512"] == {"documents": 2, "accuracy": 1.0, "macro_f1": 1.0}
    assert scores["over_512"]["documents"] == 2 and scores["over_512"]["accuracy"] == 0.0


def test_predictions_of_another_test_file_are_refused(tmp_path):
    (tmp_path / "test.jsonl").write_text(json.dumps({"text": "one", "label": "x"}) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "test_predictions.jsonl").write_text(json.dumps({"line": 7, "label": "a", "prediction": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"lines \[7\] are not in --test_file"):
        main([str(run), "--tokenizer", TOKENIZER, "--test_file", str(tmp_path / "test.jsonl")])
    with pytest.raises(FileNotFoundError, match="no test_predictions.jsonl"):
        main([str(tmp_path), "--tokenizer", TOKENIZER, "--test_file", str(tmp_path / "test.jsonl")])
