# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Pack the pretraining corpus for a GPU machine that can receive at most 64 MiB with the repository.

The training books are tokenized with the study's tokenizer and stored as uint16 token ids (no special tokens),
concatenated in shards that are compressed with xz (about 0.9 bytes per token instead of ~4 bytes of gzipped text).
The held-out books are cut into validation spans and masked once here, so that the device scores exactly the same
masked tokens with every model. Wheels of the packages the device lacks go into the same folder.

    python -m research.pretraining.pack --data_dir DATA --out_dir .pretrain_payload --max_train_tokens 45000000

Output (`--out_dir`, ignored by git):

* `train-NN.u16.xz`: shards of concatenated books, each book's tokens as they come from
  `tokenizer(text, add_special_tokens=False)`; `manifest.json` lists every book with its shard and offset.
* `validation.npz`: `input_ids` (spans, length) uint16 with 15% of the positions masked (BERT's 80/10/10), `labels`
  int16 (-100 where nothing is scored); each span is `--span_body` word pieces of one held-out book.
* `manifest.json`: token counts, sha256 of every file and of the uncompressed token arrays, the tokenizer's sha256.
* `wheels/` (with `--wheels`): the wheels `pip download` fetched for the device's Python.

Books are drawn in a seeded random order until `--max_train_tokens` is reached, so a smaller budget is a random
subset of the books (all authors keep a share), not the first shards. `--in_domain` adds the training split of
fine-tuning datasets (never a test split): their documents are joined into one stream, `[SEP]` between documents.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import random
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from run_scripts.helpers.corpus import corpus_shards, iter_documents


STUDY = Path(__file__).resolve().parent
TOKENIZER = STUDY / "tokenizer-16k"
REPOSITORY = STUDY.parents[1]
SHIPPED_WEIGHTS = REPOSITORY / "pretrained" / "ran-books-small" / "model.safetensors"  # not read by the device call
# The body of a validation span: 8 x 510 word pieces, so the BERT peer (blocks of [CLS] 510 [SEP]) scores exactly
# the tokens RAN scores in one block of [CLS] 4,080 [SEP].
SPAN_BODY = 8 * 510
# LZMA2 with literal position bits for 2-byte tokens; preset 6 compresses within 0.1% of preset 9e in half the time.
XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 6, "lc": 0, "lp": 1, "pb": 1}]
# The device's Python (3.12, x86-64) lacks these versions: transformers 5.17 is installed, ran_hf needs 5.24, which
# checks `regex` at import.
WHEELS = ["transformers==5.24.0", "regex==2025.11.3"]
# The model folders the slim transformers wheel keeps: the Auto classes, the BERT peer, and the models
# `benchmarks/gpu_suite.py` compares RAN with (0.08 MB more), so that one carried payload serves both device calls.
SLIM_KEEP_MODELS = ("auto", "bert", "encoder_decoder", "modernbert", "longformer", "big_bird", "gpt2")
WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
BOOK_DIRS = ["gutenberg-more", "gutenberg"]
TOKENIZE_BATCH = 8  # books tokenized together (in parallel)
IN_DOMAIN = {"hyperpartisan": "hyperpartisan/train-byarticle.jsonl", "20newsgroups": "20newsgroups/train.jsonl.gz",
             "imdb": "imdb/train.jsonl.gz"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    return sha256(path.read_bytes())


def tokenize(tokenizer, text: str) -> np.ndarray:
    return tokenize_batch(tokenizer, [text])[0]


def tokenize_batch(tokenizer, texts: list[str]) -> list[np.ndarray]:
    """The word pieces of each text (no special tokens), as uint16; a batch is tokenized on all cores."""
    ids = tokenizer(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]
    return [np.asarray(piece_ids, dtype=np.uint16) for piece_ids in ids]


def read_books(data_dir: Path, split: str) -> list[dict]:
    """The books of `split` (`train`: every book of `gutenberg/` too, which has no split field), text included."""
    return [{"document": f"{name}/{doc['document']}", "text": doc["text"]} for name in BOOK_DIRS
            for doc in iter_documents(corpus_shards([str(data_dir / name)], "data_dir"), split_column="split",
                                      split=split)]


def in_domain_stream(data_dir: Path, name: str, tokenizer) -> dict:
    """One dataset's training documents as one stream of word pieces, `[SEP]` after each document."""
    pieces = []
    path = data_dir / IN_DOMAIN[name]
    for doc in iter_documents([path]):
        pieces.append(tokenize(tokenizer, doc["text"]))
        pieces.append(np.asarray([tokenizer.sep_token_id], dtype=np.uint16))
    return {"document": f"{IN_DOMAIN[name]} (train, {len(pieces) // 2} documents joined by [SEP])",
            "ids": np.concatenate(pieces)}


def mask_once(spans: np.ndarray, tokenizer, seed: int, probability: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking drawn once: `probability` of the positions are scored; of those 80% become [MASK], 10% a
    random word piece, 10% stay. Returns the masked input ids (uint16) and the labels (int16, -100 = not scored)."""
    rng = np.random.default_rng(seed)
    scored = rng.random(spans.shape) < probability
    labels = np.where(scored, spans.astype(np.int16), np.int16(-100))
    draw = rng.random(spans.shape)
    inputs = spans.copy()
    inputs[scored & (draw < 0.8)] = tokenizer.mask_token_id
    replaced = scored & (draw >= 0.8) & (draw < 0.9)
    first_word_piece = max(tokenizer.all_special_ids) + 1
    inputs[replaced] = rng.integers(first_word_piece, len(tokenizer), size=int(replaced.sum()), dtype=np.uint16)
    return inputs, labels


def validation_spans(books: list[np.ndarray], count: int, body: int = SPAN_BODY) -> np.ndarray:
    """`count` spans of `body` word pieces evenly spaced over the held-out books, none across two books."""
    candidates = [(b, start) for b, ids in enumerate(books) for start in range(0, len(ids) - body + 1, body)]
    if len(candidates) < count:
        raise ValueError(f"--validation_spans {count}: the held-out books hold only {len(candidates)} spans.")
    keep = np.unique(np.linspace(0, len(candidates) - 1, count).round().astype(int))
    return np.stack([books[candidates[i][0]][candidates[i][1]: candidates[i][1] + body] for i in keep])


def compress(raw: bytes) -> bytes:
    return lzma.compress(raw, format=lzma.FORMAT_XZ, filters=XZ_FILTERS)


def write_shards(books: list[dict], out_dir: Path, shard_tokens: int) -> list[dict]:
    """Concatenate the books into shards of about `shard_tokens` tokens, each compressed with xz."""
    shards, current = [], []
    for book in books:
        current.append(book)
        if sum(len(b["ids"]) for b in current) >= shard_tokens:
            shards.append(current)
            current = []
    if current:
        shards.append(current)
    raws = [np.concatenate([b["ids"] for b in members]).astype("<u2").tobytes() for members in shards]
    paths = [out_dir / f"train-{number:02d}.u16.xz" for number in range(len(shards))]
    started = time.time()
    with ProcessPoolExecutor(max_workers=max(1, min(len(raws), os.cpu_count() or 1))) as pool:
        for path, compressed in zip(paths, pool.map(compress, raws)):
            path.write_bytes(compressed)
    print(f"compressed {len(raws)} shard(s) in {time.time() - started:.0f} s", flush=True)
    records = []
    for path, raw, members in zip(paths, raws, shards):
        tokens = np.frombuffer(raw, dtype="<u2")
        offset, index = 0, []
        for b in members:
            index.append({"document": b["document"], "offset": offset, "tokens": len(b["ids"])})
            offset += len(b["ids"])
        records.append({"file": path.name, "tokens": int(len(tokens)), "bytes": path.stat().st_size,
                        "sha256": file_sha256(path), "sha256_tokens": sha256(raw), "books": index})
        print(f"{path.name}: {len(members)} books, {len(tokens):,} tokens, {path.stat().st_size / 2**20:.2f} MiB "
              f"({path.stat().st_size / len(tokens):.3f} bytes/token)", flush=True)
    return records


def slim_wheel(wheel: Path, keep_models: tuple[str, ...] = SLIM_KEEP_MODELS) -> None:
    """Rewrite the transformers wheel without the model folders other than `keep_models` (11 of its 13.5 MB).
    `transformers.models` finds its submodules by listing its folder, so the others simply do not exist; the
    wheel's RECORD is rewritten to match."""
    kept = tuple(f"transformers/models/{name}/" for name in keep_models)
    def wanted(name: str) -> bool:
        return not name.startswith("transformers/models/") or name.count("/") == 2 or name.startswith(kept)
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for info in src.infolist():
            if not wanted(info.filename):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if wanted(line.split(",")[0])) + "\n").encode()
            dst.writestr(info, data)
    slim.replace(wheel)


