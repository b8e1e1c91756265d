# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The report of a `gpu_suite.py` run: `table.md` and PNG plots from its `results.json`.

    python benchmarks/gpu_report.py RESULTS_DIR docs/benchmark_gpu

RESULTS_DIR holds the `results.json` (and `pytest.txt`) that the device call wrote to $OUT. The output folder gets
`table.md`, `speed.png`, `generation.png`, `profile.png` and a copy of `results.json`. Standard library and
matplotlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil


LABELS = {"ran": "RAN", "modernbert": "ModernBERT (sdpa)", "longformer": "Longformer", "bigbird": "BigBird",
          "bert_chunks": "BERT, 512-token chunks", "gpt2": "GPT-2"}
MODEL_ORDER = ("ran", "modernbert", "longformer", "bigbird", "bert_chunks")
CATEGORY_ORDER = ("embedding", "projections", "cell chain", "window attention", "memory review", "layer glue",
                  "pooler", "loss", "optimizer", "other")
MODE_TITLES = {"forward": "Forward (inference mode)", "train": "Training step (forward, loss, backward, AdamW)"}
# the speed targets: RAN's training step at 32k against each peer's in the same call, tokens/s over tokens/s
SPEED_TARGETS = {"modernbert": 1.0}
CHAIN_SHARE_TARGET = 0.5  # the cell chain's share of the profiled training step's device timeline


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _gib(mb) -> str:
    return f"{mb / 1024:.1f}" if mb is not None else "?"


def _mark(r: dict) -> str:
    """A short reason for a cell without a number."""
    reason = r.get("error") or r.get("skipped") or ""
    if "out of memory" in reason:
        return "OOM"
    if reason.startswith("too slow"):
        return "too slow"
    if "time cap" in reason:
        return "time cap"
    return "failed"


def _steps(seconds: list) -> str:
    """The long training step's timings: the first step alone when the cap left time for no second."""
    if len(seconds) == 1:
        return f"{seconds[0]} s for the first step (no second step inside the cap)"
    return f"{seconds} s per step (first, second)"


def load(results_dir: str) -> dict:
    """`results.json` of a device call; a pytest record without progress counts (calls before they were recorded)
    gets them from the `pytest.txt` beside it."""
    with open(os.path.join(results_dir, "results.json")) as f:
        data = json.load(f)
    log = os.path.join(results_dir, "pytest.txt")
    for r in records(data, "pytest"):
        if "progress" not in r and os.path.exists(log):
            from benchmarks.gpu_suite import pytest_progress

            with open(log) as f:
                r["progress"] = pytest_progress(f.read())
    return data


def records(data: dict, kind: str) -> list[dict]:
    return [r for r in data["records"] if r.get("kind") == kind]


def environment_lines(data: dict) -> list[str]:
    meta = data["meta"]
    env = dict(meta.get("versions", {}), **next((r for r in records(data, "env") if "skipped" not in r), {}))
    size = meta["size"]
    lines = ["# RAN on a GPU: correctness, speed, memory, profile, generation", "",
             f"- Device: {env.get('device_name', meta['device'])}"
             + (f", {env['memory_gib']} GiB, compute capability {env['capability']}" if "memory_gib" in env else "")
             + (f", driver / max SM clock / power limit: {env['nvidia_smi']}" if env.get("nvidia_smi") else ""),
             f"- Software: PyTorch {env.get('torch', '?')}, CUDA {env.get('cuda')}, Transformers "
             f"{env.get('transformers', '?')}, Python {env.get('python', '?')}",
             f"- Measured matmul peak: {env.get('matmul_tflops_bf16', '?')} TFLOP/s bf16, "
             f"{env.get('matmul_tflops_fp32', '?')} TFLOP/s fp32 ({env.get('matmul_shape', '')})",
             f"- Model size (every model): vocab {size['vocab_size']}, D {size['hidden_size']}, "
             f"{size['num_hidden_layers']} layers, {size['num_attention_heads']} x {size['attention_head_size']} "
             f"heads, RAN window {size['window_size']}; dtype {meta['dtype']} "
             + ("(autocast, fp32 weights)" if meta["dtype"] == "bf16" else ""),
             f"- Command: `{meta['command']}` (scale `{meta['scale']}`), git {meta['git'].get('head', '?')[:10]}"
             + (" with uncommitted ran_hf changes" if meta["git"].get("dirty_ran_hf") else ""),
             f"- Started {meta['started']}, {meta.get('wall_s', '?')} s of a {meta['budget_s']:.0f} s budget", ""]
    parts = data.get("parts", {})
    if parts:
        lines += ["| part | status | seconds (cap) |", "| --- | --- | --- |"]
        lines += [f"| {name} | {p['status']} | {p.get('seconds', '')} ({p['cap_s']:.0f}) |"
                  for name, p in parts.items()]
        lines.append("")
    return lines


