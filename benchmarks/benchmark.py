# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Speed and memory of RAN against the authors' `rannet` and the long-document models of Transformers.

One driver for every measurement of the README's "Speed and memory" section. Each case runs in its own
subprocess (so peak memory is per case) and writes one JSON line back; the driver writes `results.json`,
`table.md` and, when matplotlib is installed, PNG plots to `--out-dir`.

Encoder models, built from configs (no download) with the width, depth, heads and vocabulary of the RAN under test
(default base-like: vocab 30522, D 768, 2 layers, 12 heads x 64, RAN window 256, dropout 0), otherwise their own
family's defaults:

  ran          ran_hf `RANModel` of this checkout (fast path)
  ran_source   the same RAN from ANOTHER checkout (`--ran-source DIR`: the case runs with DIR first on PYTHONPATH),
               so a refactor can be timed before and after in one run, side by side
  ran_loop     the same weights run window by window by `ran_hf.reference` (forward only): what the fast path buys
  rannet       the authors' `rannet==0.3.1` (TF / Keras) in a Python 3.10 subprocess (`--rannet-python`)
  bert         `BertModel`, SDPA attention, absolute positions sized to the longest length
  longformer   `LongformerModel`, attention window 512, no global tokens
  bigbird      `BigBirdModel`, block-sparse attention (blocks of 64, 3 random blocks)
  modernbert   `ModernBertModel`, SDPA, local attention 128 with a global layer every third layer

Modes (every model does the same work in a mode):

  forward            inference mode, the encoder's outputs
  train              one full training step: forward, loss, backward AND the optimizer update (Adam, lr 1e-4, as
                     rannet's `enc_train`); loss = mean(last_hidden_state ** 2) + mean(pooled ** 2) for the models
                     with a pooled output (RAN's cell transform, rannet's cell), mean(last_hidden_state ** 2) else
  train_frozen_emb   the same step with the word embeddings frozen: no embedding gradient and no update of the
                     vocab x D table (23 M parameters at the base size); `train` minus this is what the dense
                     embedding gradient and its update cost
  train_gc           `train` with gradient checkpointing (at `--gc-lengths` only)

Dtypes `fp32` and `bf16` (autocast). Time is the median of `--repeats` calls after `--warmup` (fewer repeats when
one call would pass `--max-case-seconds / repeats`; the number done is recorded). A series stops once the next
length is projected (from its last two points) to take more than `--max-call-seconds`, or after an error; the table
says why a cell is empty. Before the cases, the matmul throughput of the device is measured at the model's
projection shapes, so the RAN / rannet rows can say which fraction of it they reach (matmul FLOPs from the config,
`flops_per_token`; a training step counted as 3x the forward).

Generation (`--contexts`): `RANForCausalLM` (and the `--ran-source` one) against a GPT-2 of the same width and
depth: the prompt prefilled through the cache in chunks of 4096, then `--decode-tokens` single-token steps; the
median per-token latency and the cache bytes after the prompt.

Commands (from the repository root):

    python benchmarks/benchmark.py --out-dir docs/benchmark               # the full CPU run of the README
    python benchmarks/benchmark.py --models ran ran_source --ran-source ../ran_hf_before --modes train \\
        --lengths 8192 --contexts --out-dir /tmp/before_after              # a refactor, before and after
    python benchmarks/benchmark.py --models ran rannet --modes train train_frozen_emb --lengths 8192 \\
        --contexts --out-dir /tmp/embedding                                # what the embedding update costs

The module level imports only the standard library: the rannet cases run this file under the rannet Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("ran", "ran_source", "ran_loop", "rannet", "bert", "longformer", "bigbird", "modernbert")
RAN_MODELS = ("ran", "ran_source", "ran_loop")
MODES = ("forward", "train", "train_frozen_emb", "train_gc")
TRAIN_MODES = ("train", "train_frozen_emb", "train_gc")
DTYPES = ("fp32", "bf16")
DEFAULT_LENGTHS = (1024, 4096, 8192, 16384, 32768, 65536)
LABELS = {"ran": "RAN (ran_hf)", "ran_source": "RAN (--ran-source)", "ran_loop": "RAN, window loop",
          "rannet": "rannet 0.3.1 (TF)", "bert": "BERT", "longformer": "Longformer", "bigbird": "BigBird",
          "modernbert": "ModernBERT", "gpt2": "GPT-2"}
MODE_TITLES = {"forward": "forward", "train": "training step (forward, backward, Adam update)",
               "train_frozen_emb": "training step, word embeddings frozen", "train_gc": "training step, gradient "
               "checkpointing"}
RANNET_SIZE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=2, num_attention_heads=12,
                   attention_head_size=64, window_size=256, min_window_size=16)
