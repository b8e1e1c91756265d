# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""benchmarks/gpu_suite.py rehearsed on the CPU at tiny sizes (the same code path as the device call), its profile
attribution on synthetic and real events, a call cut by its budget, and benchmarks/gpu_report.py on the output."""

import json
import math

import pytest
import torch

from benchmarks import gpu_report, gpu_suite


MS = 1_000_000  # the synthetic times below are in milliseconds


class Event:
    """The few methods of a profiler event that `breakdown_from_events` reads."""

    def __init__(self, name, start, end, device="CPU", thread=1, seq=-1, corr=0, linked=0):
        self._values = dict(name=name, start_ns=start * MS, end_ns=end * MS, device_type=f"DeviceType.{device}",
                            start_thread_id=thread, sequence_nr=seq, correlation_id=corr,
                            linked_correlation_id=linked, is_async=False,
                            is_user_annotation=name.startswith("ran::") and device == "CUDA")

    def __getattr__(self, key):
        return lambda: self._values[key]


def synthetic_step():
    """A forward with an embedding, a cell chain (holding a projection) and a window attention, a backward on
    another thread, an optimizer step, and the device kernels each op launched."""
    host = [
        Event("ran::embedding", 0, 10), Event("aten::embedding", 1, 9, seq=1, corr=100),
        Event("ran::cell chain", 10, 40), Event("ran::projections", 11, 20), Event("aten::addmm", 12, 19, seq=2,
                                                                                   corr=101),
        Event("cudaLaunchKernel", 13, 14, corr=103, linked=101),  # a runtime call whose id collides with an op's
        Event("aten::mul", 21, 30, seq=3, corr=102),
        Event("ran::window attention", 40, 50), Event("aten::sdpa", 41, 49, seq=4, corr=103),
        Event("autograd::engine::evaluate_function: AddmmBackward0", 60, 70, thread=2, seq=2),
        Event("aten::mm", 61, 69, thread=2, corr=104),
        Event("autograd::engine::evaluate_function: SdpaBackward0", 70, 79, thread=2, seq=4),
        Event("aten::sdpa_backward", 71, 78, thread=2, corr=105),
        Event("Optimizer.step#AdamW.step", 80, 95), Event("aten::_fused_adamw_", 81, 94, corr=106),
    ]
    kernels = [(2, 8, 100), (15, 25, 101), (30, 32, 102), (45, 50, 103), (62, 70, 104), (72, 78, 105), (82, 90, 106)]
    annotation = Event("ran::cell chain", 15, 32, device="CUDA")  # the device copy of a host range: not a kernel
    return host + [annotation] + [Event("kernel", start, end, device="CUDA", linked=op) for start, end, op in kernels]


def test_kernels_are_charged_to_their_ranges_and_backward_to_the_forward_range():
    split = gpu_suite.breakdown_from_events(synthetic_step(), "cuda")
    c = split["categories"]
    assert c["embedding"]["forward_ms"] == pytest.approx(6.0)
    # the projection inside the chain counts as the chain; so does its backward (sequence number 2)
    assert c["cell chain"]["forward_ms"] == pytest.approx(12.0)
    assert c["cell chain"]["backward_ms"] == pytest.approx(8.0)
    assert c["projections"]["busy_ms"] == 0
    # the runtime call with a colliding id does not steal the attention kernel
    assert c["window attention"]["forward_ms"] == pytest.approx(5.0)
    assert c["window attention"]["backward_ms"] == pytest.approx(6.0)
    assert c["optimizer"]["optimizer_ms"] == pytest.approx(8.0)
    # idle gaps go to the kernel that follows them: 7 + 5 + 12 before chain kernels
    assert c["cell chain"]["idle_before_ms"] == pytest.approx(24.0)
    assert split["busy_ms"] == pytest.approx(45.0) and split["timeline_ms"] == pytest.approx(88.0)
    assert c["cell chain"]["share_of_timeline"] == pytest.approx((20 + 24) / 88, abs=1e-3)
    assert sum(v["share_of_busy"] for v in c.values()) == pytest.approx(1.0, abs=1e-3)


def test_the_ranges_cover_a_real_ran_training_step():
    """The hooks find RAN's submodules and the chain driver: every named part gets time, little is left over. The
    eager chain, whose own modules' ranges open inside the chain's (the rehearsal profiles the compiled one)."""
    spec = dict(gpu_suite.SCALES["tiny"], device="cpu", dtype="fp32", threads=1)
    model = gpu_suite._ran_model(spec, chain="eager").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, 101, (1, 96))
    remove, installed = gpu_suite.install_profile_ranges(model)
    assert installed == ["embeddings", "pooler", "layers", "run_cell_chain"]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        optimizer.zero_grad()
        gpu_suite._loss(model(input_ids=ids)).backward()
        optimizer.step()
    remove()
    split = gpu_suite.breakdown_from_events(prof.profiler.kineto_results.events(), "cpu")
    shares = {c: v["share_of_busy"] for c, v in split["categories"].items()}
    for part in ("embedding", "projections", "cell chain", "window attention", "memory review", "optimizer"):
        assert shares[part] > 0, part
    assert split["categories"]["cell chain"]["backward_ms"] > 0 and split["backward_ops"] > 100
    assert shares["other"] < 0.1
    import ran_hf.modeling_ran as modeling

    assert modeling.run_cell_chain.__module__ == "ran_hf.cell_chain"  # the wrapper is gone again


def test_matmul_flops_count_the_useful_work():
    size = gpu_suite.SCALES["base"]["size"]
    d = 768
    assert gpu_suite.encoder_flops_per_token("bert_chunks", size, 32768) == 12 * (24 * d * d + 4 * 512 * d)
    local = gpu_suite.encoder_flops_per_token("modernbert", size, 4096, dict(global_layers=4, local_window=128))
    wider = gpu_suite.encoder_flops_per_token("modernbert", size, 8192, dict(global_layers=4, local_window=128))
    assert wider - local == 4 * d * 4 * 4096  # only the 4 global layers grow with the length


def test_a_series_projects_a_sequential_part_and_a_per_token_part():
    def case(length, batch, seconds):
        return dict(seq_len=length, batch_size=batch, median_s=seconds)

    # t = 1e-4 L + 1e-5 B L: a chain along the row plus work per token
    def t(length, batch):
        return 1e-4 * length + 1e-5 * batch * length

    measured = [case(4096, 8, t(4096, 8)), case(8192, 4, t(8192, 4))]
    assert gpu_suite.series_projection(measured, 131072, 1) == pytest.approx(t(131072, 1))
    # the same batch twice: a power law in the length (quadratic here), at least linear
    assert gpu_suite.series_projection([case(1024, 1, 1.0), case(2048, 1, 4.0)], 4096, 1) == pytest.approx(16.0)
    assert gpu_suite.series_projection([case(1024, 1, 1.0), case(2048, 1, 1.0)], 4096, 1) == pytest.approx(2.0)
    assert gpu_suite.series_projection([case(1024, 4, 1.0)], 4096, 2) == pytest.approx(2.0)
    assert gpu_suite.series_projection([], 4096, 1) is None


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The whole call at tiny sizes on the CPU, then the report."""
    out = tmp_path_factory.mktemp("gpu_suite")
    data = gpu_suite.main(["--scale", "tiny", "--device", "cpu", "--threads", "1", "--out", str(out / "raw"),
                           "--parts", *gpu_suite.PARTS, "--models", "ran", "bert_chunks", "--modes", "forward",
                           "train", "--set", "lengths=[64,256]", "contexts=[16,64]", "optimise_lengths=[128]"])
    gpu_report.main([str(out / "raw"), str(out / "report")])
    return data, out


