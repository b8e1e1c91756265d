# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Speed and memory of RAN against the authors' `rannet` and the long-document models of Transformers.

Encoder cases: every model is built from a config (no download) with the width, depth, heads and vocabulary of the
RAN under test (default base-like: vocab 30522, D 768, 2 layers, 12 heads x 64, RAN window 256, dropout 0) and the
defaults of its own family otherwise:

  ran          ran_hf `RANModel` (fast path; on CPU the token-parallel stages run in chunks of ~2k tokens)
  ran_loop     the same weights run by the plain window-by-window loop of `ran_hf.reference` (forward only): what the
               fast path buys
  rannet       the authors' `rannet==0.3.1` (TF / Keras), run by `--rannet-python` through `bench_encoder.py`
  bert         `BertModel`, SDPA attention, absolute positions sized to the longest length
  longformer   `LongformerModel`, attention window 512 (its default), no global tokens
  bigbird      `BigBirdModel`, block-sparse attention (blocks of 64, 3 random blocks)
  modernbert   `ModernBertModel`, SDPA; local attention 128 with a global layer every 3rd layer (its defaults)

Modes: `forward` (inference mode), `train` (forward + backward of mean(last_hidden_state ** 2), no optimizer step),
`train_gc` (the same with gradient checkpointing, at `--gc-lengths` only). Dtypes: `fp32`, `bf16` (autocast).
Each (model, mode, dtype, batch, length) runs in its own subprocess: peak memory is that process's peak RSS on CPU
(model included) or `torch.cuda.max_memory_allocated` on CUDA. Time is the median of `--repeats` calls after
`--warmup` (fewer repeats when one call passes `--max-case-seconds / repeats`; the number is recorded). A series
stops growing once the next length is projected (from the last two points) to take more than `--max-call-seconds`
per call, or after an out-of-memory; the table says why a cell is empty.

Generation cases (`--contexts`): `RANForCausalLM` against a GPT-2-style model of the same width and depth: prompt
prefilled through the cache in chunks of 4096, then `--decode-tokens` single-token steps; per-token latency
(median) and cache bytes (see `bench_generation.py`).

Before the cases, the matrix-multiply throughput of this machine is measured (fp32 and bf16, the shapes of the
model's projections), so each RAN / rannet row can say which fraction of it it reaches (matmul FLOPs per token from
the config, `bench_encoder.flops_per_token`; forward + backward counted as 3x).

Writes `results.json`, `table.md` and PNG plots (time and memory against length, log-log, one line per model) to
`--out-dir`:

    python run_scripts/benchmark.py --out-dir docs/benchmark                # the full CPU run of the README
    python run_scripts/benchmark.py --models ran bert --lengths 1024 4096 --modes forward --contexts 1024 \\
        --out-dir /tmp/bench                                                 # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_encoder  # noqa: E402  (standard library only at import time; its subprocess harness is reused)
from bench_encoder import REPO_ROOT, emit, peak_rss_mb, run_case_subprocess, wait_for_quiet  # noqa: E402

MODELS = ("ran", "ran_loop", "rannet", "bert", "longformer", "bigbird", "modernbert")
MODES = ("forward", "train", "train_gc")
DTYPES = ("fp32", "bf16")
DEFAULT_LENGTHS = (1024, 4096, 8192, 16384, 32768, 65536)
LABELS = {"ran": "RAN (ran_hf)", "ran_loop": "RAN, window loop", "rannet": "rannet 0.3.1 (TF)", "bert": "BERT",
          "longformer": "Longformer", "bigbird": "BigBird", "modernbert": "ModernBERT", "gpt2": "GPT-2"}


# ----------------------------------------------------------------------------------------------------------------------
# models (built inside the case subprocess)
# ----------------------------------------------------------------------------------------------------------------------


