"""The recipe-selection driver scores candidates on dev only and ignores runs that have not finished."""

import gzip
import json

import pytest
from transformers import AutoTokenizer

from research import recipe_selection
from research.recipe_selection.__main__ import (ADAPTED_CHECKPOINT, CANDIDATES, collect, dataset_flags,
                                                ensure_tokenizer, epoch_history, finished, format_table, main, report,
                                                run_command, run_dir)


def write(tmp_path, candidate, seed, **metrics):
    folder = run_dir(tmp_path, candidate, seed)
    folder.mkdir(parents=True)
    (folder / "all_results.json").write_text(json.dumps(metrics))


def test_choice_is_by_mean_dev_macro_f1_and_unfinished_runs_are_ignored(tmp_path):
    assert recipe_selection is not None and "recipe" in CANDIDATES
    # "recipe" is worse on dev but better on test: the table must still rank by dev
    write(tmp_path, "recipe", 1, eval_macro_f1=0.6, test_accuracy=0.9, test_macro_f1=0.9, train_runtime=60)
    write(tmp_path, "recipe", 2, eval_macro_f1=0.8, test_accuracy=0.7, test_macro_f1=0.7, train_runtime=60)
    write(tmp_path, "regularized", 1, eval_macro_f1=0.75, test_accuracy=0.6, test_macro_f1=0.6, train_runtime=120)
    write(tmp_path, "regularized", 2, eval_macro_f1=0.7, test_accuracy=0.6, test_macro_f1=0.6, train_runtime=120)
    write(tmp_path, "10-epochs", 1, eval_macro_f1=0.99, train_runtime=60)  # training done, test not written yet
    (run_dir(tmp_path, "10-epochs", 2)).mkdir(parents=True)
    (run_dir(tmp_path, "10-epochs", 2) / "all_results.json").write_text("{")  # being rewritten right now

    assert finished(tmp_path, "10-epochs", 1) is None and finished(tmp_path, "10-epochs", 2) is None
    rows = {row["candidate"]: row for row in collect(tmp_path, [1, 2])}
    assert set(rows) == {"recipe", "regularized"}
    assert rows["regularized"]["dev_macro_f1"][0] == 0.725 and rows["recipe"]["dev_macro_f1"][0] == 0.7
    # candidates built on the D 128 recipe name it instead of spelling out its flags
    assert rows["regularized"]["flags"] == "(d128-2-layers) --weight_decay 0.1 --hidden_dropout_prob 0.2"
    assert rows["recipe"]["flags"] == "(the recipe)"
    assert rows["recipe"]["per_seed_test_macro_f1"] == [0.9, 0.7] and rows["recipe"]["seeds"] == [1, 2]
    assert "test_accuracy_over_512" not in rows["recipe"]  # runs without the split by length
    table = report(tmp_path, [1, 2]).splitlines()
    assert table[2].startswith("| regularized |") and table[3].startswith("| recipe |")
    assert table[3].split(" | ")[7:9] == ["-", "-"]

    write(tmp_path, "10-epochs", 3, eval_macro_f1=0.5, test_accuracy=0.5, test_macro_f1=0.5, train_runtime=60,
          test_le_512_accuracy=0.6, test_over_512_accuracy=0.4)
    row = collect(tmp_path, [3])[0]
    assert row["test_accuracy_over_512"] == (0.4, 0.0) and row["test_accuracy_le_512"] == (0.6, 0.0)
    assert row["train_minutes"] == 1.0
    # a resumed run counts the training time of all its processes, not the last one's
    write(tmp_path, "10-epochs", 4, eval_macro_f1=0.5, test_accuracy=0.5, test_macro_f1=0.5, train_runtime=60,
          train_runtime_all_processes=300)
    assert collect(tmp_path, [3, 4])[0]["train_minutes"] == 3.0
    assert format_table([row]).splitlines()[2].split(" | ")[7:9] == ["0.600 ± 0.000", "0.400 ± 0.000"]
    assert (tmp_path / "table.md").exists() and (tmp_path / "results.json").exists()


