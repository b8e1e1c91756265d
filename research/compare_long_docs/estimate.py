# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Cost estimate of the full comparison from smoke runs: measured throughput x the full data's input sizes.

    python -m research.compare_long_docs.estimate --data_dir DATA --smoke_dir outputs/smoke [--output FILE]

`--smoke_dir` holds tiny runs of every model made with the comparison's own command (see README.md, "Cost"). Their
throughput is input positions (tokens; sentences for the sentence models) per second of process CPU time, one torch
thread: training (forward, backward, AdamW step) and evaluation (forward only) separately. The full data's positions
per model come from the whole training, dev and test splits, as each model reads them (capped at --max_length,
bert512 at 512, chunk_pool with each chunk's [CLS]/[SEP], ran_minilm in MiniLM WordPiece tokens, the sentence models
in sentences of at most --max_sentences per document). A run that trains E epochs costs
E x (train positions / train rate) + (E x train documents / eval_docs) x (dev positions / eval rate) + test
positions / eval rate. How many epochs early stopping will take is not known before the runs; the estimate gives
the least the rule allows (the first evaluation stays best: 1 + patience evaluations), the epoch caps, and a middle
guess. The one-time MiniLM sentence embedding of every document is added (its rate is measured here on 512
sentences of the data).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from run_scripts.helpers.tokenizer import load_tokenizer

from . import data as data_module
from .__main__ import parse_args
from .models import CHUNK, MINILM_MODELS, MODEL_NAMES, MODELS, SENTENCE_MODELS, make_batch
from .report import read_runs


def positions(name: str, lengths: np.ndarray, minilm_lengths: np.ndarray, sentences: np.ndarray,
              max_length: int) -> int:
    """Input positions model `name` reads for documents of these (uncapped) lengths."""
    if name in SENTENCE_MODELS:
        return int(sentences.sum())
    if name in MINILM_MODELS:
        return int(np.minimum(minilm_lengths, max_length).sum())
    capped = np.minimum(lengths, max_length)
    if name == "bert512":
        return int(np.minimum(capped, CHUNK).sum())
    if name == "chunk_pool":
        body = capped - 2
        return int((body + 2 * np.maximum(1, np.ceil(body / (CHUNK - 2)))).sum())
    return int(capped.sum())


def split_sizes(dataset: str, args) -> dict:
    """Per split: document count, common-tokenizer lengths, MiniLM lengths and sentence counts of the full data."""
    splits = data_module.load_dataset_splits(dataset, Path(args.data_dir))
    common, _ = data_module.load_common_tokenizer(dataset, args, splits["train"]["text"])
    minilm = load_tokenizer(str(data_module.minilm_dir()))
    out = {}
    for split in ("train", "dev", "test"):
        texts = splits[split]["text"]
        length = lambda tok: np.array([len(x) for b in range(0, len(texts), 2000)  # noqa: E731
                                       for x in tok(texts[b: b + 2000])["input_ids"]])
        out[split] = {"documents": len(texts), "lengths": length(common), "minilm_lengths": length(minilm),
                      "sentences": np.array([len(data_module.split_sentences(t, args.max_sentences))
                                             for t in texts])}
    return out


def sentence_rate(texts: list[str], max_sentences: int, n: int = 512) -> float:
    """MiniLM sentences embedded per CPU second (one thread), on the first `n` sentences of `texts`."""
    sentences = [s for t in texts for s in data_module.split_sentences(t, max_sentences)][:n]
    data_module.embed_sentences(sentences[:8])  # load the encoder outside the clock
    begin = time.process_time()
    data_module.embed_sentences(sentences)
    return len(sentences) / (time.process_time() - begin)


