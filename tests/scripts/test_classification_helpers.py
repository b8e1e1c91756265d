# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The label, validation-split and test-scoring helpers both classification scripts share, and labels of mixed
types in one file."""

import json

import numpy as np
import pytest

from run_scripts.helpers.classification import (
    check_split_labels,
    parse_labels,
    score_test_split,
    training_label_names,
    validation_indices,
)
from run_scripts.helpers.data_files import read_records


def test_validation_split_is_stratified_disjoint_and_seeded():
    labels = np.array([0] * 80 + [1] * 20)
    train, validation, stratified = validation_indices(labels, 10, seed=42, num_labels=2)
    assert stratified and len(validation) == 10 and sorted(train + validation) == list(range(100))
    assert labels[validation].tolist().count(1) == 2  # the 80 / 20 proportion kept
    assert validation_indices(labels, 10, seed=42, num_labels=2)[1] == validation
    assert validation_indices(labels, 10, seed=43, num_labels=2)[1] != validation


def test_validation_split_of_multi_label_rows_is_not_stratified():
    multi_hot = np.eye(3, dtype=np.float32)[np.arange(30) % 3]
    train, validation, stratified = validation_indices(multi_hot, 20, seed=0, num_labels=3)
    assert not stratified and len(validation) == 6 and not set(train) & set(validation)


def test_validation_split_that_leaves_nothing_names_the_flag():
    with pytest.raises(ValueError, match="--validation_split_percentage 1 of 20 training documents"):
        validation_indices(np.zeros(20, dtype=np.int64), 1, seed=0, num_labels=1)


def test_label_names_follow_the_dataset_order_and_the_class_names():
    assert training_label_names(False, ["10", "9", "2"], "train_file", "t.jsonl") == ["2", "9", "10"]
    assert training_label_names(False, ["b", "a"], "train_file", "t.jsonl", dataset_order=["b", "c", "a"]) == [
        "b", "c", "a"]
    assert training_label_names(False, ["0", "1"], "train_file", "t.jsonl", {"0": "neg", "1": "pos"}) == [
        "neg", "pos"]
    with pytest.raises(ValueError, match=r"not the training label\(s\) \['1'\]"):
        training_label_names(False, ["0", "1"], "train_file", "t.jsonl", {"0": "neg"})
    with pytest.raises(ValueError, match="--train_file 't.jsonl' has a single label"):
        training_label_names(False, ["0", "0"], "train_file", "t.jsonl")


def test_split_labels_are_renamed_and_checked_against_the_model():
    records = [{"_line": 1}, {"_line": 2}]
    splits = {"test": ("test_file", "test.jsonl", records)}
    checked = check_split_labels({"test": (False, ["0", "1"])}, splits, False, ["neg", "pos"], {"0": "neg", "1": "pos"})
    assert checked == {"test": ["neg", "pos"]}
    with pytest.raises(ValueError, match=r"--test_file 'test.jsonl' has label\(s\) never seen.*'2' \(line 2\)"):
        check_split_labels({"test": (False, ["0", "2"])}, splits, False, ["0", "1"])
    with pytest.raises(ValueError, match="labels are lists .* but the training data is single-label"):
        check_split_labels({"test": (True, [["0"], ["1"]])}, splits, False, ["0", "1"])


def test_test_scores_split_by_length_and_beside_the_majority_class():
    y_true = np.array([0, 1, 1, 1])
    y_pred = np.array([0, 1, 0, 1])
    lengths = np.array([100, 600, 700, 512])
    metrics, table = score_test_split(y_true, y_pred, lengths, np.array([1, 1, 0]), False, ["no", "yes"], "RAN")
    assert metrics["test_accuracy"] == 0.75 and metrics["test_samples"] == 4
    assert metrics["test_le_512_samples"] == 2 and metrics["test_le_512_accuracy"] == 1.0  # 512 tokens is "<= 512"
    assert metrics["test_over_512_samples"] == 2 and metrics["test_over_512_accuracy"] == 0.5
    assert metrics["baseline_accuracy"] == 0.75  # the training majority, "yes", on every document
    assert list(table) == ["RAN (this run)", "RAN, the 2 documents of <= 512 tokens",
                           "RAN, the 2 documents of > 512 tokens", "majority class of the training labels ('yes')"]
    _, table = score_test_split(y_true, y_pred, lengths, None, False, ["no", "yes"], "RAN")
    assert "majority class of the test labels (no training split) ('yes')" in table


def labelled_file(path, rows):
    """A jsonl file of `{"text", "label"}` rows as written (labels keep their JSON types), or a csv of them."""
    if path.suffix == ".csv":
        path.write_text("text,label\n" + "".join(f"doc {i},{label}\n" for i, label in enumerate(rows)))
    else:
        path.write_text("".join(json.dumps({"text": f"doc {i}", "label": label}) + "\n" for i, label in enumerate(rows)))
    return path


@pytest.mark.parametrize("name, labels, match", [
    ("merge.jsonl", ["1", 1, 0, 0], r"integer as text on line\(s\) 1 \(e.g. '1'\); integer on line\(s\) 2, 3, 4"),
    ("three.jsonl", ["yes", 1, 0], r"text on line\(s\) 1 \(e.g. 'yes'\); integer on line\(s\) 2, 3"),
    ("three.csv", ["yes", 1, 0, 1], r"text on line\(s\) 2 \(e.g. 'yes'\); integer as text on line\(s\) 3, 4, 5"),
])
def test_labels_of_different_types_are_an_error_naming_the_types_and_lines(tmp_path, name, labels, match):
    path = labelled_file(tmp_path / name, labels)
    records = read_records(path, ["label"], "train_file", text_field="text")
    with pytest.raises(ValueError, match=rf"--train_file '.*{name}': the labels in field 'label' are of different "
                                         rf"types: {match}.*--class_names"):
        parse_labels(records, "label", str(path), "train_file")


def test_labels_of_different_types_are_accepted_when_the_class_names_name_every_value(tmp_path):
    path = labelled_file(tmp_path / "merge.jsonl", ["1", 1, 0, 0])
    records = read_records(path, ["label"], "train_file", text_field="text")
    names = {"0": "negative", "1": "positive"}
    multi, keys = parse_labels(records, "label", str(path), "train_file", names)
    assert keys == ["1", "1", "0", "0"] and training_label_names(multi, keys, "train_file", str(path), names) == [
        "negative", "positive"]
    with pytest.raises(ValueError, match="different types"):  # a value the names leave out: still an error
        parse_labels(read_records(labelled_file(tmp_path / "three.jsonl", ["yes", 1, 0]), ["label"],
                                  text_field="text"), "label", "three.jsonl", "train_file", names)
    uniform = labelled_file(tmp_path / "uniform.jsonl", ["1", "0", "10"])  # one type: as before
    assert parse_labels(read_records(uniform, ["label"], text_field="text"), "label", "u", "train_file")[1] == [
        "1", "0", "10"]


@pytest.mark.usefixtures("restore_script_globals")
def test_run_classification_refuses_mixed_labels_before_training(tmp_path):
    from run_scripts import run_classification

    path = labelled_file(tmp_path / "train.jsonl", ["1", 1, 0, 0, 1, 0])
    with pytest.raises(ValueError, match=r"train\.jsonl': the labels in field 'label' are of different types"):
        run_classification.main(["--train_file", str(path), "--output_dir", str(tmp_path / "o"), "--use_cpu",
                                 "--report_to", "none"])
