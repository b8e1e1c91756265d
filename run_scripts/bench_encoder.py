# -*- coding: utf-8 -*-
"""CPU benchmark of the RAN encoder: ours (`ran_hf`, PyTorch) against the authors' `rannet==0.3.1` (TF / Keras).

Everything is batch 1 on the CPU, with the base-like config: vocab 30522, hidden 768, 2 RAN layers, 12 heads of 64,
window 256, min window 16, dropout 0. Token ids are `numpy.random.RandomState(0).randint(1, 30522, (1, L))`.

Cases (each (case, length) runs in its own subprocess, so the recorded peak RSS, `ru_maxrss`, is per case):

  ours_fp32     RANModel forward, float32, under torch.inference_mode().
  ours_bf16     the same under torch.autocast("cpu", dtype=torch.bfloat16); also one (untimed) float32 forward on
                the same input, and the max abs / relative difference of last_hidden_state and pooler_output.
  ours_train    forward + backward in float32 (model.train(), dropout 0), loss = mean(seq**2) + mean(pooled**2);
                gradients of every parameter, no optimizer step.
  rannet_fwd    RanNet(return_sequences, return_cell, apply_cell_transform) forward, float32, in a tf.function
                with training=False (run by the rannet Python; TF_KERAS=1).
  rannet_train  the same encoder, loss as above, GradientTape in a tf.function with training=True: backward only,
                no optimizer step (the gradients are reduced to one global squared norm so none is pruned).
  memory        one float32 forward of --memory-length tokens (default 131072) of ours: wall time and peak RSS.
  profile       (not in the default set) torch.profiler of one ours fp32 forward after a warm-up: top 15 ops by
                self CPU time.

Timings are the median of --repeats calls after --warmup calls (the first TF call traces the graph). tokens/s =
L / median. A subprocess that passes --timeout seconds, or whose RSS passes --rss-limit-gb (or leaves less than
1 GiB of MemAvailable), is killed and recorded as such; the run goes on.

FLOPs (matrix multiplies only, multiply-add = 2 FLOPs) per token per layer, with D = hidden, A = heads * head size,
W = window, n = L / W windows:
  2 * (3*D*A + A*D + 2*D*D + D*D + D*D + 2*D*D)   q/k/v, attention output, attention GLU, memory-review q, o, GLU
  + 2 * 2 * (W + 1) * A                            window attention (scores and values over the cell + W tokens)
  + 2 * 2 * n * D                                  memory review over the n cells
The sequential cell chain, the memory-review k/v of the cells, embeddings and pooler are left out (< 1%).
A forward + backward is counted as 3x the forward.

Commands (from the repository root):

  # the full side-by-side run used for the report (about 25 minutes, most of it bf16 at 32k, when the machine is
  # quiet; --wait-idle waits up to 10 min before each case for other processes to leave the 2 cores alone and
  # --retry-if-contended re-runs a case that was disturbed anyway)
  python run_scripts/bench_encoder.py --lengths 8192 32768 --wait-idle 600 --retry-if-contended 2 \
      --out bench_results/bench_encoder.json

  # ours only / some cases only
  python run_scripts/bench_encoder.py --skip-rannet --modes ours_fp32 ours_bf16 --lengths 2048

  # profile of ours fp32 forward (top 15 ops by self CPU time)
  python run_scripts/bench_encoder.py --modes profile --lengths 8192 32768 --skip-rannet --wait-idle 600 \
      --out bench_results/profile_encoder.json

  # one case by hand (what the driver runs; ours cases with this Python, rannet cases with the rannet Python)
  python run_scripts/bench_encoder.py --case ours_fp32 --seq-len 8192
  TF_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 /opt/rannet-venv/bin/python run_scripts/bench_encoder.py \
      --case rannet_fwd --seq-len 8192

This file runs under both Pythons: the module level imports only the standard library (torch and ran_hf are
imported inside the ours cases, tensorflow and rannet inside the rannet cases).
"""
import argparse
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)

CONFIG = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=2, num_attention_heads=12, attention_head_size=64,
              window_size=256, min_window_size=16)
RANNET_PARAMS = dict(vocab_size=30522, embedding_size=768, ran_layers=2, head_num=12, head_size=64, window_size=256,
                     min_window_size=16, dropout_rate=0.0)

OURS_MODES = ("ours_fp32", "ours_bf16", "ours_train")
RANNET_MODES = ("rannet_fwd", "rannet_train")
DEFAULT_MODES = OURS_MODES + RANNET_MODES + ("memory",)
ALL_MODES = DEFAULT_MODES + ("profile",)
RESULT_TAG = "BENCH_RESULT "