def correctness_lines(data: dict) -> list[str]:
    lines = ["## Correctness", ""]
    if not records(data, "pytest") and not records(data, "check"):
        lines.append("not run")
    for r in records(data, "pytest"):
        progress = r.get("progress") or {}
        ran = ""
        if r["summary"] == "no summary line" and progress.get("percent") is not None:
            counts = ", ".join(f"{progress[k]} {k}" for k in ("passed", "failed", "errors", "skipped")
                               if progress.get(k))
            ran = (f"; before the cap, the progress dots showed {counts or 'nothing'} ({progress['percent']}% of the "
                   "collected tests)")
        lines += [f"- Model tests on the device: {r['summary']} (`{r['command']}`, {r['seconds']} s, return code "
                  f"{r['returncode']}){ran}"]
    for r in records(data, "check"):
        status = "pass" if r.get("passed") else "FAIL"
        if "skipped" in r:
            where = f" at {r['seq_len']:,} tokens" if "seq_len" in r else ""
            lines.append(f"- {r['check']}{where}: {r['skipped']}")
        elif r["check"] == "bf16_vs_fp32":
            errors = ", ".join(f"{k} {v:.2e} (tolerance {r['tolerances'][k]:.0e})"
                               for k, v in r["relative_errors"].items())
            lines.append(f"- bf16 autocast against fp32, ||bf16 - fp32|| / ||fp32||, batch {r['batch_size']} x "
                         f"{r['seq_len']} tokens with a padded row: {errors}; worst single gradient "
                         f"`{r['worst_parameter']}` {r['worst_parameter_relative_error']:.2e}: **{status}**")
        elif r["check"] == "finite_forward":
            detail = r.get("error") or f"{r['seconds']} s, peak {_gib(r.get('peak_mb'))} GiB"
            lines.append(f"- Forward at {r['seq_len']:,} tokens ({r['dtype']}): finite outputs: **{status}** "
                         f"({detail})")
        elif r["check"] == "all_pad_row":
            lines.append(f"- A batch with an all-pad row, forward and backward ({r['dtype']}): outputs finite "
                         f"{r['outputs_finite']}, gradients finite {r['gradients_finite']}, pad row's largest "
                         f"output {r['pad_row_max_abs']:.2g}: **{status}**")
    return lines + [""]


def matmul_fraction(r: dict, peak_tflops) -> float | None:
    if not peak_tflops or "median_s" not in r:
        return None
    factor = 1 if r["mode"] == "forward" else 3
    return r["flops_per_token"] * factor * r["tokens_per_step"] / r["median_s"] / (peak_tflops * 1e12)


def speed_lines(data: dict) -> list[str]:
    rows = records(data, "speed")
    if not rows:
        return []
    peak = next(iter(records(data, "env")), {}).get("matmul_tflops_bf16" if data["meta"]["dtype"] == "bf16"
                                                       else "matmul_tflops_fp32")
    lengths = sorted({r["seq_len"] for r in rows})
    batches = {length: next((r["batch_size"] for r in rows if r["seq_len"] == length and "batch_size" in r), "?")
               for length in lengths}
    lines = ["## Speed and memory", "",
             f"{data['meta']['tokens_per_step']:,} tokens per step: batch = tokens / length (at least 1; the "
             f"longest length then has more tokens per step). Cells: tokens/s (peak memory GiB); OOM = out of "
             f"memory, too slow = the next length was projected past the per-call cap, time cap = the call's "
             f"budget ran out. Fraction = matmul FLOPs counted from the config (useful work only, a training "
             f"step as 3x the forward) over the measured peak.", ""]
    chains = sorted({r["chain_implementation"] for r in rows if "chain_implementation" in r})
    if chains:
        lines += [f"RAN's cell chain: `chain_implementation=\"{'/'.join(chains)}\"`.", ""]
    header = "| model | " + " | ".join(f"{_k(n)} (batch {batches[n]})" for n in lengths) + " |"
    for mode in ("forward", "train"):
        group = [r for r in rows if r["mode"] == mode]
        if not group:
            continue
        lines += [f"**{MODE_TITLES[mode]}**", "", header, "| --- |" + " --- |" * len(lengths)]
        fraction_rows = []
        for model in [m for m in MODEL_ORDER if any(r["model"] == m for r in group)]:
            cells, fractions = [], []
            for length in lengths:
                r = next((r for r in group if r["model"] == model and r["seq_len"] == length), None)
                if r is None:
                    cells.append("")
                elif "median_s" in r:
                    cells.append(f"{r['tokens_per_s']:,.0f} ({_gib(r.get('peak_mb'))})")
                else:
                    cells.append(_mark(r))
                fraction = matmul_fraction(r, peak) if r else None
                fractions.append(f"{fraction:.1%}" if fraction is not None else "")
            lines.append(f"| {LABELS[model]} | " + " | ".join(cells) + " |")
            fraction_rows.append(f"| {LABELS[model]} | " + " | ".join(fractions) + " |")
        lines += ["", f"Fraction of the measured {data['meta']['dtype']} matmul peak, {mode}:", "", header,
                  "| --- |" + " --- |" * len(lengths), *fraction_rows, ""]
    return lines


