# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""`run_scripts/run_sentence_classification.py` with the head's own linear layers (the sentence projection and the
classifier) re-initialised by PyTorch's default (`nn.Linear.reset_parameters`: uniform weights of bound
`1 / sqrt(fan_in)`, uniform biases) instead of the product's N(0, `initializer_range`) and zero biases; the RAN
inside keeps its own initialisation. An ablation of the initialisation, run with the script's own flags:

    RUN="python -m research.sentence_classification.default_init" \
        bash research/sentence_classification/run.sh hyperpartisan-regex ran "1 2 3" frozen-defaultinit ...
"""

import sys

import run_scripts.run_sentence_classification as script


_build_model = script.build_model


def build_model_with_default_init(*args, **kwargs):
    model = _build_model(*args, **kwargs)
    for layer in (getattr(model.pooling, "projection", None), model.classifier):
        if layer is not None:
            layer.reset_parameters()
    return model


if __name__ == "__main__":
    script.build_model = build_model_with_default_init
    script.main(sys.argv[1:])