def build_model(name: str, size: dict, max_length: int):
    """The encoder `name` at the width/depth/heads/vocab of `size`, dropout 0, positions for `max_length` tokens."""
    import transformers

    common = dict(vocab_size=size["vocab_size"], hidden_size=size["hidden_size"],
                  num_hidden_layers=size["num_hidden_layers"], num_attention_heads=size["num_attention_heads"])
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if name in ("ran", "ran_loop"):
        from ran_hf import RANConfig, RANModel

        return RANModel(RANConfig(**common, attention_head_size=size["attention_head_size"],
                                  window_size=size["window_size"], min_window_size=size["min_window_size"],
                                  **no_dropout))
    if name == "bert":
        config = transformers.BertConfig(**common, max_position_embeddings=max_length, attn_implementation="sdpa",
                                         **no_dropout)
        return transformers.BertModel(config, add_pooling_layer=False)
    if name == "longformer":
        window = 512
        return transformers.LongformerModel(transformers.LongformerConfig(
            **common, max_position_embeddings=max_length + window + 2, attention_window=window, **no_dropout),
            add_pooling_layer=False)
    if name == "bigbird":
        return transformers.BigBirdModel(transformers.BigBirdConfig(
            **common, max_position_embeddings=max_length, attention_type="block_sparse", block_size=64,
            num_random_blocks=3, **no_dropout), add_pooling_layer=False)
    if name == "modernbert":
        config = transformers.ModernBertConfig(
            **common, max_position_embeddings=max_length, pad_token_id=0, bos_token_id=2, eos_token_id=3,
            cls_token_id=2, sep_token_id=3, attention_dropout=0.0, embedding_dropout=0.0, mlp_dropout=0.0,
            attn_implementation="sdpa")
        return transformers.ModernBertModel(config)
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def window_loop_forward(model, ids):
    """The plain window-by-window loop (`ran_hf.reference`), one document at a time."""
    from ran_hf import reference

    return [reference.encode(model, row)["last_hidden_state"] for row in ids]


# ----------------------------------------------------------------------------------------------------------------------
# one case (subprocess)
# ----------------------------------------------------------------------------------------------------------------------


