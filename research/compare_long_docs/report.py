# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparison's table: mean and standard deviation over seeds of every model's test and dev scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from run_scripts.helpers.reports import read_result_log

from .data import DATASETS
from .models import MODEL_NAMES, MODELS


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
    for run in read_result_log(output_dir / dataset / "runs.jsonl"):
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
