# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Can the cell chain run in parallel over windows? A fixed-point (Jacobi) test, measured on a CPU.

A layer's chain is a recurrence over windows, `(c_i, s_i) = step(s_{i-1}, c_{i-1}, window i)` (eqs. 3-7), and it is
sequential: on a GPU it is a few small kernels per window and layer, bound by their launches. A recurrence can be
solved in parallel by fixed-point iteration: guess every incoming cell (here `s_0` and `c = 0`), run the step on
all windows at once (one batched call), shift the results one window on, and repeat. After k sweeps the first k
windows are exact, so n sweeps always reproduce the chain; the iteration pays only if the later windows converge
long before that, which needs a step that shrinks differences in its incoming cell.

For every layer of a model this script captures the chain's inputs in one forward (eval mode, one document), runs
the sweeps, and reports after each the largest relative error `|s_i - s_i*| / |s_i*|` over the windows' passed cells
(the exact `s_i*` from the model's own chain), and the sweeps needed to reach `--tolerance`.

    python -m benchmarks.chain_fixed_point                          # pretrained/ran-books-small, 8,192 tokens
    python -m benchmarks.chain_fixed_point --random-weights         # its config from random weights
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import torch

import ran_hf  # noqa: F401  (registers RAN with the Auto classes)
from ran_hf import modeling_ran
from run_scripts.helpers.corpus import iter_documents
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer


REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPOSITORY / "pretrained" / "ran-books-small"
DEFAULT_TEXT = REPOSITORY / "run_scripts" / "data" / "hyperpartisan" / "train-byarticle.jsonl.gz"


@contextlib.contextmanager
def captured_chain_inputs():
    """Records `(layer, start carry, chain windows, exact passed cells)` for every layer's chain run while the
    context is open, by wrapping the model's one entry point to the chain, `ran_hf.modeling_ran.run_cell_chain`."""
    records = []
    original = modeling_ran.run_cell_chain

    def recording(step, layer, carry, windows, *args, **kwargs):
        out = original(step, layer, carry, windows, *args, **kwargs)
        records.append((layer, carry, windows, out[1][1]))
        return out

    modeling_ran.run_cell_chain = recording
    try:
        yield records
    finally:
        modeling_ran.run_cell_chain = original


def jacobi_errors(layer, carry, windows, exact_passed: torch.Tensor, tolerance: float) -> list[float]:
    """Largest relative error of the passed cells (B, n, D) after each fixed-point sweep, until `tolerance` (at most
    n sweeps: the n-th is exact). Each sweep is one call of the layer's chain step on all windows of all rows."""
    batch_size, num_windows = exact_passed.shape[:2]
    keys, values, key_mask, _, has_previous, _ = (None if t is None else t.transpose(0, 1).flatten(0, 1)
                                                  for t in windows.stacked())
    s0 = carry[0]
    incoming = s0[:, None].expand(-1, num_windows, -1)  # guesses of s_{i-1} and c_{i-1}, (B, n, D)
    previous_c = torch.zeros_like(incoming)
    errors = []
    for _ in range(num_windows):
        _, (c, passed, _, _) = layer.chain_window((incoming.flatten(0, 1), previous_c.flatten(0, 1)),
                                                  (keys, values, key_mask, None, has_previous, None))
        c, passed = c.unflatten(0, (batch_size, num_windows)), passed.unflatten(0, (batch_size, num_windows))
        error = (passed - exact_passed).norm(dim=-1) / exact_passed.norm(dim=-1)
        errors.append(error.max().item())
        if errors[-1] < tolerance:
            break
        incoming = torch.cat([s0[:, None], passed[:, :-1]], 1)
        previous_c = torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], 1)
    return errors


def document_ids(tokenizer, text_file: Path, length: int) -> dict:
    """The texts of a jsonl(.gz) file joined in file order, cut at `length` tokens."""
    texts, words = [], 0
    for document in iter_documents([text_file]):
        texts.append(document["text"])
        words += len(texts[-1].split())
        if words > length:
            break
    return tokenizer("\n\n".join(texts), truncation=True, max_length=length, return_tensors="pt")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--random-weights", action="store_true", help="The model's config from random weights.")
    parser.add_argument("--text-file", type=Path, default=DEFAULT_TEXT, help="jsonl(.gz) with a `text` field.")
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="Write the result here as JSON.")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    if args.random_weights:
        model = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(args.model))
    else:
        model = AutoModelForMaskedLM.from_pretrained(args.model)
    model.eval()
    inputs = document_ids(AutoTokenizer.from_pretrained(args.model), args.text_file, args.length)
    with torch.no_grad(), captured_chain_inputs() as records:
        model(**inputs)
        layers = []
        for layer, carry, windows, exact_passed in records:
            errors = jacobi_errors(layer, carry, windows, exact_passed, args.tolerance)
            layers.append({"layer": layer.layer_idx, "windows": exact_passed.shape[1],
                           "sweeps_to_tolerance": len(errors) if errors[-1] < args.tolerance else None,
                           "max_relative_error_per_sweep": [float(f"{e:.3g}") for e in errors]})
            print(f"layer {layer.layer_idx}: {layers[-1]['windows']} windows, {len(errors)} sweeps to "
                  f"{args.tolerance:g}; errors " + " ".join(f"{e:.1e}" for e in errors), flush=True)
    result = {"command": "python -m benchmarks.chain_fixed_point " + " ".join(argv if argv is not None else sys.argv[1:]),
              "torch": torch.__version__, "model": args.model.name, "random_weights": args.random_weights,
              "tokens": inputs["input_ids"].shape[1], "tolerance": args.tolerance, "layers": layers}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
