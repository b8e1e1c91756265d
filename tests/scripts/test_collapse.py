# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""A run that collapsed to one class is told from a result: the detector on evaluation histories, and a tiny
classifier forced to collapse by a huge learning rate, whose WARNING reaches the log, the results and the model
card."""

import json
import math

import numpy as np
import pytest

from run_scripts import run_classification, run_ner
from run_scripts.helpers.collapse import (check_collapse, collapse_findings, distinct_predictions, recovered_epochs,
                                         training_log)
from script_data import TINY, data_dir  # noqa: F401 (data_dir: a fixture)


def history(*evaluations):
    """Evaluations (epoch, eval_loss, distinct predictions) as Trainer's log_history holds them."""
    return [{"epoch": epoch, "eval_loss": loss, "eval_predicted_classes": count} for epoch, loss, count in evaluations]


def test_a_collapse_once_the_learning_rate_peaked_is_found_twice_over():
    # two classes: the loss fell below ln 2, then came back to it as the model took to predicting one class
    found = collapse_findings(history((1, 0.52, 2), (2, 0.6931, 1), (3, 0.6932, 1)), "eval_predicted_classes", 2)
    assert len(found) == 2
    assert found[0] == ("the predictions on the validation split are constant (one class for every example) at "
                        "epoch(s) 2, 3")
    assert found[1].startswith(f"the validation loss came back to the uniform level ln 2 = {math.log(2):.4f} "
                               "(0.6932 at epoch 3) after it had been down to 0.5200")


@pytest.mark.parametrize("evaluations, expected", [
    (((1, 0.9, 3), (2, 0.6, 3), (3, 0.4, 3)), 0),  # learning
    (((1, 1.0986, 3), (2, 1.0985, 2), (3, 1.0984, 3)), 0),  # never below the uniform level: not learning, no collapse
    (((1, 1.0986, 1), (2, 1.0986, 1)), 1),  # one class all along: constant predictions
    (((1, 0.9, 3), (2, 1.09, 3)), 1),  # back within 3% of ln 3 with varied predictions
    (((1, 0.9, 3), (2, 1.2, 3)), 0),  # worse than uniform, but not at it: overfitting, not a collapse
    (((1, 1.0986, 1), (2, 0.8, 3), (3, 0.7, 3)), 0),  # one class until it learned: no collapse
    (((1, 0.6, 3), (2, 1.0986, 1), (3, 0.5, 3)), 0),  # a dip into one class, then better than before: recovered
    (((1, 0.9, 3), (2, 1.09, 3), (3, 1.3, 3)), 0),  # passing ln 3 on its way up: overfitting
])
def test_the_detector_tells_a_collapse_from_a_run_that_learns_or_never_did(evaluations, expected):
    assert len(collapse_findings(history(*evaluations), "eval_predicted_classes", 3)) == expected


def test_a_loss_at_ln_k_with_the_accuracy_kept_is_overfitting_not_a_collapse():
    """Two classes: the loss climbs back through ln 2 = 0.693 as the model grows confident, accuracy stays 0.85."""
    evaluations = [{"epoch": e, "eval_loss": loss, "eval_accuracy": accuracy, "eval_predicted_classes": 2}
                   for e, loss, accuracy in ((1, 0.43, 0.82), (2, 0.33, 0.87), (3, 0.70, 0.85))]
    assert collapse_findings(evaluations, "eval_predicted_classes", 2) == []
    evaluations[-1]["eval_accuracy"] = 0.55  # most of the way back to chance (0.5): collapsed
    assert "uniform level ln 2" in collapse_findings(evaluations, "eval_predicted_classes", 2)[0]


def test_a_recovered_dip_is_told_apart_from_one_class_before_learning():
    assert recovered_epochs(history((1, 0.6, 2), (2, 0.69, 1), (3, 0.69, 1), (4, 0.5, 2)),
                            "eval_predicted_classes") == "2, 3"
    assert recovered_epochs(history((1, 0.6, 2), (2, 0.69, 1)), "eval_predicted_classes") is None  # did not recover
    assert recovered_epochs(history((1, 0.6, 2), (2, 0.5, 2)), "eval_predicted_classes") is None


def test_the_evaluations_of_the_kept_model_after_training_are_not_read_as_its_end():
    log = [*history((1, 0.52, 2), (2, 0.6931, 1)), {"train_runtime": 10.0, "epoch": 2},
           {"epoch": 2, "eval_loss": 0.52, "eval_predicted_classes": 2}]
    assert training_log(log) == log[:2] and training_log(log[:2]) == log[:2]


