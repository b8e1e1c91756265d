import collections
import gzip
import json

from research.sentence_classification import make_splits, report


def write_20newsgroups(data_dir, train=200, test=40):
    folder = data_dir / "20newsgroups"
    folder.mkdir(parents=True)
    (folder / "labels.txt").write_text("alt.atheism\ncomp.graphics\nsci.space\nrec.autos\n")
    for split, size in (("train", train), ("test", test)):
        with gzip.open(folder / f"{split}.jsonl.gz", "wt") as f:
            for i in range(size):  # sorted by label, as the shipped files are
                f.write(json.dumps({"text": f"post {split} {i}. About topic {i * 4 // size}.",
                                    "label": i * 4 // size}) + "\n")


def read_labels(path):
    return collections.Counter(json.loads(line)["label"] for line in path.open())


def test_a_dev_choice_folder_holds_stratified_train_and_dev_samples_and_no_test(tmp_path):
    write_20newsgroups(tmp_path / "data")
    make_splits.main(["--data_dir", str(tmp_path / "data"), "--dataset", "20newsgroups", "--train_size", "40",
                      "--dev_size", "20", "--no_test", "--output_dir", str(tmp_path / "splits")])
    folder = tmp_path / "splits" / "20newsgroups-40"
    assert sorted(p.name for p in folder.iterdir()) == ["dev.jsonl", "train.jsonl"]
    assert set(read_labels(folder / "train.jsonl").values()) == {10}
    assert set(read_labels(folder / "dev.jsonl").values()) == {5}
    train = {json.loads(line)["text"] for line in (folder / "train.jsonl").open()}
    assert not train & {json.loads(line)["text"] for line in (folder / "dev.jsonl").open()}


def test_the_full_splits_keep_their_folder_name_and_test_split(tmp_path):
    write_20newsgroups(tmp_path / "data")
    make_splits.main(["--data_dir", str(tmp_path / "data"), "--dataset", "20newsgroups",
                      "--output_dir", str(tmp_path / "splits")])
    folder = tmp_path / "splits" / "20newsgroups"
    assert sum(read_labels(folder / "train.jsonl").values()) == 180
    assert sum(read_labels(folder / "test.jsonl").values()) == 40


def write_run(folder, dev_macro_f1, predicted_classes):
    """A finished run whose evaluations after each epoch predicted `predicted_classes` distinct labels."""
    folder.mkdir(parents=True)
    results = {"eval": {"eval_macro_f1": dev_macro_f1, "eval_accuracy": dev_macro_f1, "eval_predicted_classes": 2},
               "train": {"epochs_trained": 8.0, "train_runtime_all_processes": 60.0}, "wall_time_s": 70.0}
    (folder / "all_results_summary.json").write_text(json.dumps(results))
    log = [{"epoch": epoch + 1, "eval_loss": 0.6, "eval_predicted_classes": count}
           for epoch, count in enumerate(predicted_classes)] + [{"train_runtime": 60.0}]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 80, "epoch": 8.0, "best_global_step": 30,
                                                           "log_history": log}))
    (folder / "config.json").write_text(json.dumps({"id2label": {"0": "a", "1": "b"}}))


def test_the_report_of_runs_without_a_test_split_counts_the_runs_that_ended_collapsed(tmp_path):
    write_run(tmp_path / "ran-frozen-lr1e-3-seed1", 0.80, [2, 1, 2, 2])  # a passing dip: not counted
    write_run(tmp_path / "ran-frozen-lr1e-3-seed2", 0.10, [2, 2, 1, 1])
    records = [report.run_record(folder) for folder in sorted(tmp_path.iterdir())]
    assert [r["collapsed"] for r in records] == [False, True] and records[0]["best_epoch"] == 3.0
    table = report.table(records)
    assert "| RAN over sentences | frozen-lr1e-3 MiniLM | 2 |" in table and table.endswith("| 3.0 / 8.0 | 1 |")
    assert "45.0 ± 49.5" in table and "majority class" not in table