def _optimise_train(data, length) -> dict:
    """The optimise part's measured RAN training steps at `length`, by chain variant."""
    return {r["variant"]: r for r in records(data, "optimise") if r.get("mode", "train") == "train"
            and r["seq_len"] == length and "tokens_per_s" in r}


def _speed(data, model, mode, length):
    return next((r for r in records(data, "speed") if r["model"] == model and r["mode"] == mode
                 and r["seq_len"] == length and "tokens_per_s" in r), None)


def target_lines(data: dict) -> list[str]:
    """The targets, each met / missed / not measured, from the numbers above (one call, so like with like)."""
    lines = ["## Targets", "", "| target | measured | verdict |", "| --- | --- | --- |"]
    lengths = sorted({r["seq_len"] for r in records(data, "speed")})
    at = 32768 if 32768 in lengths or not lengths else lengths[-1]
    rans = [("", _speed(data, "ran", "train", at))] if _speed(data, "ran", "train", at) else []
    rans += [(f" (RAN's chain {variant})", r) for variant, r in _optimise_train(data, at).items()]
    for other, factor in SPEED_TARGETS.items():
        peer = _speed(data, other, "train", at)
        for which, ran in rans if peer else []:
            ratio = ran["tokens_per_s"] / peer["tokens_per_s"]
            lines.append(f"| training step at {_k(at)}: >= {factor}x {LABELS[other]}'s tokens/s{which} | "
                         f"{ratio:.2f}x | {'met' if ratio >= factor else 'missed'} |")
        if peer and rans:
            continue
        lines.append(f"| training step at {_k(at)}: >= {factor}x {LABELS[other]}'s tokens/s | not measured | - |")
    profile = next((r for r in records(data, "profile") if r["seq_len"] == at and "categories" in r), None)
    if profile:
        chain = profile["categories"]["cell chain"]
        lines.append(f"| cell chain <= {CHAIN_SHARE_TARGET:.0%} of the training step at {_k(at)} (chain "
                     f"{profile.get('chain_implementation', 'eager')}) | {chain['share_of_timeline']:.1%} of the "
                     f"timeline, {chain['share_of_busy']:.1%} of kernel time | "
                     f"{'met' if chain['share_of_timeline'] <= CHAIN_SHARE_TARGET else 'missed'} |")
    else:
        lines.append(f"| cell chain <= {CHAIN_SHARE_TARGET:.0%} of the training step | not measured | - |")
    long = next(iter(records(data, "long_train")), None)
    if long and "peak_mb" in long and "error" not in long:
        fits = long["peak_mb"] / 1024 <= 80
        lines.append(f"| {_k(long['seq_len'])} tokens train on one 80 GB GPU (checkpointing) | peak "
                     f"{_gib(long['peak_mb'])} GiB, {long['step_s'][-1]} s per step | {'met' if fits else 'missed'} |")
    else:
        lines.append(f"| a long sequence trains on one 80 GB GPU | "
                     f"{(long or {}).get('error') or (long or {}).get('skipped') or 'not measured'} | - |")
    gen = {r["context"]: r for r in records(data, "generation") if r["model"] == "ran" and "decode_ms_median" in r}
    if len(gen) > 1:
        short, long_context = min(gen), max(gen)
        ratio = gen[long_context]["decode_ms_median"] / gen[short]["decode_ms_median"]
        lines.append(f"| decoding at {_k(long_context)} <= 1.2x the ms/token at {_k(short)} | {ratio:.2f}x | "
                     f"{'met' if ratio <= 1.2 else 'missed'} |")
    else:
        lines.append("| decoding at 128k <= 1.2x the ms/token at 1k | not measured | - |")
    return lines + [""]


