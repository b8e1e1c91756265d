# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Choose the training settings of the `from-scratch` recipe on Hyperpartisan's dev split, over several seeds, and
run the chosen recipe on the other datasets.

Each candidate is a list of flags added to the default job of `run_scripts/run_classification.py` (the shipped
Hyperpartisan data and tokenizer; the dev split is a stratified 10% of the official train split, drawn by the
seed). A candidate is scored by its dev macro-F1 (the best epoch's, as the job itself selects), averaged over the
seeds; test metrics are recorded for the report but play no part in the choice. Runs go `--threads` torch threads
each (default 1), `--parallel` at a time; a finished run (test metrics in its `all_results.json`) is not run again,
a run still alive from another driver process (its `pid` file names a live process) is waited for, and a run that was
stopped continues from its newest checkpoint (one every 15 minutes of training, and one per epoch), so the command
resumes.

`--dataset 20newsgroups` or `imdb` (with `--data_dir`, the folder holding `<dataset>/train.jsonl.gz` and
`test.jsonl.gz`) runs the same job on that dataset's full train split (dev: a stratified 10% of it, drawn by the
seed) and official test split, documents cut at 2,048 tokens (the comparison's cap), with an 8k WordPiece tokenizer
trained once on the train split into `OUTPUT_DIR/tokenizer` and shared by every seed.

    python -m research.recipe_selection --output_dir outputs/recipe_selection --seeds 42 43 44 --parallel 2
    python -m research.recipe_selection --output_dir outputs/recipe_selection --report_only
    python -m research.recipe_selection --dataset 20newsgroups --data_dir DATA --output_dir outputs/recipe_20ng \
        --candidates recipe --seeds 42 43 44 45 46

A candidate that starts from the pretrained checkpoint (`--recipe pretrained`) keeps the checkpoint's own tokenizer on
every dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


# The D 128 recipe (D 128 x 2 layers, 4 x 32 heads, window 128, lr 1e-3, 6 epochs of 2,048 tokens), as flags on top
# of the `from-scratch` recipe; the candidates after `d128-2-layers` are variations of it.
D128_RECIPE = ["--hidden_size", "128", "--num_hidden_layers", "2", "--num_attention_heads", "4",
               "--attention_head_size", "32", "--window_size", "128", "--learning_rate", "1e-3",
               "--num_train_epochs", "6", "--max_length", "2048"]
# Built by the masked-LM command of research/pretraining/README.md ("Task-adaptive pretraining"); not shipped.
ADAPTED_CHECKPOINT = "outputs/adapted/ran-books-small-hyperpartisan"
# The `pretrained` recipe started from that checkpoint.
ADAPTED_START = ["--recipe", "pretrained", "--model_name_or_path", ADAPTED_CHECKPOINT]
CANDIDATES = {
    # the `from-scratch` recipe: the pretrained RAN's size (research/pretraining/README.md) from scratch, 3 epochs
    # of 1,024 tokens at lr 2e-4
    "recipe": [],
    # 2.5x the learning rate: after 3 epochs 20 Newsgroups' dev macro-F1 still rises by 0.064 in the last epoch
    "lr-5e-4": ["--learning_rate", "5e-4"],
    # twice the passes: a from-scratch embedding table sees each rare header token once per epoch, and the BiLSTM of
    # the converged comparison peaks at epoch 15 on 20 Newsgroups
    "6-epochs": ["--num_train_epochs", "6"],
    # the authors' max pooling in the cell transform (it trains with the memory-review residual:
    # research/stall_diagnosis/); a max-pooled BiLSTM learns 20 Newsgroups' keyword-like cues far faster than
    # mean-pooled RAN under the converged comparison
    "max-pooling": ["--config_overrides", "pooler_mode=cell_max"],
    # a quarter of the window, so the recurrence runs 4x as often and attention is local: at window 256 most 20
    # Newsgroups posts (median 352 tokens) span one or two windows, where RAN is close to a plain transformer
    "window-64": ["--window_size", "64"],
    # the document vector as the plain mean of the token outputs (the paper's Table 4 "average" pooling, no cell
    # term): `--recipe from-scratch-average`
    "average-pooling": ["--config_overrides", "pooler_mode=token_mean"],
    "d128-2-layers": D128_RECIPE,
    # fine-tuning the pretrained RAN (`--recipe pretrained`: `pretrained/ran-books-small`, the recipe's size, with
    # its own tokenizer and the recipe's pooling and schedule) at two learning rates
    "pretrained-lr1e-4": ["--recipe", "pretrained", "--learning_rate", "1e-4"],
    "pretrained-lr3e-4": ["--recipe", "pretrained", "--learning_rate", "3e-4"],
    # the plain mean of the pretrained token outputs as the document vector: the cell-mean pooler's cell transform
    # starts from weights that masked-token prediction never trained, while every token output did
    "pretrained-average": ["--recipe", "pretrained", "--config_overrides", "pooler_mode=token_mean"],
    # the pretrained RAN after 6 more epochs of masked-LM training on the training articles' text (task-adaptive
    # pretraining: research/pretraining/README.md), fine-tuned with the `pretrained` recipe
    "pretrained-adapted": ADAPTED_START,
    # the pretrained RAN reading the first 2,048 tokens instead of 1,024 (it was pretrained on blocks of 4,096): in the
    # job's tokenizer 72% of the test articles fit in 1,024 tokens, 95% in 2,048
    "pretrained-2048": ["--recipe", "pretrained", "--max_length", "2048"],
    # both steadying changes together: the adapted checkpoint (adapted on blocks of 2,048) reading 2,048 tokens
    "pretrained-adapted-2048": ADAPTED_START + ["--max_length", "2048"],
    # the stable learning rate for the loaded weights, ten times it for the pooler and classifier that start from
    # random values (at lr 1e-4 for all, several seeds still predict one class after the first epoch)
    "pretrained-head-lr1e-3": ["--recipe", "pretrained", "--learning_rate", "1e-4", "--head_learning_rate", "1e-3"],
    # one epoch instead of three (a reduced protocol for the larger datasets on two CPU cores): 20 Newsgroups' average
    # pooling from random weights and from the pretrained RAN; IMDB's recipe from random weights and from the
    # pretrained RAN
    "recipe-1-epoch": ["--num_train_epochs", "1"],
    "average-pooling-1-epoch": ["--config_overrides", "pooler_mode=token_mean", "--num_train_epochs", "1"],
    "pretrained-average-1-epoch": ["--recipe", "pretrained", "--config_overrides", "pooler_mode=token_mean",
                                   "--num_train_epochs", "1"],
    "pretrained-1-epoch": ["--recipe", "pretrained", "--num_train_epochs", "1"],
    # all-MiniLM-L6-v2's six layers as RAN's window blocks, its gates closed at the start (`--recipe minilm`:
    # python -m ran_hf.convert_encoder --encoder minilm; the encoder at lr 5e-5, what RAN adds at 1e-3, its own
    # 30k tokenizer)
    "minilm": ["--recipe", "minilm"],
    # the same for one epoch, the reduced protocol of 20 Newsgroups and IMDB above
    "minilm-1-epoch": ["--recipe", "minilm", "--num_train_epochs", "1"],
    "10-epochs": D128_RECIPE + ["--num_train_epochs", "10"],
    "regularized": D128_RECIPE + ["--weight_decay", "0.1", "--hidden_dropout_prob", "0.2"],
    "lr-5e-4-10-epochs": D128_RECIPE + ["--learning_rate", "5e-4", "--num_train_epochs", "10"],
    "regularized-more": D128_RECIPE + ["--weight_decay", "0.1", "--hidden_dropout_prob", "0.3"],
}


DATASETS = ("hyperpartisan", "20newsgroups", "imdb")  # hyperpartisan: the default job's shipped data
OTHER_DATASET_MAX_LENGTH = 2048


def dataset_flags(dataset: str, data_dir: Path | None, output_dir: Path) -> list[str]:
    """The data flags of a run on `dataset` (none for the default job's Hyperpartisan)."""
    if dataset == "hyperpartisan":
        return []
    if data_dir is None:
        raise ValueError(f"--dataset {dataset} needs --data_dir, the folder holding {dataset}/train.jsonl.gz and "
                         f"{dataset}/test.jsonl.gz.")
    files = {split: data_dir / dataset / f"{split}.jsonl.gz" for split in ("train", "test")}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"--data_dir {data_dir}: missing {', '.join(missing)}.")
    return ["--train_file", str(files["train"]), "--test_file", str(files["test"]),
            "--validation_split_percentage", "10", "--max_length", str(OTHER_DATASET_MAX_LENGTH),
            "--tokenizer_name", str(output_dir / "tokenizer"), "--per_device_eval_batch_size", "32"]


