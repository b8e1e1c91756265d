# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The control of the RAN around MiniLM: the same model, recipe and data with RAN's additions held shut.

    python -m research.encoder_warm_start.closed_gates --seed 42 --output_dir outputs/minilm-closed/seed42 \\
        [run_classification.py flags ...]

`run_scripts/run_classification.py --recipe minilm` with every gate frozen at zero (the per-head gates through
which tokens read the cell and memory review's per-channel gate): the model is then all-MiniLM-L6-v2 run over
windows of 512 tokens, its token states averaged over the whole document, with the recipe's learning rates, epochs,
length, batches and dropout. What the RAN run gains over this run is what the cell chain and memory review add.
"""

from __future__ import annotations

import sys

from run_scripts import run_classification
from run_scripts.helpers.model_args import build_model


GATES = ("window_block.cell_gate", "memory_review.gate")


def build_closed_model(auto_class, *args, **kwargs):
    """`run_classification`'s `build_model`, then every gate frozen (they start at zero and stay there)."""
    model = build_model(auto_class, *args, **kwargs)
    gates = [(name, parameter) for name, parameter in model.named_parameters() if name.endswith(GATES)]
    if not gates:
        raise ValueError("closed_gates needs a RAN around a pretrained encoder (window_block='bert').")
    for name, parameter in gates:
        if parameter.detach().abs().max() > 0:
            raise ValueError(f"{name} is not zero: the checkpoint's gates are already open.")
        parameter.requires_grad_(False)
    return model


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_classification.build_model = build_closed_model
    try:
        return run_classification.main(["--recipe", "minilm", *argv])
    finally:
        run_classification.build_model = build_model


if __name__ == "__main__":
    main()