def profile_lines(data: dict) -> list[str]:
    rows = sorted((r for r in records(data, "profile") if "categories" in r), key=lambda r: r["seq_len"])
    if not records(data, "profile"):
        return []
    if not rows:
        return [f"## Where RAN's training step goes", "", "not measured: " + "; ".join(
            r.get("error") or r.get("skipped", "") for r in records(data, "profile")), ""]
    lines = ["## Where RAN's training step goes", "",
             "torch.profiler over one training step. Ranges come from forward hooks on the model's submodules and a "
             "wrapper of the chain's entry point (no change to the model code); backward kernels are charged to the forward "
             "op that created their autograd node. 'kernel' = share of summed device-kernel time; 'timeline' = "
             "share of the step's device timeline, the idle gap before each kernel charged to that kernel's range. "
             "The profiler's per-op overhead slows host-bound parts (compare the profiled and unprofiled step)."
             + (" On a CPU both shares are of the host ops' self time." if data["meta"]["device"] == "cpu" else ""),
             "", "| part | " + " | ".join(f"{_k(r['seq_len'])} kernel | {_k(r['seq_len'])} timeline | "
                                          f"{_k(r['seq_len'])} fwd / bwd / opt ms" for r in rows) + " |",
             "| --- |" + " --- | --- | --- |" * len(rows)]
    for c in CATEGORY_ORDER:
        cells = []
        for r in rows:
            v = r["categories"].get(c, {})
            cells += [f"{v.get('share_of_busy', 0):.1%}", f"{v.get('share_of_timeline', 0):.1%}",
                      f"{v.get('forward_ms', 0):.1f} / {v.get('backward_ms', 0):.1f} / {v.get('optimizer_ms', 0):.1f}"]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines.append("")
    for r in rows:
        chain = r.get("chain_forward", {})
        lines.append(f"- {_k(r['seq_len'])} x batch {r['batch_size']}, chain "
                     f"{r.get('chain_implementation', 'eager')}: step {r['step_s']} s unprofiled, "
                     f"{r['profiled_step_s']} s profiled; kernels busy {r['busy_ms']:.0f} ms of a "
                     f"{r['timeline_ms']:.0f} ms device timeline ({r['units']}). Without the profiler, the chain "
                     f"took {chain.get('chain_share', float('nan')):.1%} of a training-mode forward "
                     f"({chain.get('chain_s')} of {chain.get('forward_s')} s, device events around the chain's entry point)")
    return lines + [""]


def generation_lines(data: dict) -> list[str]:
    """Contexts in the order they ran; a context measured again (after the longer ones) gets its own column."""
    rows = records(data, "generation")
    if not rows:
        return []
    by_model = {model: [r for r in rows if r["model"] == model] for model in ("ran", "gpt2")}
    columns = max(([r["context"] for r in group] for group in by_model.values()), key=len)
    titles = [_k(c) + (" (again)" if c in columns[:i] else "") for i, c in enumerate(columns)]
    lines = ["## Generation", "",
             f"Prompt prefilled through the cache, then single-token decode steps (synchronised; median). Cells: "
             f"ms per token (cache MiB after the prompt); {rows[0]['dtype']} weights.", "",
             "| model | " + " | ".join(titles) + " |", "| --- |" + " --- |" * len(columns)]
    for model, group in by_model.items():
        cells = [_generation_cell(group[i]) if i < len(group) else "" for i in range(len(columns))]
        lines.append(f"| {LABELS[model]} | " + " | ".join(cells) + " |")
    return lines + [""]


def _generation_cell(r: dict) -> str:
    if "decode_ms_median" not in r:
        return _mark(r)
    return f"{r['decode_ms_median']:.2f} ({r['cache_bytes'] / 2**20:.1f})"


def long_and_optimise_lines(data: dict) -> list[str]:
    lines = []
    for r in records(data, "long_train"):
        lines += ["## Long sequence", ""]
        if "error" in r or "skipped" in r:
            lines.append(f"- RAN training step at {r['seq_len']:,} tokens with gradient checkpointing: "
                         f"{r.get('error') or r.get('skipped')} (peak {_gib(r.get('peak_mb'))} GiB)")
        else:
            lines.append(f"- RAN training step at {r['seq_len']:,} tokens, batch 1, gradient checkpointing: "
                         f"{_steps(r['step_s'])}, {r['tokens_per_s']:,.0f} tokens/s, peak "
                         f"{_gib(r['peak_mb'])} GiB, loss finite {r['loss_finite']}")
        lines.append("")
    lines += optimise_lines(data)
    return lines