LEARNING_RATE = 1e-4  # rannet's enc_train uses Adam(1e-4)
RESULT_TAG = "BENCH_RESULT "


# ----------------------------------------------------------------------------------------------------------------------
# measurement helpers (standard library only)
# ----------------------------------------------------------------------------------------------------------------------


def flops_per_token(seq_len: int, size: dict) -> dict:
    """Matrix-multiply FLOPs per token of one RAN forward (multiply-add = 2 FLOPs). Per layer, with D = hidden,
    A = heads x head size, W = window, n = L / W windows: 2 (3DA + AD + 2D^2 + D^2 + D^2 + 2D^2) for q/k/v, the
    attention output, its GLU, the memory-review query and output and their GLU; 2 * 2 (W + 1) A for the window
    attention over the cell and W tokens; 2 * 2 n D for memory review over the n cells. The cell chain, the review's
    keys/values of the cells, the embeddings and the pooler are left out (< 1%)."""
    d = size["hidden_size"]
    a = size["num_attention_heads"] * size["attention_head_size"]
    w = size["window_size"]
    n = max(seq_len / w, 1.0)
    dense = 2 * (3 * d * a + a * d + 2 * d * d + d * d + d * d + 2 * d * d)
    per_layer = dense + 2 * 2 * (w + 1) * a + 2 * 2 * n * d
    return dict(dense=dense, per_layer=per_layer, total=per_layer * size["num_hidden_layers"])


def peak_rss_mb() -> float:
    """Peak resident set of this process (Linux ru_maxrss is in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def cpu_snapshot():
    """(wall s, CPU seconds of the whole machine, CPU seconds of this process), for contention checks."""
    busy = None
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), busy, usage.ru_utime + usage.ru_stime


def other_cpu_cores(start, end):
    """Average number of cores other processes kept busy between two snapshots (0: the machine to ourselves)."""
    wall = end[0] - start[0]
    if start[1] is None or end[1] is None or wall <= 0:
        return None
    return round(max((end[1] - start[1]) - (end[2] - start[2]), 0.0) / wall, 2)


def wait_for_quiet(max_wait_s: float, threshold_cores: float = 0.3, probe_s: float = 3.0):
    """Wait (at most max_wait_s) until other processes use fewer than threshold_cores cores."""
    t0 = time.time()
    while True:
        start = cpu_snapshot()
        time.sleep(probe_s)
        level = other_cpu_cores(start, cpu_snapshot())
        if level is None or level < threshold_cores or time.time() - t0 >= max_wait_s:
            return round(time.time() - t0, 1), level


def emit(result: dict) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)


def package_digest(package_dir: str) -> str:
    """sha256 of the package's *.py files: which model source a case timed."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(package_dir)):
        if name.endswith(".py"):
            with open(os.path.join(package_dir, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def git_info(directory: str = REPO_ROOT) -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except Exception as exc:  # pragma: no cover
            return f"unavailable: {exc}"

    return dict(head=git("rev-parse", "HEAD"), dirty_ran_hf=git("status", "--short", "--", "ran_hf"))


def _proc_kib(path: str, key: str):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def run_case_subprocess(cmd: list, env: dict, timeout: float, rss_limit_gb: float, label: dict) -> dict:
    """Run one case; never raises. Kills the child (by its pid) on timeout or when it nears the machine's memory."""
    t0 = time.time()
    max_rss, killed = 0, None
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO_ROOT)
        while proc.poll() is None:
            time.sleep(0.25)
            rss = _proc_kib(f"/proc/{proc.pid}/status", "VmRSS:") or 0
            max_rss = max(max_rss, rss)
            available = _proc_kib("/proc/meminfo", "MemAvailable:")
            if time.time() - t0 > timeout:
                killed = f"timeout after {timeout} s"
            elif rss > rss_limit_gb * 1024 ** 2:
                killed = f"OOM guard: RSS {rss / 1024 ** 2:.1f} GiB > --rss-limit-gb {rss_limit_gb}"
            elif available is not None and available < 1024 ** 2:
                killed = f"OOM guard: MemAvailable {available / 1024 ** 2:.2f} GiB < 1 GiB"
            if killed:
                proc.kill()
                proc.wait()
                break
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_TAG)]
    if lines and not killed:
        result = json.loads(lines[-1][len(RESULT_TAG):])
    else:
        error = killed or f"exit code {proc.returncode}" + (" (SIGKILL: likely the kernel OOM killer)"
                                                            if proc.returncode == -9 else "")
        result = dict(label, error=error, stderr_tail=stderr[-1500:])
    result["subprocess_wall_s"] = round(time.time() - t0, 1)
    result["watchdog_max_rss_mb"] = round(max_rss / 1024.0, 1)
    return result


