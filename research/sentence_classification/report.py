# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Collects the finished runs of `run.sh` (outputs/sentence_classification/<dataset>/<head>-<mode>-seed<k>/) into
research/sentence_classification/results/<dataset>.jsonl (one line per run: scores, epochs, times) and prints the
mean ± std table over seeds:

    python -m research.sentence_classification.report [--outputs outputs/sentence_classification]
"""

import argparse
import json
from pathlib import Path

import numpy as np

from run_scripts.helpers.collapse import run_findings


HERE = Path(__file__).resolve().parent
NAMES = {"aose": "AoSE", "ran": "RAN over sentences"}
COLUMNS = (("test_accuracy", "test acc"), ("test_macro_f1", "test macro-F1"), ("test_over_512_accuracy", "acc > 512"),
           ("test_over_512_macro_f1", "macro-F1 > 512"), ("eval_macro_f1", "dev macro-F1"))


def run_record(folder: Path) -> dict | None:
    summary = folder / "all_results_summary.json"
    if not summary.is_file():
        return None
    results = json.loads(summary.read_text())
    head, rest = folder.name.split("-", 1)  # <head>-<mode>-seed<k>; a mode may hold dashes (frozen-nomerge)
    mode, seed = rest.rsplit("-", 1)
    state = json.loads((folder / "trainer_state.json").read_text()) if (folder / "trainer_state.json").is_file() else {}
    best = state.get("best_global_step")
    steps_per_epoch = (state.get("global_step", 0) / state["epoch"]) if state.get("epoch") else None
    return {"run": folder.name, "head": head, "encoder_mode": mode, "seed": int(seed.removeprefix("seed")),
            **{key: results.get("test", {}).get(key) for key in (
                "test_accuracy", "test_macro_f1", "test_le_512_accuracy", "test_le_512_macro_f1",
                "test_over_512_accuracy", "test_over_512_macro_f1", "test_samples", "test_over_512_samples",
                "baseline_accuracy", "baseline_macro_f1")},
            "eval_macro_f1": results.get("eval", {}).get("eval_macro_f1"),
            "eval_accuracy": results.get("eval", {}).get("eval_accuracy"),
            "epochs_trained": results.get("train", {}).get("epochs_trained"),
            "best_epoch": round(best / steps_per_epoch, 2) if best and steps_per_epoch else None,
            "collapsed": ended_collapsed(folder, state, results),
            "train_seconds": results.get("train", {}).get("train_runtime_all_processes"),
            "wall_seconds": results.get("wall_time_s")}


def ended_collapsed(folder: Path, state: dict, results: dict) -> bool:
    """Whether the run ended collapsed or keeps a one-class model, judged from its evaluations by the scripts' own
    detector (`run_scripts.helpers.collapse`), so that runs of every version of the detector are judged alike."""
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    _, findings, _ = run_findings(state.get("log_history", []), results.get("eval"), "eval_predicted_classes",
                                  len(config.get("id2label", {})) or None)
    return bool(findings)


def table(records: list[dict]) -> str:
    lines = ["| model | encoder | seeds | " + " | ".join(name for _, name in COLUMNS) +
             " | epochs (best / stop) | runs collapsed |",
             "| --- | --- | ---: |" + " ---: |" * (len(COLUMNS) + 2)]
    groups = {}
    for record in records:
        groups.setdefault((record["head"], record["encoder_mode"]), []).append(record)
    for (head, mode), runs in sorted(groups.items()):
        cells = []
        for key, _ in COLUMNS:
            values = np.array([r[key] for r in runs if r[key] is not None]) * 100
            cells.append(f"{values.mean():.1f} ± {values.std(ddof=1) if len(values) > 1 else 0:.1f}"
                         if len(values) else "")
        epochs = (f"{np.mean([r['best_epoch'] or 0 for r in runs]):.1f} / "
                  f"{np.mean([r['epochs_trained'] or 0 for r in runs]):.1f}")
        collapsed = sum(bool(r.get("collapsed")) for r in runs)
        lines.append(f"| {NAMES.get(head, head)} | {mode} MiniLM | {len(runs)} | " + " | ".join(cells) +
                     f" | {epochs} | {collapsed} |")
    baseline = records[0]
    if baseline["baseline_accuracy"] is not None:  # runs without a test split (dev choices) have no such row
        lines.append(f"| majority class | | | {100 * baseline['baseline_accuracy']:.1f} | "
                     f"{100 * baseline['baseline_macro_f1']:.1f} | | | | | |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", default="outputs/sentence_classification")
    args = parser.parse_args(argv)
    (HERE / "results").mkdir(exist_ok=True)
    for dataset in sorted(p for p in Path(args.outputs).iterdir() if p.is_dir()):
        records = [r for r in (run_record(f) for f in sorted(dataset.iterdir()) if f.is_dir()) if r]
        if not records:
            continue
        with open(HERE / "results" / f"{dataset.name}.jsonl", "w") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        print(f"## {dataset.name}\n\n{table(records)}\n")


if __name__ == "__main__":
    main()