def ensure_tokenizer(data_flags: list[str], output_dir: Path) -> None:
    """Train the WordPiece tokenizer of a dataset other than Hyperpartisan once, on the train file of `data_flags`."""
    if not data_flags or (output_dir / "tokenizer" / "tokenizer.json").exists():
        return
    from run_scripts.run_classification import ModelArguments  # the vocabulary it would train with itself

    train_file = data_flags[data_flags.index("--train_file") + 1]
    subprocess.run([sys.executable, "run_scripts/train_tokenizer.py", "--train_files", train_file,
                    "--output_dir", str(output_dir / "tokenizer"), "--vocab_size",
                    str(ModelArguments.tokenizer_vocab_size)],
                   check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})


def describe(candidate: str) -> str:
    """The candidate's flags for the report, those of the D 128 recipe named rather than spelled out."""
    flags = CANDIDATES[candidate]
    if candidate != "d128-2-layers" and flags[:len(D128_RECIPE)] == D128_RECIPE:
        return " ".join(["(d128-2-layers)", *flags[len(D128_RECIPE):]])
    return " ".join(flags) or "(the recipe)"


def run_dir(output_dir: Path, candidate: str, seed: int) -> Path:
    return output_dir / candidate / f"seed{seed}"


def finished(output_dir: Path, candidate: str, seed: int) -> dict | None:
    """The run's metrics once it has written its test metrics (Trainer fills `all_results.json` split by split)."""
    path = run_dir(output_dir, candidate, seed) / "all_results.json"
    try:
        results = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # not yet written, or being rewritten right now
        return None
    return results if "test_accuracy" in results else None


