# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Tests of the stall-diagnosis instrumentation (research/stall_diagnosis/probe.py) and of the TF-IDF baseline's
feature selection (research/tfidf_baseline/tfidf_baseline.py). Offline, CPU, a few seconds."""

import argparse
import json

import numpy as np
import pytest
import torch

from conftest import randomize

from research.stall_diagnosis import probe
from research.tfidf_baseline import tfidf_baseline as tfidf


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


def test_fixes_change_what_they_claim(one_thread):
    zero = probe.build_model(97, "max", True, "zero_o", 0.02, seed=0)
    assert all(not layer.memory_review.o.weight.detach().any() for layer in zero.ran.layers)
    none = randomize(probe.build_model(97, "max", True, "none", 0.02, seed=0), seed=1).eval()
    residual = probe.build_model(97, "max", True, "residual", 0.02, seed=0).eval()
    residual.load_state_dict(none.state_dict())
    with torch.no_grad():
        assert not torch.allclose(none(**_inputs()).logits, residual(**_inputs()).logits)
    wide = probe.build_model(97, "max", True, "init_scale", 0.1, seed=0)
    assert 0.08 < float(wide.ran.layers[0].memory_review.q.weight.detach().std()) < 0.1


def test_activation_stats_and_grad_groups(one_thread):
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


def test_run_keys_of_recorded_runs_still_match():
    """A re-run of a documented command must skip the runs already recorded, so the default sample sizes keep the
    key format of the recorded runs; other sizes are named in the key."""
    recorded = json.loads((probe.REPO / "docs" / "stall" / "runs_recipe.jsonl").read_text().splitlines()[0])
    args = argparse.Namespace(init_std=0.02, lr=0.001, warmup=0.1, schedule="linear", batch_size=8, steps=200,
                              max_length=512, train_size=probe.DEFAULT_TRAIN_SIZE, dev_size=probe.DEFAULT_DEV_SIZE)
    assert probe.run_key(args, "max", True, "none", seed=0) == recorded["key"]
    args.train_size = 5000
    assert probe.run_key(args, "max", True, "none", seed=0) == recorded["key"] + "|train=5000|dev=300"


@pytest.mark.parametrize("min_df,max_features", [(1, None), (2, None), (1, 7), (2, 5)])
def test_tfidf_feature_selection_matches_vectorizer(min_df, max_features):
    """Selecting columns of one count matrix gives TfidfVectorizer's vocabulary for that min_df / max_features."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    texts = ["the cat sat on the mat", "the dog sat", "a cat and a dog", "the mat was red", "red cat red dog"]
    counter = CountVectorizer(ngram_range=(1, 2))
    counts = counter.fit_transform(texts).tocsr()
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    keep = tfidf.features(counts, df, min_df, max_features)
    names = counter.get_feature_names_out()[keep]
    expected = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df, max_features=max_features).fit(texts)
    assert sorted(names) == sorted(expected.get_feature_names_out())


def test_tfidf_missing_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit):
        tfidf.main(["--data_dir", str(tmp_path / "nowhere")])
    with pytest.raises(FileNotFoundError, match="--data_dir"):
        tfidf.load("imdb", tmp_path)