def optimise_lines(data: dict) -> list[str]:
    """The optimise part: RAN's cell chain by `chain_implementation`, same weights, same process."""
    rows, checks = records(data, "optimise"), records(data, "optimise_check")
    if not rows and not checks:
        return []
    lines = ["## The cell chain by `chain_implementation`", "",
             "RAN models with the same weights in one process, one per `chain_implementation`. Forward in "
             "inference mode; training step = forward, loss, backward, fused AdamW. 'first call' holds the compile "
             "of that grad mode's graphs for a compiled chain, and the capture of that call's shapes for "
             "`cuda_graphs` (the training graphs compile in the check below); 'chain share' = the cell chain's "
             "share of a training-mode forward, from device events around the chain's entry point (a captured "
             "chain's replay included).", ""]
    for r in checks:
        variant = r.get("variant", "compiled")  # results written before more than two chains were compared
        head = f"- `{variant}` against eager, one training-mode forward and backward at {_k(r['seq_len'])}"
        if "error" in r or "skipped" in r:
            lines.append(f"{head}: {r.get('error') or r.get('skipped')}")
            continue
        lines.append(f"{head} x batch {r['batch_size']} ({r['dtype']}): ||{variant} - eager|| / ||eager|| outputs "
                     f"{r['relative_error_outputs']:.2e}, all gradients {r['relative_error_gradients']:.2e}; "
                     f"seconds of that call: eager {r['call_s']['eager']}, {variant} {r['call_s'][variant]} "
                     f"(compiling{', capturing' if variant == 'cuda_graphs' else ''}); windows per compiled call: "
                     f"{r.get('windows_per_compiled_call', 1)}, compile mode: {r.get('compile_mode') or 'default'}"
                     + (f", windows per capture: a multiple of {r['windows_per_capture']}"
                        if variant == "cuda_graphs" and "windows_per_capture" in r else ""))
    if rows:
        lines += ["", "| mode | length x batch | chain | s | over eager | chain share | first call s | new graphs |",
                  "| --- |" + " --- |" * 7]
        keys = sorted({(r.get("mode", "train"), r["seq_len"]) for r in rows}, key=lambda k: (k[0] != "forward", k[1]))
        for mode, length in keys:
            pick = {r["variant"]: r for r in rows if (r.get("mode", "train"), r["seq_len"]) == (mode, length)}
            batch = next((r["batch_size"] for r in pick.values() if "batch_size" in r), "?")  # a skipped row has none
            eager = pick.get("eager", {})
            for variant, r in sorted(pick.items(), key=lambda item: item[0] != "eager"):
                chain = r.get("chain_forward")
                speedup = (f"{eager['median_s'] / r['median_s']:.2f}x"
                           if variant != "eager" and "median_s" in eager and "median_s" in r else "")
                share = f"{chain['chain_share']:.1%}" if chain else ""
                lines.append(f"| {mode} | {_k(length)} x {batch} | {variant} | {r.get('median_s', _mark(r))} | "
                             f"{speedup} | {share} | {r.get('first_call_s', '')} | {r.get('new_graphs', '')}"
                             + (f" (captures held: {r['captures']})" if "captures" in r else "") + " |")
    return lines + [""]


def peers_lines(data: dict) -> list[str]:
    """RAN's training step (speed part, or both chains of the optimise part) against the other encoders' at the
    lengths the optimise part measured."""
    lines = []
    for length in sorted({r["seq_len"] for r in records(data, "optimise")}):
        peers = {m: _speed(data, m, "train", length) for m in MODEL_ORDER if m != "ran"}
        peers = {m: r for m, r in peers.items() if r}
        ran = _optimise_train(data, length)
        if not peers or not ran:
            continue
        lines += [f"## Training step at {_k(length)}: RAN against the others", "",
                  "| model | s/step | tokens/s | peak GiB | RAN's tokens/s over this |", "| --- | --- | --- | --- | --- |"]
        for variant, r in ran.items():
            lines.append(f"| RAN, chain {variant} | {r['median_s']} | {r['tokens_per_s']:,.0f} | "
                         f"{_gib(r.get('peak_mb'))} | |")
        for model, r in peers.items():
            ratios = ", ".join(f"{variant} {ran[variant]['tokens_per_s'] / r['tokens_per_s']:.2f}x" for variant in ran)
            lines.append(f"| {LABELS[model]} (batch {r['batch_size']}) | {r['median_s']} | {r['tokens_per_s']:,.0f} | "
                         f"{_gib(r.get('peak_mb'))} | {ratios} |")
        lines.append("")
    return lines


