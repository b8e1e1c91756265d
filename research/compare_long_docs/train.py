# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Training under one budget with dev-based selection, and the test evaluation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from run_scripts.helpers.reports import append_result, classification_scores, read_result_log

from .data import LONG
from .models import SENTENCE_MODELS, build_model, logits_of, make_batch, parameter_count


def length_grouped_batches(lengths: np.ndarray, batch_size: int, rng) -> list[np.ndarray]:
    """Random batches of similar-length documents (Trainer's `group_by_length` idea): shuffle, sort inside
    mega-batches of 16 batches, cut, shuffle the batches."""
    order = rng.permutation(len(lengths))
    mega = batch_size * 16
    batches = []
    for start in range(0, len(order), mega):
        group = order[start: start + mega]
        group = group[np.argsort(-lengths[group], kind="stable")]
        batches += [group[i: i + batch_size] for i in range(0, len(group), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def scores(labels: np.ndarray, predictions: np.ndarray) -> dict:
    """`classification_scores` with the number of documents (an empty split has only the count)."""
    if len(labels) == 0:
        return {"n": 0}
    return {"n": int(len(labels)), **classification_scores(labels, predictions)}


@torch.no_grad()
def predict(model: nn.Module, name: str, docs: list, sizes: np.ndarray, cls_id: int, sep_id: int,
            batch_size: int) -> np.ndarray:
    model.eval()
    order = np.argsort(-sizes, kind="stable")
    predictions = np.zeros(len(docs), dtype=np.int64)
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        logits = logits_of(model, name, make_batch(name, [docs[i] for i in idx], cls_id, sep_id))
        predictions[idx] = logits.argmax(-1).numpy()
    return predictions


def train_one(name: str, seed: int, args, data: dict, vocab_size: int, cls_id: int, sep_id: int,
              learning_rate: float, pooling: str | None = None) -> dict:
    """Train `name` for `args.steps` steps with dev-based checkpoint selection; test metrics overall and split at
    512 tokens."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    num_labels = len(data["labels"])
    model = build_model(name, args, vocab_size, num_labels, pooling)
    key = "sentences" if name in SENTENCE_MODELS else "ids"
    train_docs, train_labels = data["train"][key], data["train"]["label"]
    train_sizes = np.array([len(d) for d in train_docs])
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    warmup = max(1, int(0.1 * args.steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / max(1, args.steps - warmup))))
    batches: list[np.ndarray] = []
    best = {"dev_macro_f1": -1.0}
    best_state = None
    start_time = time.perf_counter()
    train_seconds = 0.0
    losses = []
    for step in range(1, args.steps + 1):
        if not batches:
            batches = length_grouped_batches(train_sizes, args.batch_size, rng)
        idx = batches.pop()
        model.train()
        logits = logits_of(model, name, make_batch(name, [train_docs[i] for i in idx], cls_id, sep_id))
        loss = F.cross_entropy(logits, torch.from_numpy(train_labels[idx]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % args.eval_steps == 0 or step == args.steps:
            train_seconds += time.perf_counter() - start_time
            dev = data["dev"]
            dev_pred = predict(model, name, dev[key], np.array([len(d) for d in dev[key]]), cls_id, sep_id,
                               args.eval_batch_size)
            dev_scores = scores(dev["label"], dev_pred)
            print(f"    {name} seed {seed} step {step}: train loss {np.mean(losses[-args.eval_steps:]):.4f}, "
                  f"dev acc {dev_scores['accuracy']:.3f} macro-F1 {dev_scores['macro_f1']:.3f}", flush=True)
            if dev_scores["macro_f1"] > best["dev_macro_f1"]:
                best = {"dev_macro_f1": dev_scores["macro_f1"], "dev_accuracy": dev_scores["accuracy"], "step": step}
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            start_time = time.perf_counter()
    model.load_state_dict(best_state)
    test = data["test"]
    eval_start = time.perf_counter()
    test_pred = predict(model, name, test[key], np.array([len(d) for d in test[key]]), cls_id, sep_id,
                        args.eval_batch_size)
    long_docs = test["token_length"] > LONG
    return {
        "model": name, "seed": seed, "params": parameter_count(model), "steps": args.steps,
        "learning_rate": learning_rate, **({"pooler_pooling": pooling} if pooling else {}),
        "train_seconds": round(train_seconds, 1), "test_seconds": round(time.perf_counter() - eval_start, 1),
        "best_step": best["step"], "dev_macro_f1": best["dev_macro_f1"], "dev_accuracy": best["dev_accuracy"],
        "final_train_loss": float(np.mean(losses[-args.eval_steps:])),
        "test": scores(test["label"], test_pred),
        "test_short": scores(test["label"][~long_docs], test_pred[~long_docs]),
        "test_long": scores(test["label"][long_docs], test_pred[long_docs]),
    }


def candidate_settings(name: str, args) -> list[dict]:
    """The hyperparameter settings tried for `name`; the one with the best dev macro-F1 is kept.

    Token baselines train once at --learning_rate. The sentence models' heads are small and their inputs unit-norm,
    so one shared rate under-trains them: each --sentence_learning_rates value is tried. RAN tries each
    --ran_poolings value for the cell transform's token pooling (eq. 10): with memory review, the authors' max
    pooling stays at chance from scratch on IMDB and 20 Newsgroups in this budget while mean pooling trains (see
    the README), and both RAN variants get the same choice."""
    if name in SENTENCE_MODELS:
        return [{"learning_rate": rate} for rate in args.sentence_learning_rates]
    if name in ("ran", "ran_no_mr"):
        return [{"learning_rate": args.learning_rate, "pooling": pooling} for pooling in args.ran_poolings]
    return [{"learning_rate": args.learning_rate}]


def _setting_key(name: str, seed: int, setting: dict) -> str:
    return json.dumps({"model": name, "seed": seed, **setting}, sort_keys=True)


def train_with_selection(name: str, seed: int, args, data: dict, vocab_size: int, cls_id: int, sep_id: int,
                         candidates_path: Path | None = None) -> dict:
    """Train every candidate setting of `name` (dev only decides; test is read once per run and never used to
    choose) and return the run with the best dev macro-F1, its `train_seconds` the sum over candidates. With
    `candidates_path`, each finished candidate is appended there and reused when the command runs again."""
    settings = candidate_settings(name, args)
    cached = {}
    for entry in read_result_log(candidates_path) if candidates_path is not None else []:
        cached.setdefault(entry["key"], entry["run"])
    runs = []
    for setting in settings:
        key = _setting_key(name, seed, setting)
        if key not in cached:
            cached[key] = train_one(name, seed, args, data, vocab_size, cls_id, sep_id, **setting)
            if candidates_path is not None and len(settings) > 1:
                append_result(candidates_path, {"key": key, "run": cached[key]})
        runs.append(cached[key])
    best = dict(max(runs, key=lambda r: r["dev_macro_f1"]))
    if len(runs) > 1:
        label = "pooler_pooling" if "pooling" in settings[0] else "learning_rate"
        best[f"dev_macro_f1_by_{label}"] = {str(r[label]): r["dev_macro_f1"] for r in runs}
        best["train_seconds"] = round(sum(r["train_seconds"] for r in runs), 1)
    return best
