# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Training to convergence: early stopping on dev macro-F1, resumable mid-training, and the test evaluation.

One rule for every model (`train_run`): AdamW (weight decay 0.01, gradient clipping 1.0), batches of
`--batch_size` length-grouped documents in a seed-fixed order (the same order for every model: grouped by the
common tokenizer's lengths), dev macro-F1 every `--eval_docs` training documents (at most one epoch apart) and at
the end of the last epoch, stop after `--patience` evaluations without a strictly better dev macro-F1 or at the
max-epochs cap, then the best dev state is evaluated once on test. The learning rate warms up linearly over 10% of
the cap's steps (at most one epoch) and decays linearly to zero at the cap.

A run's state (model, optimizer, scheduler, torch and numpy RNG, the epoch's remaining batches, counters, the
early-stopping state and the best dev weights) is written to `<run_dir>/checkpoint.pt` every
`--checkpoint_seconds` and after every evaluation, atomically (temp file, fsync, rename); the next call resumes
from it and reaches the same result as an uninterrupted run.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from run_scripts.helpers.reports import classification_scores

from .data import LONG
from .models import INPUT_KEY, MINILM_MODELS, OPTION_MODELS, SENTENCE_MODELS, batch_tokens, build_model, logits_of, \
    make_batch, parameter_count, to_device

PROTOCOL = "early-stopping-v1"  # runs.jsonl records of this comparison; records without it are not read


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


class EarlyStopping:
    """Patience on a score to maximise: `update` records one evaluation and says whether it is a new best (strictly
    better); `should_stop` once `patience` evaluations in a row were not."""

    def __init__(self, patience: int):
        if patience < 1:
            raise ValueError(f"--patience must be at least 1, got {patience}.")
        self.patience = patience
        self.best = -math.inf
        self.best_evaluation = 0  # 1-based index of the best evaluation
        self.evaluations = 0
        self.bad = 0

    def update(self, score: float) -> bool:
        self.evaluations += 1
        if score > self.best:
            self.best, self.best_evaluation, self.bad = score, self.evaluations, 0
            return True
        self.bad += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "best_evaluation": self.best_evaluation, "evaluations": self.evaluations,
                "bad": self.bad}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_evaluation = state["best"], state["best_evaluation"]
        self.evaluations, self.bad = state["evaluations"], state["bad"]


def scores(labels: np.ndarray, predictions: np.ndarray) -> dict:
    """`classification_scores` with the number of documents (an empty split has only the count)."""
    if len(labels) == 0:
        return {"n": 0}
    return {"n": int(len(labels)), **classification_scores(labels, predictions)}


def _special_ids(name: str, data: dict) -> tuple[int, int]:
    if name in MINILM_MODELS:
        return data["minilm_cls_id"], data["minilm_sep_id"]
    return data["cls_id"], data["sep_id"]


