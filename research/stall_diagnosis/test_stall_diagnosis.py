# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The stall probe's model variants and instrumentation (research/stall_diagnosis/probe.py). Offline, CPU, a few
seconds."""

import argparse
import json

import pytest
import torch

from research.stall_diagnosis import probe
from tests.conftest import one_thread, randomize  # noqa: F401 (one_thread: a fixture)


def _inputs():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 97, (3, 300), generator=generator)
    ids[1, 200:] = 0
    ids[2, :40] = 0
    return {"input_ids": ids, "attention_mask": (ids != 0).long()}


@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_unfixed_probe_model_matches_ran_hf(one_thread, pooling):
    """The recording hooks leave the computation untouched (same weights, padding included, recorder on), and stay
    on the probe's instances: a fresh ran_hf model has none."""
    from ran_hf import RANForSequenceClassification

    patched = randomize(probe.build_model(97, pooling, True, "none", 0.02, seed=0), seed=1).eval()
    plain = RANForSequenceClassification(patched.config).eval()
    plain.load_state_dict(patched.state_dict())
    assert not plain.ran.layers[0]._forward_pre_hooks and not plain.ran.layers[0].memory_review._forward_hooks
    probe.RECORDER.active = True
    try:
        with torch.no_grad():
            torch.testing.assert_close(patched(**_inputs()).logits, plain(**_inputs()).logits, rtol=0, atol=0)
    finally:
        probe.RECORDER.active = False
    values = probe.RECORDER.values
    assert values["layer1.read"].shape == (*values["grid_mask"].shape, patched.config.hidden_size)


def test_each_fix_changes_the_model_as_described(one_thread):
    """zero_o zeroes the review's output projection, residual changes the logits of the same weights, and
    init_scale draws the kernels with the given std."""
    zero = probe.build_model(97, "max", True, "zero_o", 0.02, seed=0)
    assert all(not layer.memory_review.o.weight.detach().any() for layer in zero.ran.layers)
    none = randomize(probe.build_model(97, "max", True, "none", 0.02, seed=0), seed=1).eval()
    residual = probe.build_model(97, "max", True, "residual", 0.02, seed=0).eval()
    residual.load_state_dict(none.state_dict())
    with torch.no_grad():
        assert not torch.allclose(none(**_inputs()).logits, residual(**_inputs()).logits)
    wide = probe.build_model(97, "max", True, "init_scale", 0.1, seed=0)
    assert 0.08 < float(wide.ran.layers[0].memory_review.q.weight.detach().std()) < 0.1


def test_activation_stats_and_gradient_groups_cover_the_model(one_thread):
    """The eval-mode statistics name every recorded part and restore training mode; gradient norms come in the
    probe's module groups; identical tokens give cosines of 1."""
    model = probe.build_model(97, "max", True, "none", 0.02, seed=0)
    stats = probe.activation_stats(model, _inputs())
    assert model.training  # restored after the eval-mode probe
    for name in ("layer0.read", "layer1.gated", "layer1.out", "pool.pooled"):
        assert name in stats
    assert 0.0 < stats["pool.distinct_argmax_share"] <= 1.0
    model(**_inputs()).logits.sum().backward()
    assert set(probe.grad_norms(model)) == set(probe.GROUPS)
    same = torch.ones(2, 5, 4)
    mask = torch.ones(2, 5, dtype=torch.bool)
    assert probe.token_stats(same, mask) == pytest.approx({"within_cos": 1.0, "across_cos": 1.0})


def test_run_key_matches_the_committed_records():
    """Re-running a command of the README skips the runs already in `results/`: a run of the default sample sizes
    has the key of the committed record, other sizes are named in the key."""
    recorded = json.loads((probe.RESULTS / "runs_recipe.jsonl").read_text().splitlines()[0])
    args = argparse.Namespace(init_std=0.02, lr=0.001, warmup=0.1, schedule="linear", batch_size=8, steps=200,
                              max_length=512, train_size=probe.DEFAULT_TRAIN_SIZE, dev_size=probe.DEFAULT_DEV_SIZE)
    assert probe.run_key(args, "max", True, "none", seed=0) == recorded["key"]
    args.train_size = 5000
    assert probe.run_key(args, "max", True, "none", seed=0) == recorded["key"] + "|train=5000|dev=300"
