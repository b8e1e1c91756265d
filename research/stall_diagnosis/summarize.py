"""Plots and tables from the probe runs (`results/runs*.jsonl` of this folder, written by probe.py).

    python -m research.stall_diagnosis.summarize

Writes, in `research/stall_diagnosis/results/`: `summary.json` (dev accuracy per configuration over seeds, without
the traces), `variants.png` (gradient norms and activation statistics over the first steps, seed 0, four variants),
`slow_warmup.png` (the authors' model under the converged comparison's warm-up slope) and `first_steps.png`; prints
the markdown table of the study's README.
"""

import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .probe import DEFAULT_TRAIN_SIZE, RESULTS  # noqa: E402


def read_runs() -> list[dict]:
    runs = []
    for path in sorted(RESULTS.glob("runs*.jsonl")):
        runs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return runs


def train_size(run: dict) -> int:
    """The run's number of training documents (a record without the field used probe.py's default)."""
    return run.get("train_size", DEFAULT_TRAIN_SIZE)


def config_name(run: dict) -> str:
    review = "review" if run["review"] else "no review"
    recipe = f"lr {run['lr']:g}, warm-up {run['warmup']:g}, {run['schedule']}"
    fix = run["fix"] if run["fix"] != "init_scale" else f"init std {run['init_std']:g}"
    steps = f"{run['steps']} steps" + (f" of {train_size(run):,} docs" if train_size(run) != DEFAULT_TRAIN_SIZE else "")
    return f"{run['pooling']} | {review} | {fix} | {recipe} | {steps}"


def table(runs: list[dict]) -> tuple[str, dict]:
    groups = defaultdict(list)
    for run in runs:
        groups[config_name(run)].append(run)
    lines = ["| pooling | memory review | fix | recipe | steps | seeds | dev acc per seed | mean | trained (> 60%) |",
             "| --- | --- | --- | --- | ---: | ---: | --- | ---: | ---: |"]
    summary = {}
    for name, members in sorted(groups.items()):
        members.sort(key=lambda r: r["seed"])
        accs = [r["dev_accuracy"] for r in members]
        trained = sum(a > 0.6 for a in accs)
        lines.append("| " + " | ".join(name.split(" | ")) + f" | {len(accs)} | "
                     + ", ".join(f"s{r['seed']}: {100 * r['dev_accuracy']:.1f}" for r in members)
                     + f" | {100 * np.mean(accs):.1f} | {trained}/{len(accs)} |")
        summary[name] = {"seeds": [r["seed"] for r in members], "dev_accuracy": accs,
                         "curves": {r["seed"]: r["curve"] for r in members}}
    return "\n".join(lines), summary