def markdown(data: dict) -> str:
    parts = [environment_lines(data), correctness_lines(data), target_lines(data), speed_lines(data),
             peers_lines(data), profile_lines(data), generation_lines(data), long_and_optimise_lines(data)]
    errors = data.get("worker_errors")
    if errors:
        parts.append(["## Worker errors", ""] + [f"- {e['part']} {e.get('model') or ''}: {e['ended']}"
                                                  for e in errors] + [""])
    return "\n".join(line for part in parts for line in part)


def plots(data: dict, out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    speed = [r for r in records(data, "speed") if "tokens_per_s" in r]
    if speed:
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for model in MODEL_ORDER:
            for mode, style in (("forward", "--"), ("train", "-")):
                series = sorted((r for r in speed if r["model"] == model and r["mode"] == mode),
                                key=lambda r: r["seq_len"])
                if not series:
                    continue
                x = [r["seq_len"] for r in series]
                label = f"{LABELS[model]}, {mode}"
                axes[0 if mode == "forward" else 1].plot(x, [r["tokens_per_s"] for r in series], style, marker="o",
                                                         label=LABELS[model])
                if mode == "train":
                    axes[2].plot(x, [r["peak_mb"] / 1024 for r in series], style, marker="o", label=label)
        for ax, title, ylabel in zip(axes, ("forward", "training step", "training step peak memory"),
                                     ("tokens/s", "tokens/s", "GiB")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(title)
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        for ax in axes[:2]:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        fig.suptitle(f"{data['meta']['dtype']}, {data['meta']['tokens_per_step']:,} tokens per step")
        fig.tight_layout()
        written.append(_save(fig, plt, out_dir, "speed.png"))
    generation = [r for r in records(data, "generation") if "decode_ms_median" in r]
    if generation:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
        for model in ("ran", "gpt2"):
            series = sorted((r for r in generation if r["model"] == model), key=lambda r: r["context"])
            if series:
                x = [r["context"] for r in series]
                axes[0].plot(x, [r["decode_ms_median"] for r in series], marker="o", label=LABELS[model])
                axes[1].plot(x, [r["cache_bytes"] / 2**20 for r in series], marker="o", label=LABELS[model])
        for ax, ylabel in zip(axes, ("ms per generated token", "cache after the prompt (MiB)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("context (tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, plt, out_dir, "generation.png"))
    profile = sorted((r for r in records(data, "profile") if "categories" in r), key=lambda r: r["seq_len"])
    if profile:
        fig, ax = plt.subplots(figsize=(8, 0.9 + 0.8 * len(profile) * 2))
        labels, y = [], 0
        for r in profile:
            for measure in ("share_of_timeline", "share_of_busy"):
                left = 0.0
                for i, c in enumerate(CATEGORY_ORDER):
                    share = r["categories"].get(c, {}).get(measure) or 0.0
                    ax.barh(y, share, left=left, color=plt.cm.tab10(i), label=c if y == 0 else None)
                    left += share
                labels.append(f"{_k(r['seq_len'])}, {'timeline' if measure == 'share_of_timeline' else 'kernels'}")
                y += 1
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of RAN's training step")
        ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.25))
        fig.tight_layout()
        written.append(_save(fig, plt, out_dir, "profile.png"))
    return written


def _save(fig, plt, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", help="the folder holding the device call's results.json")
    parser.add_argument("out_dir", nargs="?", default="docs/benchmark_gpu")
    args = parser.parse_args(argv)
    data = load(args.results_dir)
    os.makedirs(args.out_dir, exist_ok=True)
    text = markdown(data)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(text + "\n")
    for name in ("results.json", "pytest.txt"):
        source = os.path.join(args.results_dir, name)
        if os.path.exists(source) and os.path.realpath(source) != os.path.realpath(os.path.join(args.out_dir, name)):
            shutil.copyfile(source, os.path.join(args.out_dir, name))
    written = plots(data, args.out_dir)
    print(text)
    print(f"wrote {os.path.join(args.out_dir, 'table.md')} and {', '.join(written) or 'no plots'}")
    return text


if __name__ == "__main__":
    main()