def test_without_a_class_count_only_constant_predictions_count():
    """Multi-label and NER have no single uniform level: the loss is not read."""
    evaluations = history((1, 0.3, 4), (2, math.log(3), 4))
    assert collapse_findings(evaluations, "eval_predicted_classes", None) == []
    ner = [{"epoch": 1, "eval_loss": 0.2, "eval_predicted_tags": 1}]
    assert "constant" in collapse_findings(ner, "eval_predicted_tags", None)[0]


def test_distinct_predictions_counts_ids_multi_hot_rows_and_tags():
    assert distinct_predictions(np.array([1, 1, 1])) == 1 and distinct_predictions(np.array([0, 2, 0])) == 2
    assert distinct_predictions(np.array([[1, 0], [1, 0], [0, 1]])) == 2
    assert distinct_predictions(["O", "O", "B-PER"]) == 2


@pytest.mark.usefixtures("restore_script_globals")
def test_a_forced_collapse_is_a_warning_in_the_log_the_results_and_the_card(data_dir, tmp_path, capsys):
    args = ["--train_file", str(data_dir / "train.jsonl.gz"), "--test_file", str(data_dir / "test.jsonl"),
            "--validation_split_percentage", "25", "--num_train_epochs", "2", "--per_device_train_batch_size", "6",
            *TINY, "--tokenizer_name", run_classification.DEFAULT_TOKENIZER]  # (a fixed vocabulary: the same runs)
    collapsed = run_classification.main([*args, "--output_dir", str(tmp_path / "collapsed"), "--learning_rate", "1"])
    logged = capsys.readouterr().out
    assert "WARNING - run_scripts - " in logged and "Training collapsed: the predictions on the validation split " \
                                                     "are constant" in logged
    assert collapsed["collapse"]["kept_model_constant"] and collapsed["eval"]["eval_predicted_classes"] == 1
    assert "lower --learning_rate (this run's peak was 1; e.g. 0.33)" in collapsed["collapse"]["advice"]
    summary = json.loads((tmp_path / "collapsed" / "all_results_summary.json").read_text())
    assert summary["collapse"]["summary"] == collapsed["collapse"]["summary"]
    card = (tmp_path / "collapsed" / "README.md").read_text()
    warning, test = card.index("## Warning: training collapsed"), card.index("## Test results")
    assert warning < test and "those of a collapsed model, not a result" in card[warning:test]

    learned = run_classification.main([*args, "--output_dir", str(tmp_path / "learned"), "--learning_rate", "3e-3"])
    assert learned["collapse"] is None and learned["eval"]["eval_predicted_classes"] > 1
    assert "collapsed" not in (tmp_path / "learned" / "README.md").read_text()


@pytest.mark.usefixtures("restore_script_globals")
def test_a_tagger_that_tags_every_word_alike_is_a_warning_in_its_card(data_dir, tmp_path):
    out = tmp_path / "ner"
    results = run_ner.main(["--train_file", str(data_dir / "ner_train.txt"), "--validation_file",
                            str(data_dir / "ner_valid.txt"), "--output_dir", str(out), "--num_train_epochs", "1",
                            "--learning_rate", "10", "--per_device_train_batch_size", "4", *TINY])
    assert results["validation"]["eval_predicted_tags"] == 1 and results["collapse"]["kept_model_constant"]
    assert "## Warning: training collapsed" in (out / "README.md").read_text()


def fake_trainer(*evaluations):
    from types import SimpleNamespace

    log = [*history(*evaluations), {"train_runtime": 1.0}]
    return SimpleNamespace(state=SimpleNamespace(log_history=log), args=SimpleNamespace(learning_rate=1e-3))


def test_a_run_is_flagged_by_where_it_ended_not_by_a_passing_dip(caplog):
    kept = {"eval_loss": 0.5, "eval_predicted_classes": 2}
    with caplog.at_level("WARNING", logger="run_scripts"):
        assert check_collapse(fake_trainer((1, 0.6, 2), (2, 0.69, 1), (3, 0.5, 2)), kept,
                              "eval_predicted_classes", 2) is None
    assert "constant at epoch(s) 2 and varied again later" in caplog.text and "Training collapsed" not in caplog.text
    ended = check_collapse(fake_trainer((1, 0.5, 2), (2, 0.6931, 1), (3, 0.6931, 1)), kept,
                           "eval_predicted_classes", 2)
    assert not ended["kept_model_constant"] and "may predate the collapse" in ended["summary"]
    assert "constant (one class for every example) at epoch(s) 2, 3" in ended["summary"]