# ----------------------------------------------------------------------------------------------------------------------
# helpers shared by all cases
# ----------------------------------------------------------------------------------------------------------------------


def flops_per_token(seq_len, cfg=CONFIG):
    """Matrix-multiply FLOPs per token of one forward (see the module docstring)."""
    D = cfg["hidden_size"]
    A = cfg["num_attention_heads"] * cfg["attention_head_size"]
    W = cfg["window_size"]
    n = max(seq_len / W, 1.0)
    dense = 2 * (3 * D * A + A * D + 2 * D * D + D * D + D * D + 2 * D * D)
    window_attention = 2 * 2 * (W + 1) * A
    memory_review = 2 * 2 * n * D
    per_layer = dense + window_attention + memory_review
    return dict(dense=dense, window_attention=window_attention, memory_review=memory_review, per_layer=per_layer,
                total=per_layer * cfg["num_hidden_layers"])


def peak_rss_mb():
    """Peak resident set of this process (Linux ru_maxrss is in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def token_ids(seq_len, vocab_size):
    import numpy as np

    return np.random.RandomState(0).randint(1, vocab_size, size=(1, seq_len))


def cpu_snapshot():
    """(wall s, CPU seconds used by the whole machine, CPU seconds used by this process) for contention checks."""
    busy = None
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # user..steal, without guest (counted in user)
    except (OSError, ValueError, IndexError):
        pass
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), busy, usage.ru_utime + usage.ru_stime


def other_cpu_cores(start, end):
    """Average number of cores that *other* processes kept busy between two snapshots (0 = machine to ourselves)."""
    wall = end[0] - start[0]
    if start[1] is None or end[1] is None or wall <= 0:
        return None
    return round(max((end[1] - start[1]) - (end[2] - start[2]), 0.0) / wall, 2)


def time_calls(fn, warmup, repeats):
    """Returns (times of the timed calls, other processes' average CPU cores during them, last call's output)."""
    times = []
    out = None
    start = None
    for i in range(warmup + repeats):
        if i == warmup:
            start = cpu_snapshot()
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    return times, other_cpu_cores(start, cpu_snapshot()), out


def summarize(timed, seq_len, flops_total):
    times, other_cores, _ = timed
    med = statistics.median(times)
    return dict(times_s=[round(t, 4) for t in times], median_s=round(med, 4), tokens_per_s=round(seq_len / med, 1),
                gflops_per_s=round(flops_total / med / 1e9, 2), other_procs_cpu_cores=other_cores)


def source_digest():
    """sha256 of ran_hf/*.py as this process sees them (the package is being edited while benchmarks run)."""
    h = hashlib.sha256()
    pkg = os.path.join(REPO_ROOT, "ran_hf")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def emit(result):
    print(RESULT_TAG + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------------------------------------------------
# ours (PyTorch)
# ----------------------------------------------------------------------------------------------------------------------


def build_ours(threads):
    if REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)
    import torch

    if threads:
        torch.set_num_threads(threads)
    from ran_hf import RANConfig, RANModel

    torch.manual_seed(0)
    config = RANConfig(**CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = RANModel(config).eval()
    return torch, model


def case_ours(mode, seq_len, warmup, repeats, threads):
    torch, model = build_ours(threads)
    ids = torch.from_numpy(token_ids(seq_len, CONFIG["vocab_size"])).long()
    fpt = flops_per_token(seq_len)
    res = dict(case=mode, seq_len=seq_len, framework="torch " + torch.__version__,
               params=sum(p.numel() for p in model.parameters()), torch_threads=torch.get_num_threads(),
               torch_interop_threads=torch.get_num_interop_threads(), ran_hf_digest=source_digest(),
               rss_after_build_mb=peak_rss_mb(), flops_per_token=fpt["total"])

    if mode == "ours_fp32":
        def call():
            with torch.inference_mode():
                out = model(ids)
            return out

        res.update(summarize(time_calls(call, warmup, repeats), seq_len, fpt["total"] * seq_len))
        res["warmup"] = warmup

    elif mode == "ours_bf16":
        def call():
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(ids)
            return out

        timed = time_calls(call, warmup, repeats)
        res.update(summarize(timed, seq_len, fpt["total"] * seq_len))
        res["warmup"] = warmup
        low = timed[2]  # output of the last timed bf16 call
        with torch.inference_mode():
            ref = model(ids)
        res["output_dtype_bf16"] = str(low.last_hidden_state.dtype)
        for name in ("last_hidden_state", "pooler_output"):
            a = ref[name].float()
            b = low[name].float()
            diff = (a - b).abs()
            res[name + "_max_abs_err"] = float(diff.max())
            res[name + "_max_abs_ref"] = float(a.abs().max())
            res[name + "_rel_err_max"] = float(diff.max() / a.abs().max().clamp_min(1e-30))
            res[name + "_rel_err_norm"] = float((a - b).norm() / a.norm().clamp_min(1e-30))
            res[name + "_finite"] = bool(torch.isfinite(b).all())

    elif mode == "ours_train":
        model.train()
        losses = []

        def call():
            model.zero_grad(set_to_none=True)
            out = model(ids)
            loss = out.last_hidden_state.square().mean() + out.pooler_output.square().mean()
            loss.backward()
            losses.append(float(loss))

        res.update(summarize(time_calls(call, warmup, repeats), seq_len, 3 * fpt["total"] * seq_len))
        res["warmup"] = warmup
        res["loss"] = losses[-1]
        res["grad_norm"] = float(torch.sqrt(sum(p.grad.float().square().sum() for p in model.parameters()
                                                if p.grad is not None)))
        res["optimizer"] = "none (backward only)"

    elif mode == "memory":
        def call():
            with torch.inference_mode():
                out = model(ids)
            return out

        rss_before = peak_rss_mb()
        start = cpu_snapshot()
        out = call()
        end = cpu_snapshot()
        wall = end[0] - start[0]
        res["other_procs_cpu_cores"] = other_cpu_cores(start, end)
        res.update(wall_s=round(wall, 3), tokens_per_s=round(seq_len / wall, 1),
                   gflops_per_s=round(fpt["total"] * seq_len / wall / 1e9, 2), rss_before_forward_mb=rss_before,
                   output_finite=bool(torch.isfinite(out.last_hidden_state).all()),
                   note="single call, no warm-up (the first call includes one-time setup)")

    elif mode == "profile":
        from torch.profiler import ProfilerActivity, profile

        with torch.inference_mode():
            for _ in range(max(warmup, 1)):
                model(ids)
            start = cpu_snapshot()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                model(ids)
            end = cpu_snapshot()
            res["profiled_wall_s"] = round(end[0] - start[0], 3)
            res["other_procs_cpu_cores"] = other_cpu_cores(start, end)
        averages = prof.key_averages()
        res["top15_self_cpu"] = averages.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40)
        res["top15_self_cpu_by_shape"] = prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40, max_shapes_column_width=80)
        print(res["top15_self_cpu"], flush=True)
    else:
        raise ValueError(mode)

    res["peak_rss_mb"] = peak_rss_mb()
    emit(res)


# ----------------------------------------------------------------------------------------------------------------------
# rannet==0.3.1 (TF / Keras), run by the rannet Python
# ----------------------------------------------------------------------------------------------------------------------


def case_rannet(mode, seq_len, warmup, repeats):
    os.environ["TF_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    from rannet import RanNet, RanNetParams

    np.random.seed(0)
    tf.random.set_seed(0)
    params = RanNetParams(dict(RANNET_PARAMS))
    model = RanNet(params, return_sequences=True, return_cell=True, apply_cell_transform=True)()
    x = tf.constant(token_ids(seq_len, RANNET_PARAMS["vocab_size"]).astype(np.float32))
    fpt = flops_per_token(seq_len)
    res = dict(case=mode, seq_len=seq_len, framework="tensorflow " + tf.__version__, params=int(model.count_params()),
               tf_threads=dict(intra=tf.config.threading.get_intra_op_parallelism_threads(),
                               inter=tf.config.threading.get_inter_op_parallelism_threads()),
               rss_after_build_mb=peak_rss_mb(), flops_per_token=fpt["total"])

    if mode == "rannet_fwd":
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
        def forward(inp):
            return model(inp, training=False)

        def call():
            seq, cell = forward(x)
            seq.numpy()
            cell.numpy()

        res.update(summarize(time_calls(call, warmup, repeats), seq_len, fpt["total"] * seq_len))

    elif mode == "rannet_train":
        variables = model.trainable_variables

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
        def train_step(inp):
            with tf.GradientTape() as tape:
                seq, cell = model(inp, training=True)
                loss = tf.reduce_mean(tf.square(seq)) + tf.reduce_mean(tf.square(cell))
            grads = tape.gradient(loss, variables)
            squares = []
            for g in grads:
                if g is None:
                    continue
                values = g.values if isinstance(g, tf.IndexedSlices) else g
                squares.append(tf.reduce_sum(tf.square(values)))
            return loss, tf.add_n(squares)

        losses = []

        def call():
            loss, grad_sq = train_step(x)
            losses.append((float(loss.numpy()), float(grad_sq.numpy())))

        res.update(summarize(time_calls(call, warmup, repeats), seq_len, 3 * fpt["total"] * seq_len))
        res["loss"] = losses[-1][0]
        # note: IndexedSlices of the embedding may hold repeated rows, so this is not exactly the dense grad norm
        res["grad_norm_approx"] = losses[-1][1] ** 0.5
        res["optimizer"] = "none (backward only)"
    else:
        raise ValueError(mode)

    res["warmup"] = warmup
    res["peak_rss_mb"] = peak_rss_mb()
    emit(res)


# ----------------------------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------------------------


def _rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _mem_available_kib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def run_case_subprocess(cmd, env, timeout, rss_limit_gb, label):
    """Run one case; never raises. Kills the child (by its pid) on timeout or when it nears the machine's memory."""
    t0 = time.time()
    max_rss = 0
    killed = None
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=REPO_ROOT)
        while proc.poll() is None:
            time.sleep(0.25)
            rss = _rss_kib(proc.pid)
            max_rss = max(max_rss, rss)
            avail = _mem_available_kib()
            if time.time() - t0 > timeout:
                killed = f"timeout after {timeout} s"
            elif rss > rss_limit_gb * 1024 ** 2:
                killed = f"OOM guard: RSS {rss / 1024 ** 2:.1f} GiB > --rss-limit-gb {rss_limit_gb}"
            elif avail is not None and avail < 1024 ** 2:
                killed = f"OOM guard: MemAvailable {avail / 1024 ** 2:.2f} GiB < 1 GiB (child RSS {rss / 1024 ** 2:.1f} GiB)"
            if killed:
                proc.kill()
                proc.wait()
                break
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    wall = round(time.time() - t0, 1)
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if lines and not killed:
        res = json.loads(lines[-1][len(RESULT_TAG):])
    else:
        error = killed
        if error is None:
            error = f"exit code {proc.returncode}" + (" (SIGKILL: likely the kernel OOM killer)"
                                                      if proc.returncode == -9 else "")
        res = dict(case=label[0], seq_len=label[1], error=error, stderr_tail=stderr[-1500:])
    res["subprocess_wall_s"] = wall
    res["watchdog_max_rss_mb"] = round(max_rss / 1024.0, 1)
    return res


def wait_for_quiet(max_wait_s, threshold_cores=0.3, probe_s=3.0):
    """Wait (at most max_wait_s) until the machine's other processes use fewer than threshold_cores cores, measured
    over probe_s windows from /proc/stat (the driver itself is idle meanwhile). Returns (waited s, last level)."""
    t0 = time.time()
    level = None
    while True:
        start = cpu_snapshot()
        time.sleep(probe_s)
        level = other_cpu_cores(start, cpu_snapshot())
        if level is None or level < threshold_cores or time.time() - t0 >= max_wait_s:
            return round(time.time() - t0, 1), level


def _fmt(value, spec="{:,.0f}"):
    return "-" if value is None else spec.format(value)


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def print_tables(results, lengths):
    def get(case, seq_len, key):
        for r in results:
            if r.get("case") == case and r.get("seq_len") == seq_len and "error" not in r:
                return r.get(key)
        return None

    def status(case, seq_len):
        for r in results:
            if r.get("case") == case and r.get("seq_len") == seq_len:
                return "ERR" if "error" in r else "ok"
        return None

    print("\nThroughput (tokens/s, batch 1; ratio = ours / rannet; err = bf16 vs fp32 max abs, seq | pooled)")
    head = (f"{'L':>6} | {'ours fp32':>9} {'ours bf16':>9} {'rannet':>8} | {'fp32/rn':>7} {'bf16/rn':>7} | "
            f"{'ours f+b':>8} {'rn f+b':>8} {'f+b/rn':>6} | {'bf16 err seq | pool':>20}")
    print(head)
    print("-" * len(head))
    for L in lengths:
        of, ob, rf = get("ours_fp32", L, "tokens_per_s"), get("ours_bf16", L, "tokens_per_s"), get("rannet_fwd", L,
                                                                                                  "tokens_per_s")
        ot, rt = get("ours_train", L, "tokens_per_s"), get("rannet_train", L, "tokens_per_s")
        rt_s = _fmt(rt) if rt is not None else ("ERR" if status("rannet_train", L) == "ERR" else "-")
        rf_s = _fmt(rf) if rf is not None else ("ERR" if status("rannet_fwd", L) == "ERR" else "-")
        e1, e2 = get("ours_bf16", L, "last_hidden_state_max_abs_err"), get("ours_bf16", L, "pooler_output_max_abs_err")
        err = "-" if e1 is None else f"{e1:.3g} | {e2:.3g}"
        print(f"{L:>6} | {_fmt(of):>9} {_fmt(ob):>9} {rf_s:>8} | {_fmt(_ratio(of, rf), '{:.2f}'):>7} "
              f"{_fmt(_ratio(ob, rf), '{:.2f}'):>7} | {_fmt(ot):>8} {rt_s:>8} {_fmt(_ratio(ot, rt), '{:.2f}'):>6} | "
              f"{err:>20}")

    print("\nAchieved GFLOP/s (matmul FLOPs from the config; f+b counted as 3x fwd) and peak RSS (GiB) per case")
    cases = ["ours_fp32", "ours_bf16", "ours_train", "rannet_fwd", "rannet_train"]
    print(f"{'L':>6} | " + " ".join(f"{c:>14}" for c in cases))
    for L in lengths:
        cells = []
        for c in cases:
            g, rss = get(c, L, "gflops_per_s"), get(c, L, "peak_rss_mb")
            if g is None:
                st = status(c, L)
                cells.append(f"{'ERR' if st == 'ERR' else '-':>14}")
            else:
                cells.append(f"{g:>6.1f} /{rss / 1024:>5.2f}G")
        print(f"{L:>6} | " + " ".join(cells))

    print("\nCPU contention: cores kept busy by other processes during the timed calls (2 cores in all)")
    print(f"{'L':>6} | " + " ".join(f"{c:>12}" for c in cases))
    for L in lengths:
        print(f"{L:>6} | " + " ".join(f"{_fmt(get(c, L, 'other_procs_cpu_cores'), '{:.2f}'):>12}" for c in cases))

    for r in results:
        if r.get("case") == "memory":
            if "error" in r:
                print(f"\nmemory: L={r['seq_len']}: ERROR {r['error']}")
            else:
                print(f"\nmemory: ours fp32 forward of L={r['seq_len']:,}: {r['wall_s']:.1f} s "
                      f"({r['tokens_per_s']:,.0f} tok/s), peak RSS {r['peak_rss_mb'] / 1024:.2f} GiB "
                      f"(after build {r['rss_after_build_mb'] / 1024:.2f} GiB; other processes' CPU "
                      f"{_fmt(r.get('other_procs_cpu_cores'), '{:.2f}')} cores)")
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"error: {r['case']} L={r['seq_len']}: {r['error']}")
    for r in results:
        if r.get("case") == "profile" and "error" not in r:
            print(f"\nprofile: ours fp32 forward, L={r['seq_len']} (one call, {r['profiled_wall_s']} s under the "
                  f"profiler, other processes' CPU {_fmt(r.get('other_procs_cpu_cores'), '{:.2f}')} cores)\n"
                  f"{r['top15_self_cpu']}")


def git_info():
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except Exception as exc:  # pragma: no cover
            return f"unavailable: {exc}"

    return dict(head=git("rev-parse", "HEAD"), dirty_ran_hf=git("status", "--short", "--", "ran_hf"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", nargs="+", type=int, default=[8192, 32768])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default="results.json", help="JSON file with every raw result")
    ap.add_argument("--rannet-python", default="/opt/rannet-venv/bin/python")
    ap.add_argument("--skip-rannet", action="store_true")
    ap.add_argument("--memory-length", type=int, default=131072)
    ap.add_argument("--modes", nargs="+", choices=ALL_MODES, default=list(DEFAULT_MODES),
                    help=f"default: {' '.join(DEFAULT_MODES)}; 'profile' runs only when asked")
    ap.add_argument("--timeout", type=int, default=900, help="per-case subprocess timeout in seconds")
    ap.add_argument("--rss-limit-gb", type=float, default=20.0,
                    help="kill a case whose RSS passes this many GiB (the machine has 24 GiB)")
    ap.add_argument("--wait-idle", type=float, default=0.0,
                    help="before each case wait up to this many seconds for other processes to leave the CPU idle "
                         "(< 0.3 cores busy); the level found is recorded either way")
    ap.add_argument("--retry-if-contended", type=int, default=0,
                    help="re-run a case up to N more times when other processes kept more than "
                         "--contention-threshold cores busy during its timed calls (the least contended run is kept)")
    ap.add_argument("--contention-threshold", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads for ours (0 = torch's default)")
    ap.add_argument("--case", choices=ALL_MODES, help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.case:
        if a.case in RANNET_MODES:
            case_rannet(a.case, a.seq_len, a.warmup, a.repeats)
        else:
            case_ours(a.case, a.seq_len, a.warmup, a.repeats, a.threads)
        return

    modes = list(dict.fromkeys(a.modes))
    rannet_ok = not a.skip_rannet and os.path.exists(a.rannet_python)
    if not a.skip_rannet and not rannet_ok and any(m in RANNET_MODES for m in modes):
        print(f"note: rannet Python {a.rannet_python!r} not found; skipping the rannet cases "
              "(pass --rannet-python PATH, or --skip-rannet to silence this).", flush=True)
    if not rannet_ok:
        modes = [m for m in modes if m not in RANNET_MODES]

    plan = []
    for L in a.lengths:
        for m in modes:
            if m != "memory":
                plan.append((m, L))
    if "memory" in modes:
        plan.append(("memory", a.memory_length))

    meta = dict(argv=sys.argv, started=time.strftime("%Y-%m-%d %H:%M:%S"), python=sys.version.split()[0],
                rannet_python=a.rannet_python if rannet_ok else None, machine=platform.machine(),
                cpus=os.cpu_count(), git=git_info(), config=CONFIG, rannet_params=RANNET_PARAMS,
                flops_per_token={L: flops_per_token(L) for L in sorted(set(a.lengths + [a.memory_length]))},
                warmup=a.warmup, repeats=a.repeats, timeout_s=a.timeout, rss_limit_gb=a.rss_limit_gb,
                batch_size=1, device="cpu")
    results = []
    out_path = os.path.abspath(a.out)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)

    def save():
        with open(out_path, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)

    for mode, L in plan:
        if mode in RANNET_MODES:
            cmd = [a.rannet_python, os.path.abspath(__file__)]
            env = dict(os.environ, TF_KERAS="1", TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(a.threads)]
            env = dict(os.environ)
        warmup = 0 if mode == "memory" else a.warmup
        cmd += ["--case", mode, "--seq-len", str(L), "--warmup", str(warmup), "--repeats", str(a.repeats)]
        attempts = []
        for attempt in range(1 + max(a.retry_if_contended, 0)):
            waited, quiet_level = wait_for_quiet(a.wait_idle) if a.wait_idle > 0 else (0.0, None)
            load = os.getloadavg()
            print(f"[{time.strftime('%H:%M:%S')}] {mode:<12} L={L:<7} (load avg {load[0]:.2f}"
                  f"{', retry %d' % attempt if attempt else ''}) ...", end=" ", flush=True)
            res = run_case_subprocess(cmd, env, a.timeout, a.rss_limit_gb, (mode, L))
            res.update(attempt=attempt, load_avg_before=[round(x, 2) for x in load], waited_for_idle_s=waited,
                       other_procs_cpu_cores_before=quiet_level)
            attempts.append(res)
            contention = res.get("other_procs_cpu_cores")
            if "error" in res:
                print(f"ERROR: {res['error']} ({res['subprocess_wall_s']} s)", flush=True)
            elif mode == "memory":
                print(f"{res['wall_s']:.2f} s, peak RSS {res['peak_rss_mb'] / 1024:.2f} GiB", flush=True)
            elif mode == "profile":
                print(f"done ({res['profiled_wall_s']} s profiled)", flush=True)
            else:
                print(f"median {res['median_s']:.3f} s, {res['tokens_per_s']:,.0f} tok/s, "
                      f"peak RSS {res['peak_rss_mb'] / 1024:.2f} GiB", flush=True)
            if contention is not None and contention > a.contention_threshold and "error" not in res:
                print(f"    (other processes used {contention:.2f} cores during the timed calls)", flush=True)
                continue
            break
        # keep the least contended successful attempt; the others stay in the JSON under `other_attempts`
        ok = [r for r in attempts if "error" not in r] or attempts
        best = min(ok, key=lambda r: r.get("other_procs_cpu_cores") or 0.0)
        best["other_attempts"] = [r for r in attempts if r is not best]
        results.append(best)
        save()

    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save()
    print_tables(results, a.lengths)
    print(f"\nraw results: {out_path}")


if __name__ == "__main__":
    main()