def run_encoder_case(case: dict) -> dict:
    import numpy as np
    import torch

    device = torch.device(case["device"])
    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    model = build_model(case["model"], case["size"], case["seq_len"]).to(device)
    ids = torch.from_numpy(np.random.RandomState(0).randint(5, case["size"]["vocab_size"],
                                                            (case["batch_size"], case["seq_len"]))).to(device)
    mode, bf16 = case["mode"], case["dtype"] == "bf16"
    result = dict(params=sum(p.numel() for p in model.parameters()), rss_after_build_mb=peak_rss_mb(),
                  torch=torch.__version__, threads=torch.get_num_threads())
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    if mode == "forward":
        model.eval()

        def call():
            with torch.inference_mode(), autocast:
                if case["model"] == "ran_loop":
                    return window_loop_forward(model, ids)[0]
                return model(input_ids=ids).last_hidden_state
    else:
        model.train()
        if mode == "train_gc":
            model.gradient_checkpointing_enable()

        def call():
            model.zero_grad(set_to_none=True)
            with autocast:
                hidden = model(input_ids=ids).last_hidden_state
            loss = hidden.float().square().mean()
            loss.backward()
            return hidden.detach()

    def timed_call():
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, out

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    warmup_times = [timed_call()[0] for _ in range(case["warmup"])]
    per_call = max(warmup_times) if warmup_times else 0.0
    repeats = case["repeats"]
    if per_call > 0 and per_call * repeats > case["max_case_seconds"]:
        repeats = max(1, int(case["max_case_seconds"] // per_call))
    start = bench_encoder.cpu_snapshot()
    times, out = [], None
    for _ in range(repeats):
        seconds, out = timed_call()
        times.append(seconds)
    result.update(times_s=[round(t, 4) for t in times], median_s=round(statistics.median(times), 4),
                  repeats_done=repeats, warmup_s=[round(t, 3) for t in warmup_times],
                  other_procs_cpu_cores=bench_encoder.other_cpu_cores(start, bench_encoder.cpu_snapshot()),
                  output_finite=bool(torch.isfinite(out.float()).all()))
    result["tokens_per_s"] = round(case["batch_size"] * case["seq_len"] / result["median_s"], 1)
    result["peak_rss_mb"] = peak_rss_mb()
    if device.type == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return result


def run_generation_case(case: dict) -> dict:
    import torch
    import bench_generation

    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    size = case["size"]
    args = argparse.Namespace(hidden=size["hidden_size"], layers=size["num_hidden_layers"],
                              heads=size["num_attention_heads"], window=size["window_size"])
    if case["model"] == "ran":
        model = bench_generation.ran_model(args)
    else:
        model = bench_generation.gpt2_model(args, case["context"] + case["decode_tokens"] + 1)
    model = model.to(case["device"])
    result = bench_generation.measure(model, case["context"], case["decode_tokens"], chunk=4096)
    result.update(params=sum(p.numel() for p in model.parameters()), peak_rss_mb=peak_rss_mb())
    return result


def run_matmul_case(case: dict) -> dict:
    """Best GFLOP/s of the model's projection shapes (T x D tokens, D -> k linear) on this device, fp32 and bf16."""
    import torch

    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    device = torch.device(case["device"])
    d = case["size"]["hidden_size"]
    tokens = 2048 if device.type == "cpu" else 16384
    result = {}
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        best = 0.0
        for width in (d, 2 * d, 3 * d):
            x = torch.randn(tokens, d, device=device, dtype=dtype)
            weight = torch.randn(width, d, device=device, dtype=dtype)  # nn.Linear layout, as the models use it
            flops = 2.0 * tokens * d * width
            torch.nn.functional.linear(x, weight)
            calls = 3
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                torch.nn.functional.linear(x, weight)
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = max(best, flops * calls / (time.perf_counter() - start) / 1e9)
        result[f"matmul_gflops_{dtype_name}"] = round(best, 1)
    return result


# ----------------------------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------------------------


def subprocess_case(case: dict, args) -> dict:
    """Run one case in a fresh process (ours: this Python; rannet: the rannet Python via bench_encoder.py)."""
    if case["kind"] == "encoder" and case["model"] == "rannet":
        rannet_mode = {"forward": "rannet_fwd", "train": "rannet_train"}[case["mode"]]
        cmd = [args.rannet_python, os.path.join(HERE, "bench_encoder.py"), "--case", rannet_mode, "--seq-len",
               str(case["seq_len"]), "--warmup", str(case["warmup"]), "--repeats", str(case["repeats"])]
        env = dict(os.environ, TF_KERAS="1", TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--case", json.dumps(case)]
        env = dict(os.environ)
    res = run_case_subprocess(cmd, env, args.timeout, args.rss_limit_gb, (case.get("model"), case.get("seq_len")))
    if case["kind"] == "encoder" and case["model"] == "rannet" and "error" not in res:
        res["repeats_done"] = len(res.get("times_s", []))
        res["output_finite"] = True
    res.pop("case", None)
    return {**case, **res}


def projected_call_seconds(done: list[dict], length: int) -> float | None:
    """Seconds per call at `length`, extrapolated from the last two measured points of a series (power law)."""
    points = [(r["seq_len"], r["median_s"]) for r in done if "median_s" in r]
    if not points:
        return None
    if len(points) == 1:
        (l1, t1), exponent = points[-1], 2.0
    else:
        (l0, t0), (l1, t1) = points[-2:]
        exponent = min(max(math.log(t1 / t0) / math.log(l1 / l0), 1.0), 2.5) if t0 > 0 and l1 > l0 else 2.0
    return t1 * (length / l1) ** exponent


def plan_cases(args, device: str) -> list[dict]:
    cases = []
    base = dict(kind="encoder", device=device, size=args.size, warmup=args.warmup, repeats=args.repeats,
                max_case_seconds=args.max_case_seconds, threads=args.threads)
    for dtype in args.dtypes:
        for mode in args.modes:
            for batch_size in args.batch_sizes:
                for model in args.models:
                    if (model == "ran_loop" and mode != "forward") or (model == "rannet" and (
                            mode == "train_gc" or dtype != "fp32" or device != "cpu" or batch_size != 1)):
                        continue
                    lengths = args.lengths
                    if mode == "train_gc":
                        lengths = [L for L in args.gc_lengths if L <= max(args.lengths)]
                    for length in sorted(lengths):
                        cases.append(dict(base, model=model, mode=mode, dtype=dtype, batch_size=batch_size,
                                          seq_len=length))
    return cases


def run_all(args) -> dict:
    device = args.device
    meta = dict(argv=sys.argv, started=time.strftime("%Y-%m-%d %H:%M:%S"), python=sys.version.split()[0],
                machine=platform.machine(), processor=_cpu_name(), cpus=os.cpu_count(), device=device,
                git=bench_encoder.git_info(), size=args.size, repeats=args.repeats, warmup=args.warmup,
                max_call_seconds=args.max_call_seconds, rss_limit_gb=args.rss_limit_gb)
    os.makedirs(args.out_dir, exist_ok=True)
    out_path = os.path.join(args.out_dir, "results.json")
    results: list[dict] = []

    def save():
        with open(out_path, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)

    meta.update(subprocess_case(dict(kind="matmul", device=device, size=args.size, threads=args.threads), args))
    print(f"matmul throughput: fp32 {meta.get('matmul_gflops_fp32')} GFLOP/s, bf16 {meta.get('matmul_gflops_bf16')}"
          f" GFLOP/s", flush=True)
    rannet_base = all(args.size[k] == v for k, v in bench_encoder.CONFIG.items())
    rannet_ok = os.path.exists(args.rannet_python) and rannet_base
    for case in plan_cases(args, device):
        if case["model"] == "rannet" and not rannet_ok:
            results.append({**case, "skipped": f"n/a: rannet Python {args.rannet_python} not found" if rannet_base
                            else "n/a: rannet runs only the base-like size of bench_encoder.py"})
            continue
        series = [r for r in results if all(r.get(k) == case[k] for k in ("model", "mode", "dtype", "batch_size"))]
        failed = [r for r in series if "error" in r or "skipped" in r]
        if failed:
            results.append({**case, "skipped": f"not run: {failed[-1].get('error') or failed[-1]['skipped']} "
                                               f"at {failed[-1]['seq_len']} tokens"})
            continue
        if case["mode"] == "train_gc":  # checkpointing costs about one more forward: project from plain training
            series = [r for r in results if r.get("kind") == "encoder" and r["seq_len"] < case["seq_len"] and all(
                r.get(k) == v for k, v in dict(case, mode="train").items() if k in ("model", "mode", "dtype",
                                                                                   "batch_size"))]
        if case["model"] == "ran_loop" and case["seq_len"] > args.loop_max_length:
            results.append({**case, "skipped": f"n/a: beyond --loop-max-length {args.loop_max_length}"})
            continue
        projected = projected_call_seconds(series, case["seq_len"])
        if projected is not None and projected > args.max_call_seconds:
            results.append({**case, "skipped": f"projected {projected:.0f} s per call > --max-call-seconds "
                                               f"{args.max_call_seconds:.0f}"})
            print(f"  skip {case['model']} {case['mode']} {case['dtype']} L={case['seq_len']}: {results[-1]['skipped']}",
                  flush=True)
            continue
        if args.wait_idle > 0:
            wait_for_quiet(args.wait_idle)
        print(f"[{time.strftime('%H:%M:%S')}] {case['model']:<10} {case['mode']:<8} {case['dtype']} "
              f"B={case['batch_size']} L={case['seq_len']:<6} ...", end=" ", flush=True)
        res = subprocess_case(case, args)
        results.append(res)
        if "error" in res:
            print(f"ERROR: {res['error']}", flush=True)
        else:
            print(f"{res['median_s']:.3f} s/call, {res['tokens_per_s']:,.0f} tok/s, peak RSS "
                  f"{res['peak_rss_mb'] / 1024:.2f} GiB", flush=True)
        save()

    for model in ("ran", "gpt2"):
        for context in args.contexts:
            case = dict(kind="generation", model=model, context=context, decode_tokens=args.decode_tokens,
                        device=device, size=args.size, threads=args.threads)
            print(f"[{time.strftime('%H:%M:%S')}] generate {model:<5} context {context:<6} ...", end=" ", flush=True)
            res = subprocess_case(case, args)
            results.append(res)
            print(f"ERROR: {res['error']}" if "error" in res else
                  f"{res['decode_ms_median']:.1f} ms/token, cache {res['cache_bytes_after_prompt'] / 2**20:.2f} MiB",
                  flush=True)
            save()
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save()
    return dict(meta=meta, results=results)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ----------------------------------------------------------------------------------------------------------------------
# report: table and plots
# ----------------------------------------------------------------------------------------------------------------------


def _matmul_fraction(row: dict, meta: dict) -> float | None:
    if row["model"] not in ("ran", "rannet") or "median_s" not in row:
        return None
    peak = meta.get(f"matmul_gflops_{row['dtype']}")
    flops = bench_encoder.flops_per_token(row["seq_len"], row["size"])["total"] * row["seq_len"] * row["batch_size"]
    flops *= 1 if row["mode"] == "forward" else 3
    return flops / row["median_s"] / 1e9 / peak if peak else None


def _cell(row: dict | None) -> str:
    if row is None:
        return ""
    if "median_s" in row:
        memory = row.get("peak_gpu_mb", row.get("peak_rss_mb", 0)) / 1024
        return f"{row['tokens_per_s']:,.0f} ({memory:.1f})"
    reason = row.get("error") or row.get("skipped", "")
    if reason.startswith("n/a"):
        return "n/a"
    if "OOM" in reason or "SIGKILL" in reason:
        return "out of memory"
    if "projected" in reason or "timeout" in reason:
        return "too slow"
    if reason.startswith("not run"):
        return "-"
    return "failed"


def markdown_report(data: dict) -> str:
    meta, rows = data["meta"], data["results"]
    encoder = [r for r in rows if r.get("kind") == "encoder"]
    lines = [f"Machine: {meta.get('processor')}, {meta.get('cpus')} CPUs, device `{meta['device']}`; measured "
             f"matmul throughput {meta.get('matmul_gflops_fp32')} GFLOP/s fp32, {meta.get('matmul_gflops_bf16')} "
             f"GFLOP/s bf16. Started {meta['started']}, git {meta['git']['head'][:10]}.", ""]
    if meta.get("note"):  # e.g. rows re-measured after a fix, merged in by hand
        lines += [meta["note"], ""]
    params = {r["model"]: r["params"] for r in encoder if "params" in r}
    lines += ["Parameters: " + ", ".join(f"{LABELS[m]} {p / 1e6:.1f} M" for m, p in params.items()), ""]
    groups = sorted({(r["mode"], r["dtype"], r["batch_size"]) for r in encoder}, key=lambda g: (MODES.index(g[0]), g[1], g[2]))
    for mode, dtype, batch_size in groups:
        group = [r for r in encoder if (r["mode"], r["dtype"], r["batch_size"]) == (mode, dtype, batch_size)]
        lengths = sorted({r["seq_len"] for r in group})
        models = [m for m in MODELS if any(r["model"] == m for r in group)]
        what = {"forward": "forward", "train": "forward + backward", "train_gc": "forward + backward, gradient "
                "checkpointing"}[mode]
        lines += [f"**{what}, {dtype}, batch {batch_size}**: tokens/s (peak memory GiB)", "",
                  "| model | " + " | ".join(f"{L:,}" for L in lengths) + " |",
                  "| --- |" + " --- |" * len(lengths)]
        for model in models:
            cells = [_cell(next((r for r in group if r["model"] == model and r["seq_len"] == L), None))
                     for L in lengths]
            lines.append(f"| {LABELS[model]} | " + " | ".join(cells) + " |")
        lines.append("")
        fractions = [(r["model"], r["seq_len"], _matmul_fraction(r, meta)) for r in group]
        fractions = [f"{LABELS[m]} {L:,}: {f:.0%}" for m, L, f in fractions if f is not None]
        if fractions:
            lines += ["Fraction of the measured matmul throughput (matmul FLOPs from the config): "
                      + ", ".join(fractions), ""]
        ran = {r["seq_len"]: r["median_s"] for r in group if r["model"] == "ran" and "median_s" in r}
        if 4096 in ran and 65536 in ran:
            lines += [f"RAN time(65,536) / time(4,096): {ran[65536] / ran[4096]:.1f} (linear: 16)", ""]
    generation = [r for r in rows if r.get("kind") == "generation" and "decode_ms_median" in r]
    if generation:
        contexts = sorted({r["context"] for r in generation})
        lines += ["**generation**: per-token decode latency in ms (cache MiB after the prompt)", "",
                  "| model | " + " | ".join(f"{c:,}" for c in contexts) + " |", "| --- |" + " --- |" * len(contexts)]
        for model in ("ran", "gpt2"):
            cells = []
            for c in contexts:
                r = next((r for r in generation if r["model"] == model and r["context"] == c), None)
                cells.append("" if r is None else f"{r['decode_ms_median']:.1f} "
                                                  f"({r['cache_bytes_after_prompt'] / 2**20:.1f})")
            lines.append(f"| {LABELS[model]} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(data: dict, out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if "median_s" in r or "decode_ms_median" in r]
    written = []
    encoder = [r for r in rows if r.get("kind") == "encoder"]
    for mode, dtype, batch_size in sorted({(r["mode"], r["dtype"], r["batch_size"]) for r in encoder}):
        group = [r for r in encoder if (r["mode"], r["dtype"], r["batch_size"]) == (mode, dtype, batch_size)]
        fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.2))
        for model in MODELS:
            series = sorted((r for r in group if r["model"] == model), key=lambda r: r["seq_len"])
            if not series:
                continue
            lengths = [r["seq_len"] for r in series]
            ax_time.plot(lengths, [r["median_s"] for r in series], marker="o", label=LABELS[model])
            ax_mem.plot(lengths, [r.get("peak_gpu_mb", r["peak_rss_mb"]) / 1024 for r in series], marker="o",
                        label=LABELS[model])
        memory_label = "peak GPU memory (GiB)" if data["meta"]["device"] == "cuda" else "peak RSS (GiB)"
        for ax, ylabel in ((ax_time, "seconds per call"), (ax_mem, memory_label)):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        ax_time.legend(fontsize=8)
        what = {"forward": "forward", "train": "forward + backward", "train_gc": "forward + backward (GC)"}[mode]
        fig.suptitle(f"{what}, {dtype}, batch {batch_size}, {data['meta']['device']}")
        fig.tight_layout()
        path = os.path.join(out_dir, f"{mode}_{dtype}_b{batch_size}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    generation = [r for r in rows if r.get("kind") == "generation"]
    if generation:
        fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.2))
        for model in ("ran", "gpt2"):
            series = sorted((r for r in generation if r["model"] == model), key=lambda r: r["context"])
            contexts = [r["context"] for r in series]
            ax_time.plot(contexts, [r["decode_ms_median"] for r in series], marker="o", label=LABELS[model])
            ax_mem.plot(contexts, [r["cache_bytes_after_prompt"] / 2**20 for r in series], marker="o",
                        label=LABELS[model])
        for ax, ylabel in ((ax_time, "ms per generated token"), (ax_mem, "cache after the prompt (MiB)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("context (tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        ax_time.legend(fontsize=8)
        fig.suptitle("generation: decode latency and cache size")
        fig.tight_layout()
        path = os.path.join(out_dir, "generation.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--lengths", nargs="+", type=int, default=list(DEFAULT_LENGTHS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--gc-lengths", nargs="*", type=int, default=[65536],
                        help="lengths of the train_gc cases (gradient checkpointing), those up to max(--lengths)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=None,
                        help="default: fp32 on CPU (this kind of CPU has no bf16 units), fp32 and bf16 on CUDA")
    parser.add_argument("--loop-max-length", type=int, default=8192,
                        help="longest input of the ran_loop baseline (it is linear in the length: the ratio holds)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    parser.add_argument("--contexts", nargs="*", type=int, default=[1024, 4096, 16384, 32768],
                        help="generation contexts (none: skip generation)")
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--hidden-size", type=int, default=768)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=12)
    parser.add_argument("--window-size", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-call-seconds", type=float, default=90.0,
                        help="skip a length whose projected time per call is longer")
    parser.add_argument("--max-case-seconds", type=float, default=180.0,
                        help="fewer timed repeats when repeats x one call would take longer")
    parser.add_argument("--timeout", type=int, default=1800, help="per-case subprocess timeout (s)")
    parser.add_argument("--rss-limit-gb", type=float, default=21.0, help="kill a CPU case whose RSS passes this")
    parser.add_argument("--wait-idle", type=float, default=0.0,
                        help="before each case wait up to this long for other processes to leave the CPU idle")
    parser.add_argument("--threads", type=int, default=0, help="torch threads in the cases (0: torch's default)")
    parser.add_argument("--rannet-python", default="/opt/rannet-venv/bin/python")
    parser.add_argument("--out-dir", default="bench_results/benchmark")
    parser.add_argument("--report-only", action="store_true", help="redo table and plots from out-dir/results.json")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.case:  # inside a case subprocess
        case = json.loads(args.case)
        runner = {"encoder": run_encoder_case, "generation": run_generation_case, "matmul": run_matmul_case}
        emit(runner[case["kind"]](case))
        return None

    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.dtypes is None:
        args.dtypes = ["fp32"] if args.device == "cpu" else ["fp32", "bf16"]
    args.size = dict(vocab_size=args.vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.num_layers,
                     num_attention_heads=args.num_heads, attention_head_size=args.hidden_size // args.num_heads,
                     window_size=args.window_size, min_window_size=16)
    if args.report_only:
        with open(os.path.join(args.out_dir, "results.json")) as f:
            data = json.load(f)
    else:
        data = run_all(args)
    report = markdown_report(data)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(report + "\n")
    plots = plot(data, args.out_dir)
    print("\n" + report)
    print(f"results: {os.path.join(args.out_dir, 'results.json')}; plots: {', '.join(plots)}")
    return data


if __name__ == "__main__":
    main()
