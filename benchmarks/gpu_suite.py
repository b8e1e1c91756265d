# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""RAN on one GPU in one bounded call: CUDA correctness, RAN's cell chain eager against compiled, speed and memory
against ModernBERT, Longformer, BigBird and BERT, a profile of RAN's training step, generation against GPT-2, and a
256k-token checkpointed training step.

    python -m benchmarks.gpu_suite --out DIR                 # the device call (bf16, base size, 420 s)
    python -m benchmarks.gpu_suite --scale tiny --out DIR    # the same call on CPU at tiny sizes (rehearsal)
    python benchmarks/gpu_report.py DIR docs/benchmark_gpu   # DIR/results.json -> table.md and plots

Parts, each with a time cap (`--caps`) inside one overall budget (`--budget-s`), run in the order `--parts` gives
(default: the scale's call, `env optimise speed pytest profile`); a part that does not fit is marked in the results,
never silently left out:

  env          device, versions, the measured bf16 matmul peak (8192^3 products, CUDA events, median of 10)
  optimise     RAN with each `chain_implementation` ("cuda_graphs", "compiled", "eager") in one process: outputs
               and gradients against eager's, then forward and training step at 8k and 32k (batch 1)
  speed        RAN, ModernBERT (sdpa), Longformer, BigBird and BERT over 512-token chunks (default: ModernBERT and
               Longformer at 8k and 32k, batch 1) with `tokens_per_step` tokens per step (batch = tokens / length,
               at least 1): forward and a training step (forward, loss, backward, AdamW), bf16 autocast; tokens/s
               and peak memory; a series stops at out-of-memory or when the next length is projected past
               `max_call_s`
  pytest       `RAN_TEST_DEVICE=cuda` over the model tests (`-x`, a per-test timeout, SIGINT before the part's cap)
  checks       bf16 autocast forward and backward against fp32 (relative errors, stated tolerances); finite outputs
               at 32k and 131k tokens and, forward and backward, on a batch with an all-pad row
  profile      torch.profiler over one training step of RAN (default: at 32k, the chain compiled): device time
               split into embedding, projections, cell chain, window attention, memory review, layer glue, loss
               and optimizer
  generation   ms per token and cache bytes at 1k, 32k and 128k of context, RAN against GPT-2 of the same size
  long_train   one training step of RAN at 256k tokens with gradient checkpointing: peak memory, seconds

Every result is written to `OUT/results.json` as it arrives, so a call cut short still returns what it measured.

How the profile splits a step (no change to `ran_hf/`): forward pre/post hooks on the model's submodules open and
close `torch.profiler.record_function` ranges (embedding, q/k/v and output projections, window attention, memory
review, pooler, the rest of each layer), and `ran_hf.modeling_ran.run_cell_chain` is wrapped in a `cell chain` range for
the profiled step only. A range inside the chain counts as the chain. Each device kernel is charged to the range of
the host op that launched it; a backward kernel to the range of the forward op that created its autograd node (the
profiler's sequence numbers); the optimizer's kernels to `Optimizer.step`. Two shares are reported: of the summed
kernel time, and of the device timeline, where the idle gap before a kernel is charged to that kernel's range (a
launch-bound part such as the chain leaves the device idle between its small kernels).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time


from benchmarks import benchmark  # standard library only at import


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TAG = "GPU_SUITE "
PARTS = ("env", "checks", "pytest", "speed", "profile", "generation", "long_train", "optimise")
SPEED_MODELS = ("ran", "modernbert", "longformer", "bigbird", "bert_chunks")
LABELS = {"ran": "RAN", "modernbert": "ModernBERT (sdpa)", "longformer": "Longformer", "bigbird": "BigBird",
          "bert_chunks": "BERT, 512-token chunks", "gpt2": "GPT-2"}
SPEED_WEIGHTS = {"ran": 2}  # share of the speed part's time per model, relative to 1 for the others
LEARNING_RATE = 1e-4
BERT_CHUNK = 512
PYTEST_SUMMARY_S = 5  # seconds pytest gets after SIGINT to print its summary line
PYTEST_FILES = ["tests/model/test_parity.py", "tests/model/test_encoder.py", "tests/model/test_causal.py",
                "tests/model/test_layer_schedule.py"]
# bf16 autocast against fp32 on the same weights and inputs, ||bf16 - fp32|| / ||fp32||: outputs and the pooled
# vector within 5e-2, all gradients together within 1e-1 (bf16 keeps 8 mantissa bits, about 4e-3 per rounding;
# 12 layers of normalised residual blocks compound it)
TOLERANCES = dict(last_hidden_state=5e-2, pooler_output=5e-2, gradients=1e-1)

# The default call at each scale runs `parts` in that order, each inside its cap (seconds), the whole inside
# `budget_s`. A worker process needs 16-21 s on the device before its first result (imports, a base-size model on the
# GPU, the first CUDA calls; measured on an H100 in the call at 3d19c15), so every part's cap covers that start.
# The base call fits one device command of at most 500 s (about 60 s of unpacking and CUDA start, then 420 s), so
# that a 15-minute device session keeps time for a shorter second call. It measures like with like in one process
# tree: RAN with every chain implementation (optimise) and its peers (speed) at 8k and 32k, batch 1 at both lengths
# (`tokens_per_step` 8192), then the CUDA model tests, then a profile of RAN's training step at 32k with the chain
# compiled, the implementation shipped for speed.
# the chains the optimise part compares, in the order it runs them at each length: the newest first, so that a call
# cut short loses the rows earlier calls measured (the 32k eager training step takes about 9 s on an H100)
OPTIMISE_VARIANTS = ["cuda_graphs", "compiled", "eager"]
SCALES = {
    # the device call: base size, bf16
    "base": dict(size=dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           attention_head_size=64, window_size=256, min_window_size=16),
                 parts=["env", "optimise", "speed", "pytest", "profile"], speed_models=["modernbert", "longformer"],
                 speed_modes=["forward", "train"], lengths=[8192, 32768], tokens_per_step=8192,
                 profile_lengths=[32768],
                 nan_lengths=[32768, 131072], check_length=4096, contexts=[1024, 32768, 131072], decode_tokens=32,
                 prefill_chunk=4096, long_length=262144, optimise_lengths=[8192, 32768], optimise_batch_size=1,
                 matmul_size=8192, max_call_s=8.0, max_case_s=6.0, warmup=1, repeats=3, budget_s=420,
                 pytest_timeout=30, pytest_files=PYTEST_FILES, pytest_select="not flex",
                 compile_backend="inductor", ran_chain="compiled", optimise_variants=OPTIMISE_VARIANTS,
                 caps=dict(env=10, optimise=180, speed=80, pytest=60, checks=40, profile=90, generation=60,
                           long_train=100)),
    # the rehearsal: the same code path at tiny sizes, seconds on a CPU (the optimise lengths give 8 and 16 windows,
    # whole blocks of the compiled chain, as the base lengths' 32 and 128 do)
    "tiny": dict(size=dict(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           attention_head_size=16, window_size=16, min_window_size=4),
                 parts=["env", "optimise", "speed", "pytest", "profile"], speed_models=["modernbert", "longformer"],
                 speed_modes=["forward", "train"], lengths=[128, 256], tokens_per_step=128,
                 profile_lengths=[256],
                 nan_lengths=[256, 1024], check_length=96, contexts=[16, 64, 256], decode_tokens=3,
                 prefill_chunk=64, long_length=512, optimise_lengths=[128, 256], optimise_batch_size=1,
                 matmul_size=256, max_call_s=20.0, max_case_s=2.0, warmup=1, repeats=2, budget_s=1200,
                 pytest_timeout=60, pytest_files=["tests/model/test_parity.py"], pytest_select="directory_loads",
                 compile_backend="aot_eager", ran_chain="compiled", optimise_variants=OPTIMISE_VARIANTS,
                 caps=dict(env=60, optimise=120, speed=240, pytest=120, checks=90, profile=90, generation=90,
                           long_train=60)),
}


# ----------------------------------------------------------------------------------------------------------------------
# helpers shared by the driver and the workers (standard library only)
# ----------------------------------------------------------------------------------------------------------------------


def emit(record: dict) -> None:
    print(TAG + json.dumps(record), flush=True)


def pytest_progress(output: str) -> dict:
    """The progress characters of `pytest -q` output (`.` passed, `F` failed, `E` error, `s` skipped, `x`/`X`
    xfail/xpass), counted from its progress lines (those ending in `[ NN%]`), and the last percentage shown: what
    ran, even when pytest was killed before its summary line."""
    counts = dict(passed=0, failed=0, errors=0, skipped=0, xfailed=0, percent=None)
    names = {".": "passed", "F": "failed", "E": "errors", "s": "skipped", "x": "xfailed", "X": "xfailed"}
    for line in output.splitlines():
        match = re.fullmatch(r"([.FEsxX]+)\s*(?:\[\s*(\d+)%\])?", line.strip())
        if not match:
            continue
        for char in match.group(1):
            counts[names[char]] += 1
        if match.group(2):
            counts["percent"] = int(match.group(2))
    return counts


def encoder_flops_per_token(model: str, size: dict, seq_len: int, extra: dict | None = None) -> float:
    """Matrix-multiply FLOPs per token of one encoder forward, counted from the config (multiply-add = 2 FLOPs),
    the useful work only (masked or padded attention entries are not counted). D = hidden, A = heads x head size.

    RAN: `benchmark.flops_per_token` (q/k/v, outputs, GLUs, memory review; window attention over W + 1 keys).
    BERT over 512-token chunks: 24 D^2 (q/k/v/o and the 4D MLP) + 4 * 512 * A per layer.
    Longformer: 24 D^2 + 4 * 513 * A (a 512-token window).  BigBird: 24 D^2 + 4 * 8 * 64 * A (3 sliding, 2 global,
    3 random blocks of 64).  ModernBERT: 2 (4 D^2 + 3 D I) with I its GLU width, + 4 * 128 * A on local layers and
    4 * L * A on the global (full-attention) layers.
    """
    extra = extra or {}
    d, layers = size["hidden_size"], size["num_hidden_layers"]
    a = size["num_attention_heads"] * size["attention_head_size"]
    if model == "ran":
        return benchmark.flops_per_token(seq_len, size)["total"]
    if model == "bert_chunks":
        return layers * (24 * d * d + 4 * min(seq_len, BERT_CHUNK) * a)
    if model == "longformer":
        return layers * (24 * d * d + 4 * min(seq_len, 513) * a)
    if model == "bigbird":
        return layers * (24 * d * d + 4 * min(seq_len, 8 * 64) * a)
    if model == "modernbert":
        inner = extra.get("intermediate_size", 1152)
        window = extra.get("local_window", 128)
        num_global = extra.get("global_layers", len(range(0, layers, 3)))
        dense = 2 * (4 * d * d + 3 * d * inner)
        return layers * dense + 4 * a * (num_global * seq_len + (layers - num_global) * min(seq_len, window))
    raise ValueError(f"unknown model {model!r}")


def installed_versions() -> dict:
    """PyTorch and Transformers as installed for this Python (no import), for a report without the env part."""
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def series_projection(done: list[dict], length: int, batch: int) -> float | None:
    """Seconds of one call at `length` x `batch` projected from the last two measured cases of a series, as
    `a * length + b * batch * length`: a part sequential along a row (RAN's cell chain: the number of windows per
    row, whatever the batch) plus a part proportional to the tokens. Two cases with the same batch give a power law
    in the length instead (exponent clamped to [1, 2]); a single case, time proportional to the tokens."""
    points = [(r["seq_len"], r["batch_size"], r["median_s"]) for r in done if "median_s" in r][-2:]
    if not points:
        return None
    (l1, b1, t1) = points[-1]
    if len(points) == 1:
        return t1 * (batch * length) / (b1 * l1)
    (l0, b0, t0) = points[0]
    if b0 == b1:
        exponent = min(max(math.log(t1 / t0) / math.log(l1 / l0), 1.0), 2.0) if t0 > 0 and t1 > 0 else 1.0
        return t1 * (length / l1) ** exponent * batch / b1
    # solve t = a L + b B L through both points
    determinant = l0 * b1 * l1 - l1 * b0 * l0
    a = (t0 * b1 * l1 - t1 * b0 * l0) / determinant
    b = (l0 * t1 - l1 * t0) / determinant
    if a < 0:
        a, b = 0.0, t1 / (b1 * l1)
    if b < 0:
        a, b = t1 / l1, 0.0
    return a * length + b * batch * length


# ----------------------------------------------------------------------------------------------------------------------
# workers: each runs in its own process and emits one tagged JSON line per result
# ----------------------------------------------------------------------------------------------------------------------


def _torch_setup(spec: dict):
    import torch

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    if spec["device"] == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    use_compile_settings(spec)
    return torch


def _sync(torch, device: str):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _autocast(torch, spec: dict):
    return torch.autocast(spec["device"], dtype=torch.bfloat16, enabled=spec["dtype"] == "bf16")


def _reset_peak(torch, device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mb(torch, device: str) -> float:
    if device == "cuda":
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return benchmark.peak_rss_mb()


def _is_oom(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "OutOfMemory" in text or "out of memory" in text.lower() or "DefaultCPUAllocator: can't allocate" in text


def worker_env(spec: dict) -> None:
    """Device, versions, and the measured bf16 (and fp32/tf32) matmul peak on random data."""
    torch = _torch_setup(spec)
    import transformers

    device = spec["device"]
    info = dict(kind="env", device=device, torch=torch.__version__, transformers=transformers.__version__,
                cuda=torch.version.cuda, python=sys.version.split()[0], processor=benchmark._cpu_name(),
                cpus=os.cpu_count())
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count)
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = smi.stdout.strip()
        except Exception as exc:  # noqa: BLE001
            info["nvidia_smi"] = f"unavailable: {exc}"
    else:
        info.update(device_name=f"CPU: {info['processor']}")
    n = spec["matmul_size"]
    sync = _sync(torch, device)
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        times = []
        for i in range(13):
            sync()
            start = time.perf_counter()
            torch.mm(a, b)
            sync()
            if i >= 3:
                times.append(time.perf_counter() - start)
        info[f"matmul_tflops_{name}"] = round(2 * n**3 / statistics.median(times) / 1e12, 3)
    info["matmul_shape"] = f"{n}x{n}x{n}, random, median of 10 after 3 warm-ups" + (
        ", fp32 with TF32 allowed" if device == "cuda" else "")
    emit(info)


def _ran_model(spec: dict, causal: bool = False, chain: str | None = None):
    """RAN at the spec's size, dropout 0, its cell chain run by `chain` (default: the spec's `ran_chain`)."""
    import torch
    from ran_hf import RANConfig, RANForCausalLM, RANModel

    size = spec["size"]
    config = RANConfig(**{k: size[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                 "num_attention_heads", "attention_head_size", "window_size",
                                                 "min_window_size")},
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       chain_implementation=chain or spec.get("ran_chain", "eager"))
    torch.manual_seed(0)
    return (RANForCausalLM if causal else RANModel)(config)


def _loss(out):
    loss = out.last_hidden_state.float().square().mean()
    pooled = getattr(out, "pooler_output", None)
    if pooled is not None:
        loss = loss + pooled.float().square().mean()
    return loss


def _check_loss(out, mask=None):
    """The loss of the precision checks: fixed random projections of the token vectors (mean over real tokens) and
    of the pooled vector. `_loss` does not serve there: the outputs are normalized, so their mean square barely
    depends on the weights and its gradient is mostly rounding (a relative bf16 gradient error of 0.04 where this
    loss has 0.008, measured on CPU at a tiny size)."""
    import torch

    hidden = out.last_hidden_state.float()
    generator = torch.Generator().manual_seed(7)
    directions = torch.randn(2, hidden.shape[-1], generator=generator).to(hidden.device)
    if mask is None:
        mask = hidden.new_ones(hidden.shape[:2])
    mask = mask.to(hidden.dtype)
    loss = ((hidden @ directions[0]) * mask).sum() / mask.sum()
    pooled = getattr(out, "pooler_output", None)
    if pooled is not None:
        loss = loss + (pooled.float() @ directions[1]).mean()
    return loss


def _relative(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def worker_checks(spec: dict) -> None:
    """bf16 autocast against fp32 (forward outputs and all gradients); finite outputs at long lengths and on an
    all-pad row."""
    torch = _torch_setup(spec)
    torch.backends.cuda.matmul.allow_tf32 = False  # a plain fp32 reference
    torch.backends.cudnn.allow_tf32 = False
    device = spec["device"]
    model = _ran_model(spec).to(device).train()
    vocab = spec["size"]["vocab_size"]
    generator = torch.Generator().manual_seed(1)
    length = spec["check_length"]
    ids = torch.randint(5, vocab, (2, length), generator=generator).to(device)
    mask = torch.ones_like(ids)
    mask[1, length // 3:] = 0  # a padded row
    results = {}
    for name in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=name == "bf16"):
            out = model(input_ids=ids, attention_mask=mask)
        _check_loss(out, mask).backward()
        results[name] = dict(last_hidden_state=out.last_hidden_state.detach().float() * mask[..., None],
                             pooler_output=out.pooler_output.detach().float(),
                             gradients=torch.cat([p.grad.flatten().float() for p in model.parameters()
                                                  if p.grad is not None]))
    errors = {key: _relative(results["bf16"][key], results["fp32"][key]) for key in TOLERANCES}
    worst = max(((name, _relative(p_bf16, p_fp32)) for name, p_bf16, p_fp32 in _per_param_gradients(
        model, results) if float(p_fp32.norm()) > 0), key=lambda item: item[1], default=(None, None))
    emit(dict(kind="check", check="bf16_vs_fp32", seq_len=length, batch_size=2,
              relative_errors={k: round(v, 5) for k, v in errors.items()}, tolerances=TOLERANCES,
              worst_parameter=worst[0], worst_parameter_relative_error=worst[1] and round(worst[1], 5),
              passed=all(errors[k] <= TOLERANCES[k] for k in TOLERANCES)))
    del results

    model.eval()
    for length in spec["nan_lengths"]:
        _reset_peak(torch, device)
        row = dict(kind="check", check="finite_forward", seq_len=length, batch_size=1, dtype=spec["dtype"])
        try:
            ids = torch.randint(5, vocab, (1, length), generator=generator).to(device)
            start = time.perf_counter()
            with torch.inference_mode(), _autocast(torch, spec):
                out = model(input_ids=ids)
            _sync(torch, device)()
            row.update(seconds=round(time.perf_counter() - start, 3), peak_mb=_peak_mb(torch, device),
                       passed=bool(torch.isfinite(out.last_hidden_state).all() and torch.isfinite(
                           out.pooler_output).all()))
            del out
        except Exception as exc:  # noqa: BLE001
            row.update(passed=False, error=f"{type(exc).__name__}: {exc}"[:400])
        emit(row)

    model.train()
    model.zero_grad(set_to_none=True)
    row = dict(kind="check", check="all_pad_row", seq_len=spec["check_length"], batch_size=2, dtype=spec["dtype"])
    ids = torch.randint(5, vocab, (2, spec["check_length"]), generator=generator).to(device)
    mask = torch.ones_like(ids)
    mask[1] = 0
    with _autocast(torch, spec):
        out = model(input_ids=ids, attention_mask=mask)
    _loss(out).backward()
    grads_finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    row.update(outputs_finite=bool(torch.isfinite(out.last_hidden_state).all() and torch.isfinite(
        out.pooler_output).all()), gradients_finite=grads_finite,
        pad_row_max_abs=float(out.last_hidden_state[1].abs().max()))
    row["passed"] = row["outputs_finite"] and grads_finite
    emit(row)


def _per_param_gradients(model, results):
    offset = 0
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        n = p.numel()
        yield name, results["bf16"]["gradients"][offset: offset + n], results["fp32"]["gradients"][offset: offset + n]
        offset += n


def build_speed_model(name: str, size: dict, max_length: int, chain: str = "eager"):
    """The encoder of a speed series at the width/depth/heads/vocab of `size` (dropout 0): RAN from this checkout
    (its cell chain run by `chain`), the others from Transformers configs (`benchmark.build_encoder`); BERT is sized
    for 512-token chunks."""
    if name == "ran":
        model = benchmark.build_encoder("ran", size, max_length)
        model.config.chain_implementation = chain
        return model
    if name == "bert_chunks":
        return benchmark.build_encoder("bert", size, BERT_CHUNK)
    return benchmark.build_encoder(name, size, max_length)


def _model_extra(name: str, model) -> dict:
    if name != "modernbert":
        return {}
    config = model.config
    types = getattr(config, "layer_types", None)
    if types is not None:
        is_global = [t == "full_attention" for t in types]
    else:  # older configs: a global layer every `global_attn_every_n_layers`
        is_global = [i % config.global_attn_every_n_layers == 0 for i in range(config.num_hidden_layers)]
    return dict(intermediate_size=config.intermediate_size, global_layers=sum(is_global),
                local_window=config.local_attention)


def worker_speed(spec: dict) -> None:
    """One model's series: each length (batch = tokens_per_step / length, at least 1), forward then a training step
    with a fresh AdamW (so a forward's peak memory holds no optimizer state). A mode's series stops at its first
    out-of-memory, failure or projected overrun; the other mode goes on."""
    torch = _torch_setup(spec)
    device, name = spec["device"], spec["model"]
    model = build_speed_model(name, spec["size"], max(spec["lengths"]), spec.get("ran_chain", "eager")).to(device)
    extra = _model_extra(name, model)
    params = sum(p.numel() for p in model.parameters())
    vocab = spec["size"]["vocab_size"]
    sync = _sync(torch, device)
    done = {mode: [] for mode in spec["modes"]}
    stopped = {mode: None for mode in spec["modes"]}
    for length in spec["lengths"]:
        batch = max(1, spec["tokens_per_step"] // length)
        ids = torch.randint(5, vocab, (batch, length), generator=torch.Generator().manual_seed(length)).to(device)
        if name == "bert_chunks" and length >= BERT_CHUNK:
            ids = ids.reshape(-1, BERT_CHUNK)
        for mode in spec["modes"]:
            row = dict(kind="speed", model=name, mode=mode, seq_len=length, batch_size=batch,
                       tokens_per_step=batch * length, dtype=spec["dtype"], params=params,
                       flops_per_token=encoder_flops_per_token(name, spec["size"], length, extra))
            if name == "ran":
                row["chain_implementation"] = model.config.chain_implementation
            projected = series_projection(done[mode], length, batch)
            if stopped[mode] is None and projected is not None and projected > spec["max_call_s"]:
                stopped[mode] = f"too slow: projected {projected:.1f} s per call > {spec['max_call_s']} s"
            if stopped[mode] is None and projected is not None and time.time() + 3 * projected > spec["deadline"]:
                stopped[mode] = f"time cap: projected {projected:.1f} s per call, part budget spent"
            if stopped[mode] is not None:
                emit(dict(row, skipped=stopped[mode]))
                continue
            optimizer = None
            if mode == "train":
                optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=device == "cuda")
            call = _speed_call(torch, spec, model, ids, mode, optimizer)
            _reset_peak(torch, device)
            try:
                timing, finite = benchmark.time_calls(call, spec["warmup"], spec["repeats"], spec["max_case_s"],
                                                      sync)
                row.update(median_s=timing["median_s"], times_s=timing["times_s"],
                           repeats_done=timing["repeats_done"], warmup_s=timing["warmup_s"],
                           tokens_per_s=round(batch * length / timing["median_s"], 1),
                           peak_mb=_peak_mb(torch, device), output_finite=bool(finite))
                done[mode].append(row)
            except Exception as exc:  # noqa: BLE001
                stopped[mode] = ("out of memory" if _is_oom(exc) else "failed") + f": {type(exc).__name__}"
                row.update(error=stopped[mode], detail=str(exc)[:400], peak_mb=_peak_mb(torch, device))
            call = optimizer = None
            model.zero_grad(set_to_none=True)
            _reset_peak(torch, device)
            emit(row)


def _new_step(torch) -> None:
    """Tell CUDA-graph trees (`--compile-mode reduce-overhead`) that a new step begins, so that a step never waits on
    the previous one's outputs or backward; nothing happens without them."""
    torch.compiler.cudagraph_mark_step_begin()


def _speed_call(torch, spec, model, ids, mode, optimizer):
    """forward: inference mode, bf16 autocast; train: forward, loss, backward, AdamW step. Returns finiteness."""
    autocast = _autocast(torch, spec)
    if mode == "forward":
        model.eval()

        def call():
            _new_step(torch)
            with torch.inference_mode(), autocast:
                out = model(input_ids=ids).last_hidden_state
            return torch.isfinite(out).all()

        return call
    model.train()

    def call():
        optimizer.zero_grad(set_to_none=True)
        _new_step(torch)
        with autocast:
            out = model(input_ids=ids)
        loss = _loss(out)
        loss.backward()
        optimizer.step()
        return torch.isfinite(loss.detach())

    return call


# --------------------------------------------- profile ---------------------------------------------------------------

PROFILE_CATEGORIES = ("embedding", "projections", "cell chain", "window attention", "memory review", "layer glue",
                      "pooler", "loss", "optimizer", "other")
RANGE_PREFIX = "ran::"


def wrap_chain_entry_points(modeling, wrap) -> tuple:
    """Replace the cell chain's entry point in `modeling` (`run_cell_chain`, which every chain implementation goes
    through, a captured chain's replay included) by `wrap(function)`. Returns the callable that puts it back and the
    names replaced."""
    name = "run_cell_chain"
    function = getattr(modeling, name)
    setattr(modeling, name, wrap(function))

    def restore():
        setattr(modeling, name, function)

    return restore, [name]


def install_profile_ranges(model) -> tuple[list, list[str]]:
    """Forward pre/post hooks that open and close a `record_function` range per submodule of a `RANModel`, and a
    wrapper of the cell chain's entry point `ran_hf.modeling_ran.run_cell_chain`. Returns (the unpatch callable, names
    installed)."""
    import torch
    import ran_hf.modeling_ran as modeling

    handles, installed = [], []

    def attach(module, category):
        stack = []

        # a compiled chain traces the hooks of the modules it calls: there they open no range (the chain's own
        # range, from its entry point, covers them)
        def pre(_module, _args):
            if torch.compiler.is_compiling():
                return
            context = torch.profiler.record_function(RANGE_PREFIX + category)
            context.__enter__()
            stack.append(context)

        def post(_module, _args, _output):
            if not torch.compiler.is_compiling():
                stack.pop().__exit__(None, None, None)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))

    def attach_tree(module, category):
        for submodule in module.modules():
            attach(submodule, category)

    if hasattr(model, "embeddings"):
        attach_tree(model.embeddings, "embedding")
        installed.append("embeddings")
    if getattr(model, "pooler", None) is not None:
        attach_tree(model.pooler, "pooler")
        installed.append("pooler")
    for layer in getattr(model, "layers", []):
        attach(layer, "layer glue")
        block = getattr(layer, "window_block", None)
        if block is not None:
            attach(block, "window attention")
            for name, child in block.named_children():
                attach_tree(child, "projections")
        if getattr(layer, "memory_review", None) is not None:
            attach_tree(layer.memory_review, "memory review")
        for name in ("cell_glu", "cell_residual_norm", "cell_initializer", "cell_initializer_norm"):
            if hasattr(layer, name):
                attach_tree(getattr(layer, name), "cell chain")
    if getattr(model, "layers", None):
        installed.append("layers")
    def in_chain_range(function):
        def wrapper(*args, **kwargs):
            with torch.profiler.record_function(RANGE_PREFIX + "cell chain"):
                return function(*args, **kwargs)
        return wrapper

    restore_chain, names = wrap_chain_entry_points(modeling, in_chain_range)
    installed += names

    def remove():
        for handle in handles:
            handle.remove()
        restore_chain()

    return remove, installed


def _category_of_stack(names: list[str]) -> str | None:
    """The category of an op from the names of its enclosing ranges (outermost first): the cell chain wins over
    anything inside it, otherwise the innermost range."""
    found = [n[len(RANGE_PREFIX):] for n in names if n.startswith(RANGE_PREFIX)]
    if "cell chain" in found:
        return "cell chain"
    for n in reversed(names):
        if n.startswith("Optimizer.") or n.startswith(RANGE_PREFIX + "optimizer"):
            return "optimizer"
    return found[-1] if found else None


def breakdown_from_events(events, device: str) -> dict:
    """Split a profiled step's time into categories from the profiler's raw events (`kineto_results.events()`).

    Host events get their enclosing ranges by nesting per thread; forward ops map their autograd sequence number
    to a category; ops inside `autograd::engine::evaluate_function` take the category of their node's sequence
    number. On CUDA the units are the device kernels (charged to the host op that launched them, by correlation
    id); on CPU the host ops' self times. Returns per-category milliseconds (forward / backward / optimizer) and
    shares."""
    host, device_events = [], []
    for e in events:
        kind = str(e.device_type())
        start, end = _event_ns(e)
        if "CUDA" in kind:
            name = e.name()
            # kernels, copies and sets only: the device-side copies of the host's ranges span many kernels
            if not (e.is_user_annotation() or name.startswith((RANGE_PREFIX, "Optimizer.", "ProfilerStep"))):
                device_events.append((start, end, e.linked_correlation_id(), name))
        elif "CPU" in kind and not e.is_async():
            host.append(dict(name=e.name(), start=start, end=end, thread=e.start_thread_id(),
                             seq=e.sequence_nr(), corr=e.correlation_id(), linked=e.linked_correlation_id(),
                             children_ns=0))
    # nesting per thread: every host event gets (category, phase)
    by_thread: dict[int, list[dict]] = {}
    for h in host:
        by_thread.setdefault(h["thread"], []).append(h)
    seq_category: dict[int, tuple[int, str]] = {}
    backward_events = []
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda h: (h["start"], -h["end"]))
        stack: list[dict] = []
        for h in thread_events:
            while stack and stack[-1]["end"] <= h["start"]:
                stack.pop()
            if stack:
                stack[-1]["children_ns"] += h["end"] - h["start"]
            names = [s["name"] for s in stack] + [h["name"]]
            h["range"] = _category_of_stack(names)
            node = next((s for s in reversed(stack + [h]) if s["name"].startswith(
                "autograd::engine::evaluate_function")), None)
            if node is not None:
                h["phase"], h["node_seq"] = "backward", node["seq"]
                backward_events.append(h)
            elif h["range"] == "optimizer":
                h["phase"] = "optimizer"
            else:
                h["phase"] = "forward"
                if h["seq"] is not None and h["seq"] >= 0 and h["range"] is not None:
                    depth = len(stack)
                    if h["seq"] not in seq_category or seq_category[h["seq"]][0] < depth:
                        seq_category[h["seq"]] = (depth, h["range"])
            stack.append(h)
    for h in host:
        if h["phase"] == "backward":
            h["category"] = seq_category.get(h["node_seq"], (0, "other"))[1]
            if h["range"] == "optimizer":
                h["category"] = "optimizer"
        else:
            h["category"] = h["range"] or "other"
    totals = {c: dict(forward_ms=0.0, backward_ms=0.0, optimizer_ms=0.0, idle_before_ms=0.0)
              for c in PROFILE_CATEGORIES}

    def charge(h, ns, idle_ns=0):
        cat = h["category"] if h["category"] in totals else "other"
        totals[cat][f"{h['phase']}_ms"] += ns / 1e6
        totals[cat]["idle_before_ms"] += idle_ns / 1e6

    if device_events:
        by_corr = {h["corr"]: h for h in host if h["linked"] == 0}  # ops, not the runtime's launch calls
        device_events.sort()
        busy_end = device_events[0][0]
        unlinked = 0
        for start, end, corr, _name in device_events:
            h = by_corr.get(corr)
            if h is None:
                unlinked += 1
                h = dict(category="other", phase="forward")
            charge(h, end - start, max(0, start - busy_end))
            busy_end = max(busy_end, end)
        span_ms = (busy_end - device_events[0][0]) / 1e6
        units = f"{len(device_events)} device kernels/copies ({unlinked} without a host op)"
    else:
        for h in host:
            charge(h, max(0, h["end"] - h["start"] - h["children_ns"]))
        span_ms = (max(h["end"] for h in host) - min(h["start"] for h in host)) / 1e6 if host else 0.0
        units = f"{len(host)} host ops (self time)"
    busy = sum(v["forward_ms"] + v["backward_ms"] + v["optimizer_ms"] for v in totals.values())
    timeline = busy + sum(v["idle_before_ms"] for v in totals.values())
    out = {}
    for c, v in totals.items():
        work = v["forward_ms"] + v["backward_ms"] + v["optimizer_ms"]
        out[c] = dict({k: round(x, 3) for k, x in v.items()}, busy_ms=round(work, 3),
                      share_of_busy=round(work / busy, 4) if busy else None,
                      share_of_timeline=round((work + v["idle_before_ms"]) / timeline, 4) if timeline else None)
    return dict(categories=out, busy_ms=round(busy, 3), timeline_ms=round(timeline, 3), span_ms=round(span_ms, 3),
                units=units, host_events=len(host), backward_ops=len(backward_events))


