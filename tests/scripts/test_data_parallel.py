# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""`torchrun --nproc_per_node 2` on CPUs trains data-parallel (gloo): two processes of batch 4 end with the weights
of one process of batch 8, and share one tokenizer trained on the first; a launch that would train each process
alone is refused with the fix."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from run_scripts import run_classification
from script_data import TINY, classification_rows, write_jsonl


pytestmark = pytest.mark.usefixtures("restore_script_globals")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ON_CPU = [flag for flag in TINY if flag != "--use_cpu"]  # the scripts turn --use_cpu on under torchrun without CUDA


def test_two_cpu_processes_train_like_one_with_twice_the_batch(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(16, 0))
    # random batches: the scripts' default length-grouped sampler groups at the per-device batch size (4 or 8 here),
    # so its batches differ between the two set-ups by design
    common = ["--train_file", train, "--validation_split_percentage", "0", "--num_train_epochs", "2",
              "--save_strategy", "no", "--train_sampling_strategy", "random", *ON_CPU]
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "run_scripts/run_classification.py", *common, "--per_device_train_batch_size", "4", "--output_dir",
         str(tmp_path / "two")], cwd=ROOT, capture_output=True, text=True, timeout=400,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    state = json.loads((tmp_path / "two" / "trainer_state.json").read_text())
    assert state["global_step"] == 4  # 16 documents x 2 epochs in steps of 2 x 4 (alone, each would take 8)
    assert "Data-parallel training: 2 processes on cpu" in launched.stdout

    # one process, twice the batch, the tokenizer the first process trained and sent to the second
    run_classification.main([*common, "--use_cpu", "--per_device_train_batch_size", "8", "--tokenizer_name",
                             str(tmp_path / "two"), "--output_dir", str(tmp_path / "one")])
    two, one = load_file(tmp_path / "two" / "model.safetensors"), load_file(tmp_path / "one" / "model.safetensors")
    assert two.keys() == one.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_launch_that_would_train_each_process_alone_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    train = write_jsonl(tmp_path / "train.jsonl", classification_rows(6, 0))
    with pytest.raises(ValueError, match=r"one of 2 launched together .* but Trainer would train it alone .* leave "
                                         r"--use_cpu on"):
        run_classification.main(["--train_file", train, "--output_dir", str(tmp_path / "o"), *ON_CPU,
                                 "--use_cpu", "False"])