def test_each_candidate_is_compared_with_the_recipe_seed_for_seed(tmp_path):
    # "window-64" ran seed 1 only: its mean dev is above the recipe's two-seed mean, yet on seed 1 it is behind
    write(tmp_path, "recipe", 1, eval_macro_f1=0.8, test_accuracy=0.6, test_macro_f1=0.6, train_runtime=60)
    write(tmp_path, "recipe", 2, eval_macro_f1=0.5, test_accuracy=0.5, test_macro_f1=0.5, train_runtime=60)
    write(tmp_path, "window-64", 1, eval_macro_f1=0.7, test_accuracy=0.7, test_macro_f1=0.7, train_runtime=60)
    write(tmp_path, "6-epochs", 3, eval_macro_f1=0.9, test_accuracy=0.9, test_macro_f1=0.9, train_runtime=60)
    rows = {row["candidate"]: row for row in collect(tmp_path, [1, 2, 3])}
    assert rows["window-64"]["dev_gain_over_recipe"] == pytest.approx((-0.1, 1))
    assert rows["recipe"]["dev_gain_over_recipe"] == (0.0, 2)
    assert rows["6-epochs"]["dev_gain_over_recipe"] is None  # no seed in common
    table = report(tmp_path, [1, 2, 3]).splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| 6-epochs", "| window-64", "| recipe"]
    assert [line.split(" | ")[4] for line in table[2:]] == ["-", "-0.100 (1)", "-"]
    # without the recipe's runs there is nothing to pair with
    assert all(row["dev_gain_over_recipe"] is None for row in collect(tmp_path, [3]))


def test_other_datasets_need_their_files_and_a_stopped_run_resumes(tmp_path):
    assert dataset_flags("hyperpartisan", None, tmp_path) == []
    with pytest.raises(ValueError, match="--dataset imdb needs --data_dir"):
        dataset_flags("imdb", None, tmp_path)
    with pytest.raises(FileNotFoundError, match="imdb/test.jsonl.gz"):
        (tmp_path / "data" / "imdb").mkdir(parents=True)
        (tmp_path / "data" / "imdb" / "train.jsonl.gz").write_bytes(b"")
        dataset_flags("imdb", tmp_path / "data", tmp_path / "out")
    (tmp_path / "data" / "imdb" / "test.jsonl.gz").write_bytes(b"")
    flags = dataset_flags("imdb", tmp_path / "data", tmp_path / "out")
    assert flags[flags.index("--tokenizer_name") + 1] == str(tmp_path / "out" / "tokenizer")
    assert flags[flags.index("--max_length") + 1] == "2048"

    command = run_command(tmp_path / "out", "recipe", 42, flags)
    assert "--resume_from_checkpoint" not in command and str(tmp_path / "data" / "imdb" / "train.jsonl.gz") in command
    assert command[-2:] == ["--torch_threads", "1"]
    (run_dir(tmp_path / "out", "recipe", 42) / "checkpoint-100").mkdir(parents=True)
    command = run_command(tmp_path / "out", "recipe", 42, flags, threads=2)
    assert command[-4:] == ["--torch_threads", "2", "--resume_from_checkpoint", "last"]
    # the pretrained checkpoint keeps its own tokenizer on every dataset
    command = run_command(tmp_path / "out", "pretrained-lr3e-4", 42, flags)
    assert "--tokenizer_name" not in command and command[command.index("--recipe") + 1] == "pretrained"
    assert command[command.index("--max_length") + 1] == "2048"


def test_threads_and_parallel_below_one_are_refused(tmp_path, capsys):
    for flags in (["--threads", "0"], ["--parallel", "0"]):
        with pytest.raises(SystemExit):
            main(["--output_dir", str(tmp_path / "out"), *flags])
        assert " ".join(flags) in capsys.readouterr().err


def test_the_dataset_tokenizer_is_trained_once_on_its_train_file(tmp_path):
    words = "the review film plot actor scene music ending story character".split()
    (tmp_path / "data" / "imdb").mkdir(parents=True)
    for split in ("train", "test"):
        with gzip.open(tmp_path / "data" / "imdb" / f"{split}.jsonl.gz", "wt") as file:
            for i in range(50):
                text = " ".join(words[(i + j) % 10] for j in range(30))
                file.write(json.dumps({"text": text, "label": i % 2}) + "\n")
    out = tmp_path / "out"
    ensure_tokenizer([], out)  # Hyperpartisan: the default job's shipped tokenizer
    assert not out.exists()
    flags = dataset_flags("imdb", tmp_path / "data", out)
    ensure_tokenizer(flags, out)
    tokenizer_file = out / "tokenizer" / "tokenizer.json"
    trained = tokenizer_file.stat().st_mtime_ns
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    assert tokenizer.tokenize("the film plot") == ["the", "film", "plot"] and tokenizer.pad_token_id == 0
    ensure_tokenizer(flags, out)  # every seed shares the first one
    assert tokenizer_file.stat().st_mtime_ns == trained


