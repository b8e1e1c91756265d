# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""run_classification.py end to end on tiny synthetic data: training from scratch and from a checkpoint, resuming,
multi-label, the shipped Hyperpartisan job's data, clear errors on bad files, label names, predicting on unlabelled
documents and --dataset_name."""

import json
import shutil

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from run_scripts import run_classification, run_mlm
from run_scripts.helpers import data_files, reports, trainer_setup
from script_data import TINY, TOPICS, document, write_jsonl, classification_rows, data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def test_classification_from_scratch(data_dir, tmp_path, capsys):
    out = tmp_path / "cls"
    results = run_classification.main([
        "--train_file", str(data_dir / "train.jsonl.gz"), "--test_file", str(data_dir / "test.jsonl"),
        "--output_dir", str(out), "--num_train_epochs", "2", "--per_device_train_batch_size", "6",
        "--validation_split_percentage", "25", *TINY])
    printed = capsys.readouterr().out
    assert "> 512" in printed and "median" in printed and "p90" in printed  # the length report
    assert "majority class" in printed and "macro_f1" in printed
    assert results["length_statistics"]["train"]["max"] > 512  # long documents are not cut at 512 ...
    assert results["length_statistics"]["train"]["over_512"] >= 1
    for key in ("test_accuracy", "test_micro_f1", "test_macro_f1", "baseline_accuracy", "baseline_macro_f1"):
        assert 0.0 <= results["test"][key] <= 1.0
    assert results["test"]["baseline_accuracy"] == pytest.approx(4 / 12)  # one of three balanced topics
    card = (out / "README.md").read_text()
    assert "macro_f1" in card and "hidden 16" in card and "train.jsonl.gz" in card
    assert "`run_scripts/run_classification.py` of `ran_hf` from scratch." in card
    predictions = [json.loads(line) for line in (out / "test_predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 12
    # the test scores split at 512 tokens: the parts add up to the whole, and each part is scored on its own
    long = [p for p in predictions if p["tokens"] > 512]
    test = results["test"]
    assert 0 < len(long) < 12 and test["test_over_512_samples"] == len(long)
    assert test["test_le_512_samples"] == 12 - len(long)
    assert test["test_over_512_accuracy"] == pytest.approx(sum(p["label"] == p["prediction"] for p in long) / len(long))
    assert test["test_accuracy"] == pytest.approx(
        (test["test_over_512_accuracy"] * len(long) + test["test_le_512_accuracy"] * (12 - len(long))) / 12)
    assert "documents of > 512 tokens" in printed
    assert any(p.name.startswith("checkpoint-") for p in out.iterdir())

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert model.config.problem_type == "single_label_classification"
    assert set(model.config.id2label.values()) == set(TOPICS)
    batch = tok(["goal team " * 400, "vote senate"], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] > 512
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()


def test_classification_resume_from_checkpoint(data_dir, tmp_path):
    out = tmp_path / "resume"
    args = ["--train_file", str(data_dir / "train.jsonl.gz"), "--output_dir", str(out), "--per_device_train_batch_size",
            "9", "--validation_split_percentage", "0", "--save_strategy", "epoch", *TINY]
    first = run_classification.main([*args, "--num_train_epochs", "1"])
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    stored = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())["stateful_callbacks"]
    first_seconds = stored["TrainingClock"]["attributes"]["seconds"]
    second = run_classification.main([*args, "--num_train_epochs", "2", "--resume_from_checkpoint", "last"])
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 8 and first["train"]["epoch"] == 1 and second["train"]["epoch"] == 2
    # the training time of both processes: the first's as its checkpoint stored it, plus the second's own
    assert 0 < first_seconds <= first["train"]["train_runtime_all_processes"]
    assert second["train"]["train_runtime_all_processes"] == pytest.approx(
        first_seconds + second["train"]["train_runtime"], abs=0.5)
    # a checkpoint from before the clock existed resumes too, counting the new process only
    older = json.loads((out / "checkpoint-8" / "trainer_state.json").read_text())
    del older["stateful_callbacks"]["TrainingClock"]
    (out / "checkpoint-8" / "trainer_state.json").write_text(json.dumps(older))
    third = run_classification.main([*args, "--num_train_epochs", "3", "--resume_from_checkpoint", "last"])
    assert third["train"]["train_runtime_all_processes"] == pytest.approx(third["train"]["train_runtime"], abs=0.5)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == vocab  # the checkpoint's tokenizer, not a new one
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        run_classification.main([*args, "--output_dir", str(tmp_path / "empty"), "--resume_from_checkpoint", "last"])


def test_training_clock_starts_from_the_checkpoints_total():
    clock = trainer_setup.TrainingClock()
    resumed = TrainerState(global_step=4, stateful_callbacks=None)  # as read from a checkpoint's trainer_state.json
    resumed.stateful_callbacks = {"TrainingClock": {"args": {}, "attributes": {"seconds": 1000.0}}}
    clock.on_train_begin(None, resumed, None)
    assert 1000.0 <= clock.seconds() < 1010.0
    assert clock.state()["attributes"]["seconds"] >= 1000.0
    fresh = TrainerState(stateful_callbacks=[clock])  # holds the clock's 1000+ s, as a second train() call would
    clock.on_train_begin(None, fresh, None)  # a run from step 0 counts its own time only
    assert 0.0 <= clock.seconds() < 10.0
    older = TrainerState(global_step=4, stateful_callbacks=None)  # a checkpoint saved before the clock existed
    clock.on_train_begin(None, older, None)
    assert 0.0 <= clock.seconds() < 10.0 and "TrainingClock" in older.stateful_callbacks  # so Trainer can save it


def test_a_run_resumed_mid_epoch_trains_like_the_uninterrupted_run(data_dir, tmp_path):
    # 32 training documents in batches of 8: 4 steps an epoch; a checkpoint after every step (--save_every_minutes)
    args = ["--train_file", str(data_dir / "train.jsonl.gz"), "--per_device_train_batch_size", "8",
            "--num_train_epochs", "3", "--validation_split_percentage", "12", "--save_total_limit", "20",
            "--load_best_model_at_end", "False", "--save_every_minutes", "1e-9", *TINY]
    whole = tmp_path / "whole"
    run_classification.main([*args, "--output_dir", str(whole)])
    assert sorted(int(p.name.split("-")[1]) for p in whole.glob("checkpoint-*")) == list(range(1, 13))

    def losses(out):
        return [h["loss"] for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in h]

    def resume(source, step, name):
        out = tmp_path / name
        out.mkdir()
        shutil.copytree(source / f"checkpoint-{step}", out / f"checkpoint-{step}")
        run_classification.main([*args, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
        return out

    expected_weights = load_file(whole / "model.safetensors")
    # mid-epoch (step 6 of 12); the length-grouped sampler shuffles the rest of epoch 2 as the whole run did
    mid = resume(whole, 6, "mid")
    assert losses(mid)[6:] == losses(whole)[6:]
    assert all(torch.equal(expected_weights[k], w) for k, w in load_file(mid / "model.safetensors").items())
    # resumed at an epoch boundary (step 4), stopped again mid-epoch (its own checkpoint 6) and resumed
    boundary = resume(whole, 4, "boundary")
    again = resume(boundary, 6, "again")
    assert losses(boundary)[4:] == losses(again)[4:] == losses(whole)[4:]
    # a checkpoint without the record (from before it existed) still resumes, shuffling the rest of the epoch anew
    state_file = tmp_path / "older" / "checkpoint-6" / "trainer_state.json"
    shutil.copytree(whole / "checkpoint-6", state_file.parent)
    older = json.loads(state_file.read_text())
    del older["stateful_callbacks"]["EpochStartRandomState"]
    state_file.write_text(json.dumps(older))
    run_classification.main([*args, "--output_dir", str(tmp_path / "older"), "--resume_from_checkpoint", "last"])
    assert len(losses(tmp_path / "older")) == 12


def test_timed_checkpoints_ask_for_a_save_once_the_interval_has_passed():
    now = [0.0]
    timed = trainer_setup.TimedCheckpoints(minutes=2, clock=lambda: now[0])
    control = TrainerControl()
    timed.on_train_begin(None, None, control)
    now[0] = 119.0
    timed.on_step_end(None, None, control)
    assert not control.should_save
    now[0] = 120.0
    timed.on_step_end(None, None, control)
    assert control.should_save
    control.should_save = False
    timed.on_save(None, None, control)  # any checkpoint (an epoch's too) starts the interval again
    now[0] = 200.0
    timed.on_step_end(None, None, control)
    assert not control.should_save


@pytest.mark.parametrize("minutes", ["-1", "nan"])
def test_save_every_minutes_must_not_be_negative(data_dir, tmp_path, minutes):
    with pytest.raises(ValueError, match="--save_every_minutes"):
        run_classification.main(["--train_file", str(data_dir / "train.jsonl.gz"), "--output_dir", str(tmp_path),
                                 "--save_every_minutes", minutes, *TINY])


def test_model_card_training_time_names_a_resumed_run():
    assert reports.training_time({"train_runtime": 61.2}) == "61 s of training"
    assert reports.training_time({"train_runtime": 61.2, "train_runtime_all_processes": 61.9}) == "61 s of training"
    assert reports.training_time({"train_runtime": 60, "train_runtime_all_processes": 300}) == (
        "300 s of training over the processes of a resumed run (60 s in the last one)")


def test_classification_multi_label(data_dir, tmp_path):
    out = tmp_path / "multi"
    results = run_classification.main([
        "--train_file", str(data_dir / "multi_train.jsonl"), "--test_file", str(data_dir / "multi_test.jsonl"),
        "--output_dir", str(out), "--num_train_epochs", "1", "--validation_split_percentage", "0", *TINY])
    assert results["multi_label"] and sorted(results["labels"]) == sorted(TOPICS)
    assert 0.0 <= results["test"]["test_macro_f1"] <= 1.0
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.problem_type == "multi_label_classification"
    tok = AutoTokenizer.from_pretrained(out)
    assert model(**tok(["atom cell vote"], return_tensors="pt")).logits.shape == (1, 3)


def test_mlm_then_classification_from_checkpoint(data_dir, tmp_path):
    mlm_out = tmp_path / "mlm"
    results = run_mlm.main(["--train_file", str(data_dir / "corpus.txt"), "--output_dir", str(mlm_out),
                            "--block_size", "64", "--per_device_train_batch_size", "4", "--num_train_epochs", "1",
                            "--validation_split_percentage", "20", *TINY])
    assert np.isfinite(results["eval"]["perplexity"]) and results["eval"]["eval_blocks"] >= 1
    tok = AutoTokenizer.from_pretrained(mlm_out)
    mlm = AutoModelForMaskedLM.from_pretrained(mlm_out).eval()
    batch = tok(["the team [MASK] the match"], return_tensors="pt")
    assert (batch["input_ids"] == tok.mask_token_id).sum() == 1
    assert mlm(**batch).logits.shape == (1, batch["input_ids"].shape[1], len(tok))
    assert "perplexity" in (mlm_out / "README.md").read_text()

    # fine-tune the pretrained encoder on a csv with int labels (tokenizer from the checkpoint)
    cls_out = tmp_path / "cls_from_mlm"
    results = run_classification.main([
        "--model_name_or_path", str(mlm_out), "--train_file", str(data_dir / "train.csv"),
        "--test_file", str(data_dir / "test.csv"), "--output_dir", str(cls_out), "--num_train_epochs", "1",
        "--validation_split_percentage", "0", *TINY])
    assert results["labels"] == ["0", "1", "2"]
    model = AutoModelForSequenceClassification.from_pretrained(cls_out)
    torch.testing.assert_close(model.ran.embeddings.word_embeddings.weight.shape,
                               mlm.ran.embeddings.word_embeddings.weight.shape)
    assert "from " + str(mlm_out) in (cls_out / "README.md").read_text()


def test_classification_default_job_data(tmp_path):
    """No data file: the shipped Hyperpartisan files (here a small slice and two steps, from scratch)."""
    out = tmp_path / "hp"
    results = run_classification.main([
        "--recipe", "from-scratch", "--output_dir", str(out), "--max_train_samples", "40", "--max_predict_samples", "12",
        "--max_length", "1024",
        "--max_steps", "2", "--per_device_train_batch_size", "4", *TINY])
    assert results["labels"] == ["not-hyperpartisan", "hyperpartisan"]  # values 0 and 1, named by --class_names
    assert results["test"]["test_samples"] == 12
    assert "Hyperpartisan" in (out / "README.md").read_text()
    # the shipped vocabulary, not one trained at run time (a trained one differs from run to run)
    shipped = AutoTokenizer.from_pretrained(run_classification.DEFAULT_TOKENIZER)
    assert len(shipped) == 8000 and AutoTokenizer.from_pretrained(out).get_vocab() == shipped.get_vocab()


# ---------------------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("drop, flag", [("text", "--text_column_name"), ("label", "--label_column_name")])
def test_missing_field(tmp_path, drop, flag):
    rows = [{"text": "a b c", "label": 0}, {"text": "d e", "label": 1}]
    rows[1].pop(drop)
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=rf"bad\.jsonl', line 2: no field '{drop}'.*{flag}"):
        run_classification.main(["--train_file", path, "--output_dir", str(tmp_path / "o"), *TINY])


def test_unseen_test_labels(data_dir, tmp_path):
    test = write_jsonl(tmp_path / "test.jsonl", [{"text": "goal", "label": "sports"},
                                                 {"text": "storm", "label": "weather"},
                                                 {"text": "cash", "label": "finance"}])
    with pytest.raises(ValueError, match=r"test\.jsonl' has label\(s\) never seen.*'finance' \(line 3\).*"
                                         r"'weather' \(line 2\)"):
        run_classification.main(["--train_file", str(data_dir / "train.jsonl.gz"), "--test_file", test,
                                 "--output_dir", str(tmp_path / "o"), *TINY])


def test_empty_documents(tmp_path):
    rows = [{"text": "goal team", "label": "a"}, {"text": "  ", "label": "b"}, {"text": "vote", "label": "b"},
            {"text": "", "label": "a"}, {"text": "atom", "label": "a"}, {"text": "cell", "label": "b"}]
    path = write_jsonl(tmp_path / "empty.jsonl", rows)
    with pytest.raises(ValueError, match=r"empty\.jsonl': empty document .* line\(s\) 2, 4\..*--skip_empty_documents"):
        run_classification.main(["--train_file", path, "--output_dir", str(tmp_path / "o"), *TINY])
    records = data_files.read_records(data_files.Path(path), ["text", "label"], text_field="text", skip_empty=True)
    assert [r["_line"] for r in records] == [1, 3, 5, 6]


def test_joined_text_columns(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"title": "Big news", "text": "Body here.", "label": 1},
                                              {"title": "", "text": "Only body.", "label": 0},
                                              {"title": " ", "text": "", "label": 0}])
    records = data_files.read_records(data_files.Path(path), ["label"], text_field=["title", "text"], skip_empty=True)
    assert [r["_text"] for r in records] == ["Big news\n\nBody here.", "Only body."]
    with pytest.raises(ValueError, match=r"'title' and 'text' empty .* line\(s\) 3\."):
        data_files.read_records(data_files.Path(path), ["label"], text_field=["title", "text"])


def test_bad_json_and_unknown_format(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "a", "label": 0}\n{"text": "b", "label": \n')
    with pytest.raises(ValueError, match=r"broken\.jsonl', line 2: not valid JSON"):
        run_classification.main(["--train_file", str(path), "--output_dir", str(tmp_path / "o"), *TINY])
    other = tmp_path / "data.parquet"
    other.write_text("x")
    with pytest.raises(ValueError, match="unknown file type"):
        run_classification.main(["--train_file", str(other), "--output_dir", str(tmp_path / "o"), *TINY])


# ---------------------------------------------------------------------------------------------------------------------
# after training: label names, predicting on unlabelled documents, --dataset_name
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def int_label_classifier(data_dir, tmp_path_factory):
    """A tiny classifier trained on a csv whose labels are ints, named with --class_names."""
    out = tmp_path_factory.mktemp("named") / "cls"
    results = run_classification.main([
        "--train_file", str(data_dir / "train.csv"), "--output_dir", str(out), "--num_train_epochs", "1",
        "--validation_split_percentage", "0", "--class_names", "0=sports,1=politics,2=science", *TINY])
    return out, results


def unlabelled_rows(n, seed):
    return [{"text": row["text"]} for row in classification_rows(n, seed)]


def test_saved_classifier_names_its_labels_for_pipeline(int_label_classifier):
    from transformers import pipeline

    out, results = int_label_classifier
    assert results["labels"] == ["sports", "politics", "science"]  # in the order of the values 0, 1, 2
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "sports", "1": "politics", "2": "science"}
    assert config["label2id"] == {"sports": 0, "politics": 1, "science": 2}
    classifier = pipeline("text-classification", model=str(out), device="cpu")
    predicted = classifier(["goal team match " * 200, "vote senate"], top_k=None)
    assert [sorted(d["label"] for d in row) for row in predicted] == [sorted(TOPICS)] * 2
    assert all(sum(d["score"] for d in row) == pytest.approx(1.0, abs=1e-5) for row in predicted)
    card = (out / "README.md").read_text()
    assert f'pipeline("text-classification", model="{out}")' in card
    assert f"--model_name_or_path {out} --do_predict --test_file new.jsonl" in card


def test_a_sample_that_misses_labels_of_a_sorted_file_is_flagged(tmp_path, capsys):
    rows = sorted(classification_rows(24, 3), key=lambda row: row["label"])  # sorted by label, as IMDB's files are
    train, test = write_jsonl(tmp_path / "train.jsonl", rows), write_jsonl(tmp_path / "test.jsonl", rows)
    with pytest.raises(ValueError, match="has a single label"):
        run_classification.main(["--train_file", train, "--output_dir", str(tmp_path / "one"),
                                 "--max_train_samples", "8", *TINY])
    logged = capsys.readouterr().out  # the scripts log to stdout
    assert "WARNING - run_scripts - --max_train_samples 8 keeps the first 8 of 24 documents, which hold 1 of the " \
           "split's 3 distinct labels" in logged
    run_classification.main(["--train_file", train, "--test_file", test, "--output_dir", str(tmp_path / "two"),
                             "--max_train_samples", "20", "--max_predict_samples", "16", "--num_train_epochs", "1",
                             "--validation_split_percentage", "0", *TINY])
    logged = capsys.readouterr().out
    assert "--max_predict_samples 16 keeps the first 16 of 24 documents, which hold 2 of the split's 3" in logged
    assert "--max_train_samples" not in logged  # 20 of 24 still hold every label


def test_class_names_must_name_every_training_label(data_dir, tmp_path):
    with pytest.raises(ValueError, match=r"--class_names names the values \['0', '1'\] but not.*\['2'\]"):
        run_classification.main(["--train_file", str(data_dir / "train.csv"), "--output_dir", str(tmp_path / "o"),
                                 "--class_names", "0=sports,1=politics", *TINY])
    with pytest.raises(ValueError, match="--class_names: 'sports' is not 'value=name'"):
        run_classification.main(["--train_file", str(data_dir / "train.csv"), "--output_dir", str(tmp_path / "o"),
                                 "--class_names", "sports", *TINY])


def test_predict_on_documents_without_labels(int_label_classifier, tmp_path, capsys):
    out, _ = int_label_classifier
    new = write_jsonl(tmp_path / "new.jsonl", unlabelled_rows(5, 11))
    predicted_dir = tmp_path / "predicted"
    results = run_classification.main(["--model_name_or_path", str(out), "--do_predict", "--test_file", new,
                                       "--output_dir", str(predicted_dir), *TINY])
    assert "test" not in results and results["predict"] == {"predict_samples": 5, "labelled": False}
    assert "no test metrics are computed" in capsys.readouterr().out  # the log says so
    assert not (predicted_dir / "test_results.json").exists()
    rows = [json.loads(line) for line in (predicted_dir / "test_predictions.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5]
    assert all("label" not in r and r["prediction"] in TOPICS for r in rows)
    assert all(set(r["probabilities"]) == set(TOPICS) for r in rows)
    # probabilities are rounded to 5 decimals, so a near-uniform tiny model can tie: the prediction holds the maximum
    assert all(r["probabilities"][r["prediction"]] == max(r["probabilities"].values()) for r in rows)
    assert all(sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-4) for r in rows)

    # the same documents with labels: metrics, and the same predictions with the gold labels next to them
    labelled = write_jsonl(tmp_path / "labelled.jsonl", [{**row, "label": "sports"} for row in unlabelled_rows(5, 11)])
    results = run_classification.main(["--model_name_or_path", str(out), "--do_predict", "--test_file", labelled,
                                       "--output_dir", str(tmp_path / "scored"), *TINY])
    assert results["test"]["test_samples"] == 5 and 0.0 <= results["test"]["test_accuracy"] <= 1.0
    scored = [json.loads(line) for line in (tmp_path / "scored" / "test_predictions.jsonl").read_text().splitlines()]
    assert [r["label"] for r in scored] == ["sports"] * 5
    assert [r["prediction"] for r in scored] == [r["prediction"] for r in rows]

    # labels on some documents only is an error, not a silent mix
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [{"text": "goal team", "label": "sports"}, {"text": "vote"}])
    with pytest.raises(ValueError, match=r"mixed\.jsonl': field 'label' is on line 1 but not on line 2"):
        run_classification.main(["--model_name_or_path", str(out), "--do_predict", "--test_file", mixed,
                                 "--output_dir", str(tmp_path / "m"), *TINY])


def save_dataset_dict(path, splits, class_label=True):
    """A DatasetDict folder (`save_to_disk`) of {split: rows}; with `class_label` the label a ClassLabel of the
    topics."""
    def dataset(rows):
        if not rows:  # an empty split with the columns
            return datasets.Dataset.from_dict({"text": [], "label": []}, features=datasets.Features(
                {"text": datasets.Value("string"), "label": datasets.Value("string")}))
        if not class_label or "label" not in rows[0]:
            return datasets.Dataset.from_list(rows)
        features = datasets.Features({name: datasets.ClassLabel(names=list(TOPICS)) if name == "label" else
                                      datasets.Value("string") for name in rows[0]})
        return datasets.Dataset.from_list([{**row, "label": list(TOPICS).index(row["label"])} for row in rows],
                                          features=features)

    datasets.DatasetDict({split: dataset(rows) for split, rows in splits.items()}).save_to_disk(str(path))
    return str(path)


def test_classification_from_a_saved_dataset_folder(tmp_path):
    rows = [{"text": row["text"], "label": row["label"]} for row in classification_rows(36, 0)]
    folder = save_dataset_dict(tmp_path / "topics", {"train": rows[:24], "validation": rows[24:30],
                                                      "test": rows[30:]})
    out = tmp_path / "cls"
    results = run_classification.main(["--dataset_name", folder, "--output_dir", str(out), "--num_train_epochs",
                                       "1", *TINY])
    assert results["labels"] == list(TOPICS)  # the ClassLabel's names, in its id order
    assert results["test"]["test_samples"] == 6 and "eval" in results
    assert json.loads((out / "config.json").read_text())["id2label"] == {str(i): t for i, t in enumerate(TOPICS)}
    assert f"Dataset `{folder}`" in (out / "README.md").read_text()

    # a test split without labels is predicted: no label column, or a ClassLabel of -1 ("no label", as on the Hub)
    no_column = save_dataset_dict(tmp_path / "new", {"test": unlabelled_rows(4, 12)})
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=list(TOPICS))})
    minus_one = str(tmp_path / "minus_one")
    datasets.DatasetDict({"test": datasets.Dataset.from_list([{**row, "label": -1} for row in unlabelled_rows(4, 12)],
                                                             features=features)}).save_to_disk(minus_one)
    for folder in (no_column, minus_one):
        results = run_classification.main(["--model_name_or_path", str(out), "--dataset_name", folder,
                                           "--output_dir", str(tmp_path / "predicted"), *TINY])
        assert results["predict"]["predict_samples"] == 4 and "test" not in results
        lines = (tmp_path / "predicted" / "test_predictions.jsonl").read_text().splitlines()
        assert [json.loads(line)["prediction"] in TOPICS for line in lines] == [True] * 4


def test_dataset_name_errors(tmp_path):
    rows = [{"text": "goal team", "label": "sports"}, {"text": "vote senate", "label": "politics"}]
    args = ["--output_dir", str(tmp_path / "o"), *TINY]
    no_text = save_dataset_dict(tmp_path / "no_text", {"train": [{"body": r["text"], "label": r["label"]}
                                                                 for r in rows]})
    with pytest.raises(ValueError, match=r"no_text\[train\]', line 1: no field 'text'.*--text_column_name"):
        run_classification.main(["--dataset_name", no_text, *args])
    no_label = save_dataset_dict(tmp_path / "no_label", {"train": [{"text": r["text"]} for r in rows]})
    with pytest.raises(ValueError, match=r"no_label\[train\]', line 1: no field 'label'.*--label_column_name"):
        run_classification.main(["--dataset_name", no_label, *args])
    bad_label = save_dataset_dict(tmp_path / "bad_label", {"train": [{"text": "goal", "label": 0.5},
                                                                    {"text": "vote", "label": 1.0}]},
                                  class_label=False)
    with pytest.raises(ValueError, match=r"bad_label\[train\]', line 1: label 0.5 is not a class"):
        run_classification.main(["--dataset_name", bad_label, *args])
    empty = save_dataset_dict(tmp_path / "empty", {"train": rows, "test": []}, class_label=False)
    with pytest.raises(ValueError, match=r"empty': split 'test' holds no records"):
        run_classification.main(["--dataset_name", empty, *args])
    files = tmp_path / "files"
    files.mkdir()
    write_jsonl(files / "train.jsonl", rows)
    write_jsonl(files / "test.jsonl", [])
    with pytest.raises(ValueError, match=r"files': a split holds no records"):
        run_classification.main(["--dataset_name", str(files), *args])
    other = save_dataset_dict(tmp_path / "other", {"training": rows}, class_label=False)
    with pytest.raises(ValueError, match=r"has the splits \['training'\], none of them"):
        run_classification.main(["--dataset_name", other, *args])
    with pytest.raises(ConnectionError, match=r"--dataset_name 'someone/not_here': no such local folder, and the Hub "
                                              r"cannot be reached"):
        run_classification.main(["--dataset_name", "someone/not_here", *args])  # offline (conftest)
    with pytest.raises(ValueError, match="--dataset_name replaces --train_file"):
        run_classification.main(["--dataset_name", other, "--train_file", "x.jsonl", *args])


def test_head_learning_rate_trains_the_new_weights_alone_when_the_loaded_ones_barely_move(data_dir, tmp_path):
    """From a masked-LM checkpoint the pooler and classifier are new: at --head_learning_rate 1e-2 with
    --learning_rate 1e-9 they train while every loaded weight stays where the checkpoint had it."""
    mlm_out = tmp_path / "mlm"
    run_mlm.main(["--train_file", str(data_dir / "corpus.txt"), "--output_dir", str(mlm_out), "--block_size", "64",
                  "--per_device_train_batch_size", "4", "--num_train_epochs", "1", "--validation_split_percentage",
                  "0", *TINY])
    tuned = {}
    for head_lr in ("1e-2", "1e-9"):  # the same seed, so the same initial head
        run_classification.main([
            "--model_name_or_path", str(mlm_out), "--train_file", str(data_dir / "train.csv"),
            "--output_dir", str(tmp_path / head_lr), "--num_train_epochs", "2", "--validation_split_percentage", "0",
            "--learning_rate", "1e-9", "--head_learning_rate", head_lr, "--save_strategy", "no", *TINY])
        tuned[head_lr] = load_file(tmp_path / head_lr / "model.safetensors")
    loaded = load_file(mlm_out / "model.safetensors")
    body = [name for name in tuned["1e-2"] if name in loaded]
    head = [name for name in tuned["1e-2"] if name not in loaded]
    assert len(body) > 10 and all(name.startswith("ran.") for name in body)
    assert {"classifier.weight", "ran.pooler.cell_dense.weight"} <= set(head)
    for name in body:
        torch.testing.assert_close(tuned["1e-2"][name], loaded[name], atol=1e-6, rtol=0)
    for name in head:
        assert (tuned["1e-2"][name] - tuned["1e-9"][name]).abs().max() > 1e-3, name


def test_head_learning_rate_gives_named_parameters_their_own_group_under_one_schedule(tmp_path):
    from ran_hf import RANConfig, RANForSequenceClassification

    model = RANForSequenceClassification(RANConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, attention_head_size=8, window_size=8,
                                                    min_window_size=4))
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-4, weight_decay=0.01, warmup_steps=2,
                             use_cpu=True, report_to="none")
    trainer = trainer_setup.RANTrainer(model=model, args=args,
                                       learning_rates=dict.fromkeys(["classifier.weight", "classifier.bias"], 1e-2))
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {names[id(p)]: g for g in trainer.optimizer.param_groups for p in g["params"]}
    assert len(groups) == len(names)
    peak = {name: (group["initial_lr"], group["weight_decay"]) for name, group in groups.items()}
    assert peak["classifier.weight"] == (1e-2, 0.01) and peak["classifier.bias"] == (1e-2, 0.0)
    assert peak["ran.embeddings.word_embeddings.weight"] == (1e-4, 0.01)
    assert peak["ran.embeddings.norm.weight"] == (1e-4, 0.0)
    for _ in range(4):  # warm-up and decay scale every group alike
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        assert groups["classifier.bias"]["lr"] == pytest.approx(100 * groups["ran.embeddings.norm.weight"]["lr"])
    assert groups["classifier.bias"]["lr"] > 0
    with pytest.raises(ValueError, match="does not have"):
        trainer_setup.RANTrainer(model=model, args=args, learning_rates={"nope": 1.0}).create_optimizer()


def test_a_classifier_fine_tuned_on_other_labels_keeps_its_encoder_and_starts_a_new_classifier(int_label_classifier,
                                                                                                   tmp_path):
    """A classifier of three labels fine-tuned again on a task of two: the classifier, whose shape no longer fits, is
    new and takes --head_learning_rate; every other weight loads from the checkpoint and, at a learning rate of 1e-9,
    stays there; the saved model names the new labels."""
    source, _ = int_label_classifier
    rows = [{"text": row["text"], "label": "sports" if row["label"] == "sports" else "other"}
            for row in classification_rows(24, 5)]
    out = tmp_path / "binary"
    run_classification.main([
        "--model_name_or_path", str(source), "--train_file", write_jsonl(tmp_path / "train.jsonl", rows),
        "--output_dir", str(out), "--num_train_epochs", "1", "--validation_split_percentage", "0",
        "--learning_rate", "1e-9", "--head_learning_rate", "1e-2", "--save_strategy", "no", *TINY])
    loaded, tuned = load_file(source / "model.safetensors"), load_file(out / "model.safetensors")
    assert loaded["classifier.weight"].shape[0] == 3 and tuned["classifier.weight"].shape[0] == 2
    assert tuned["classifier.bias"].abs().max() > 1e-3  # from zeros, at the head's rate
    kept = [name for name in loaded if not name.startswith("classifier.")]
    assert len(kept) > 10 and set(kept) < set(tuned)
    for name in kept:
        torch.testing.assert_close(tuned[name], loaded[name], atol=1e-6, rtol=0)
    assert set(json.loads((out / "config.json").read_text())["label2id"]) == {"other", "sports"}


@pytest.mark.parametrize("flags, match", [(["--head_learning_rate", "-1"], "positive"),
                                          (["--head_learning_rate", "1e-3"], "from scratch")])
def test_head_learning_rate_errors(data_dir, tmp_path, flags, match):
    with pytest.raises(ValueError, match=match):
        run_classification.main(["--train_file", str(data_dir / "train.csv"), "--output_dir", str(tmp_path),
                                 *flags, *TINY])