def finite_numbers(value):
    if isinstance(value, dict):
        return all(finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_numbers(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)


def test_the_rehearsal_measures_every_part(rehearsal):
    data, out = rehearsal
    assert json.loads((out / "raw" / "results.json").read_text()) == data
    assert {name: part["status"] for name, part in data["parts"].items()} == {name: "ok" for name in gpu_suite.PARTS}
    assert finite_numbers(data["records"])
    by_kind = {}
    for r in data["records"]:
        assert "error" not in r and "skipped" not in r, r
        by_kind.setdefault(r["kind"], []).append(r)
    assert by_kind["env"][0]["matmul_tflops_fp32"] > 0
    assert [r["check"] for r in by_kind["check"]] == ["bf16_vs_fp32", "finite_forward", "finite_forward",
                                                      "all_pad_row"]
    assert all(r["passed"] for r in by_kind["check"]) and by_kind["pytest"][0]["passed"]
    assert {(r["model"], r["mode"], r["seq_len"]) for r in by_kind["speed"]} == {
        (m, mode, n) for m in ("ran", "bert_chunks") for mode in ("forward", "train") for n in (64, 256)}
    tokens = gpu_suite.SCALES["tiny"]["tokens_per_step"]
    assert all(r["tokens_per_s"] > 0 and r["output_finite"] and r["batch_size"] == max(1, tokens // r["seq_len"])
               and r["tokens_per_step"] == r["batch_size"] * r["seq_len"] for r in by_kind["speed"])
    # RAN's chain in the speed and profile parts: the scale's, the implementation shipped for speed
    assert {r.get("chain_implementation") for r in by_kind["speed"] if r["model"] == "ran"} == {"compiled"}
    assert {r["chain_implementation"] for r in by_kind["profile"]} == {"compiled"}
    for r in by_kind["profile"]:
        assert sum(v["share_of_timeline"] for v in r["categories"].values()) == pytest.approx(1.0, abs=1e-3)
        assert r["categories"]["cell chain"]["share_of_busy"] > 0 and 0 < r["chain_forward"]["chain_share"] < 1
    assert {(r["model"], r["context"]) for r in by_kind["generation"]} == {
        (m, c) for m in ("ran", "gpt2") for c in (16, 64)}
    assert all(r["decode_ms_median"] > 0 and r["cache_bytes"] > 0 for r in by_kind["generation"])
    assert by_kind["long_train"][0]["loss_finite"] and by_kind["long_train"][0]["peak_mb"] > 0
    assert {(r["variant"], r["mode"]) for r in by_kind["optimise"]} == {
        (v, m) for v in ("eager", "compiled", "cuda_graphs") for m in ("forward", "train")}
    # the captured chain ran (captures emulated on the CPU): the check captured each layer's training chain, the
    # forward its inference chain, and the training step reused the check's
    assert [r["captures"] for r in by_kind["optimise"] if r["variant"] == "cuda_graphs"] == [4, 4]
    assert all(r["chain_forward"]["chain_calls"] == 2 for r in by_kind["optimise"] if r["mode"] == "train")
    assert [r["variant"] for r in by_kind["optimise_check"]] == ["cuda_graphs", "compiled"]
    for check in by_kind["optimise_check"]:
        assert check["relative_error_outputs"] < 1e-5 and check["relative_error_gradients"] < 1e-5


def test_the_report_renders_from_the_rehearsal(rehearsal):
    _, out = rehearsal
    table = (out / "report" / "table.md").read_text()
    for heading in ("## Correctness", "## Targets", "## Speed and memory", "## Where RAN's training step goes",
                    "## Generation", "## Long sequence", "## The cell chain by `chain_implementation`"):
        assert heading in table, heading
    assert "PyTorch " + torch.__version__ in table and "Command: `" in table
    assert "| RAN | " in table and "| BERT, 512-token chunks | " in table and "| cell chain | " in table
    assert "RAN's cell chain: `chain_implementation=\"compiled\"`." in table
    assert "| cell chain <= 50% of the training step at 256 (chain compiled) | " in table
    assert "| training step at 256: >= 1.0x ModernBERT (sdpa)'s tokens/s | not measured | - |" in table
    assert "FAIL" not in table and "failed" not in table
    for name in ("speed.png", "generation.png", "profile.png"):
        assert (out / "report" / name).stat().st_size > 10_000, name


def test_an_optimise_part_cut_after_its_first_rows_renders(rehearsal):
    # the worker measured the compiled forward, then was killed: the rows it did not reach carry no batch size
    data, _ = rehearsal
    data = json.loads(json.dumps(data))
    measured = next(r for r in data["records"] if r["kind"] == "optimise" and r["variant"] == "compiled"
                    and r["mode"] == "forward")
    cut = [dict(kind="optimise", variant=v, mode=m, seq_len=measured["seq_len"], part="optimise",
                skipped="not measured: worker time cap: killed at the part's deadline")
           for v, m in (("eager", "forward"), ("compiled", "train"), ("eager", "train"))]
    data["records"] = [r for r in data["records"] if r["kind"] != "optimise"] + [measured] + cut
    table = gpu_report.markdown(data)
    length = gpu_report._k(measured["seq_len"])
    assert f"| forward | {length} x 1 | eager | time cap |  |" in table
    assert f"| forward | {length} x 1 | compiled | {measured['median_s']} |  |" in table
    assert f"| train | {length} x ? | compiled | time cap |  |" in table


def test_a_context_measured_again_gets_its_own_column(rehearsal):
    data, _ = rehearsal
    data = json.loads(json.dumps(data))
    again = [dict(r, decode_ms_median=r["decode_ms_median"] + 1) for r in data["records"]
             if r["kind"] == "generation" and r["context"] == 16]
    data["records"] += again
    table = gpu_report.markdown(data)
    assert "| model | 16 | 64 | 16 (again) |" in table
    ran = next(r for r in again if r["model"] == "ran")
    assert table.count(f"| {ran['decode_ms_median']:.2f} ({ran['cache_bytes'] / 2**20:.1f}) |") == 1


def test_the_base_call_fits_one_device_command():
    """The default call at the base scale: the parts that matter first, each cap above a worker's start on the
    device (16-21 s measured), all inside the budget, and the budget inside a 500 s command less about 60 s of
    setup (so that a 15-minute device session keeps time for a second, shorter call)."""
    base = gpu_suite.SCALES["base"]
    assert base["parts"] == ["env", "optimise", "speed", "pytest", "profile"]
    caps = [base["caps"][part] for part in base["parts"]]
    assert sum(caps) <= base["budget_s"] <= 500 - 60
    assert all(base["caps"][part] >= 25 for part in base["parts"] if part != "env")
    # each speed model gets at least 25 s
    assert base["caps"]["speed"] / len(base["speed_models"]) >= 25
    # every chain at two lengths, one batch size (so the compiled step's shapes stay the same) ...
    assert base["optimise_lengths"] == [8192, 32768] and base["optimise_batch_size"] == 1
    assert set(base["optimise_variants"]) == {"eager", "compiled", "cuda_graphs"}
    # ... and the peers at the same lengths and batch, forward and training step, so every ratio is like with like
    assert base["lengths"] == base["optimise_lengths"] and base["speed_modes"] == ["forward", "train"]
    assert all(max(1, base["tokens_per_step"] // n) == base["optimise_batch_size"] for n in base["lengths"])
    assert base["profile_lengths"] == [32768] and base["ran_chain"] == "compiled"


def test_pytest_progress_counts_what_ran_without_a_summary():
    output = "cmd\n\n" + "." * 72 + " [ 72%]\n" + ".." + "F" + "\n"
    assert gpu_suite.pytest_progress(output) == dict(passed=74, failed=1, errors=0, skipped=0, xfailed=0, percent=72)


def test_a_cut_call_marks_what_it_did_not_measure(tmp_path):
    # the speed worker is killed at its deadline (before its first result): every planned case is marked
    data = gpu_suite.main(["--scale", "tiny", "--device", "cpu", "--out", str(tmp_path), "--parts", "checks",
                           "speed", "--models", "ran", "--modes", "train", "--caps", "speed=1", "checks=1",
                           "--set", "lengths=[64,128,256,1024]"])
    checks = [r for r in data["records"] if r["kind"] == "check"]
    assert [r["check"] for r in checks] == ["bf16_vs_fp32", "finite_forward", "finite_forward", "all_pad_row"]
    assert all(r["skipped"].startswith("not measured: worker time cap") for r in checks)
    speed = [r for r in data["records"] if r["kind"] == "speed"]
    assert [r["seq_len"] for r in speed] == [64, 128, 256, 1024]
    assert all(r["skipped"].startswith("not measured: worker time cap") for r in speed)
    assert data["parts"]["env"]["status"] == "not requested"
    # a budget already spent skips the parts and says so
    data = gpu_suite.main(["--scale", "tiny", "--device", "cpu", "--out", str(tmp_path / "spent"), "--budget-s",
                           "0", "--parts", *gpu_suite.PARTS])
    assert all(p["status"].startswith("skipped") for p in data["parts"].values()) and not data["records"]
    table = gpu_report.markdown(data)
    assert "not measured" in table and "| speed | skipped" in table
    cut = gpu_report.markdown(json.loads((tmp_path / "results.json").read_text()))
    assert "| RAN | time cap | time cap | time cap | time cap |" in cut
    assert "- finite_forward at 1,024 tokens: not measured: worker time cap" in cut
