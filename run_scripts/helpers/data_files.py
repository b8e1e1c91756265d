# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Reading the scripts' data: .jsonl/.json/.csv/.tsv files (optionally gzipped) with `datasets.load_dataset`,
.txt files one document per line, and `--dataset_name` folders or Hub names, with errors that name the argument,
the file, the line and the fix."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import datasets


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
    """`path` opened for reading as UTF-8 text (decompressed when it ends in .gz). Read it inside
    `named_decode_errors` so that bytes that are not UTF-8 are an error naming the file and the line."""
    if path.suffix.lower() == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def first_undecodable_line(path: Path) -> tuple[int, int, int] | None:
    """(line number, column, byte value) of the first byte of `path` (decompressed when it ends in .gz) that is not
    UTF-8, all 1-based but the byte; None when the whole file is UTF-8."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return number, err.start + 1, raw[err.start]
    return None


def bad_encoding_error(path: Path, source: str) -> ValueError | None:
    """A ValueError naming `source` (e.g. `--train_file 'x.jsonl'`), the line and column of the first byte of
    `path` that is not UTF-8, and the command that re-encodes the file; None when the file is UTF-8."""
    found = first_undecodable_line(path)
    if found is None:
        return None
    number, column, byte = found
    stem, _, suffixes = path.name.partition(".")
    fixed = path.with_name(f"{stem}.utf8.{suffixes}" if suffixes else f"{stem}.utf8")
    if path.suffix.lower() == ".gz":
        command = f"zcat '{path}' | iconv -f latin1 -t utf-8 | gzip > '{fixed}'"
    else:
        command = f"iconv -f latin1 -t utf-8 '{path}' > '{fixed}'"
    return ValueError(
        f"{source}, line {number}: byte 0x{byte:02x} at column {column} is not UTF-8; the scripts read UTF-8 text. "
        f"Re-encode the file, e.g. from Latin-1 (for another encoding, name it after -f; `iconv -l` lists them): "
        f"{command}")


@contextlib.contextmanager
def named_decode_errors(path: Path, source: str):
    """Within the block, a `UnicodeDecodeError` from reading `path` becomes `bad_encoding_error`'s ValueError,
    which names `source`, the line and the fix."""
    try:
        yield
    except UnicodeDecodeError:
        error = bad_encoding_error(path, source)
        if error is None:
            raise
        raise error from None


def split_columns(names: str) -> list[str]:
    """'title,text' -> ['title', 'text']."""
    cols = [c.strip() for c in names.split(",") if c.strip()]
    if not cols:
        raise ValueError(f"Empty column name list {names!r}.")
    return cols


def load_file(path: Path, arg_name: str = "train_file") -> datasets.Dataset:
    """A .jsonl/.json/.csv/.tsv file (optionally gzipped) as a `datasets.Dataset` (`datasets.load_dataset`), with
    errors that name the argument, the file and, for bad JSON, the line."""
    fmt = file_format(path)
    if fmt == "text":
        raise ValueError(f"--{arg_name} '{path}': a .txt file holds only text; `read_records` reads it.")
    kwargs = {"keep_default_na": False} if fmt == "csv" else {}
    if fmt == "csv" and ".tsv" in [s.lower() for s in path.suffixes]:
        kwargs["sep"] = "\t"
    try:
        return datasets.load_dataset(fmt, data_files=str(path), split="train", **kwargs)
    except Exception as err:  # datasets wraps parse errors; name the first bad line instead
        encoding_error = bad_encoding_error(path, f"--{arg_name} '{path}'")
        if encoding_error is not None:
            raise encoding_error from None
        if fmt == "json":
            _raise_on_bad_json(path, arg_name)
        if isinstance(err, StopIteration) or "EmptyDataError" in repr(err) or "No columns" in str(err):
            raise ValueError(f"--{arg_name} '{path}': the file holds no records"
                             f"{' (a header row with the column names is needed)' if fmt == 'csv' else ''}.") from None
        raise ValueError(f"--{arg_name} '{path}': could not be read as {fmt} ({err}).") from err


def _raise_on_bad_json(path: Path, arg_name: str) -> None:
    with open_text(path) as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--{arg_name} '{path}': not valid JSON ({err}).") from None
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"--{arg_name} '{path}', line {number}: not valid JSON ({err}). Expected one JSON "
                                 f"object per line (jsonl).") from None


def _json_rows(path: Path, count: int, names: Sequence[str], source: str) -> tuple[list[int], list[dict] | None]:
    """The file line of each of the `count` records of a JSON file (jsonl: its line, blank lines skipped; a JSON
    array: the item number) and the values of its fields `names` as the file writes them: `datasets` reads a column
    that mixes strings and numbers through pandas, which turns "1" into 1. Lines 1 to `count` and no values where
    the file does not parse into `count` records here."""
    with open_text(path) as f, named_decode_errors(path, source):
        first = f.read(1)
        while first and first.isspace():
            first = f.read(1)
        f.seek(0)
        try:
            if first == "[":
                numbered = list(enumerate(json.load(f), start=1))
            else:
                numbered = [(number, json.loads(line)) for number, line in enumerate(f, start=1) if line.strip()]
        except ValueError:  # (json.JSONDecodeError) what datasets read but json does not: no values
            numbered = []
    if len(numbered) != count:
        return list(range(1, count + 1)), None
    values = [{name: item[name] for name in names if name in item} if isinstance(item, dict) else {}
              for _, item in numbered]
    return [number for number, _ in numbered], values


def load_dataset_splits(name: str, config_name: str | None = None, arg_name: str = "dataset_name"):
    """`--dataset_name`: a folder written by `Dataset(Dict).save_to_disk`, a folder `datasets.load_dataset`
    understands (data files, a loading script is not run), or a Hub dataset name. Returns a `DatasetDict`."""
    folder = Path(name)
    if folder.is_dir() and ((folder / "dataset_dict.json").is_file() or (folder / "dataset_info.json").is_file()
                            and (folder / "state.json").is_file()):
        _raise_on_empty_saved_splits(folder, arg_name)
        loaded = datasets.load_from_disk(str(folder))
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    try:
        return datasets.load_dataset(name, config_name)
    except ConnectionError as err:  # offline (HF_HUB_OFFLINE=1) or no network, and not a local folder
        raise ConnectionError(
            f"--{arg_name} '{name}': no such local folder, and the Hub cannot be reached ({err}). Pass a folder "
            f"written by `save_to_disk` or a folder of data files, or data files (--train_file ...), or go online "
            f"(unset HF_HUB_OFFLINE) to download a Hub dataset.") from None
    except ValueError as err:
        if "corresponds to no data" not in str(err):
            raise
        raise ValueError(f"--{arg_name} '{name}': a split holds no records ({err}); fill it or remove it.") from None
    except FileNotFoundError as err:
        raise FileNotFoundError(f"--{arg_name} '{name}': not a dataset folder (save_to_disk or data files) nor a "
                                f"dataset on the Hub that can be reached ({err}).") from None


def _raise_on_empty_saved_splits(folder: Path, arg_name: str) -> None:
    """A split saved with no records has no data file, which `load_from_disk` cannot read (IndexError): name it."""
    split_dirs = [folder]
    if (folder / "dataset_dict.json").is_file():
        with open(folder / "dataset_dict.json") as f:
            split_dirs = [folder / split for split in json.load(f)["splits"]]
    for split_dir in split_dirs:
        state_file = split_dir / "state.json"
        if state_file.is_file():
            with open(state_file) as f:
                if not json.load(f).get("_data_files"):
                    raise ValueError(f"--{arg_name} '{folder}': split '{split_dir.name}' holds no records; fill it "
                                     f"or remove it.")


def read_records(path: Path, fields: Sequence[str], arg_name: str = "train_file",
                 text_field: str | Sequence[str] | None = None, skip_empty: bool = False,
                 optional_fields: Sequence[str] = ()) -> list[dict]:
    """Read a .jsonl/.json/.csv/.tsv/.txt file (optionally gzipped) into dicts holding `fields`, `_line` (the
    1-based line number; for a JSON array the item number) and, with `text_field`, `_text`: the text, or the texts of
    several fields (e.g. `["title", "text"]`) joined by a blank line. JSON and CSV files are read with
    `datasets.load_dataset`; `dataset_records` checks the records.

    A `.txt` file holds one document per line (blank lines are skipped; they separate paragraphs). Errors
    (ValueError) name the file, the line and the fix; see `dataset_records`.
    """
    text_fields = [text_field] if isinstance(text_field, str) else list(text_field or [])
    fmt = file_format(path)
    if fmt == "text":
        wanted = list(dict.fromkeys([*fields, *text_fields]))
        extra = [name for name in wanted if name not in text_fields[:1] + ["text"]]
        if extra or len(text_fields) > 1:
            raise ValueError(
                f"--{arg_name} '{path}': a .txt file holds only text (one document per line), but the field(s) "
                f"{extra or text_fields} are needed. Use a .jsonl or .csv file with the fields {wanted}."
            )
        records = []
        with open_text(path) as f, named_decode_errors(path, f"--{arg_name} '{path}'"):
            for number, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    records.append({(text_fields or ["text"])[0]: line, "_text": line, "_line": number})
        if not records:
            raise ValueError(f"--{arg_name} '{path}': the file holds no text.")
        return records
    dataset, source = load_file(path, arg_name), f"--{arg_name} '{path}'"
    if fmt == "csv":  # rows start at line 2, after the header (a quoted field spanning lines shifts the rows after it)
        lines, values = list(range(2, len(dataset) + 2)), None
    else:
        lines, values = _json_rows(path, len(dataset), [n for n in [*fields, *optional_fields] if n not in text_fields],
                                   source)
    return dataset_records(dataset, fields, source, text_field, skip_empty, optional_fields, lines=lines,
                           values=values)


def dataset_records(dataset: datasets.Dataset, fields: Sequence[str], source: str,
                    text_field: str | Sequence[str] | None = None, skip_empty: bool = False,
                    optional_fields: Sequence[str] = (), lines: Sequence[int] | None = None,
                    values: Sequence[dict] | None = None) -> list[dict]:
    """The records of a `datasets.Dataset` as dicts holding `fields` (a `ClassLabel` value as its name; its -1, "no
    label", as a missing value), `_line` (`lines`, or the 1-based row number) and, with `text_field`, `_text`.
    `values` (one dict per row) replace the dataset's values of the fields they hold: the values as the file wrote
    them. `source` names the data in errors (`--train_file 'x.jsonl'`).

    Errors (ValueError) name the source, the line and the fix: a missing field (absent or null), a text that is not
    a string, an optional field present in some records only. An empty document (its text empty or only
    whitespace) is an error listing the lines, or with `skip_empty` a warning and the records are dropped.
    """
    text_fields = [text_field] if isinstance(text_field, str) else list(text_field or [])
    fields = list(dict.fromkeys([*fields, *text_fields]))
    lines = list(lines) if lines is not None else list(range(1, len(dataset) + 1))
    if len(dataset) == 0:
        raise ValueError(f"{source}: no records (the data is empty).")
    present = [name for name in dataset.column_names if not name.startswith("_")]
    for name in fields:
        if name not in dataset.column_names:
            raise ValueError(f"{source}, line {lines[0]}: no field {name!r} (fields present: {sorted(present)}). "
                             f"{_field_fix(name, text_fields)}")
    optional = [name for name in optional_fields if name not in fields and name in dataset.column_names]
    class_names = {name: feature.names for name, feature in dataset.features.items()
                   if isinstance(feature, datasets.ClassLabel)}
    items = dataset.select_columns([*fields, *optional]).to_list()
    for item, written in zip(items, values or []):
        item.update({name: value for name, value in written.items() if name in item})
    records = [_record(item, number, fields, optional, text_fields, class_names, source)
               for number, item in zip(lines, items)]
    for name in optional:
        having = [r["_line"] for r in records if name in r]
        if having and len(having) < len(records):
            lacking = next(r["_line"] for r in records if name not in r)
            raise ValueError(f"{source}: field {name!r} is on line {having[0]} but not on line {lacking}; give it "
                             f"in every record or in none.")
    if text_fields:
        records = drop_empty(records, text_fields, source, skip_empty)
    return records


def _record(item: dict, number: int, fields: list[str], optional: list[str], text_fields: list[str],
            class_names: dict[str, list[str]], source: str) -> dict:
    """One row of `dataset_records`: its `fields` (required), the `optional` ones it has, `_text` and `_line`."""
    for name in class_names:  # -1: a ClassLabel's "no label" (e.g. the test splits of GLUE)
        if name in item and item[name] == -1:
            item[name] = None
    missing = [name for name in fields if item[name] is None]
    if missing:
        raise ValueError(f"{source}, line {number}: no field {missing[0]!r} (or null). Add the field to every "
                         f"record. {_field_fix(missing[0], text_fields)}")
    record = {name: item[name] for name in fields}
    record.update({name: item[name] for name in optional if item[name] is not None})
    for name, names in class_names.items():
        if name in record and isinstance(record[name], int) and record[name] >= 0:
            record[name] = names[record[name]]
    for name in text_fields:
        if not isinstance(record[name], str):
            raise ValueError(f"{source}, line {number}: field {name!r} must be a string, got "
                             f"{type(record[name]).__name__}.")
    if text_fields:
        record["_text"] = "\n\n".join(record[n].strip() for n in text_fields if record[n] and record[n].strip())
    record["_line"] = number
    return record


def _field_fix(name: str, text_fields: Sequence[str]) -> str:
    return (f"Name the field to use with "
            f"{'--text_column_name' if name in text_fields else '--label_column_name'}.")


def drop_empty(records: list[dict], text_fields: list[str], source: str, skip_empty: bool) -> list:
    """Empty documents are an error (naming the lines) unless `skip_empty`, then a warning and they are dropped."""
    empty = [r["_line"] for r in records if not r["_text"]]
    if not empty:
        return records
    shown = ", ".join(map(str, empty[:20])) + (f" ... ({len(empty)} in all)" if len(empty) > 20 else "")
    what = " and ".join(repr(n) for n in text_fields)
    if not skip_empty:
        raise ValueError(
            f"{source}: empty document ({what} empty or only whitespace) on line(s) {shown}. Remove "
            f"them, or pass --skip_empty_documents to skip them with a warning."
        )
    logger.warning(f"{source}: skipping {len(empty)} empty document(s) on line(s) {shown}.")
    kept = [r for r in records if r["_text"]]
    if not kept:
        raise ValueError(f"{source}: every document is empty.")
    return kept


def first_records(records: list[dict], limit: int | None, limit_flag: str, label_field: str) -> list[dict]:
    """The first `limit` records (`--max_*_samples`; all of them without a limit). When the cut keeps fewer of the
    labels in `label_field` than the whole split holds, as on a file sorted by label, a warning says so: the run
    would train or score on part of the labels only."""
    if not limit or limit >= len(records):
        return records
    kept = records[:limit]

    def labels(rows):
        return {tuple(r[label_field]) if isinstance(r[label_field], list) else r[label_field]
                for r in rows if label_field in r}

    every, kept_labels = labels(records), labels(kept)
    if len(kept_labels) < len(every):
        logger.warning(f"--{limit_flag} {limit} keeps the first {limit} of {len(records)} documents, which hold "
                       f"{len(kept_labels)} of the split's {len(every)} distinct labels (is the file sorted by "
                       "label?); shuffle the file first to take a sample of every label.")
    return kept
