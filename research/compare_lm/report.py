# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparison's summary (mean and sample standard deviation over seeds) and its markdown tables."""

from __future__ import annotations

import argparse

import numpy as np


def summarize(runs: list[dict]) -> dict:
    """Mean (and sample standard deviation over seeds) of each model's numbers."""
    def stats(values):
        return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0}

    def split_summary(results):
        return {"ppl": stats([r["ppl"] for r in results]),
                "per_window_ppl": [float(np.mean(v)) for v in zip(*[r["per_window_ppl"] for r in results])]}

    summary = {}
    for name in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == name]
        entry = {"label": mine[0]["label"], "context": mine[0]["context"], "params": mine[0]["params"],
                 "seeds": [r["seed"] for r in mine], "train_wall_s": stats([r["train_wall_s"] for r in mine]),
                 "validation": split_summary([r["validation"] for r in mine]),
                 "test": split_summary([r["test"] for r in mine])}
        if "test_fresh_state_per_window" in mine[0]:
            entry["test_fresh_state_per_window"] = split_summary([r["test_fresh_state_per_window"] for r in mine])
        summary[name] = entry
    return summary


def fmt_stat(value: dict, digits: int = 2) -> str:
    text = f"{value['mean']:.{digits}f}"
    return text + (f" ± {value['std']:.{digits}f}" if value["std"] else "")


def format_table(summary: dict, args: argparse.Namespace, data_info: dict) -> str:
    steps = f"{args.steps} x {args.tokens_per_step}"
    lines = [
        f"Test blocks: {data_info['test_blocks']} x {args.block_size} tokens, {data_info['scored_test_tokens']} scored "
        f"word pieces (the first token of every {args.window_size}-token window is not scored). Training: {steps} "
        f"tokens (steps x tokens per step), seeds {args.seeds}, {args.threads} thread(s).",
        "",
        "| model | rows per step | params (non-emb.) | train wall s | valid ppl | test ppl | test ppl, fresh state "
        "per window |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in summary.values():
        fresh = entry.get("test_fresh_state_per_window")
        rows = args.tokens_per_step // entry["context"]
        lines.append(
            f"| {entry['label']} | {rows} x {entry['context']} | {entry['params']['total']:,} "
            f"({entry['params']['non_embedding']:,}) | {fmt_stat(entry['train_wall_s'], 0)} | "
            f"{fmt_stat(entry['validation']['ppl'])} | {fmt_stat(entry['test']['ppl'])} | "
            f"{fmt_stat(fresh['ppl']) if fresh else '-'} |"
        )
    num_windows = args.block_size // args.window_size
    title = f"Test perplexity per {args.window_size}-token window index inside the {args.block_size}-token block:"
    lines += ["", title, "", "| model | " + " | ".join(f"w{i}" for i in range(1, num_windows + 1)) + " |",
              "|---|" + "---|" * num_windows]
    for entry in summary.values():
        rows = [(entry["label"], entry["test"])]
        if "test_fresh_state_per_window" in entry:
            rows.append((entry["label"] + ", fresh state per window", entry["test_fresh_state_per_window"]))
        for label, split in rows:
            lines.append(f"| {label} | " + " | ".join(f"{x:.1f}" for x in split["per_window_ppl"]) + " |")
    return "\n".join(lines) + "\n"