def _event_ns(e) -> tuple[int, int]:
    if hasattr(e, "start_ns"):
        return e.start_ns(), e.end_ns()
    start = int(e.start_us() * 1000)  # older torch
    return start, start + int(e.duration_us() * 1000)


def time_chain_in_forward(torch, spec: dict, model, ids) -> dict:
    """The cell chain's share of one training-mode forward, without the profiler: device events (CUDA) or the host
    clock (CPU) around each call of the chain's entry point (`run_cell_chain`, whatever the chain implementation),
    and around the whole forward."""
    import ran_hf.modeling_ran as modeling

    device = spec["device"]

    def mark():
        if device != "cuda":
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(start, end):
        return start.elapsed_time(end) / 1000 if device == "cuda" else end - start

    # only the outermost call is timed
    marks, depth = [], [0]

    def timed(function):
        def wrapper(*args, **kwargs):
            depth[0] += 1
            begin = mark() if depth[0] == 1 else None
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
                if begin is not None:
                    marks.append((begin, mark()))
        return wrapper

    restore_chain, _ = wrap_chain_entry_points(modeling, timed)
    try:
        _sync(torch, device)()
        _new_step(torch)
        start = mark()
        with _autocast(torch, spec):
            out = model(input_ids=ids)
        end = mark()
        _sync(torch, device)()
    finally:
        restore_chain()
    del out
    total = seconds(start, end)
    chain = sum(seconds(a, b) for a, b in marks)
    return dict(forward_s=round(total, 4), chain_s=round(chain, 4), chain_share=round(chain / total, 4),
                chain_calls=len(marks))