def bench_sentence_model(name: str, counts: np.ndarray, args, batches: int = 40) -> tuple[float, float]:
    """(train, eval) sentences per CPU second of `name` on random unit vectors, documents with the sentence counts
    drawn from `counts`: the smoke runs of the sentence models are too short to time (a few ms a step), and their
    cost depends only on the shapes."""
    import torch

    from .models import build_model
    from .train import predict, train_step

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = build_model(name, args, 8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    docs = [rng.standard_normal((int(n), args.sentence_dim)).astype(np.float32) for n in
            rng.choice(counts, args.batch_size * batches)]
    docs = [d / np.linalg.norm(d, axis=1, keepdims=True) for d in docs]
    labels = torch.from_numpy(rng.integers(0, 2, len(docs)))
    warm = make_batch(name, docs[: args.batch_size], 0, 0)  # one-time costs (first call of each op) off the clock
    train_step(model, name, warm, labels[: args.batch_size], optimizer, schedule)
    predict(model, name, docs[: args.batch_size], 0, 0, args.eval_batch_size)
    begin = time.process_time()
    for b in range(batches):
        batch = make_batch(name, docs[b * args.batch_size: (b + 1) * args.batch_size], 0, 0)
        train_step(model, name, batch, labels[b * args.batch_size: (b + 1) * args.batch_size], optimizer, schedule)
    train_rate = sum(len(d) for d in docs) / (time.process_time() - begin)
    begin = time.process_time()
    predict(model, name, docs, 0, 0, args.eval_batch_size)
    return train_rate, sum(len(d) for d in docs) / (time.process_time() - begin)


def rates(name: str, run: dict, sizes: dict, args) -> tuple[float, float, str]:
    """(train, eval) positions per CPU second and where they come from."""
    if name in SENTENCE_MODELS:
        return (*bench_sentence_model(name, sizes["train"]["sentences"], args), "bench")
    train_rate = run["tokens_seen"] / run["train_cpu_seconds"]
    eval_rate = (run["dev_tokens_per_eval"] + run["test_tokens"]) / (run["dev_eval_cpu_seconds"] +
                                                                      run["test_cpu_seconds"])
    return train_rate, eval_rate, "smoke"


def estimate(args, smoke_dir: Path, guess_epochs: dict) -> str:
    lines, totals = [], {"least": 0.0, "guess": 0.0, "cap": 0.0}
    by_dataset, estimated = {}, set()
    for dataset in args.datasets:
        runs = {r["model"]: r for r in read_runs(smoke_dir, dataset)}
        if not runs:
            continue
        before = dict(totals)
        sizes = split_sizes(dataset, args)
        n_train = sizes["train"]["documents"]
        eval_docs = min(args.eval_docs, n_train)
        n_sentences = sum(int(sizes[s]["sentences"].sum()) for s in ("train", "dev", "test"))
        lines.append(f"\n**{dataset}**: train {n_train}, dev {sizes['dev']['documents']}, test "
                     f"{sizes['test']['documents']} documents; dev every {eval_docs} documents, patience "
                     f"{args.patience}. CPU hours per run (one thread), by epochs trained:\n")
        lines.append("| model | train positions / epoch | train pos/s | eval pos/s | h / epoch (train + dev) | test h "
                     "| least: epochs, h | guess: epochs, h | cap: epochs, h |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in MODELS:
            if name not in runs:
                continue
            estimated.add(name)
            train_rate, eval_rate, source = rates(name, runs[name], sizes, args)
            pos = {s: positions(name, sizes[s]["lengths"], sizes[s]["minilm_lengths"], sizes[s]["sentences"],
                                args.max_length) for s in ("train", "dev", "test")}
            per_epoch = (pos["train"] / train_rate + (n_train / eval_docs) * pos["dev"] / eval_rate) / 3600
            test_h = pos["test"] / eval_rate / 3600
            cap = args.sentence_max_epochs if name in SENTENCE_MODELS else args.max_epochs
            least = min(cap, math.ceil((1 + args.patience) * eval_docs / n_train * 100) / 100)
            guess = min(cap, guess_epochs["sentence" if name in SENTENCE_MODELS else "token"]
                        + args.patience * eval_docs / n_train)
            cells = []
            for key, epochs in (("least", least), ("guess", guess), ("cap", cap)):
                hours = epochs * per_epoch + test_h
                totals[key] += len(args.seeds) * hours
                cells.append(f"{epochs:.1f}, {hours:.2f}")
            unit = " sent." if name in SENTENCE_MODELS else ""
            lines.append(f"| {MODEL_NAMES[name]}{' (bench)' if source == 'bench' else ''} | "
                         f"{pos['train'] / 1e6:.2f} M{unit} | {train_rate:,.0f} | "
                         f"{eval_rate:,.0f} | {per_epoch:.3f} | {test_h:.3f} | {' | '.join(cells)} |")
        if any(m in runs for m in SENTENCE_MODELS):
            rate = sentence_rate(data_module.load_dataset_splits(dataset, Path(args.data_dir), 64, 64, 64)["train"]
                                 ["text"], args.max_sentences)
            hours = n_sentences / rate / 3600
            for key in totals:
                totals[key] += hours
            lines.append(f"\nOne-time MiniLM sentence embedding: {n_sentences:,} sentences at {rate:.0f} per CPU "
                         f"second = {hours:.2f} h.")
        by_dataset[dataset] = {key: totals[key] - before[key] for key in totals}
    seeds = len(args.seeds)
    head = [f"CPU-hour estimate for {len(by_dataset)} datasets x {len(estimated)} models x {seeds} seeds (one thread "
            f"per run; `least` = the first evaluation stays best, `guess` = best after {guess_epochs['token']} epochs "
            f"(token models) / {guess_epochs['sentence']} (sentence models) plus patience, `cap` = --max_epochs "
            f"{args.max_epochs} / --sentence_max_epochs {args.sentence_max_epochs}):",
            "", "| | " + " | ".join(by_dataset) + " | total |", "| --- |" + " ---: |" * (len(by_dataset) + 1)]
    for key in totals:
        head.append(f"| {key} | " + " | ".join(f"{d[key]:.0f}" for d in by_dataset.values())
                    + f" | {totals[key]:.0f} |")
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke_dir", required=True)
    parser.add_argument("--output", default=None, help="also write the estimate (markdown) here")
    parser.add_argument("--guess_token_epochs", type=float, default=5)
    parser.add_argument("--guess_sentence_epochs", type=float, default=15)
    own, rest = parser.parse_known_args(argv)
    args = parse_args(rest)  # the comparison's own flags (--data_dir, --patience, --eval_docs, caps, ...)
    import torch

    torch.set_num_threads(args.threads)  # as the runs (one thread by default); the benches time this
    text = estimate(args, Path(own.smoke_dir), {"token": own.guess_token_epochs,
                                                 "sentence": own.guess_sentence_epochs})
    if own.output:
        Path(own.output).write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