def download_wheels(out_dir: Path, slim: bool = True) -> list[dict]:
    """`pip download` the wheels of `WHEELS` for CPython 3.12 on x86-64 Linux, without dependencies; with `slim`,
    the transformers wheel keeps only the model folders RAN's pretraining uses (`slim_wheel`)."""
    wheel_dir = out_dir / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(wheel_dir), *WHEELS],
                   check=True)
    if slim:
        for wheel in wheel_dir.glob("transformers-*.whl"):
            slim_wheel(wheel)
    return [{"file": w.name, "bytes": w.stat().st_size, "sha256": file_sha256(w), "slim": slim and
             w.name.startswith("transformers-")} for w in sorted(wheel_dir.glob("*.whl"))]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="Folder holding gutenberg-more/ and gutenberg/ (and the "
                                                          "fine-tuning datasets for --in_domain).")
    parser.add_argument("--out_dir", default=".pretrain_payload")
    parser.add_argument("--tokenizer", default=str(TOKENIZER))
    parser.add_argument("--max_train_tokens", type=int, default=45_000_000,
                        help="Books are added in a seeded random order until this many tokens (in-domain included).")
    parser.add_argument("--in_domain", nargs="*", default=["hyperpartisan"], choices=sorted(IN_DOMAIN),
                        help="Fine-tuning datasets whose training split joins the corpus.")
    parser.add_argument("--validation_spans", type=int, default=64)
    parser.add_argument("--span_body", type=int, default=SPAN_BODY,
                        help="Word pieces per validation span (a multiple of the peer's block body, 510).")
    parser.add_argument("--shard_tokens", type=int, default=8_000_000)
    parser.add_argument("--wheels", action="store_true", help="Also pip download the device's wheels.")
    parser.add_argument("--only_wheels", action="store_true",
                        help="Only (re)download the wheels into an existing payload and update its manifest.")
    parser.add_argument("--full_transformers", action="store_true",
                        help="With --wheels: keep every model folder of the transformers wheel (11 MB more).")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    data_dir, out_dir = Path(args.data_dir), Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.only_wheels:
        return add_wheels(out_dir, json.loads((out_dir / "manifest.json").read_text()), not args.full_transformers)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    if len(tokenizer) > 2**15:
        raise ValueError(f"--tokenizer: {len(tokenizer)} word pieces do not fit the int16 labels of the validation.")
    started = time.time()

    held_out = [tokenize(tokenizer, b["text"]) for b in read_books(data_dir, "validation")]
    spans = validation_spans(held_out, args.validation_spans, args.span_body)
    inputs, labels = mask_once(spans, tokenizer, args.seed)
    np.savez_compressed(out_dir / "validation.npz", input_ids=inputs, labels=labels)
    print(f"validation: {len(held_out)} books, {sum(map(len, held_out)):,} tokens; {len(spans)} spans of "
          f"{args.span_body}, {int((labels != -100).sum()):,} scored tokens", flush=True)

    books = read_books(data_dir, "train")
    random.Random(args.seed).shuffle(books)
    chosen = [in_domain_stream(data_dir, name, tokenizer) for name in args.in_domain]
    total = sum(len(b["ids"]) for b in chosen)
    for start in range(0, len(books), TOKENIZE_BATCH):
        if total >= args.max_train_tokens:
            break
        batch = books[start: start + TOKENIZE_BATCH]
        for book, ids in zip(batch, tokenize_batch(tokenizer, [book.pop("text") for book in batch])):
            if total >= args.max_train_tokens:
                break
            book["ids"] = ids
            total += len(ids)
            chosen.append(book)
    print(f"train: {len(chosen)} of {len(books) + len(args.in_domain)} documents, {total:,} tokens "
          f"({time.time() - started:.0f} s to tokenize)", flush=True)
    shards = write_shards(chosen, out_dir, args.shard_tokens)

    manifest = {
        "tokenizer_sha256": file_sha256(Path(args.tokenizer) / "tokenizer.json"),
        "vocab_size": len(tokenizer),
        "seed": args.seed,
        "train": {"tokens": int(sum(s["tokens"] for s in shards)), "books": sum(len(s["books"]) for s in shards),
                  "books_available": len(books), "in_domain": args.in_domain, "shards": shards},
        "validation": {"file": "validation.npz", "sha256": file_sha256(out_dir / "validation.npz"),
                       "books": len(held_out), "spans": int(len(spans)), "span_body": args.span_body,
                       "scored_tokens": int((labels != -100).sum()), "sha256_input_ids": sha256(inputs.tobytes())},
        "command": "python -m research.pretraining.pack " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    if args.wheels:
        return add_wheels(out_dir, manifest, not args.full_transformers)
    write_manifest(out_dir, manifest)
    print(f"{time.time() - started:.0f} s", flush=True)
    return manifest


def add_wheels(out_dir: Path, manifest: dict, slim: bool) -> dict:
    manifest["wheels"] = download_wheels(out_dir, slim=slim)
    write_manifest(out_dir, manifest)
    return manifest


def write_manifest(out_dir: Path, manifest: dict) -> None:
    """manifest.json with the payload's size (every file but the manifest); prints what the device call would
    carry: the payload plus the files of the working tree that git does not ignore (limit 64 MiB)."""
    manifest["payload_bytes"] = sum(f.stat().st_size for f in out_dir.rglob("*")
                                    if f.is_file() and f.name != "manifest.json")
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    payload = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    tree = working_tree_bytes()
    print(f"{out_dir}: {manifest['train']['tokens']:,} training tokens, payload {payload / 2**20:.1f} MiB; with the "
          f"working tree ({tree / 2**20:.1f} MiB) {(payload + tree) / 2**20:.1f} MiB of the 64 MiB a device call "
          f"carries", flush=True)
    if payload + tree > 64 * 2**20:
        advice = "pack again with a smaller --max_train_tokens."
        weights = SHIPPED_WEIGHTS.stat().st_size if SHIPPED_WEIGHTS.exists() else 0
        if payload + tree - weights <= 64 * 2**20:
            advice = (f"remove {SHIPPED_WEIGHTS.relative_to(REPOSITORY)} ({weights / 2**20:.1f} MiB, which the call "
                      f"does not read) from the working tree for the call and restore it from git after, or {advice}")
        print(f"WARNING: over 64 MiB: {advice}", flush=True)


def working_tree_bytes() -> int:
    """The size of the files a device call sends besides the carried folders: tracked and untracked-not-ignored."""
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=STUDY, capture_output=True, check=True,
                               text=True).stdout.strip())
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum((root / name.decode()).stat().st_size for name in listed if name and (root / name.decode()).is_file())


if __name__ == "__main__":
    main()
