# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""torch.export, ONNX (onnxruntime parity) and torch.compile of RANModel, and the eager speed they must not cost.

    python benchmarks/export_compile.py export onnx legacy compile speed

`export`: torch.export with a dynamic length, then the exported program against eager at several lengths.
`onnx` / `legacy`: torch.onnx.export with dynamo=True / False, then onnxruntime against PyTorch at lengths below
W, at a multiple of W, with a merged remainder (min_window_size), with a kept remainder, and on padded rows.
`compile`: graph breaks (`torch._dynamo.explain`), then torch.compile (inductor, no_grad) over five lengths:
compile time of each first call and graphs compiled so far. `speed`: eager forward at 8,192 tokens, base-like
config (vocab 30522, D 768, 2 layers, 12x64, W 256), one thread, median of 3. A tiny config (W 8,
min_window_size 3, random weights) serves the other measurements.
"""

import argparse
import statistics
import tempfile
import time

import torch

from ran_hf import RANConfig, RANModel


LENGTHS = {"L=5 (< W)": 5, "L=16 (2 W)": 16, "L=18 (merged remainder)": 18, "L=21 (kept remainder)": 21, "L=40": 40}


def tiny_model() -> RANModel:
    config = RANConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       attention_head_size=8, window_size=8, min_window_size=3)
    model = RANModel(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():  # random weights everywhere, so no output is trivially zero
            param.copy_(torch.randn(param.shape, generator=generator) / max(param.shape[-1], 1) ** 0.5)
    return model


def inputs(length: int, seed: int = 3):
    ids = torch.randint(1, 97, (2, length), generator=torch.Generator().manual_seed(seed))
    return ids, torch.ones_like(ids)


def padded_inputs():
    ids, mask = inputs(21, seed=1)
    mask[0, :4] = 0  # left padding: 17 real tokens (the remainder merges)
    mask[1, 13:] = 0  # right padding: 13 real tokens (the remainder stays)
    return ids.masked_fill(mask == 0, 0), mask


def cases():
    return [(name, *inputs(length)) for name, length in LENGTHS.items()] + [("padded rows", *padded_inputs())]


def dynamic_length():
    length = torch.export.Dim("length", min=2, max=4096)
    return {"input_ids": {1: length}, "attention_mask": {1: length}}


class Outputs(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def run_export():
    model = tiny_model()
    ids, mask = inputs(21)
    try:
        program = torch.export.export(model, (ids,), kwargs={"attention_mask": mask}, dynamic_shapes=dynamic_length())
    except Exception as error:  # noqa: BLE001 -- the measurement is whether it fails
        print("torch.export: FAILED:", type(error).__name__, str(error).strip().splitlines()[0][:300])
        return
    worst = 0.0
    for _, ids, mask in cases():
        with torch.no_grad():
            diff = program.module()(ids, attention_mask=mask)[0] - model(ids, attention_mask=mask)[0]
        worst = max(worst, diff.abs().max().item())
    print(f"torch.export: OK; exported program vs eager, max abs diff over all cases {worst:.1e}")


def run_onnx(dynamo: bool):
    import onnxruntime

    model = tiny_model()
    ids, mask = inputs(21)
    path = tempfile.NamedTemporaryFile(suffix=".onnx", delete=False).name
    names = ["input_ids", "attention_mask"]
    try:
        if dynamo:
            torch.onnx.export(Outputs(model), (ids, mask), path, dynamo=True, input_names=names,
                              dynamic_shapes=dynamic_length())
        else:
            torch.onnx.export(Outputs(model), (ids, mask), path, dynamo=False, input_names=names,
                              dynamic_axes={"input_ids": {1: "length"}, "attention_mask": {1: "length"}})
    except Exception as error:  # noqa: BLE001
        print(f"onnx export (dynamo={dynamo}): FAILED:", type(error).__name__,
              str(error).strip().splitlines()[0][:300])
        return
    print(f"onnx export (dynamo={dynamo}): OK")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    for name, ids, mask in cases():
        with torch.no_grad():
            expected = Outputs(model)(ids, mask)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        diffs = [abs(torch.from_numpy(g) - e).max().item() for g, e in zip(got, expected)]
        print(f"  {name:26s} max abs diff: last_hidden_state {diffs[0]:.1e}, pooler_output {diffs[1]:.1e}")


def run_compile():
    import torch._dynamo
    from torch._dynamo.utils import counters

    model = tiny_model()
    ids, mask = inputs(21)
    with torch.no_grad():
        explanation = torch._dynamo.explain(model)(ids, attention_mask=mask)
    print(f"graph breaks (explain, L=21): {explanation.graph_break_count}, graphs: {explanation.graph_count}")
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model)
    for length in (16, 21, 40, 57, 100):
        ids, mask = inputs(length, seed=4)
        start = time.perf_counter()
        with torch.no_grad():
            out = compiled(ids, attention_mask=mask).last_hidden_state
        seconds = time.perf_counter() - start
        with torch.no_grad():
            diff = (out - model(ids, attention_mask=mask).last_hidden_state).abs().max().item()
        print(f"  L={length:4d}: first call {seconds:6.1f} s, graphs compiled so far "
              f"{counters['stats']['unique_graphs']}, max abs diff vs eager {diff:.1e}")


def run_speed():
    config = RANConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=2, num_attention_heads=12,
                       attention_head_size=64, window_size=256)
    model = RANModel(config).eval()
    ids = torch.randint(5, 30522, (1, 8192), generator=torch.Generator().manual_seed(0))
    times = []
    with torch.no_grad():
        model(ids)
        for _ in range(3):
            start = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(f"eager 8192 tokens (base-like, 1 thread): median {median:.2f} s ({8192 / median:.0f} tokens/s), "
          f"runs {[round(t, 2) for t in times]}")


def main(argv=None):
    jobs = {"export": run_export, "onnx": lambda: run_onnx(True), "legacy": lambda: run_onnx(False),
            "compile": run_compile, "speed": run_speed}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("jobs", nargs="*", metavar="JOB",
                        help=f"what to measure, any of {', '.join(jobs)} (default: all, in this order)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.jobs if name not in jobs]
    if unknown:
        parser.error(f"unknown job(s) {', '.join(unknown)}; choose from {', '.join(jobs)}")
    torch.set_num_threads(1)
    for name in args.jobs or list(jobs):
        jobs[name]()


if __name__ == "__main__":
    main()