def device_name(device: torch.device) -> str:
    """What a run record says it ran on: "cpu", or the GPU's name."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


@torch.no_grad()
def predict(model: nn.Module, name: str, docs: list, cls_id: int, sep_id: int, batch_size: int,
            counter: dict | None = None) -> np.ndarray:
    """Predicted labels (batches of similar length, on the model's device); `counter["tokens"]` is increased by the
    input positions read."""
    model.eval()
    device = next(model.parameters()).device
    order = np.argsort(-np.array([len(d) for d in docs]), kind="stable")
    predictions = np.zeros(len(docs), dtype=np.int64)
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        batch = make_batch(name, [docs[i] for i in idx], cls_id, sep_id)
        if counter is not None:
            counter["tokens"] = counter.get("tokens", 0) + batch_tokens(batch)
        predictions[idx] = logits_of(model, name, to_device(batch, device)).argmax(-1).cpu().numpy()
    return predictions


class Stopwatch:
    """Wall and process-CPU seconds since the last `lap` (CPU time is what the cost estimate adds up: it is less
    inflated than wall time when other jobs share the cores)."""

    def __init__(self):
        self.lap()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = (wall - self._wall, cpu - self._cpu) if hasattr(self, "_wall") else (0.0, 0.0)
        self._wall, self._cpu = wall, cpu
        return elapsed


def train_step(model: nn.Module, name: str, batch: dict, labels: torch.Tensor, optimizer, schedule) -> float:
    model.train()
    loss = F.cross_entropy(logits_of(model, name, batch), labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def run_setting(name: str, seed: int, args, data: dict) -> dict:
    """Everything that decides a run's course; a checkpoint is resumed only under the same setting."""
    sentence = name in SENTENCE_MODELS
    options = args.ran_options if name in OPTION_MODELS else {}
    return {
        "model": name, "seed": seed, "train_documents": len(data["train"]["label"]),
        "dev_documents": len(data["dev"]["label"]), "batch_size": args.batch_size,
        "learning_rate": args.sentence_learning_rate if sentence else args.learning_rate,
        "embedding_learning_rate": args.embedding_learning_rate if name in MINILM_MODELS else None,
        "eval_docs": min(args.eval_docs, len(data["train"]["label"])), "patience": args.patience,
        "max_epochs": args.sentence_max_epochs if sentence else args.max_epochs,
        "hidden_size": args.hidden_size, "num_layers": args.num_layers, "num_heads": args.num_heads,
        "window_size": args.window_size, "sentence_window": args.sentence_window, "max_length": args.max_length,
        "max_sentences": args.max_sentences, "tokenizer_sha1": data["tokenizer_digest"],
        **({"ran_options": options} if options else {}),  # absent without overrides: older checkpoints still resume
    }


def _optimizer(model: nn.Module, name: str, setting: dict) -> torch.optim.Optimizer:
    if name in MINILM_MODELS and setting["embedding_learning_rate"] is not None:
        embedding = [model.embeddings.weight]
        rest = [p for n, p in model.named_parameters() if n != "embeddings.weight"]
        groups = [{"params": embedding, "lr": setting["embedding_learning_rate"]}, {"params": rest}]
    else:
        groups = [{"params": list(model.parameters())}]
    return torch.optim.AdamW(groups, lr=setting["learning_rate"], weight_decay=0.01)


def save_checkpoint(path: Path, state: dict) -> None:
    """`torch.save` to a temp file, fsync, then rename over `path`: a kill leaves the old or the new file whole."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _clone_state(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_run(name: str, seed: int, args, data: dict, run_dir: Path) -> dict:
    """Train `name` with early stopping (resuming from `run_dir/checkpoint.pt` when it is there) and evaluate the
    best dev state on test; returns the run's record. The checkpoint is left in place: the caller removes it once
    the record is safely in runs.jsonl."""
    setting = run_setting(name, seed, args, data)
    key = INPUT_KEY[name]
    cls_id, sep_id = _special_ids(name, data)
    train_docs, train_labels = data["train"][key], data["train"]["label"]
    lengths = data["train"]["token_length"]
    n_train = len(train_labels)

    device = torch.device(args.device)
    here = device_name(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = build_model(name, args, data["vocab_size"], len(data["labels"])).to(device)
    optimizer = _optimizer(model, name, setting)
    steps_per_epoch = math.ceil(n_train / args.batch_size)
    total = setting["max_epochs"] * steps_per_epoch
    warmup = max(1, min(round(0.1 * total), steps_per_epoch))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    stopper = EarlyStopping(setting["patience"])
    state = {"step": 0, "epoch": 0, "batches": [], "documents": 0, "tokens": 0, "next_eval": setting["eval_docs"],
             "loss_sum": 0.0, "loss_count": 0, "history": [], "train_seconds": 0.0, "eval_seconds": 0.0,
             "train_cpu_seconds": 0.0, "eval_cpu_seconds": 0.0, "dev_tokens": 0, "stopped": None, "resumes": 0,
             "devices": []}
    best_state = None
    path = run_dir / "checkpoint.pt"
    if path.is_file():
        saved = _load_checkpoint(path, setting)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        stopper.load_state_dict(saved["stopper"])
        torch.set_rng_state(saved["torch_rng"])
        if device.type == "cuda" and saved.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(saved["cuda_rng"], device)
        rng.bit_generator.state = saved["numpy_rng"]
        best_state = saved["best_state"]
        state = saved["state"]
        state["batches"] = [np.asarray(b, dtype=np.int64) for b in state["batches"]]
        state["resumes"] += 1
        # a checkpoint without a devices list is taken to have trained on the device it resumes on
        state.setdefault("devices", [[here, 0]])
        print(f"    {name} seed {seed}: resumed at {state['documents']} documents (epoch {state['epoch']}, "
              f"{len(state['history'])} evaluations)", flush=True)
    if not state["devices"] or state["devices"][-1][0] != here:
        state["devices"].append([here, state["documents"]])  # a run may move, e.g. GPU to CPU
    run_dir.mkdir(parents=True, exist_ok=True)

    def checkpoint() -> None:
        save_checkpoint(path, {
            "setting": setting, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(), "stopper": stopper.state_dict(), "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "numpy_rng": rng.bit_generator.state, "best_state": best_state,
            "state": {**state, "batches": [b.tolist() for b in state["batches"]]}})

    def add(kind: str, elapsed: tuple[float, float]) -> None:
        state[f"{kind}_seconds"] += elapsed[0]
        state[f"{kind}_cpu_seconds"] += elapsed[1]

    last_save = time.monotonic()
    clock = Stopwatch()
    while state["stopped"] is None:
        if not state["batches"]:
            state["batches"] = length_grouped_batches(lengths, args.batch_size, rng)
            state["epoch"] += 1
        idx = state["batches"].pop()
        batch = make_batch(name, [train_docs[i] for i in idx], cls_id, sep_id)
        state["tokens"] += batch_tokens(batch)
        loss = train_step(model, name, to_device(batch, device), torch.from_numpy(train_labels[idx]).to(device),
                          optimizer, schedule)
        state["step"] += 1
        state["documents"] += len(idx)
        state["loss_sum"] += loss
        state["loss_count"] += 1
        last_of_cap = not state["batches"] and state["epoch"] == setting["max_epochs"]
        if state["documents"] >= state["next_eval"] or last_of_cap:
            add("train", clock.lap())
            while state["next_eval"] <= state["documents"]:
                state["next_eval"] += setting["eval_docs"]
            counter = {}
            dev_pred = predict(model, name, data["dev"][key], cls_id, sep_id, args.eval_batch_size, counter)
            state["dev_tokens"] = counter.get("tokens", 0)
            dev = scores(data["dev"]["label"], dev_pred)
            improved = stopper.update(dev["macro_f1"])
            if improved:
                best_state = _clone_state(model)
            state["history"].append({"documents": state["documents"], "epoch": round(state["documents"] / n_train, 3),
                                     "train_loss": state["loss_sum"] / state["loss_count"],
                                     "dev_macro_f1": dev["macro_f1"], "dev_accuracy": dev["accuracy"]})
            state["loss_sum"], state["loss_count"] = 0.0, 0
            if stopper.should_stop:
                state["stopped"] = "patience"
            elif last_of_cap:
                state["stopped"] = "max_epochs"
            add("eval", clock.lap())
            last = state["history"][-1]
            print(f"    {name} seed {seed} epoch {last['epoch']:.2f}: train loss {last['train_loss']:.4f}, dev acc "
                  f"{dev['accuracy']:.3f} macro-F1 {dev['macro_f1']:.3f}{' *' if improved else ''}"
                  f"{'; stop: ' + state['stopped'] if state['stopped'] else ''}", flush=True)
            checkpoint()
            last_save = time.monotonic()
        elif time.monotonic() - last_save >= args.checkpoint_seconds:
            add("train", clock.lap())
            checkpoint()
            clock.lap()
            last_save = time.monotonic()

    model.load_state_dict(best_state)
    tested = _test(model, name, args, data)
    test_seconds, test_cpu_seconds = tested.pop("seconds")
    best = state["history"][stopper.best_evaluation - 1]
    return {
        "protocol": PROTOCOL, "model": name, "seed": seed, "params": parameter_count(model),
        "device": here, "devices": state["devices"],
        "setting": setting, "tokenizer": data["tokenizer"], "stopped": state["stopped"], "evaluations": len(state["history"]),
        "epochs": round(state["documents"] / n_train, 3), "best_epoch": best["epoch"],
        "documents_seen": state["documents"], "best_documents": best["documents"], "tokens_seen": state["tokens"],
        "train_seconds": round(state["train_seconds"], 3), "dev_eval_seconds": round(state["eval_seconds"], 3),
        "test_seconds": round(test_seconds, 3),
        "wall_seconds": round(state["train_seconds"] + state["eval_seconds"] + test_seconds, 3),
        "train_cpu_seconds": round(state["train_cpu_seconds"], 3),
        "dev_eval_cpu_seconds": round(state["eval_cpu_seconds"], 3), "test_cpu_seconds": round(test_cpu_seconds, 3),
        "dev_tokens_per_eval": state["dev_tokens"], "test_tokens": tested.pop("tokens"), "resumes": state["resumes"],
        "dev_macro_f1": best["dev_macro_f1"], "dev_accuracy": best["dev_accuracy"],
        "final_train_loss": state["history"][-1]["train_loss"], "history": state["history"], **tested,
    }


def _load_checkpoint(path: Path, setting: dict) -> dict:
    """A run's checkpoint, refused (`ValueError`) when it was written under another setting."""
    saved = torch.load(path, weights_only=True, map_location="cpu")
    if saved["setting"] != setting:
        changed = {k: (saved["setting"].get(k), v) for k, v in setting.items() if saved["setting"].get(k) != v}
        raise ValueError(f"{path} was written under another setting (saved, now): {changed}. Run with the "
                         f"settings it was started with, or delete {path.parent} to start that run again.")
    return saved


def _test(model: nn.Module, name: str, args, data: dict) -> dict:
    """`model` on the test split: scores overall, on documents of at most and of more than 512 tokens, the tokens
    read and the (wall, CPU) seconds it took."""
    test = data["test"]
    clock, counter = Stopwatch(), {}
    predictions = predict(model, name, test[INPUT_KEY[name]], *_special_ids(name, data), args.eval_batch_size, counter)
    seconds = clock.lap()
    long_docs = test["token_length"] > LONG
    return {"test": scores(test["label"], predictions),
            "test_short": scores(test["label"][~long_docs], predictions[~long_docs]),
            "test_long": scores(test["label"][long_docs], predictions[long_docs]),
            "tokens": counter.get("tokens", 0), "seconds": seconds}


def interim_test(name: str, seed: int, args, data: dict, run_dir: Path) -> dict:
    """Test the best dev state so far of an unfinished run, read from its checkpoint, leaving the run as it is (a
    process may be training it): a look at a run that will not finish in the time at hand. Not a result of the
    protocol, whose run may still improve on dev; `interim` says so in the record."""
    path = run_dir / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint of an unfinished {name} seed {seed} run to test.")
    saved = _load_checkpoint(path, run_setting(name, seed, args, data))
    if saved["best_state"] is None:
        raise ValueError(f"{path}: the run has not been evaluated on dev yet; nothing to test.")
    model = build_model(name, args, data["vocab_size"], len(data["labels"])).to(torch.device(args.device))
    model.load_state_dict(saved["best_state"])
    state = saved["state"]
    best = state["history"][saved["stopper"]["best_evaluation"] - 1]
    tested = _test(model, name, args, data)
    return {"interim": True, "protocol": PROTOCOL, "model": name, "seed": seed, "setting": saved["setting"],
            "epochs": round(state["documents"] / len(data["train"]["label"]), 3), "evaluations": len(state["history"]),
            "best_epoch": best["epoch"], "dev_macro_f1": best["dev_macro_f1"], "dev_accuracy": best["dev_accuracy"],
            "test_seconds": round(tested.pop("seconds")[0], 3), "history": state["history"], **tested}
