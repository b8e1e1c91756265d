# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Data files the scripts cannot read as they are: bytes that are not UTF-8 name the file, the line and the
command that re-encodes it, in every format and reader."""

import gzip
import re
from pathlib import Path

import pytest

from run_scripts import run_ner
from run_scripts.helpers import corpus, data_files


LATIN1 = "café".encode("latin1")  # b"caf\xe9": not UTF-8


def write_bytes(path: Path, lines: list[bytes]) -> Path:
    data = b"\n".join(lines) + b"\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name, lines, line", [
    ("train.jsonl", [b'{"text": "ok", "label": "a"}', b'{"text": "' + LATIN1 + b'", "label": "b"}'], 2),
    ("train.jsonl.gz", [b'{"text": "ok", "label": "a"}', b'{"text": "x ' + LATIN1 + b'", "label": "b"}'], 2),
    ("train.csv", [b"text,label", b"ok,a", b"more,b", LATIN1 + b",b"], 4),
    ("train.txt", [b"ok", b"", LATIN1], 3),
])
def test_bytes_that_are_not_utf8_name_the_file_the_line_and_the_fix(tmp_path, name, lines, line):
    path = write_bytes(tmp_path / name, lines)
    fields = [] if name.endswith(".txt") else ["label"]
    with pytest.raises(ValueError, match=rf"--train_file '{re.escape(str(path))}', line {line}: byte 0xe9 at "
                                         rf"column \d+ is not UTF-8.*iconv -f latin1 -t utf-8") as caught:
        data_files.read_records(path, fields, "train_file", text_field="text")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no bare UnicodeDecodeError shown
    fixed = re.search(r"> '([^']+)'", str(caught.value)).group(1)
    assert data_files.file_format(Path(fixed)) == data_files.file_format(path)  # the re-encoded file reads the same


def test_conll_and_corpus_readers_name_the_line_too(tmp_path):
    conll = write_bytes(tmp_path / "ner.txt", [b"-DOCSTART- O", b"", b"John B-PER", LATIN1 + b" O"])
    with pytest.raises(ValueError, match=r"--train_file '.*ner\.txt', line 4: byte 0xe9 .* not UTF-8.*iconv"):
        run_ner.read_conll(conll, "train_file")
    shard = write_bytes(tmp_path / "books.jsonl.gz", [b'{"text": "one"}', b'{"text": "' + LATIN1 + b'"}'])
    with pytest.raises(ValueError, match=r"books\.jsonl\.gz', line 2: byte 0xe9 .*zcat .* \| iconv"):
        list(corpus.iter_documents([shard]))


def test_a_utf8_file_reads_as_before(tmp_path):
    path = write_bytes(tmp_path / "train.jsonl", ['{"text": "café", "label": "a"}'.encode()])
    assert data_files.bad_encoding_error(path, "x") is None
    assert [r["_text"] for r in data_files.read_records(path, ["label"], text_field="text")] == ["café"]