def series(run: dict, path: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for point in run["trace"]:
        value = point
        for part in path.split("/"):
            value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            steps.append(point["step"])
            values.append(value)
    return steps, values


def plot_variants(runs: list[dict]):
    chosen = {}
    for run in runs:
        if run["seed"] == 0 and run["fix"] in ("none", "residual") and run["warmup"] == 0 and run["schedule"] == "constant":
            chosen.setdefault((run["pooling"], run["review"], run["fix"]), run)
    panels = [
        ("grad/layer1.memory_review", "grad norm: layer 1 memory review"),
        ("grad/layer0.window_attention", "grad norm: layer 0 window attention"),
        ("grad/embeddings", "grad norm: embeddings"),
        ("grad/pooler.pooling_dense", "grad norm: pooler pooling_dense"),
        ("act/layer1.out/within_cos", "last layer: cosine of a doc's tokens"),
        ("act/pool.pooled/across_cos", "pooled vector: cosine across docs"),
        ("act/pool.pool_part_doc_std", "pooler token part: std across docs"),
        ("act/logits.doc_std", "logits: std across docs"),
        ("loss", "train loss (mean since last point)"),
    ]
    fig, axes = plt.subplots(3, 3, figsize=(15, 11))
    for ax, (path, title) in zip(axes.flat, panels):
        for (pooling, review, fix), run in sorted(chosen.items()):
            steps, values = series(run, path)
            label = f"{pooling}, {'review' if review else 'no review'}{' + residual' if fix == 'residual' else ''}"
            ax.plot(steps, values, marker="o", ms=3, label=f"{label} ({100 * run['dev_accuracy']:.0f}%)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if path.startswith("grad"):
            ax.set_yscale("log")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("IMDB 512-token probe, width 128, 2 layers, seed 0, AdamW lr 1e-3 constant, batch 8")
    fig.tight_layout()
    fig.savefig(RESULTS / "variants.png", dpi=80)


def plot_slow_warmup(runs: list[dict]):
    """The authors' model under the converged comparison's warm-up (1e-3 reached after 2,813 steps, so the first N
    steps of it are a linear ramp to 1e-3 * N / 2813), against the constant 1e-3 of part 1, seeds 0 and 1."""
    chosen = [run for run in runs if run["pooling"] == "max" and run["review"] and run["fix"] == "none"
              and run["seed"] in (0, 1) and (run["warmup"] == 1.0 or (run["warmup"] == 0 and run["steps"] == 200))]
    if not any(run["warmup"] == 1.0 for run in chosen):
        return
    panels = [("act/layer1.out/within_cos", "last layer: cosine of a doc's tokens"),
              ("grad/embeddings", "grad norm: embeddings"),
              ("act/layer0.read/rms", "layer 0 review: cell-read part (same for all tokens), rms"),
              ("act/last_review.gated_token_varying_rms", "last review: token-varying part of GLU(q), rms"),
              ("loss", "train loss (mean since last point)"),
              ("dev", "dev accuracy (300 docs)")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (path, title) in zip(axes.flat, panels):
        for run in sorted(chosen, key=lambda r: (r["warmup"], r["steps"], train_size(r), r["seed"])):
            label = (f"ramp to {run['lr']:.2g} over {run['steps']} steps, {train_size(run) // 1000}k docs, "
                     f"s{run['seed']}" if run["warmup"] == 1.0 else f"constant {run['lr']:g}, s{run['seed']}")
            if path == "dev":
                steps, values = [c["step"] for c in run["curve"]], [c["dev_accuracy"] for c in run["curve"]]
            else:
                steps, values = series(run, path)
            ax.plot(steps, values, marker="o", ms=2, label=label, linestyle="--" if run["warmup"] == 0 else "-")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        if path.startswith("grad") or path.endswith("token_varying_rms"):
            ax.set_yscale("log")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Authors' RAN (max pooling, memory review): the converged comparison's warm-up slope "
                 "(1e-3 / 2,813 per step) against constant lr 1e-3", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / "slow_warmup.png", dpi=80)


def plot_first_steps():
    path = RESULTS / "first_steps.json"
    if not path.is_file():
        return
    runs = json.loads(path.read_text())
    panels = [("layer1.out_within", "last layer output: cosine of a doc's tokens"),
              ("layer0.out_within", "layer 0 output: cosine of a doc's tokens"),
              ("layer0.read_rms", "layer 0 review: cell-read part (same for all tokens), rms"),
              ("layer0.gated_rms", "layer 0 review: GLU(q) token part, rms"),
              ("pool_part_doc_std", "pooler token part: std across docs")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (key, title) in zip(axes, panels):
        for name, rows in runs.items():
            ax.plot([r["step"] for r in rows], [r.get(key) for r in rows], marker=".", label=name.split("|")[0] + " pooling")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    fig.suptitle("First 30 AdamW steps (lr 1e-3, no warm-up), authors' RAN with memory review, seed 0", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / "first_steps.png", dpi=80)


def main():
    runs = read_runs()
    text, summary = table(runs)
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot_variants(runs)
    plot_slow_warmup(runs)
    plot_first_steps()
    print(text)


if __name__ == "__main__":
    main()
