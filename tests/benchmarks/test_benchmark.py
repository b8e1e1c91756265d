"""benchmarks/benchmark.py on a tiny config: cases run in subprocesses, the series logic skips what would be too
slow, and the report and plots are written. (The real benchmark is a script, not a test.)"""

import json

import pytest

from benchmarks import benchmark


def test_projection_follows_the_measured_exponent():
    linear = [dict(seq_len=1024, median_s=1.0), dict(seq_len=2048, median_s=2.0)]
    quadratic = [dict(seq_len=1024, median_s=1.0), dict(seq_len=2048, median_s=4.0)]
    assert benchmark.projected_call_seconds(linear, 8192) == pytest.approx(8.0)
    assert benchmark.projected_call_seconds(quadratic, 8192) == pytest.approx(64.0)
    assert benchmark.projected_call_seconds([dict(seq_len=1024, median_s=1.0)], 2048) == pytest.approx(4.0)
    assert benchmark.projected_call_seconds([], 2048) is None


def test_tiny_run_writes_results_table_and_plots(tmp_path):
    out = tmp_path / "bench"
    data = benchmark.main([
        "--models", "ran", "bert", "rannet", "--lengths", "128", "--modes", "forward", "train", "train_gc",
        "--gc-lengths", "128", "--contexts", "64", "--decode-tokens", "2", "--hidden-size", "32", "--num-heads",
        "2", "--vocab-size", "101", "--window-size", "32", "--repeats", "1", "--warmup", "0", "--device", "cpu",
        "--threads", "1", "--out-dir", str(out),
    ])
    rows = data["results"]
    measured = [r for r in rows if "median_s" in r]
    assert {(r["model"], r["mode"], r["seq_len"]) for r in measured} == {
        (m, mode, 128) for m in ("ran", "bert") for mode in ("forward", "train", "train_gc")}
    assert all(r["output_finite"] and r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 for r in measured)
    # rannet only runs the base-like size: recorded as not applicable, never as a failure
    assert all(r["skipped"].startswith("n/a") for r in rows if r.get("model") == "rannet")
    generation = [r for r in rows if r.get("kind") == "generation"]
    assert {r["model"] for r in generation} == {"ran", "gpt2"} and all(r["decode_ms_median"] > 0 for r in generation)
    assert json.loads((out / "results.json").read_text())["meta"]["matmul_gflops_fp32"] > 0
    table = (out / "table.md").read_text()
    assert "| RAN (ran_hf) |" in table and "| rannet 0.3.1 (TF) | n/a |\n" in table
    for name in ("forward_fp32_b1.png", "train_fp32_b1.png", "train_gc_fp32_b1.png", "generation.png"):
        assert (out / name).stat().st_size > 10_000, name


def test_a_series_stops_when_the_next_length_would_be_too_slow(tmp_path):
    data = benchmark.main([
        "--models", "ran", "--lengths", "64", "128", "256", "--modes", "forward", "--contexts", "--hidden-size",
        "32", "--num-heads", "2", "--vocab-size", "101", "--window-size", "32", "--repeats", "1", "--warmup", "0",
        "--device", "cpu", "--threads", "1", "--max-call-seconds", "0", "--out-dir", str(tmp_path),
    ])
    rows = [r for r in data["results"] if r.get("kind") == "encoder"]
    assert "median_s" in rows[0]  # nothing to project from yet
    assert rows[1]["skipped"].startswith("projected") and rows[2]["skipped"].startswith("not run")