def worker_profile(spec: dict) -> None:
    """For each length: time the plain training step, then profile one step with the ranges installed."""
    torch = _torch_setup(spec)
    from torch.profiler import ProfilerActivity, profile

    device = spec["device"]
    model = _ran_model(spec).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=device == "cuda")
    sync = _sync(torch, device)
    last = None  # (windows per row, seconds the last length's profile took); the longest length comes first
    for length in spec["profile_lengths"]:
        batch = max(1, spec["tokens_per_step"] // length)
        row = dict(kind="profile", model="ran", seq_len=length, batch_size=batch, dtype=spec["dtype"],
                   chain_implementation=model.config.chain_implementation)
        windows = length / spec["size"]["window_size"]
        projected = last[1] * windows / last[0] if last else 0.0  # events grow with the windows per row
        if time.time() + projected > spec["deadline"]:
            emit(dict(row, skipped=f"time cap: projected {projected:.0f} s, part budget spent"))
            continue
        began = time.time()
        ids = torch.randint(5, spec["size"]["vocab_size"], (batch, length),
                            generator=torch.Generator().manual_seed(length)).to(device)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with _autocast(torch, spec):
                out = model(input_ids=ids)
            with torch.profiler.record_function(RANGE_PREFIX + "loss"):
                loss = _loss(out)
            loss.backward()
            with torch.profiler.record_function(RANGE_PREFIX + "optimizer"):
                optimizer.step()
            return loss

        try:
            timing, _ = benchmark.time_calls(step, 1, 1, spec["max_case_s"], sync)
            row.update(chain_forward=time_chain_in_forward(torch, spec, model, ids))
            remove, installed = install_profile_ranges(model)
            try:
                activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
                start = time.perf_counter()
                with profile(activities=activities) as prof:
                    step()
                    sync()
                profiled_s = time.perf_counter() - start
            finally:
                remove()
            parse_start = time.perf_counter()
            events = prof.profiler.kineto_results.events()
            split = breakdown_from_events(events, device)
            row.update(step_s=timing["median_s"], profiled_step_s=round(profiled_s, 3),
                       parse_s=round(time.perf_counter() - parse_start, 2), ranges_installed=installed, **split)
            last = (windows, time.time() - began)
        except Exception as exc:  # noqa: BLE001
            row.update(error=f"{type(exc).__name__}: {exc}"[:500])
            optimizer.zero_grad(set_to_none=True)
            _reset_peak(torch, device)
        emit(row)


# --------------------------------------------- generation ------------------------------------------------------------


def _prefill(model, prompt, chunk: int):
    """The prompt `(1, length)` through the cache in pieces of `chunk` tokens: the last output and the cache."""
    out, cache = None, None
    for begin in range(0, prompt.shape[1], chunk):
        out = model(prompt[:, begin: begin + chunk], cache=cache, use_cache=True)
        cache = out.cache
    return out, cache


def worker_generation(spec: dict) -> None:
    """RAN (`RANForCausalLM`) and GPT-2 of the same size: prefill each context through the cache, then time
    `decode_tokens` single-token steps (synchronised); bf16 weights on CUDA, fp32 on CPU. Each model first prefills
    one chunk and decodes a few tokens untimed, so that no timed call and no projection of a prefill's time pays for
    the first CUDA calls (at 5d4fdb5 the first 1k prefill took 1.4 s cold, which projected 32k past the cap)."""
    torch = _torch_setup(spec)
    device = spec["device"]
    dtype = torch.bfloat16 if spec["dtype"] == "bf16" else torch.float32
    sync = _sync(torch, device)
    max_positions = max(spec["contexts"]) + spec["decode_tokens"] + 1
    for name in ("ran", "gpt2"):
        size = spec["size"]
        model = benchmark.build_generator(name, size, max_positions).to(device=device, dtype=dtype)
        with torch.inference_mode():  # warm-up, untimed
            warm = torch.randint(1, size["vocab_size"], (1, spec["prefill_chunk"] + 3), device=device)
            _, cache = _prefill(model, warm[:, :spec["prefill_chunk"]], spec["prefill_chunk"])
            for token in warm[:, spec["prefill_chunk"]:].split(1, dim=1):
                cache = model(token, cache=cache, use_cache=True).cache
            sync()
            del cache
        prefill_rate = None  # seconds per context token, from the last context
        for context in spec["contexts"]:
            row = dict(kind="generation", model=name, context=context, dtype=spec["dtype"])
            projected = prefill_rate * context * 1.5 if prefill_rate else None
            if projected is not None and time.time() + projected > spec["deadline"]:
                emit(dict(row, skipped=f"time cap: projected prefill {projected:.1f} s"))
                continue
            prompt = torch.randint(1, size["vocab_size"], (1, context),
                                   generator=torch.Generator().manual_seed(context)).to(device)
            _reset_peak(torch, device)
            try:
                with torch.inference_mode():
                    sync()
                    start = time.perf_counter()
                    out, cache = _prefill(model, prompt, spec["prefill_chunk"])
                    sync()
                    prefill_s = time.perf_counter() - start
                    size_bytes = benchmark.cache_bytes(cache)
                    token, times = out.logits[:, -1:].argmax(-1), []
                    for _ in range(spec["decode_tokens"] + 1):  # the first step is a warm-up
                        sync()
                        start = time.perf_counter()
                        out = model(token, cache=cache, use_cache=True)
                        token = out.logits[:, -1:].argmax(-1)
                        sync()
                        times.append(time.perf_counter() - start)
                        cache = out.cache
                times = times[1:]
                prefill_rate = prefill_s / context
                row.update(prefill_s=round(prefill_s, 3), cache_bytes=size_bytes,
                           decode_ms_median=round(1000 * statistics.median(times), 3),
                           decode_ms_p90=round(1000 * sorted(times)[int(0.9 * (len(times) - 1))], 3),
                           peak_mb=_peak_mb(torch, device), params=sum(p.numel() for p in model.parameters()))
                del out, cache
            except Exception as exc:  # noqa: BLE001
                row.update(error=("out of memory" if _is_oom(exc) else "failed") + f": {type(exc).__name__}",
                           detail=str(exc)[:400])
                _reset_peak(torch, device)
            emit(row)
        del model
        _reset_peak(torch, device)


# --------------------------------------------- long training step ----------------------------------------------------


def worker_long_train(spec: dict) -> None:
    """One RAN training step at `long_length` tokens (batch 1) with gradient checkpointing, then a second timed."""
    torch = _torch_setup(spec)
    device = spec["device"]
    model = _ran_model(spec).to(device).train()
    model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=device == "cuda")
    length = spec["long_length"]
    ids = torch.randint(5, spec["size"]["vocab_size"], (1, length),
                        generator=torch.Generator().manual_seed(7)).to(device)
    call = _speed_call(torch, spec, model, ids, "train", optimizer)
    row = dict(kind="long_train", model="ran", seq_len=length, batch_size=1, dtype=spec["dtype"],
               gradient_checkpointing=True)
    _reset_peak(torch, device)
    sync = _sync(torch, device)
    try:
        times = []
        for _ in range(2):
            if times and time.time() + 1.5 * times[-1] > spec["deadline"]:
                break
            sync()
            start = time.perf_counter()
            finite = call()
            sync()
            times.append(time.perf_counter() - start)
        row.update(step_s=[round(t, 3) for t in times], tokens_per_s=round(length / times[-1], 1),
                   peak_mb=_peak_mb(torch, device), loss_finite=bool(finite))
        if device == "cuda":
            row["device_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    except Exception as exc:  # noqa: BLE001
        row.update(error=("out of memory" if _is_oom(exc) else "failed") + f": {type(exc).__name__}",
                   detail=str(exc)[:400], peak_mb=_peak_mb(torch, device))
    emit(row)


# --------------------------------------------- the cell chain, eager against compiled ---------------------------




def use_compile_settings(spec: dict) -> None:
    """Part of every worker's setup: point `chain_implementation="compiled"` (blocks of windows, and single windows
    for the rest) at a compile with the spec's backend and mode when they are not the shipped ones (inductor, default
    mode): `aot_eager` in the CPU rehearsal, `--compile-mode reduce-overhead` to try CUDA graphs (one graph replay
    per block)."""
    if spec["compile_backend"] == "inductor" and not spec.get("compile_mode"):
        return
    import torch

    from ran_hf import chain_compiled

    options = dict(backend=spec["compile_backend"])
    if spec.get("compile_mode"):
        options["mode"] = spec["compile_mode"]
    chain_compiled.configure(block_size=chain_compiled.BLOCK_SIZE, fullgraph=True, **options)


def optimise_cases(spec: dict) -> list[tuple[str, str, int]]:
    """(variant, mode, length) in the order they run: per length, compiled then eager, forward then train."""
    return [(variant, mode, length) for length in spec["optimise_lengths"] for variant in spec["optimise_variants"]
            for mode in ("forward", "train")]


def _compare_gradients(torch, spec, models, ids) -> list[dict]:
    """One training-mode forward and backward of each chain on the same weights: every chain against eager,
    `||chain - eager|| / ||eager||` of the outputs and of all gradients, and the seconds of each call (the first
    call of a compiled chain compiles its training graphs; of `cuda_graphs`, also captures them)."""
    results, seconds = {}, {}
    for variant in ["eager"] + [v for v in spec["optimise_variants"] if v != "eager"]:
        model = models[variant].train()
        model.zero_grad(set_to_none=True)
        _sync(torch, spec["device"])()
        _new_step(torch)
        start = time.perf_counter()
        with _autocast(torch, spec):
            out = model(input_ids=ids)
        _check_loss(out).backward()
        _sync(torch, spec["device"])()
        seconds[variant] = round(time.perf_counter() - start, 3)
        results[variant] = (out.last_hidden_state.detach().float(), torch.cat(
            [p.grad.flatten().float() for p in model.parameters() if p.grad is not None]))
        model.zero_grad(set_to_none=True)
    out_eager, grad_eager = results["eager"]
    return [dict(variant=variant, relative_error_outputs=round(_relative(out, out_eager), 6),
                 relative_error_gradients=round(_relative(grad, grad_eager), 6),
                 call_s=dict(eager=seconds["eager"], **{variant: seconds[variant]}))
            for variant, (out, grad) in results.items() if variant != "eager"]


def worker_optimise(spec: dict) -> None:
    """RAN with each `chain_implementation` of `optimise_variants` (models with the same weights, one process): at
    each length (batch `optimise_batch_size`), a forward (inference mode) and a training step (forward, loss,
    backward, AdamW), each with the chain's share of a training-mode forward; first every chain's outputs and
    gradients against eager's. A case projected past the deadline is skipped and marked. Off CUDA (the rehearsal)
    the captures of `"cuda_graphs"` are emulated by `benchmarks.static_replay`."""
    import copy

    torch = _torch_setup(spec)
    from torch._dynamo.utils import counters

    from ran_hf import chain_compiled, chain_cuda_graphs

    device = spec["device"]
    sync = _sync(torch, device)
    if device != "cuda" and "cuda_graphs" in spec["optimise_variants"]:  # the rehearsal: captures emulated
        from benchmarks import static_replay

        static_replay.install(device)
    eager = _ran_model(spec, chain="eager").to(device)
    models = dict(eager=eager)
    for variant in spec["optimise_variants"]:
        if variant != "eager":
            models[variant] = copy.deepcopy(eager)
            models[variant].config.chain_implementation = variant
    batch = spec["optimise_batch_size"]
    vocab = spec["size"]["vocab_size"]
    first = min(spec["optimise_lengths"])
    ids = torch.randint(5, vocab, (batch, first), generator=torch.Generator().manual_seed(first)).to(device)
    row = dict(kind="optimise_check", model="ran", seq_len=first, batch_size=batch, dtype=spec["dtype"],
               compile_backend=spec["compile_backend"], compile_mode=spec.get("compile_mode"),
               windows_per_compiled_call=chain_compiled.BLOCK_SIZE,
               windows_per_capture=chain_cuda_graphs.GRAPH_WINDOWS)
    try:
        for compared in _compare_gradients(torch, spec, models, ids):
            emit(dict(row, **compared))
    except Exception as exc:  # noqa: BLE001
        emit(dict(row, error=f"{type(exc).__name__}: {exc}"[:500]))
    done = {}  # (variant, mode) -> the last measured row
    for variant, mode, length in optimise_cases(spec):
        model = models[variant]
        row = dict(kind="optimise", variant=variant, mode=mode, model="ran", seq_len=length, batch_size=batch,
                   dtype=spec["dtype"], compile_backend=spec["compile_backend"] if variant != "eager" else None,
                   compile_mode=spec.get("compile_mode") if variant != "eager" else None)
        last = done.get((variant, mode))
        seen = last is not None
        projected = last["median_s"] * length / last["seq_len"] if seen else 0.0  # batch fixed: linear in windows
        if time.time() + projected > spec["deadline"]:
            emit(dict(row, skipped=f"time cap: projected {projected:.1f} s, part budget spent"))
            continue
        ids = torch.randint(5, vocab, (batch, length), generator=torch.Generator().manual_seed(length)).to(device)
        optimizer = None
        if mode == "train":
            optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=device == "cuda")
        call = _speed_call(torch, spec, model, ids, mode, optimizer)
        _reset_peak(torch, device)
        try:
            graphs_before = int(counters["stats"]["unique_graphs"])
            sync()
            start = time.perf_counter()
            finite = call()  # the warm-up; for the compiled chain also the compile of this grad mode's graphs
            sync()
            first_s = time.perf_counter() - start
            row["first_call_s"] = round(first_s, 3)
            compiled_now = int(counters["stats"]["unique_graphs"]) > graphs_before
            if seen and not compiled_now and 2 * first_s > spec["max_case_s"]:
                # a long case after a shorter one: the chain is warm (a step's shapes do not depend on the number
                # of windows), so the first call is the measurement
                times = [first_s]
            else:
                timing, finite = benchmark.time_calls(call, 0, spec["repeats"], spec["max_case_s"], sync)
                times = timing["times_s"]
            median = statistics.median(times)
            row.update(median_s=round(median, 4), times_s=[round(t, 4) for t in times],
                       tokens_per_s=round(batch * length / median, 1), peak_mb=_peak_mb(torch, device),
                       output_finite=bool(finite), new_graphs=int(counters["stats"]["unique_graphs"]) - graphs_before)
            if variant == "cuda_graphs":  # captures the model's layers hold (each with its own memory)
                row["captures"] = chain_cuda_graphs.num_captures(model)
            if mode == "train" and time.time() + row["median_s"] < spec["deadline"]:
                row["chain_forward"] = time_chain_in_forward(torch, spec, model.train(), ids)
            done[(variant, mode)] = row
        except Exception as exc:  # noqa: BLE001
            row.update(error=("out of memory" if _is_oom(exc) else "failed") + f": {type(exc).__name__}: {exc}"[:400])
            _reset_peak(torch, device)
        call = optimizer = None
        model.zero_grad(set_to_none=True)
        emit(row)