def time_calls(call, warmup: int, repeats: int, max_case_seconds: float, synchronize=lambda: None) -> dict:
    """Median time of `repeats` calls after `warmup` (fewer repeats when they would pass max_case_seconds)."""
    def timed():
        synchronize()
        start = time.perf_counter()
        out = call()
        synchronize()
        return time.perf_counter() - start, out

    warmup_times = [timed()[0] for _ in range(warmup)]
    per_call = max(warmup_times) if warmup_times else 0.0
    if per_call > 0 and per_call * repeats > max_case_seconds:
        repeats = max(1, int(max_case_seconds // per_call))
    start = cpu_snapshot()
    times, out = [], None
    for _ in range(repeats):
        seconds, out = timed()
        times.append(seconds)
    return dict(times_s=[round(t, 4) for t in times], median_s=round(statistics.median(times), 4),
                repeats_done=repeats, warmup_s=[round(t, 3) for t in warmup_times],
                other_procs_cpu_cores=other_cpu_cores(start, cpu_snapshot())), out


# ----------------------------------------------------------------------------------------------------------------------
# PyTorch cases (run in a subprocess of this Python, or of --ran-source's PYTHONPATH)
# ----------------------------------------------------------------------------------------------------------------------


def build_encoder(name: str, size: dict, max_length: int):
    """The encoder `name` at the width/depth/heads/vocab of `size`, dropout 0, positions for `max_length` tokens."""
    import transformers

    common = dict(vocab_size=size["vocab_size"], hidden_size=size["hidden_size"],
                  num_hidden_layers=size["num_hidden_layers"], num_attention_heads=size["num_attention_heads"])
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if name in RAN_MODELS:
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


def _ran_source_info() -> dict:
    import ran_hf

    package = os.path.dirname(os.path.abspath(ran_hf.__file__))
    return dict(ran_hf_dir=package, ran_hf_digest=package_digest(package))


def run_encoder_case(case: dict) -> dict:
    import numpy as np
    import torch

    device = torch.device(case["device"])
    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    model = build_encoder(case["model"], case["size"], case["seq_len"]).to(device)
    ids = torch.from_numpy(np.random.RandomState(0).randint(5, case["size"]["vocab_size"],
                                                            (case["batch_size"], case["seq_len"]))).to(device)
    mode, bf16 = case["mode"], case["dtype"] == "bf16"
    result = dict(params=sum(p.numel() for p in model.parameters()), rss_after_build_mb=peak_rss_mb(),
                  torch=torch.__version__, threads=torch.get_num_threads())
    if case["model"] in RAN_MODELS:
        result.update(_ran_source_info())
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    if mode == "forward":
        model.eval()

        def call():
            with torch.inference_mode(), autocast:
                if case["model"] == "ran_loop":
                    from ran_hf import reference

                    return [reference.encode(model, row)["last_hidden_state"] for row in ids][0]
                return model(input_ids=ids).last_hidden_state
    else:
        model.train()
        embedding = model.get_input_embeddings().weight
        if mode == "train_frozen_emb":
            embedding.requires_grad_(False)
        if mode == "train_gc":
            model.gradient_checkpointing_enable()
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
        result.update(optimizer="Adam", trained_params=sum(p.numel() for p in model.parameters() if p.requires_grad))
        # one row per weight matrix (for the embedding: the row of a token in the input), to check the update
        fingerprint = {name: (p[int(ids[0, 0])] if p is embedding else p[0]).detach().clone()
                       for name, p in model.named_parameters() if p.ndim == 2}

        def call():
            optimizer.zero_grad(set_to_none=True)
            with autocast:
                out = model(input_ids=ids)
            loss = out.last_hidden_state.float().square().mean()
            pooled = getattr(out, "pooler_output", None)
            if pooled is not None:
                loss = loss + pooled.float().square().mean()
            loss.backward()
            optimizer.step()
            return out.last_hidden_state.detach()

    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    timing, out = time_calls(call, case["warmup"], case["repeats"], case["max_case_seconds"], synchronize)
    result.update(timing, output_finite=bool(torch.isfinite(out.float()).all()))
    if mode != "forward":  # the step really updated the weights (and left a frozen embedding alone)
        moved = {name for name, p in model.named_parameters() if name in fingerprint and not torch.equal(
            p[int(ids[0, 0])] if p is embedding else p[0], fingerprint[name])}
        with_gradient = {name for name, p in model.named_parameters() if name in fingerprint and p.grad is not None
                         and bool(p.grad.any())}
        result["updated_weight_matrices"] = f"{len(moved)} of {len(with_gradient)} with a gradient"
        result["embedding_updated"] = any(p is embedding for name, p in model.named_parameters() if name in moved)
    result["tokens_per_s"] = round(case["batch_size"] * case["seq_len"] / result["median_s"], 1)
    result["peak_rss_mb"] = peak_rss_mb()
    if device.type == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return result


def build_generator(name: str, size: dict, max_positions: int):
    """`RANForCausalLM` or a GPT-2 of the same width and depth (dropout 0), in eval mode."""
    if name in ("ran", "ran_source"):
        from ran_hf import RANConfig, RANForCausalLM

        config = RANConfig(vocab_size=size["vocab_size"], hidden_size=size["hidden_size"],
                           num_hidden_layers=size["num_hidden_layers"],
                           num_attention_heads=size["num_attention_heads"],
                           attention_head_size=size["attention_head_size"], window_size=size["window_size"],
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return RANForCausalLM(config).eval()
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=size["vocab_size"], n_embd=size["hidden_size"], n_layer=size["num_hidden_layers"],
                        n_head=size["num_attention_heads"], n_positions=max_positions, bos_token_id=0, eos_token_id=0,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa")
    return GPT2LMHeadModel(config).eval()


def cache_bytes(cache) -> int:
    if hasattr(cache, "num_bytes"):
        return cache.num_bytes()
    total = 0
    for layer in cache.layers:
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
    return total


def run_generation_case(case: dict) -> dict:
    import torch

    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    torch.manual_seed(0)
    context, decode_tokens, chunk = case["context"], case["decode_tokens"], 4096
    model = build_generator(case["model"], case["size"], context + decode_tokens + 1).to(case["device"])
    prompt = torch.randint(1, case["size"]["vocab_size"], (1, context), generator=torch.Generator().manual_seed(0))
    prompt = prompt.to(case["device"])
    with torch.inference_mode():
        cache, start = None, time.perf_counter()
        for begin in range(0, context, chunk):
            out = model(prompt[:, begin: begin + chunk], cache=cache, use_cache=True)
            cache = out.cache
        prefill = time.perf_counter() - start
        size = cache_bytes(cache)
        token, times = out.logits[:, -1:].argmax(-1), []
        for _ in range(decode_tokens):
            start = time.perf_counter()
            out = model(token, cache=cache, use_cache=True)
            times.append(time.perf_counter() - start)
            cache, token = out.cache, out.logits[:, -1:].argmax(-1)
    result = dict(prefill_s=round(prefill, 3), cache_bytes_after_prompt=size,
                  decode_ms_median=round(1000 * statistics.median(times), 3),
                  decode_ms_p90=round(1000 * sorted(times)[int(0.9 * len(times))], 3),
                  params=sum(p.numel() for p in model.parameters()), peak_rss_mb=peak_rss_mb())
    if hasattr(cache, "states"):  # RAN: the memory-review history is the only part that grows with the context
        history = sum(s.review_keys.numel() * s.review_keys.element_size() * 2 for s in cache.states)
        result.update(review_history_bytes=history, fixed_state_bytes=size - history)
    if case["model"] != "gpt2":
        result.update(_ran_source_info())
    return result


def run_matmul_case(case: dict) -> dict:
    """Best GFLOP/s of the model's projection shapes (T x D tokens, D -> k linear) on the device, fp32 and bf16."""
    import torch

    if case.get("threads"):
        torch.set_num_threads(case["threads"])
    device = torch.device(case["device"])
    d = case["size"]["hidden_size"]
    tokens = 2048 if device.type == "cpu" else 16384
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    result = {}
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        best = 0.0
        for width in (d, 2 * d, 3 * d):
            x = torch.randn(tokens, d, device=device, dtype=dtype)
            weight = torch.randn(width, d, device=device, dtype=dtype)
            torch.nn.functional.linear(x, weight)
            synchronize()
            start = time.perf_counter()
            for _ in range(3):
                torch.nn.functional.linear(x, weight)
            synchronize()
            best = max(best, 2.0 * tokens * d * width * 3 / (time.perf_counter() - start) / 1e9)
        result[f"matmul_gflops_{dtype_name}"] = round(best, 1)
    return result


# ----------------------------------------------------------------------------------------------------------------------
# rannet==0.3.1 cases (TF / Keras; run by the rannet Python 3.10)
# ----------------------------------------------------------------------------------------------------------------------


def run_rannet_case(case: dict) -> dict:
    """rannet's encoder (`RanNet(return_sequences, return_cell, apply_cell_transform)`) in a `tf.function`: forward
    with training=False, or one training step (loss mean(seq^2) + mean(cell^2), GradientTape, Adam(1e-4) update,
    as the authors' enc_train)."""
    os.environ["TF_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    from rannet import RanNet, RanNetParams

    size = case["size"]
    np.random.seed(0)
    tf.random.set_seed(0)
    params = RanNetParams(dict(vocab_size=size["vocab_size"], embedding_size=size["hidden_size"],
                               ran_layers=size["num_hidden_layers"], head_num=size["num_attention_heads"],
                               head_size=size["attention_head_size"], window_size=size["window_size"],
                               min_window_size=size["min_window_size"], dropout_rate=0.0))
    model = RanNet(params, return_sequences=True, return_cell=True, apply_cell_transform=True)()
    x = tf.constant(np.random.RandomState(0).randint(5, size["vocab_size"], (1, case["seq_len"])).astype(np.float32))
    result = dict(params=int(model.count_params()), framework="tensorflow " + tf.__version__,
                  rss_after_build_mb=peak_rss_mb())
    if case["mode"] == "forward":
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
        def forward(inputs):
            return model(inputs, training=False)

        def call():
            sequence, cell = forward(x)
            return sequence.numpy(), cell.numpy()
    else:
        optimizer = tf.keras.optimizers.Adam(LEARNING_RATE)
        variables = model.trainable_variables

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
        def train_step(inputs):
            with tf.GradientTape() as tape:
                sequence, cell = model(inputs, training=True)
                loss = tf.reduce_mean(tf.square(sequence)) + tf.reduce_mean(tf.square(cell))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        def call():
            return train_step(x).numpy()

        result["optimizer"] = "Adam"
    timing, _ = time_calls(call, case["warmup"], case["repeats"], case["max_case_seconds"])
    result.update(timing, output_finite=True, tokens_per_s=round(case["seq_len"] / timing["median_s"], 1),
                  peak_rss_mb=peak_rss_mb())
    return result


# ----------------------------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------------------------


def subprocess_case(case: dict, args) -> dict:
    """Run one case in a fresh process: rannet with the rannet Python, `ran_source` with --ran-source first on
    PYTHONPATH, everything else with this Python."""
    env = dict(os.environ)
    python = sys.executable
    if case.get("model") == "rannet":
        python = args.rannet_python
        env.update(TF_KERAS="1", TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    elif case.get("model") == "ran_source":
        env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(args.ran_source), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    cmd = [python, os.path.abspath(__file__), "--case", json.dumps(case)]
    label = {k: case[k] for k in ("model", "seq_len", "context") if k in case}
    result = run_case_subprocess(cmd, env, args.timeout, args.rss_limit_gb, label)
    if case.get("model") == "ran_source" and "ran_hf_dir" in result:
        expected = os.path.join(os.path.abspath(args.ran_source), "ran_hf")
        if os.path.realpath(result["ran_hf_dir"]) != os.path.realpath(expected):
            result = dict(label, error=f"--ran-source: the case imported ran_hf from {result['ran_hf_dir']}, not "
                                       f"{expected} (is ran_hf installed in a way that shadows PYTHONPATH?)")
    return {**case, **result}


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
                    if model == "ran_loop" and mode != "forward":
                        continue
                    if model == "rannet" and (mode in ("train_gc", "train_frozen_emb") or dtype != "fp32"
                                              or device != "cpu" or batch_size != 1):
                        continue
                    lengths = args.lengths
                    if mode == "train_gc":
                        lengths = [length for length in args.gc_lengths if length <= max(args.lengths)]
                    for length in sorted(lengths):
                        cases.append(dict(base, model=model, mode=mode, dtype=dtype, batch_size=batch_size,
                                          seq_len=length))
    return cases


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run_all(args) -> dict:
    device = args.device
    meta = dict(argv=sys.argv, started=time.strftime("%Y-%m-%d %H:%M:%S"), python=sys.version.split()[0],
                machine=platform.machine(), processor=_cpu_name(), cpus=os.cpu_count(), device=device,
                git=git_info(), size=args.size, repeats=args.repeats, warmup=args.warmup,
                max_call_seconds=args.max_call_seconds, rss_limit_gb=args.rss_limit_gb,
                learning_rate=LEARNING_RATE, ran_source=os.path.abspath(args.ran_source) if args.ran_source else None)
    if args.ran_source:
        meta["ran_source_git"] = git_info(args.ran_source)
    os.makedirs(args.out_dir, exist_ok=True)
    out_path = os.path.join(args.out_dir, "results.json")
    results: list[dict] = []

    def save():
        with open(out_path, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)

    meta.update(subprocess_case(dict(kind="matmul", device=device, size=args.size, threads=args.threads), args))
    print(f"matmul throughput: fp32 {meta.get('matmul_gflops_fp32')} GFLOP/s, bf16 {meta.get('matmul_gflops_bf16')}"
          f" GFLOP/s", flush=True)
    rannet_size = all(args.size[k] == v for k, v in RANNET_SIZE.items())
    rannet_ok = bool(args.rannet_python) and os.path.exists(args.rannet_python) and rannet_size
    for case in plan_cases(args, device):
        if case["model"] == "rannet" and not rannet_ok:
            results.append({**case, "skipped": f"n/a: no rannet Python (--rannet-python) at "
                            f"{args.rannet_python}" if rannet_size
                            else "n/a: rannet runs only the base-like size"})
            continue
        series = [r for r in results if r.get("kind") == "encoder" and all(
            r.get(k) == case[k] for k in ("model", "mode", "dtype", "batch_size"))]
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
            print(f"  skip {case['model']} {case['mode']} {case['dtype']} L={case['seq_len']}: "
                  f"{results[-1]['skipped']}", flush=True)
            continue
        if args.wait_idle > 0:
            wait_for_quiet(args.wait_idle)
        print(f"[{time.strftime('%H:%M:%S')}] {case['model']:<10} {case['mode']:<16} {case['dtype']} "
              f"B={case['batch_size']} L={case['seq_len']:<6} ...", end=" ", flush=True)
        result = subprocess_case(case, args)
        results.append(result)
        print(f"ERROR: {result['error']}" if "error" in result else
              f"{result['median_s']:.3f} s/call, {result['tokens_per_s']:,.0f} tok/s, peak RSS "
              f"{result['peak_rss_mb'] / 1024:.2f} GiB", flush=True)
        save()

    generators = [m for m in ("ran", "ran_source") if m in args.models] + ["gpt2"]
    for model in generators if args.contexts else []:
        for context in args.contexts:
            case = dict(kind="generation", model=model, context=context, decode_tokens=args.decode_tokens,
                        device=device, size=args.size, threads=args.threads)
            print(f"[{time.strftime('%H:%M:%S')}] generate {model:<10} context {context:<6} ...", end=" ", flush=True)
            result = subprocess_case(case, args)
            results.append(result)
            print(f"ERROR: {result['error']}" if "error" in result else
                  f"{result['decode_ms_median']:.1f} ms/token, cache {result['cache_bytes_after_prompt'] / 2**20:.2f}"
                  f" MiB", flush=True)
            save()
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save()
    return dict(meta=meta, results=results)


# ----------------------------------------------------------------------------------------------------------------------
# report: table and plots
# ----------------------------------------------------------------------------------------------------------------------


def _matmul_fraction(row: dict, meta: dict) -> float | None:
    if row["model"] not in ("ran", "ran_source", "rannet") or "median_s" not in row:
        return None
    peak = meta.get(f"matmul_gflops_{row['dtype']}")
    flops = flops_per_token(row["seq_len"], row["size"])["total"] * row["seq_len"] * row["batch_size"]
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


def _label(model: str, meta: dict) -> str:
    if model == "ran_source" and meta.get("ran_source"):
        return f"RAN ({meta['ran_source']})"
    return LABELS[model]


def markdown_report(data: dict) -> str:
    meta, rows = data["meta"], data["results"]
    encoder = [r for r in rows if r.get("kind") == "encoder"]
    lines = [f"Machine: {meta.get('processor')}, {meta.get('cpus')} CPUs, device `{meta['device']}`; measured "
             f"matmul throughput {meta.get('matmul_gflops_fp32')} GFLOP/s fp32, {meta.get('matmul_gflops_bf16')} "
             f"GFLOP/s bf16. Started {meta['started']}, git {meta['git']['head'][:10]}. Training steps: forward, "
             f"loss, backward and an Adam update (lr {meta.get('learning_rate', LEARNING_RATE)}) for every model.",
             ""]
    if meta.get("note"):
        lines += [meta["note"], ""]
    params = {r["model"]: r["params"] for r in encoder if "params" in r}
    lines += ["Parameters: " + ", ".join(f"{_label(m, meta)} {p / 1e6:.1f} M" for m, p in params.items()), ""]
    groups = sorted({(r["mode"], r["dtype"], r["batch_size"]) for r in encoder},
                    key=lambda g: (MODES.index(g[0]), g[1], g[2]))
    for mode, dtype, batch_size in groups:
        group = [r for r in encoder if (r["mode"], r["dtype"], r["batch_size"]) == (mode, dtype, batch_size)]
        lengths = sorted({r["seq_len"] for r in group})
        models = [m for m in MODELS if any(r["model"] == m for r in group)]
        lines += [f"**{MODE_TITLES[mode]}, {dtype}, batch {batch_size}**: tokens/s (peak memory GiB)", "",
                  "| model | " + " | ".join(f"{length:,}" for length in lengths) + " |",
                  "| --- |" + " --- |" * len(lengths)]
        for model in models:
            cells = [_cell(next((r for r in group if r["model"] == model and r["seq_len"] == length), None))
                     for length in lengths]
            lines.append(f"| {_label(model, meta)} | " + " | ".join(cells) + " |")
        lines.append("")
        fractions = [(r["model"], r["seq_len"], _matmul_fraction(r, meta)) for r in group]
        fractions = [f"{_label(m, meta)} {length:,}: {f:.0%}" for m, length, f in fractions if f is not None]
        if fractions:
            lines += ["Fraction of the measured matmul throughput (matmul FLOPs from the config): "
                      + ", ".join(fractions), ""]
    lines += _embedding_cost_lines(encoder, meta)
    generation = [r for r in rows if r.get("kind") == "generation" and "decode_ms_median" in r]
    if generation:
        contexts = sorted({r["context"] for r in generation})
        lines += ["**generation**: per-token decode latency in ms (cache MiB after the prompt)", "",
                  "| model | " + " | ".join(f"{c:,}" for c in contexts) + " |", "| --- |" + " --- |" * len(contexts)]
        for model in ("ran", "ran_source", "gpt2"):
            if not any(r["model"] == model for r in generation):
                continue
            cells = []
            for c in contexts:
                r = next((r for r in generation if r["model"] == model and r["context"] == c), None)
                cells.append("" if r is None else f"{r['decode_ms_median']:.1f} "
                                                  f"({r['cache_bytes_after_prompt'] / 2**20:.1f})")
            lines.append(f"| {_label(model, meta)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _embedding_cost_lines(encoder: list[dict], meta: dict) -> list[str]:
    """Share of a training step that the word embeddings' gradient and update take (train vs train_frozen_emb)."""
    out = []
    for r in encoder:
        if r["mode"] != "train_frozen_emb" or "median_s" not in r:
            continue
        full = next((x for x in encoder if x["mode"] == "train" and "median_s" in x and all(
            x[k] == r[k] for k in ("model", "dtype", "batch_size", "seq_len"))), None)
        if full is not None:
            share = 1 - r["median_s"] / full["median_s"]
            out.append(f"{_label(r['model'], meta)} {r['seq_len']:,} {r['dtype']}: {full['median_s']:.3f} s with the "
                       f"embedding trained, {r['median_s']:.3f} s frozen ({share:+.0%} of the step)")
    return (["Word-embedding gradient and update (train minus train_frozen_emb): " + "; ".join(out), ""]
            if out else [])


def plot(data: dict, out_dir: str) -> list[str]:
    """Time and memory against length (log-log), one PNG per (mode, dtype, batch) and one for generation; nothing
    when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", flush=True)
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = data["meta"]
    rows = [r for r in data["results"] if "median_s" in r or "decode_ms_median" in r]
    written = []

    def finish(fig, axes, xlabel, ylabels, title, name):
        for ax, ylabel in zip(axes, ylabels):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(title)
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    encoder = [r for r in rows if r.get("kind") == "encoder"]
    memory_label = "peak GPU memory (GiB)" if meta["device"] == "cuda" else "peak RSS (GiB)"
    for mode, dtype, batch_size in sorted({(r["mode"], r["dtype"], r["batch_size"]) for r in encoder}):
        group = [r for r in encoder if (r["mode"], r["dtype"], r["batch_size"]) == (mode, dtype, batch_size)]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for model in MODELS:
            series = sorted((r for r in group if r["model"] == model), key=lambda r: r["seq_len"])
            if series:
                lengths = [r["seq_len"] for r in series]
                axes[0].plot(lengths, [r["median_s"] for r in series], marker="o", label=_label(model, meta))
                axes[1].plot(lengths, [r.get("peak_gpu_mb", r["peak_rss_mb"]) / 1024 for r in series], marker="o",
                             label=_label(model, meta))
        finish(fig, axes, "sequence length (tokens)", ("seconds per call", memory_label),
               f"{MODE_TITLES[mode]}, {dtype}, batch {batch_size}, {meta['device']}",
               f"{mode}_{dtype}_b{batch_size}.png")
    generation = [r for r in rows if r.get("kind") == "generation"]
    if generation:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for model in ("ran", "ran_source", "gpt2"):
            series = sorted((r for r in generation if r["model"] == model), key=lambda r: r["context"])
            if series:
                contexts = [r["context"] for r in series]
                axes[0].plot(contexts, [r["decode_ms_median"] for r in series], marker="o", label=_label(model, meta))
                axes[1].plot(contexts, [r["cache_bytes_after_prompt"] / 2**20 for r in series], marker="o",
                             label=_label(model, meta))
        finish(fig, axes, "context (tokens)", ("ms per generated token", "cache after the prompt (MiB)"),
               "generation: decode latency and cache size", "generation.png")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS,
                        default=[m for m in MODELS if m != "ran_source"],
                        help="default: all but ran_source (which needs --ran-source)")
    parser.add_argument("--ran-source", default=None, metavar="DIR",
                        help="another checkout of ran_hf (the folder holding its ran_hf/ package); the ran_source "
                             "cases import ran_hf from there (it is added to --models when not listed)")
    parser.add_argument("--lengths", nargs="+", type=int, default=list(DEFAULT_LENGTHS))
    parser.add_argument("--modes", nargs="*", choices=MODES, default=["forward", "train", "train_gc"],
                        help="default: forward train train_gc; train_frozen_emb times the step without the "
                             "word-embedding gradient and update; none: generation only")
    parser.add_argument("--gc-lengths", nargs="*", type=int, default=[65536],
                        help="lengths of the train_gc cases, those up to max(--lengths)")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=None,
                        help="default: fp32 on CPU, fp32 and bf16 on CUDA")
    parser.add_argument("--loop-max-length", type=int, default=8192,
                        help="longest input of the ran_loop baseline (it is linear in the length)")
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
    parser.add_argument("--rannet-python", default=os.environ.get("RANNET_PYTHON"),
                        help="a Python 3.10 with tensorflow 2.10, numpy<2 and rannet==0.3.1 (default: $RANNET_PYTHON; "
                             "without one the rannet rows are marked n/a)")
    parser.add_argument("--out-dir", default="bench_results/benchmark")
    parser.add_argument("--report-only", action="store_true", help="redo table and plots from out-dir/results.json")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.case:  # inside a case subprocess
        case = json.loads(args.case)
        if case.get("model") == "rannet":
            emit(run_rannet_case(case))
        else:
            runner = {"encoder": run_encoder_case, "generation": run_generation_case, "matmul": run_matmul_case}
            emit(runner[case["kind"]](case))
        return None

    if args.ran_source:
        if not os.path.isfile(os.path.join(args.ran_source, "ran_hf", "__init__.py")):
            parser.error(f"--ran-source {args.ran_source}: no ran_hf/__init__.py there; pass the root of another "
                         f"ran_hf checkout")
        if "ran_source" not in args.models:
            args.models.insert(args.models.index("ran") + 1 if "ran" in args.models else 0, "ran_source")
    elif "ran_source" in args.models:
        parser.error("--models ran_source needs --ran-source DIR (another ran_hf checkout)")
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
    print(f"results: {os.path.join(args.out_dir, 'results.json')}; plots: {', '.join(plots) or 'none'}")
    return data


if __name__ == "__main__":
    main()