def alive(output_dir: Path, candidate: str, seed: int) -> int | None:
    """The pid of this run's process if another driver process started it and it still runs."""
    path = run_dir(output_dir, candidate, seed) / "pid"
    if not path.exists():
        return None
    pid = int(path.read_text())
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


class Adopted:
    """A run started by another driver process, polled through its pid."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self):
        try:
            os.kill(self.pid, 0)
        except OSError:
            self.returncode = "?"
        return self.returncode


def starts_from_checkpoint(candidate: str) -> bool:
    """Whether the candidate's recipe fine-tunes a pretrained checkpoint, which brings its own tokenizer."""
    from run_scripts.helpers.recipes import get_recipe
    from run_scripts.helpers.trainer_setup import flag_value

    recipe = flag_value(CANDIDATES[candidate], "--recipe")
    return recipe is not None and get_recipe(recipe).checkpoint is not None


def check_checkpoint(candidate: str) -> None:
    """A candidate that fine-tunes a checkpoint built beforehand (not shipped) needs that folder."""
    from run_scripts.helpers.trainer_setup import flag_value

    checkpoint = flag_value(CANDIDATES[candidate], "--model_name_or_path")
    if checkpoint is not None and not (Path(checkpoint) / "config.json").is_file():
        raise FileNotFoundError(f"Candidate {candidate} fine-tunes {checkpoint}, which does not exist here: build it "
                                f"first with the masked-LM command in research/pretraining/README.md "
                                f"(\"Task-adaptive pretraining\").")


def candidate_flags(candidate: str) -> list[str]:
    """The candidate's flags; a candidate that names no recipe and no checkpoint varies the `from-scratch` recipe,
    which it names (the default Hyperpartisan job's own default is `minilm`)."""
    flags = CANDIDATES[candidate]
    if "--recipe" in flags or "--model_name_or_path" in flags:
        return flags
    return ["--recipe", "from-scratch", *flags]


def candidate_data_flags(candidate: str, data_flags: list[str]) -> list[str]:
    """`data_flags` without the dataset's own tokenizer for a candidate that starts from a checkpoint."""
    if starts_from_checkpoint(candidate) and "--tokenizer_name" in data_flags:
        at = data_flags.index("--tokenizer_name")
        return data_flags[:at] + data_flags[at + 2:]
    return data_flags


