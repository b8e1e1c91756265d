# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Reading the scripts' data files: .jsonl/.json/.csv/.tsv/.txt, optionally gzipped, with errors that name the
argument, the file, the line and the fix."""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


logger = logging.getLogger("run_scripts")

TEXT_SUFFIXES = {".txt", ".text", ".tokens", ".raw"}
JSON_SUFFIXES = {".jsonl", ".json", ".ndjson"}
CSV_SUFFIXES = {".csv", ".tsv"}


def check_file(path: str | os.PathLike | None, arg_name: str) -> Path:
    """`path` as a Path, or FileNotFoundError naming the argument and the path."""
    if path is None:
        raise ValueError(f"`--{arg_name}` is required.")
    p = Path(path)
    if not p.is_file():
        hint = " (it is a directory; pass a file)" if p.is_dir() else ""
        raise FileNotFoundError(f"--{arg_name}: no such file: '{path}'{hint}. Pass an existing file.")
    return p


def file_format(path: Path) -> str:
    """'json' (.jsonl/.json), 'csv' (.csv/.tsv) or 'text' (.txt/.tokens/.raw), with an optional .gz suffix."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    if suffix in JSON_SUFFIXES:
        return "json"
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in TEXT_SUFFIXES:
        return "text"
    raise ValueError(
        f"'{path}': unknown file type '{suffix or path.name}'. Use .jsonl/.json (one JSON object per line), "
        f".csv/.tsv (with a header row) or .txt (one document per line), optionally gzipped (.gz)."
    )


def open_text(path: Path) -> io.TextIOBase:
    if path.suffix.lower() == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def _iter_json_records(path: Path) -> Iterable[tuple[int, Any]]:
    with open_text(path) as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        if head == "[":  # a JSON array of objects
            try:
                items = json.loads(head + f.read())
            except json.JSONDecodeError as err:
                raise ValueError(f"'{path}': not valid JSON ({err}).") from None
            yield from ((i + 1, item) for i, item in enumerate(items))
            return
        f.seek(0)
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"'{path}', line {number}: not valid JSON ({err}). Expected one JSON object per line (jsonl)."
                ) from None


def split_columns(names: str) -> list[str]:
    """'title,text' -> ['title', 'text']."""
    cols = [c.strip() for c in names.split(",") if c.strip()]
    if not cols:
        raise ValueError(f"Empty column name list {names!r}.")
    return cols


def read_records(path: Path, fields: Sequence[str], arg_name: str = "train_file",
                 text_field: str | Sequence[str] | None = None, skip_empty: bool = False) -> list[dict]:
    """Read a .jsonl/.json/.csv/.tsv/.txt file (optionally gzipped) into dicts holding `fields`, `_line` (the
    1-based line number; for a JSON array the item number) and, with `text_field`, `_text`: the text, or the texts of
    several fields (e.g. `["title", "text"]`) joined by a blank line.

    Errors (ValueError) name the file, the line and the fix: a record that is not an object, a missing field, a text
    that is not a string. A `.txt` file holds one document per line (blank lines are skipped; they separate
    paragraphs). An empty document (its text empty or only whitespace) is an error listing the lines, or with
    `skip_empty` a warning and the records are dropped.
    """
    text_fields = [text_field] if isinstance(text_field, str) else list(text_field or [])
    fields = list(dict.fromkeys([*fields, *text_fields]))
    fmt = file_format(path)
    records = []
    if fmt == "text":
        extra = [name for name in fields if name not in text_fields[:1] + ["text"]]
        if extra or len(text_fields) > 1:
            raise ValueError(
                f"--{arg_name} '{path}': a .txt file holds only text (one document per line), but the field(s) "
                f"{extra or text_fields} are needed. Use a .jsonl or .csv file with the fields {fields}."
            )
        with open_text(path) as f:
            for number, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    records.append({(text_fields or ["text"])[0]: line, "_text": line, "_line": number})
        if not records:
            raise ValueError(f"--{arg_name} '{path}': the file holds no text.")
        return records
    items = _iter_json_records(path) if fmt == "json" else _iter_csv_records(path)
    for number, item in items:
        if not isinstance(item, dict):
            raise ValueError(f"--{arg_name} '{path}', line {number}: expected a JSON object, got "
                             f"{type(item).__name__}.")
        missing = [name for name in fields if name not in item]
        if missing:
            present = sorted(k for k in item if not k.startswith("_"))
            raise ValueError(
                f"--{arg_name} '{path}', line {number}: no field {missing[0]!r} (fields present: {present}). Add the "
                f"field to every record, or name the field to use with "
                f"{'--text_column_name' if missing[0] in text_fields else '--label_column_name'}."
            )
        record = {name: item[name] for name in fields}
        for name in text_fields:
            if record[name] is not None and not isinstance(record[name], str):
                raise ValueError(f"--{arg_name} '{path}', line {number}: field {name!r} must be a string, got "
                                 f"{type(record[name]).__name__}.")
        if text_fields:
            record["_text"] = "\n\n".join(record[n].strip() for n in text_fields if record[n] and record[n].strip())
        record["_line"] = number
        records.append(record)
    if not records:
        raise ValueError(f"--{arg_name} '{path}': the file holds no records.")
    if text_fields:
        records = drop_empty(records, text_fields, path, arg_name, skip_empty)
    return records


def drop_empty(records: list[dict], text_fields: list[str], path: Path, arg_name: str, skip_empty: bool) -> list:
    """Empty documents are an error (naming the lines) unless `skip_empty`, then a warning and they are dropped."""
    empty = [r["_line"] for r in records if not r["_text"]]
    if not empty:
        return records
    shown = ", ".join(map(str, empty[:20])) + (f" ... ({len(empty)} in all)" if len(empty) > 20 else "")
    what = " and ".join(repr(n) for n in text_fields)
    if not skip_empty:
        raise ValueError(
            f"--{arg_name} '{path}': empty document ({what} empty or only whitespace) on line(s) {shown}. Remove "
            f"them, or pass --skip_empty_documents to skip them with a warning."
        )
    logger.warning(f"--{arg_name} '{path}': skipping {len(empty)} empty document(s) on line(s) {shown}.")
    kept = [r for r in records if r["_text"]]
    if not kept:
        raise ValueError(f"--{arg_name} '{path}': every document is empty.")
    return kept


def _iter_csv_records(path: Path) -> Iterable[tuple[int, dict]]:
    delimiter = "\t" if ".tsv" in [s.lower() for s in path.suffixes] else ","
    with open_text(path) as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            raise ValueError(f"'{path}': empty CSV file (a header row with the column names is needed).")
        for row in reader:
            # DictReader's line_num is the physical line of the row's end; fine for error messages
            yield reader.line_num, {k: v for k, v in row.items() if k is not None}
