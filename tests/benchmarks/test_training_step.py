# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""benchmarks/benchmark.py times the same work for every model: a training step includes the optimizer update, the
frozen-embedding case leaves the word embeddings alone, and --ran-source times another checkout's RAN side by side."""

import os
import shutil

import pytest

from benchmarks import benchmark


TINY = ["--lengths", "128", "--hidden-size", "32", "--num-heads", "2", "--vocab-size", "101", "--window-size", "32",
        "--repeats", "1", "--warmup", "0", "--device", "cpu", "--threads", "1"]


def test_training_steps_update_the_weights_and_another_checkout_runs_side_by_side(tmp_path):
    other = tmp_path / "other_checkout"
    shutil.copytree(os.path.join(benchmark.REPO_ROOT, "ran_hf"), other / "ran_hf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "bench"
    data = benchmark.main(["--models", "ran", "bert", "--modes", "train", "train_frozen_emb", "--ran-source",
                           str(other), "--contexts", "64", "--decode-tokens", "2", "--out-dir", str(out), *TINY])
    rows = [r for r in data["results"] if r.get("kind") == "encoder"]
    assert {(r["model"], r["mode"]) for r in rows} == {
        (m, mode) for m in ("ran", "ran_source", "bert") for mode in ("train", "train_frozen_emb")}
    for r in rows:
        assert "median_s" in r, r.get("error")
        assert r["optimizer"] == "Adam" and r["output_finite"]
        updated, with_gradient = map(int, r["updated_weight_matrices"].split(" with")[0].split(" of "))
        # the step ran the optimizer: every weight matrix with a gradient moved; the frozen embedding did not
        assert updated == with_gradient > 10
        assert r["embedding_updated"] == (r["mode"] == "train")
    frozen = {r["model"]: r["trained_params"] for r in rows if r["mode"] == "train_frozen_emb"}
    trained = {r["model"]: r["trained_params"] for r in rows if r["mode"] == "train"}
    assert trained["ran"] - frozen["ran"] == 101 * 32  # the vocab x D table
    # the ran_source cases imported ran_hf from the other checkout, this checkout's cases from this one
    sources = {r["model"]: os.path.realpath(r["ran_hf_dir"]) for r in data["results"] if "ran_hf_dir" in r}
    assert sources["ran_source"] == os.path.realpath(other / "ran_hf")
    assert sources["ran"] == os.path.realpath(os.path.join(benchmark.REPO_ROOT, "ran_hf"))
    generation = {r["model"] for r in data["results"] if r.get("kind") == "generation" and "decode_ms_median" in r}
    assert generation == {"ran", "ran_source", "gpt2"}
    table = (out / "table.md").read_text()
    assert "Word-embedding gradient and update" in table and f"| RAN ({other}) |" in table
    assert "Adam update" in table


def test_ran_source_must_be_a_checkout(tmp_path):
    with pytest.raises(SystemExit):
        benchmark.main(["--ran-source", str(tmp_path), "--out-dir", str(tmp_path / "o"), *TINY])
    with pytest.raises(SystemExit):
        benchmark.main(["--models", "ran_source", "--out-dir", str(tmp_path / "o"), *TINY])