def run_command(output_dir: Path, candidate: str, seed: int, data_flags: list[str], threads: int = 1) -> list[str]:
    """The run's command line: `threads` torch threads, a checkpoint every 15 minutes of training besides each
    epoch's, and a stopped run continues from its newest checkpoint."""
    out = run_dir(output_dir, candidate, seed)
    data_flags = candidate_data_flags(candidate, data_flags)
    command = [sys.executable, "run_scripts/run_classification.py", "--seed", str(seed), "--output_dir", str(out),
               "--disable_tqdm", "True", "--save_total_limit", "1", "--save_every_minutes", "15", *data_flags,
               *candidate_flags(candidate), "--torch_threads", str(threads)]
    if any(path.is_dir() for path in out.glob("checkpoint-*")):
        command += ["--resume_from_checkpoint", "last"]
    return command


def launch(output_dir: Path, candidate: str, seed: int, data_flags: list[str],
           threads: int = 1) -> subprocess.Popen | Adopted:
    pid = alive(output_dir, candidate, seed)
    if pid is not None:
        return Adopted(pid)
    out = run_dir(output_dir, candidate, seed)
    out.mkdir(parents=True, exist_ok=True)
    command = run_command(output_dir, candidate, seed, data_flags, threads)
    with open(out / "command.txt", "a") as record:
        record.write(" ".join(command) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(out / "run.log", "a")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    (out / "pid").write_text(str(process.pid))
    return process


def train_seconds(results: dict) -> float:
    """A run's training time over all its processes (a record without `train_runtime_all_processes`: its last
    process's only)."""
    return results.get("train_runtime_all_processes", results["train_runtime"])


def collect(output_dir: Path, seeds: list[int]) -> list[dict]:
    rows = []
    for candidate in CANDIDATES:
        runs = []
        for seed in seeds:
            results = finished(output_dir, candidate, seed)
            if results is not None:
                runs.append((seed, results))
        if not runs:
            continue
        def stat(key):
            values = np.array([r[key] for _, r in runs])
            return float(values.mean()), float(values.std())
        rows.append({"candidate": candidate, "flags": describe(candidate),
                     "seeds": [s for s, _ in runs], "dev_macro_f1": stat("eval_macro_f1"),
                     "test_accuracy": stat("test_accuracy"), "test_macro_f1": stat("test_macro_f1"),
                     "train_minutes": float(np.mean([train_seconds(r) for _, r in runs])) / 60,
                     "per_seed_test_accuracy": [round(r["test_accuracy"], 3) for _, r in runs],
                     "per_seed_test_macro_f1": [round(r["test_macro_f1"], 3) for _, r in runs],
                     "per_seed_dev_macro_f1": [round(r["eval_macro_f1"], 3) for _, r in runs]})
        if all("test_over_512_accuracy" in r for _, r in runs):  # every run recorded the split by length
            rows[-1].update(test_accuracy_le_512=stat("test_le_512_accuracy"),
                            test_accuracy_over_512=stat("test_over_512_accuracy"))
    return add_paired_dev_gain(rows)


def add_paired_dev_gain(rows: list[dict]) -> list[dict]:
    """Add to each candidate's row its dev macro-F1 minus the recipe's, averaged over the seeds both ran
    (`dev_gain_over_recipe`: (mean, number of seeds), or None where they share no seed). Candidates that ran other
    seeds than the recipe (or fewer) are compared with it seed for seed here, where the mean dev is not paired."""
    recipe = next((row for row in rows if row["candidate"] == "recipe"), None)
    recipe_dev = dict(zip(recipe["seeds"], recipe["per_seed_dev_macro_f1"])) if recipe else {}
    for row in rows:
        gains = [dev - recipe_dev[seed] for seed, dev in zip(row["seeds"], row["per_seed_dev_macro_f1"])
                 if seed in recipe_dev]
        row["dev_gain_over_recipe"] = (float(np.mean(gains)), len(gains)) if gains else None
    return rows


def epoch_history(trainer_state: dict) -> list[dict]:
    """Per epoch of a run's `trainer_state.json`: its dev metrics and the training loss logged during that epoch
    (`train_loss_mean`: the mean of the logged losses, `train_loss_last`: the last one)."""
    epochs, losses = [], []
    for entry in trainer_state["log_history"]:
        if "loss" in entry:
            losses.append(entry["loss"])
        elif "eval_macro_f1" in entry:
            epochs.append({"epoch": round(entry["epoch"], 2), "step": entry["step"],
                           "eval_macro_f1": round(entry["eval_macro_f1"], 4),
                           "eval_accuracy": round(entry["eval_accuracy"], 4), "eval_loss": round(entry["eval_loss"], 4),
                           "train_loss_mean": round(float(np.mean(losses)), 4) if losses else None,
                           "train_loss_last": round(losses[-1], 4) if losses else None})
            losses = []
    return epochs


def collect_epochs(output_dir: Path, seeds: list[int]) -> dict[str, list[dict]]:
    """`epoch_history` of every finished run of `seeds` that kept its `trainer_state.json`, by `candidate/seedN`."""
    histories = {}
    for candidate in CANDIDATES:
        for seed in seeds:
            state = run_dir(output_dir, candidate, seed) / "trainer_state.json"
            if finished(output_dir, candidate, seed) is not None and state.is_file():
                histories[f"{candidate}/seed{seed}"] = epoch_history(json.loads(state.read_text()))
    return histories


def report(output_dir: Path, seeds: list[int]) -> str:
    """Write `table.md`, `results.json` and `epochs.json` (each run's dev metrics per epoch) for the finished runs of
    `seeds` in `output_dir`; returns the table."""
    rows = collect(output_dir, seeds)
    table = format_table(rows)
    (output_dir / "table.md").write_text(table)
    (output_dir / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    (output_dir / "epochs.json").write_text(json.dumps(collect_epochs(output_dir, seeds), indent=1) + "\n")
    return table


def format_table(rows: list[dict]) -> str:
    """The markdown table of `collect`'s rows (or `add_paired_dev_gain`'s), best mean dev macro-F1 first."""
    def pm(row, key):
        return f"{row[key][0]:.3f} ± {row[key][1]:.3f}" if key in row else "-"

    def paired(row):
        gain = row.get("dev_gain_over_recipe")
        return "-" if gain is None or row["candidate"] == "recipe" else f"{gain[0]:+.3f} ({gain[1]})"

    lines = ["| candidate | flags added | seeds | dev macro-F1 (choice) | dev gain over the recipe, paired (seeds) | "
             "test accuracy | test macro-F1 | test acc <= 512 | test acc > 512 | test accuracy per seed | "
             "train min/run |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for row in sorted(rows, key=lambda r: -r["dev_macro_f1"][0]):
        lines.append(
            f"| {row['candidate']} | `{row['flags']}` | {len(row['seeds'])} | {pm(row, 'dev_macro_f1')} | "
            f"{paired(row)} | {pm(row, 'test_accuracy')} | {pm(row, 'test_macro_f1')} | "
            f"{pm(row, 'test_accuracy_le_512')} | {pm(row, 'test_accuracy_over_512')} | "
            f"{' / '.join(map(str, row['per_seed_test_accuracy']))} | {row['train_minutes']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--dataset", choices=DATASETS, default="hyperpartisan",
                        help="hyperpartisan: the default job's shipped data; the others need --data_dir")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help="folder holding <dataset>/train.jsonl.gz and <dataset>/test.jsonl.gz")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per run; keep --parallel x --threads at most the cores (on 2 cores, "
                             "one IMDB run alone on two threads trained an epoch in about 30 min, a run on one "
                             "thread beside another in 47-60)")
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.parallel < 1:
        parser.error(f"--threads {args.threads} --parallel {args.parallel}: both must be at least 1.")
    if not args.report_only:
        for candidate in args.candidates:  # before any work: a missing checkpoint stops the study at once
            check_checkpoint(candidate)
        data_flags = dataset_flags(args.dataset, args.data_dir, args.output_dir)
        if not all(starts_from_checkpoint(candidate) for candidate in args.candidates):
            ensure_tokenizer(data_flags, args.output_dir)
        todo = [(c, s) for s in args.seeds for c in args.candidates if finished(args.output_dir, c, s) is None]
        todo.sort(key=lambda run: alive(args.output_dir, *run) is None)  # adopt live runs first
        running: list[tuple[str, int, subprocess.Popen, float]] = []
        while todo or running:
            while todo and len(running) < args.parallel:
                candidate, seed = todo.pop(0)
                process = launch(args.output_dir, candidate, seed, data_flags, args.threads)
                running.append((candidate, seed, process, time.time()))
                print(f"started {candidate} seed {seed}", flush=True)
            time.sleep(5)
            for item in list(running):
                candidate, seed, process, start = item
                if process.poll() is not None:
                    running.remove(item)
                    print(f"finished {candidate} seed {seed}: exit {process.returncode} after "
                          f"{time.time() - start:.0f} s", flush=True)
                    report(args.output_dir, args.seeds)
    print(report(args.output_dir, args.seeds))


if __name__ == "__main__":
    main()
