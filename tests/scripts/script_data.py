# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Tiny synthetic data for the script tests (written to tmp dirs): topic-classification jsonl / csv files, a text
corpus and CoNLL files, and the flags of a tiny RAN (`TINY`)."""

import gzip
import json
import random

import pytest



TINY = ["--hidden_size", "16", "--num_hidden_layers", "1", "--num_attention_heads", "2", "--attention_head_size", "8",
        "--window_size", "16", "--min_window_size", "4", "--tokenizer_vocab_size", "300", "--tokenizer_min_frequency",
        "1", "--hidden_dropout_prob", "0", "--attention_probs_dropout_prob", "0", "--torch_threads", "1",
        "--use_cpu", "--report_to", "none", "--disable_tqdm", "True", "--logging_steps", "1",
        "--dataloader_pin_memory", "False"]


TOPICS = {
    "sports": "match goal team coach league score season player win stadium".split(),
    "politics": "vote senate election party law minister policy debate campaign bill".split(),
    "science": "atom cell energy theory experiment molecule data lab physics gene".split(),
}
FILLER = "the a of and to in is that it was for on with as by".split()


def document(rng, topic, n_words):
    words = [rng.choice(TOPICS[topic]) if rng.random() < 0.5 else rng.choice(FILLER) for _ in range(n_words)]
    return " ".join(words).capitalize() + "."


def write_jsonl(path, rows):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


def classification_rows(n, seed, multi=False, long_every=0):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        topics = list(TOPICS)
        if multi:
            labels = sorted(rng.sample(topics, rng.choice([1, 2])))
            text = " ".join(document(rng, t, rng.randint(10, 40)) for t in labels)
            rows.append({"id": i, "text": text, "label": labels})
        else:
            topic = topics[i % 3]
            n_words = 700 if long_every and i % long_every == 0 else rng.randint(15, 80)
            rows.append({"id": i, "text": document(rng, topic, n_words), "label": topic})
    return rows


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run_scripts_data")
    write_jsonl(d / "train.jsonl.gz", classification_rows(36, 0, long_every=9))
    write_jsonl(d / "test.jsonl", classification_rows(12, 1, long_every=4))
    write_jsonl(d / "multi_train.jsonl", classification_rows(30, 2, multi=True))
    write_jsonl(d / "multi_test.jsonl", classification_rows(9, 3, multi=True))
    with open(d / "train.csv", "w", encoding="utf-8") as f:
        f.write("text,label\n")
        for row in classification_rows(24, 4):
            f.write(f"\"{row['text']}\",{list(TOPICS).index(row['label'])}\n")
    with open(d / "test.csv", "w", encoding="utf-8") as f:
        f.write("text,label\n")
        for row in classification_rows(6, 5):
            f.write(f"\"{row['text']}\",{list(TOPICS).index(row['label'])}\n")
    rng = random.Random(6)
    with open(d / "corpus.txt", "w", encoding="utf-8") as f:
        for i in range(60):
            f.write(document(rng, list(TOPICS)[i % 3], rng.randint(10, 60)) + "\n")
            if i % 10 == 9:
                f.write("\n")
    write_conll(d / "ner_train.txt", 8, seed=7)
    write_conll(d / "ner_valid.txt", 3, seed=8)
    write_conll(d / "ner_test.txt", 3, seed=9)
    return d


NAMES = {"PER": [["John", "Smith"], ["Maria"], ["Ali", "Khan"]], "LOC": [["Paris"], ["New", "York"], ["Berlin"]],
         "ORG": [["Acme", "Corp"], ["United", "Nations"]], "MISC": [["German"], ["Olympic"]]}


def conll_sentence(rng):
    rows = []
    for _ in range(rng.randint(3, 6)):
        if rng.random() < 0.4:
            kind = rng.choice(list(NAMES))
            for j, word in enumerate(rng.choice(NAMES[kind])):
                rows.append(f"{word} NNP I-NP {'B' if j == 0 else 'I'}-{kind}")
        else:
            rows.append(f"{rng.choice(FILLER)} DT B-NP O")
    rows.append(". . O O")
    return rows


def write_conll(path, n_docs, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(n_docs):
        lines += ["-DOCSTART- -X- -X- O", ""]
        for _ in range(rng.randint(3, 8)):
            lines += conll_sentence(rng) + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)