WORKERS = dict(env=worker_env, checks=worker_checks, speed=worker_speed, profile=worker_profile,
               generation=worker_generation, long_train=worker_long_train, optimise=worker_optimise)


# ----------------------------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------------------------


class Suite:
    """Runs the parts, streams every worker's records into `results.json`, keeps the time budget."""

    def __init__(self, args, scale: dict):
        self.args, self.scale = args, scale
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.start = time.time()
        self.deadline = self.start + args.budget_s
        self.data = dict(meta=dict(argv=sys.argv, command=" ".join(sys.argv), scale=args.scale,
                                   started=time.strftime("%Y-%m-%d %H:%M:%S %Z"), budget_s=args.budget_s,
                                   device=args.device, dtype=args.dtype, size=scale["size"],
                                   tokens_per_step=scale["tokens_per_step"], git=benchmark.git_info(),
                                   tolerances=TOLERANCES, platform=platform.platform(),
                                   versions=installed_versions()),
                         parts={}, records=[])
        self.save()

    def save(self) -> None:
        path = os.path.join(self.out, "results.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(path + ".tmp", path)

    def remaining(self) -> float:
        return self.deadline - time.time()

    def spec(self, **kwargs) -> dict:
        spec = dict(self.scale, device=self.args.device, dtype=self.args.dtype, threads=self.args.threads)
        spec.pop("caps")
        spec.update(kwargs)
        return spec

    def record(self, record: dict) -> None:
        record["t_s"] = round(time.time() - self.start, 1)
        self.data["records"].append(record)
        self.save()
        print(f"[{record['t_s']:6.1f}s] {summarise(record)}", flush=True)

    def run_worker(self, part: str, spec: dict, deadline: float, expected: list[dict] | None = None) -> str:
        """Run one worker process until it exits or `deadline`; returns how it ended. `expected` lists the records
        it was to write (keys that identify them): those it did not write are recorded as cut by the time cap."""
        spec = dict(spec, deadline=deadline - 2)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "benchmarks.gpu_suite", "--worker", part, "--spec", json.dumps(spec)]
        lines: queue.Queue = queue.Queue()
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=REPO_ROOT)
            reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                                      daemon=True)
            reader.start()
            written, ended = [], None
            killed = False
            while True:
                try:
                    line = lines.get(timeout=max(0.05, min(1.0, deadline - time.time())) if not killed else 5.0)
                except queue.Empty:
                    line = None if killed else ""
                if line is None:  # the worker's output ended (exited, or killed and drained)
                    proc.wait()
                    if not killed:
                        ended = "ok" if proc.returncode == 0 else f"exit code {proc.returncode}"
                    break
                if line.startswith(TAG):
                    record = json.loads(line[len(TAG):])
                    record["part"] = part
                    written.append(record)
                    self.record(record)
                elif line:
                    print(f"    {part}: {line.rstrip()}", flush=True)
                if not killed and time.time() > deadline:
                    proc.kill()  # then keep what it had written before
                    killed, ended = True, "time cap: killed at the part's deadline"
            err.seek(0)
            stderr = err.read()
        if ended != "ok":
            print(f"    {part} ({spec.get('model', '')}): {ended}; stderr tail:\n{stderr[-2000:]}", flush=True)
        for want in expected or []:
            if not any(all(r.get(k) == v for k, v in want.items()) for r in written):
                self.record(dict(want, part=part, skipped=f"not measured: worker {ended}"))
        if ended != "ok":
            self.data.setdefault("worker_errors", []).append(dict(part=part, model=spec.get("model"), ended=ended,
                                                                  stderr_tail=stderr[-3000:]))
            self.save()
        return ended

    def part(self, name: str, body) -> None:
        cap = self.args.caps.get(name, self.scale["caps"].get(name, 0))
        status = dict(cap_s=cap, started_s=round(time.time() - self.start, 1))
        if name not in self.args.parts:
            status["status"] = "not requested"
        elif cap <= 0:
            status["status"] = "skipped: no time cap given for this part at this scale"
        elif self.remaining() < min(cap, 10):
            status["status"] = f"skipped: {max(0.0, self.remaining()):.0f} s of the budget left"
        else:
            deadline = min(time.time() + cap, self.deadline)
            print(f"== {name} (cap {cap} s, {deadline - time.time():.0f} s available)", flush=True)
            try:
                status["status"] = body(deadline) or "ok"
            except Exception as exc:  # noqa: BLE001  (a driver bug must not lose the other parts)
                status["status"] = f"driver error: {type(exc).__name__}: {exc}"
        status["seconds"] = round(time.time() - self.start - status["started_s"], 1)
        self.data["parts"][name] = status
        self.save()

    # the parts ------------------------------------------------------------------------------------------------------

    def env(self, deadline):
        return self.run_worker("env", self.spec(), deadline, [dict(kind="env")])

    def checks(self, deadline):
        expected = ([dict(kind="check", check="bf16_vs_fp32")]
                    + [dict(kind="check", check="finite_forward", seq_len=n) for n in self.scale["nan_lengths"]]
                    + [dict(kind="check", check="all_pad_row")])
        return self.run_worker("checks", self.spec(), deadline, expected)

    def pytest(self, deadline):
        """The model tests on the device. At the part's deadline pytest gets SIGINT (it then prints its summary line
        with the counts so far) and, a few seconds later, SIGKILL; the progress dots are counted either way."""
        per_test = [f"--timeout={self.scale['pytest_timeout']}"] if importlib.util.find_spec("pytest_timeout") else []
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "-o", "addopts=", *per_test, "--durations=8",
               *(["-k", self.scale["pytest_select"]] if self.scale["pytest_select"] else []),
               *self.scale["pytest_files"]]
        env = dict(os.environ, RAN_TEST_DEVICE=self.args.device, PYTHONUNBUFFERED="1")
        start = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=REPO_ROOT)
        code = None
        try:
            output, _ = proc.communicate(timeout=max(1.0, deadline - PYTEST_SUMMARY_S - time.time()))
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                output, _ = proc.communicate(timeout=PYTEST_SUMMARY_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            code = f"time cap: interrupted after {time.time() - start:.0f} s"
        summary = next((line.strip("= ") for line in reversed(output.splitlines())
                        if " passed" in line or " failed" in line or " error" in line), "no summary line")
        with open(os.path.join(self.out, "pytest.txt"), "w") as f:
            f.write(" ".join(cmd) + "\n\n" + output)
        self.record(dict(kind="pytest", command="RAN_TEST_DEVICE=" + self.args.device + " " + " ".join(cmd[1:]),
                         returncode=code, summary=summary, progress=pytest_progress(output),
                         seconds=round(time.time() - start, 1), passed=code == 0))
        return "ok" if code == 0 else f"tests: {summary} (return code {code})"

    def speed(self, deadline):
        models = self.args.models
        status = []
        for index, model in enumerate(models):
            # each model gets its weight's share of what is left of the part (RAN, the slowest series, twice)
            weights = [SPEED_WEIGHTS.get(m, 1) for m in models[index:]]
            share = (deadline - time.time()) * weights[0] / sum(weights)
            tokens = self.scale["tokens_per_step"]
            expected = [dict(kind="speed", model=model, mode=mode, seq_len=length,
                             batch_size=max(1, tokens // length), tokens_per_step=max(1, tokens // length) * length)
                        for mode in self.args.modes for length in self.scale["lengths"]]
            ended = self.run_worker("speed", self.spec(model=model, modes=self.args.modes), time.time() + share,
                                    expected)
            status.append(f"{model}: {ended}")
        return "ok" if all(s.endswith(": ok") for s in status) else "; ".join(status)

    def profile(self, deadline):
        return self.run_worker("profile", self.spec(), deadline,
                               [dict(kind="profile", seq_len=n) for n in self.scale["profile_lengths"]])

    def generation(self, deadline):
        return self.run_worker("generation", self.spec(), deadline,
                               [dict(kind="generation", model=m, context=c) for m in ("ran", "gpt2")
                                for c in self.scale["contexts"]])

    def long_train(self, deadline):
        return self.run_worker("long_train", self.spec(), deadline,
                               [dict(kind="long_train", seq_len=self.scale["long_length"])])

    def optimise(self, deadline):
        spec = self.spec(compile_mode=self.args.compile_mode)
        expected = [dict(kind="optimise_check", variant=v) for v in spec["optimise_variants"] if v != "eager"]
        expected += [dict(kind="optimise", variant=v, mode=m, seq_len=n) for v, m, n in optimise_cases(spec)]
        return self.run_worker("optimise", spec, deadline, expected)

    def run(self):
        """The requested parts in the order given, then the others marked as not requested."""
        for name in list(dict.fromkeys(self.args.parts)) + [p for p in PARTS if p not in self.args.parts]:
            self.part(name, getattr(self, name))
        self.data["meta"]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        self.data["meta"]["wall_s"] = round(time.time() - self.start, 1)
        self.save()
        print(f"== done in {self.data['meta']['wall_s']} s; parts: " + ", ".join(
            f"{k}: {v['status']}" for k, v in self.data["parts"].items()), flush=True)
        return self.data


def summarise(r: dict) -> str:
    """One line per record for the log."""
    head = " ".join(str(r[k]) for k in ("kind", "model", "variant", "check", "mode") if r.get(k))
    where = next((f"L={r[k]}" for k in ("seq_len", "context") if k in r), "")
    if "error" in r or "skipped" in r:
        return f"{head} {where}: {r.get('error') or r.get('skipped')}"
    if r["kind"] == "env":
        return (f"env {r.get('device_name')} torch {r['torch']} cuda {r['cuda']} transformers {r['transformers']}: "
                f"bf16 matmul {r['matmul_tflops_bf16']} TFLOP/s")
    if r["kind"] in ("speed", "optimise"):
        return (f"{head} {where} B={r['batch_size']}: {r['median_s']:.4f} s, {r['tokens_per_s']:,.0f} tok/s"
                + (f", peak {r['peak_mb'] / 1024:.2f} GiB" if "peak_mb" in r else "")
                + (f", first call {r['first_call_s']} s" if "first_call_s" in r else "")
                + (f", chain {r['chain_forward']['chain_share']:.1%} of a forward" if "chain_forward" in r else ""))
    if r["kind"] == "profile":
        chain = r["categories"]["cell chain"]
        return (f"{head} {where}: step {r['step_s']} s, cell chain {chain['share_of_busy']:.1%} of kernel time, "
                f"{chain['share_of_timeline']:.1%} of the timeline")
    if r["kind"] == "generation":
        return f"{head} {where}: {r['decode_ms_median']} ms/token, cache {r['cache_bytes'] / 2**20:.1f} MiB"
    if r["kind"] == "long_train":
        return f"{head} {where}: steps {r['step_s']} s, peak {r['peak_mb'] / 1024:.2f} GiB"
    if r["kind"] == "pytest":
        return f"pytest: {r['summary']}; progress {json.dumps(r.get('progress'))}"
    if r["kind"] == "optimise_check":
        return (f"{head} {where}: the chain against eager, relative error outputs "
                f"{r['relative_error_outputs']:.2e}, gradients {r['relative_error_gradients']:.2e}; call seconds "
                f"{json.dumps(r['call_s'])}")
    return f"{head} {where}: passed={r.get('passed')} " + json.dumps(
        {k: r[k] for k in ("relative_errors", "seconds", "pad_row_max_abs") if k in r})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or "bench_results/gpu_suite")
    parser.add_argument("--scale", choices=sorted(SCALES), default="base")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                        help="default: bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="the whole call's time budget (default: 420 s at the base scale, 1200 s tiny)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=None,
                        help="the parts to run, in this order (default: the scale's call, e.g. env optimise speed "
                             "pytest profile)")
    parser.add_argument("--models", nargs="+", choices=SPEED_MODELS, default=None,
                        help="the speed part's models (default: the scale's, e.g. modernbert longformer)")
    parser.add_argument("--modes", nargs="+", choices=("forward", "train"), default=None,
                        help="the speed part's modes (default: the scale's, e.g. train)")
    parser.add_argument("--caps", nargs="*", default=[], metavar="PART=SECONDS",
                        help="override a part's time cap, e.g. speed=120 pytest=0")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=JSON",
                        help="override a scale setting, e.g. lengths=[512,1024] 'size={\"num_hidden_layers\":2}'")
    parser.add_argument("--compile-mode", default=None,
                        help="torch.compile mode of the optimise part's chain step (default: inductor's default; "
                             "'reduce-overhead' adds CUDA graphs)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](json.loads(args.spec))
        return None
    scale = json.loads(json.dumps(SCALES[args.scale]))
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in scale:
            parser.error(f"--set {key}: unknown setting; choose from {sorted(scale)}")
        try:
            value = json.loads(value)
        except ValueError:  # a bare word: a string
            pass
        scale[key] = dict(scale[key], **value) if isinstance(scale[key], dict) else value
    try:
        args.caps = {k: float(v) for k, v in (item.split("=") for item in args.caps)}
    except ValueError:
        parser.error("--caps takes PART=SECONDS items")
    if args.budget_s is None:
        args.budget_s = float(scale["budget_s"])
    args.parts = args.parts or list(scale["parts"])
    args.models = args.models or list(scale["speed_models"])
    args.modes = args.modes or list(scale["speed_modes"])
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    return Suite(args, scale).run()


if __name__ == "__main__":
    main()