def test_report_keeps_each_finished_runs_dev_scores_per_epoch(tmp_path):
    """`epochs.json` holds, per finished run with a `trainer_state.json`, each epoch's dev metrics and the mean and
    last training loss logged during that epoch."""
    log = [{"epoch": 0.5, "loss": 2.0, "step": 10}, {"epoch": 1.0, "loss": 1.0, "step": 20},
           {"epoch": 1.0, "eval_macro_f1": 0.41234, "eval_accuracy": 0.5, "eval_loss": 1.5, "step": 20},
           {"epoch": 1.5, "loss": 0.5, "step": 30},
           {"epoch": 2.0, "eval_macro_f1": 0.6, "eval_accuracy": 0.7, "eval_loss": 1.2, "step": 40},
           {"epoch": 2.0, "train_loss": 1.1, "train_runtime": 60.0, "step": 40}]
    assert epoch_history({"log_history": log}) == [
        {"epoch": 1.0, "step": 20, "eval_macro_f1": 0.4123, "eval_accuracy": 0.5, "eval_loss": 1.5,
         "train_loss_mean": 1.5, "train_loss_last": 1.0},
        {"epoch": 2.0, "step": 40, "eval_macro_f1": 0.6, "eval_accuracy": 0.7, "eval_loss": 1.2,
         "train_loss_mean": 0.5, "train_loss_last": 0.5}]
    write(tmp_path, "recipe", 1, eval_macro_f1=0.6, test_accuracy=0.6, test_macro_f1=0.6, train_runtime=60)
    (run_dir(tmp_path, "recipe", 1) / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    write(tmp_path, "recipe", 2, eval_macro_f1=0.6, test_accuracy=0.6, test_macro_f1=0.6, train_runtime=60)
    write(tmp_path, "window-64", 1, eval_macro_f1=0.6, train_runtime=60)  # not finished: no test metrics yet
    (run_dir(tmp_path, "window-64", 1) / "trainer_state.json").write_text(json.dumps({"log_history": log}))
    report(tmp_path, [1, 2])
    epochs = json.loads((tmp_path / "epochs.json").read_text())
    assert list(epochs) == ["recipe/seed1"] and epochs["recipe/seed1"] == epoch_history({"log_history": log})


def test_a_candidate_on_a_checkpoint_built_beforehand_needs_it(tmp_path, monkeypatch):
    """`pretrained-adapted` fine-tunes a checkpoint that is built by a command, not shipped: without that folder the
    driver stops before launching anything and names the command; with it, the run keeps the checkpoint's tokenizer."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="Task-adaptive pretraining"):
        main(["--output_dir", str(tmp_path / "study"), "--candidates", "pretrained-adapted", "--seeds", "42"])
    assert not (tmp_path / "study").exists()
    command = run_command(tmp_path / "study", "pretrained-adapted", 42, ["--tokenizer_name", "tok"])
    assert "--tokenizer_name" not in command
    assert command[command.index("--model_name_or_path") + 1] == ADAPTED_CHECKPOINT


def test_candidates_without_a_recipe_vary_the_from_scratch_recipe_by_name():
    """The default Hyperpartisan job's own default is `minilm`; a candidate that names no recipe is a from-scratch run."""
    from research.recipe_selection.__main__ import candidate_flags

    assert candidate_flags("recipe") == ["--recipe", "from-scratch"]
    assert candidate_flags("lr-5e-4") == ["--recipe", "from-scratch", "--learning_rate", "5e-4"]
    assert candidate_flags("minilm") == ["--recipe", "minilm"]
    assert candidate_flags("pretrained-adapted")[:2] == ["--recipe", "pretrained"]
