# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparison's tables: `table.md`, the TF-IDF row read from research/tfidf_baseline's results, then mean and
standard deviation over seeds of every model's test and dev scores, epochs, tokens seen and wall time; and `runs.md`,
one row per run with its scores and what it cost (epochs, tokens, wall and CPU hours, device, resumes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from research.result_log import append_result, read_result_log

from .data import DATASETS, repository_relative
from .models import MODELS, SENTENCE_MODELS, key_of, model_label
from .train import PROTOCOL

METRICS = (("test", "accuracy"), ("test", "macro_f1"), ("test_short", "accuracy"), ("test_short", "macro_f1"),
           ("test_long", "accuracy"), ("test_long", "macro_f1"))
SEPARATORS = {"ran_minilm": "pretrained MiniLM token embeddings (trained on)",
              "aose": "frozen pretrained MiniLM sentence encoder"}
HEADER = ("| model | params | seeds | test acc | test macro-F1 | acc <= 512 | macro-F1 <= 512 | acc > 512 | "
          "macro-F1 > 512 | dev macro-F1 | epochs: best / stopped | tokens seen | wall h / run |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def _mean_std(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    if not values:
        return "-"
    values = scale * np.asarray(values, dtype=float)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def read_runs(output_dir: Path, dataset: str) -> list[dict]:
    """The finished runs of `dataset` under this protocol, the first of each (model, seed, --ran_option overrides)."""
    runs: dict[tuple, dict] = {}
    for run in read_result_log(output_dir / dataset / "runs.jsonl"):
        if run.get("protocol") == PROTOCOL:
            runs.setdefault(key_of(run), run)
    return list(runs.values())


def merge_runs(sources: list[Path], output_dir: Path) -> list[str]:
    """Append to `output_dir`'s runs the finished runs of other output folders (separate processes, another
    machine) that `output_dir` lacks, a (model, seed, overrides) once; a dataset's `data.json` is taken when
    `output_dir` has none. Returns one line per run taken or skipped."""
    lines = []
    for dataset in DATASETS:
        have = {key_of(r) for r in read_runs(output_dir, dataset)}
        for source in sources:
            for run in read_runs(Path(source), dataset):
                key = key_of(run)
                if key in have:
                    lines.append(f"{dataset} {run['model']} seed {run['seed']}: already there, {source}'s skipped")
                    continue
                (output_dir / dataset).mkdir(parents=True, exist_ok=True)
                append_result(output_dir / dataset / "runs.jsonl", run)
                have.add(key)
                lines.append(f"{dataset} {run['model']} seed {run['seed']}: taken from {source}")
            summary = Path(source) / dataset / "data.json"
            if summary.is_file() and not (output_dir / dataset / "data.json").is_file():
                (output_dir / dataset / "data.json").write_text(summary.read_text())
    return lines


def read_tfidf(path: Path | None) -> dict:
    """`{dataset: record}` from research/tfidf_baseline's results.json; {} without one."""
    if path is None or not Path(path).is_file():
        return {}
    return {r["dataset"]: r for r in json.loads(Path(path).read_text())}


def _count(value: float) -> str:
    return f"{value / 1e6:.1f} M" if value >= 1e5 else f"{value / 1e3:.1f} k"


def _tfidf_row(record: dict) -> str:
    cells = [f"{100 * record[split].get(metric, float('nan')):.1f}" if record[split]["n"] else "-"
             for split, metric in METRICS]
    return (f"| TF-IDF + logistic regression | {record['num_features'] / 1e3:.0f}k features | - | "
            f"{' | '.join(cells)} | {100 * record['dev']['macro_f1']:.1f} | - | - | "
            f"{record['seconds'] / 3600:.2f} |")


def devices_of(record: dict) -> list[tuple[str, int]]:
    """The devices a run trained on, each with the training documents seen when it took over (a record without a
    `devices` list trained on its `device` only, and one without either on the CPU)."""
    return [(name, documents) for name, documents in record.get("devices") or [[record.get("device", "cpu"), 0]]]


def device_kind(record: dict) -> str:
    """"cpu", "gpu", or "mixed" for a run that moved between the CPU and a GPU (its wall time is neither's)."""
    kinds = {name == "cpu" for name, _ in devices_of(record)}
    return "mixed" if len(kinds) > 1 else ("cpu" if kinds == {True} else "gpu")


def device_cell(record: dict) -> str:
    """`cpu`, a GPU's name, or the devices in order with the documents at which each took over."""
    devices = devices_of(record)
    if len(devices) == 1:
        return devices[0][0]
    return " → ".join(name if not documents else f"{name} from {documents:,} docs" for name, documents in devices)


def _wall_cell(mine: list[dict]) -> str:
    """Mean wall hours per run, the CPU runs', the GPU runs' and the runs that moved between them apart (their
    times are not comparable)."""
    cells = []
    for kind, suffix in (("cpu", ""), ("gpu", " on GPU"), ("mixed", " CPU and GPU")):
        hours = [r["wall_seconds"] / 3600 for r in mine if device_kind(r) == kind]
        if hours:
            cells.append(f"{np.mean(hours):.2f}" + (f"{suffix} ({len(hours)})" if suffix else ""))
    return "; ".join(cells)


def _model_row(name: str, mine: list[dict]) -> str:
    cells = [_mean_std([r[split][metric] for r in mine if r[split]["n"]]) for split, metric in METRICS]
    stops = [r["stopped"] for r in mine]
    capped = f" (cap x{stops.count('max_epochs')})" if "max_epochs" in stops else ""
    unit = " sent." if name in SENTENCE_MODELS else ""
    return (f"| {model_label(mine[0])} | {mine[0]['params'] / 1e6:.2f} M | {len(mine)} | {' | '.join(cells)} "
            f"| {_mean_std([r['dev_macro_f1'] for r in mine])} "
            f"| {np.mean([r['best_epoch'] for r in mine]):.1f} / {np.mean([r['epochs'] for r in mine]):.1f}{capped} "
            f"| {_count(np.mean([r['tokens_seen'] for r in mine]))}{unit} "
            f"| {_wall_cell(mine)} |")


def dataset_table(dataset: str, runs: list[dict], summary: dict, tfidf: dict | None, tfidf_source: str = "") -> str:
    parts = []
    if runs:
        first = runs[0]
        s = first["setting"]
        caps = sorted({(r["model"] in SENTENCE_MODELS, r["setting"]["max_epochs"]) for r in runs})
        cap = ", ".join(f"{c} ({'sentence models' if sentence else 'token models'})" for sentence, c in caps)
        parts.append(
            f"**{dataset}**: test {first['test']['n']} documents ({first['test_short']['n']} of <= 512 tokens, "
            f"{first['test_long']['n']} longer; median {summary.get('test', {}).get('median', float('nan')):g} "
            f"tokens), train {s['train_documents']}, dev {s['dev_documents']} (carved from train). Dev macro-F1 every "
            f"{s['eval_docs']} training documents, stop after {s['patience']} evaluations without a better one, "
            f"epoch cap {cap}; the best dev state is tested once.\n")
    elif tfidf:
        parts.append(f"**{dataset}** (no neural run finished yet)\n")
    else:
        return ""
    parts.append(HEADER)
    if tfidf:
        parts.append(_tfidf_row(tfidf))
    for name in MODELS:
        groups = {}  # runs of one model with other --ran_option overrides get rows of their own
        for r in sorted((r for r in runs if r["model"] == name), key=lambda r: r["seed"]):
            groups.setdefault(model_label(r), []).append(r)
        if groups and name in SEPARATORS:
            parts.append(f"| *{SEPARATORS[name]}* |" + " |" * 12)
        parts.extend(_model_row(name, mine) for mine in groups.values())
    notes = []
    if tfidf:
        ours = (runs[0]["test"]["n"], runs[0]["test_short"]["n"], runs[0]["test_long"]["n"]) if runs else None
        theirs = (tfidf["test"]["n"], tfidf["test_short"]["n"], tfidf["test_long"]["n"])
        notes.append(f"TF-IDF row: `{tfidf_source}` (not recomputed; one deterministic fit, its "
                     f"settings chosen on its own 10% dev split of train, {tfidf['dev']['n']} documents; wall time "
                     f"includes that grid search)"
                     + ("" if ours == theirs else
                        f"; it was tested on {theirs[0]} documents ({theirs[1]} / {theirs[2]}), not the sample above")
                     + ".")
    if runs:
        cpu = [r for r in runs if device_kind(r) == "cpu"]
        gpu = [r for r in runs if device_kind(r) == "gpu"]
        mixed = [r for r in runs if device_kind(r) == "mixed"]
        spent = ([f"{sum(r['wall_seconds'] for r in cpu) / 3600:.1f} h over the {len(cpu)} runs on the CPU"]
                 if cpu else [])
        if gpu:
            names = sorted({name for r in gpu for name, _ in devices_of(r)})
            spent.append(f"{sum(r['wall_seconds'] for r in gpu) / 3600:.1f} h over the {len(gpu)} runs on a GPU "
                         f"({', '.join(names)})")
        if mixed:
            spent.append(f"{sum(r['wall_seconds'] for r in mixed) / 3600:.1f} h over the {len(mixed)} runs that "
                         f"trained partly on the CPU and partly on a GPU (`runs.md` says where)")
        notes.append(f"Neural runs: accuracy and macro-F1 in %, mean ± std over seeds; tokens seen are the input "
                     f"positions trained on (sentences for the sentence models); wall time = training + dev "
                     f"evaluations + test, {' and '.join(spent)}.")
    parts.append("\n" + " ".join(notes) + "\n")
    return "\n".join(parts)


RUNS_HEADER = ("| model | seed | device | test acc | acc > 512 | dev macro-F1 | epochs: best / stopped | stopped by | "
               "tokens seen | wall h | CPU h | resumes |\n"
               "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")


def cpu_hours(run: dict) -> float:
    """CPU time of one run's process (training, dev evaluations and test), in hours; on a GPU, the host's."""
    return (run["train_cpu_seconds"] + run["dev_eval_cpu_seconds"] + run["test_cpu_seconds"]) / 3600


def runs_table(dataset: str, runs: list[dict]) -> str:
    """One row per finished run of `dataset`, in the models' order, then by seed."""
    order = {name: i for i, name in enumerate(MODELS)}
    rows = [f"**{dataset}** ({len(runs)} runs)\n", RUNS_HEADER]
    for r in sorted(runs, key=lambda r: (order.get(r["model"], len(order)), r["seed"])):
        long = f"{100 * r['test_long']['accuracy']:.1f}" if r["test_long"]["n"] else "-"
        unit = " sent." if r["model"] in SENTENCE_MODELS else ""
        rows.append(f"| {model_label(r)} | {r['seed']} | {device_cell(r)} "
                    f"| {100 * r['test']['accuracy']:.1f} | {long} | {100 * r['dev_macro_f1']:.1f} "
                    f"| {r['best_epoch']:.1f} / {r['epochs']:.1f} | {r['stopped']} "
                    f"| {_count(r['tokens_seen'])}{unit} | {r['wall_seconds'] / 3600:.2f} | {cpu_hours(r):.2f} "
                    f"| {r.get('resumes', 0)} |")
    return "\n".join(rows) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def report(output_dir: Path, tfidf_path: Path | None = None) -> str:
    """Markdown tables for every dataset with runs or a TF-IDF result, written to `<output_dir>/table.md`; the
    per-run table to `<output_dir>/runs.md` when any run has finished. Returns table.md's text."""
    tfidf = read_tfidf(tfidf_path)
    parts, per_run = [], []
    for dataset in DATASETS:
        runs = read_runs(output_dir, dataset)
        summary_path = output_dir / dataset / "data.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        part = dataset_table(dataset, runs, summary, tfidf.get(dataset),
                             repository_relative(str(tfidf_path)) if tfidf_path else "")
        if part:
            parts.append(part)
        if runs:
            per_run.append(runs_table(dataset, runs))
    table = "\n".join(parts)
    _write(output_dir / "table.md", table + "\n")
    if per_run:
        note = ("Every finished run: test accuracy in % (overall and on documents over 512 tokens), dev macro-F1 of "
                "the tested state, when the best dev state came and when training stopped (`patience` or the epoch "
                "cap `max_epochs`), tokens trained on (sentences for the sentence models), wall hours (training, "
                "dev evaluations and test, summed over a resumed run's processes) and CPU hours of the run's own "
                "process(es), the device it trained on, and how often it resumed from a checkpoint.\n")
        _write(output_dir / "runs.md", note + "\n" + "\n".join(per_run))
    return table
