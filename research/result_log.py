# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The append-only results logs of the studies: one JSON object per finished run and line."""

from __future__ import annotations

import json
from pathlib import Path


def read_result_log(path: Path) -> list[dict]:
    """The records of a results log (one JSON object per line, appended as runs finish); [] before the first run."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def append_result(path: Path, record: dict) -> None:
    """Append one record to a results log as a single line, so processes sharing the log never interleave."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
