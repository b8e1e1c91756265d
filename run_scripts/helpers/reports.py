# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Reports: length statistics, markdown tables, model cards and metrics."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .dependencies import script_dependencies


if TYPE_CHECKING:
    from transformers import TrainingArguments


def length_statistics(lengths: Sequence[int], limit: int = 512, unit: str = "tokens") -> dict:
    """Documents, total `unit`s, how many and what percentage are over `limit`, mean, median, p90, max."""
    lengths = np.asarray(lengths)
    return {
        "documents": int(lengths.size),
        unit: int(lengths.sum()),
        f"over_{limit}": int((lengths > limit).sum()),
        f"pct_over_{limit}": round(100.0 * float((lengths > limit).mean()), 1),
        "mean": round(float(lengths.mean()), 1),
        "median": float(np.median(lengths)),
        "p90": float(np.percentile(lengths, 90)),
        "max": int(lengths.max()),
    }


def format_length_table(stats: dict[str, dict], limit: int = 512, unit: str = "tokens") -> str:
    header = (f"| split | documents | {unit} | > {limit} | % > {limit} | median | p90 | max |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = [f"| {name} | {s['documents']} | {s[unit]} | {s[f'over_{limit}']} | {s[f'pct_over_{limit}']} | "
            f"{s['median']:g} | {s['p90']:g} | {s['max']} |" for name, s in stats.items()]
    return "\n".join([header, *rows])


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e5 else f"{value:.4g}"
    return str(value)


def format_metrics_table(metrics: dict[str, dict]) -> str:
    """`{row name: {metric: value}}` as a markdown table (rows in order; columns = union of metric names)."""
    columns: list[str] = []
    for values in metrics.values():
        columns += [k for k in values if k not in columns]
    lines = ["| | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for name, values in metrics.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(values.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def dropout_summary(config) -> str:
    """The config's dropout probabilities by field (RAN and BERT name them `hidden_dropout_prob` and
    `attention_probs_dropout_prob`, ModernBERT `embedding_dropout`, `attention_dropout`, `mlp_dropout`, ...)."""
    fields = {key: value for key, value in config.to_dict().items()
              if "dropout" in key and isinstance(value, (int, float)) and not isinstance(value, bool)}
    return "dropout " + ", ".join(f"{key} {value}" for key, value in sorted(fields.items()))


def write_model_card(output_dir: str, *, title: str, description: str, auto_class: str, sections: dict[str, str],
                     model=None, training_args: TrainingArguments | None = None, command: str | None = None,
                     tags: Sequence[str] = (), use: str = "") -> str:
    """Write `output_dir/README.md`: what the model is, how to load it (and `use`: more of the "Use" section, e.g.
    `use_snippets`), the given sections (metrics, data, ...), the model config and the main training arguments."""
    is_ran = model is None or model.config.model_type == "ran"
    lines = ["---", "library_name: transformers", "license: apache-2.0",
             "tags:", *[f"- {t}" for t in [*(["ran", "recurrent-attention-network"] if is_ran else []),
                                            "long-documents", *tags]],
             "---", "", f"# {title}", "", description.strip(), ""]
    lines += ["## Use", "", "```python", *(["import ran_hf  # registers RAN with the Auto classes (or pass "
                                            "trust_remote_code=True to both from_pretrained calls)"]
                                           if is_ran else []),
              f"from transformers import AutoTokenizer, {auto_class}", "",
              f"tokenizer = AutoTokenizer.from_pretrained(\"{os.path.abspath(output_dir)}\")",
              f"model = {auto_class}.from_pretrained(\"{os.path.abspath(output_dir)}\")", "```", ""]
    if use:
        lines += [use.strip(), ""]
    for heading, body in sections.items():
        lines += [f"## {heading}", "", body.strip(), ""]
    if model is not None:
        c = model.config
        n_params = sum(p.numel() for p in model.parameters())
        context = (f"{c.num_attention_heads} heads x {c.attention_head_size}, window {c.window_size} (min "
                   f"{c.min_window_size})" if is_ran else
                   f"{c.num_attention_heads} heads, feed-forward {c.intermediate_size}, "
                   f"{c.max_position_embeddings} positions")
        lines += ["## Model", "",
                  f"`{type(model).__name__}`, {n_params / 1e6:.2f}M parameters: hidden {c.hidden_size}, "
                  f"{c.num_hidden_layers} layers, {context}, vocab {c.vocab_size}, {dropout_summary(c)}. "
                  f"Full config: `config.json`.", ""]
    if training_args is not None:
        keys = ["learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
                "per_device_eval_batch_size", "gradient_accumulation_steps", "weight_decay", "warmup_steps",
                "lr_scheduler_type", "max_grad_norm", "train_sampling_strategy", "eval_strategy",
                "metric_for_best_model", "load_best_model_at_end", "seed"]
        values = {k: getattr(training_args, k) for k in keys}
        values = {k: (v.value if hasattr(v, "value") else v) for k, v in values.items()}
        lines += ["## Training arguments", "", "```json", json.dumps(values, indent=2, default=str), "```", ""]
    if command:
        lines += ["## Command", "", "```bash", command, "```", ""]
    path = os.path.join(output_dir, "README.md")
    os.makedirs(output_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def use_snippets(output_dir: str, *, task: str, name: str, call: str, returns: str, script: str,
                 predict_file: str, predict_note: str) -> str:
    """The model card's `pipeline(task)` call and the script's `--do_predict` command on a file without labels."""
    model_dir = os.path.abspath(output_dir)
    return "\n".join([
        "With a `pipeline`, which names the labels:", "", "```python",
        "import ran_hf  # registers RAN with the Auto classes (or pass trust_remote_code=True to pipeline)",
        "from transformers import pipeline", "",
        f"{name} = pipeline(\"{task}\", model=\"{model_dir}\")",
        f"{name}({call})  # {returns}", "```", "",
        f"Predicting on a file without labels: {predict_note}", "", "```bash",
        shlex.join(["python", f"run_scripts/{script}", "--model_name_or_path", model_dir, "--do_predict",
                    "--test_file", predict_file, "--output_dir", "predictions"]), "```"])


def training_time(train_metrics: dict) -> str:
    """The model card's account of the training time, which names the processes of a resumed run."""
    last = train_metrics.get("train_runtime", 0)
    total = train_metrics.get("train_runtime_all_processes", last)
    if total > last + 1:
        return f"{total:.0f} s of training over the processes of a resumed run ({last:.0f} s in the last one)"
    return f"{last:.0f} s of training"


def command_line(program: str, argv: Sequence[str] | None) -> str:
    """The command that reproduces a run: `python run_scripts/x.py ARGS` for a script in run_scripts/ (given by its
    file name), `python -m research.y ARGS` for a module (given by its dotted name)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    launcher = ["python", f"run_scripts/{program}"] if program.endswith(".py") else ["python", "-m", program]
    return shlex.join([*launcher, *argv])


def classification_scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    """Accuracy (subset accuracy for multi-label), micro-F1 and macro-F1 (scikit-learn, offline)."""
    with script_dependencies():
        from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "micro_f1": float(f1_score(y_true, y_pred, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
    }


def perplexity(loss: float) -> float:
    try:
        return math.exp(loss)
    except OverflowError:
        return float("inf")
