# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""`--resume_from_checkpoint last` after a run was killed while writing a checkpoint: the half-written folder is
skipped (with a warning naming it) and the run resumes from the newest complete one, ending with the weights of the
run that was never stopped. The kill is simulated at every point of Trainer's save order (files up to that point
written, the one being written cut short or absent) and, once, is a real SIGKILL inside the save."""

import os
import shutil
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from run_scripts import run_classification
from run_scripts.helpers import trainer_setup
from script_data import TINY, classification_rows, write_jsonl


pytestmark = pytest.mark.usefixtures("restore_script_globals")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the shipped tokenizer: a vocabulary trained at run time differs between processes (WordPiece ties)
FIXED_TOKENIZER = ["--tokenizer_name", run_classification.DEFAULT_TOKENIZER]
LATER_FILES = ["optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"]


def arguments(train_file, output_dir):
    return ["--train_file", str(train_file), "--output_dir", str(output_dir), "--max_steps", "8",
            "--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "10", "--eval_strategy", "no",
            "--validation_split_percentage", "0", "--per_device_train_batch_size", "4", *TINY, *FIXED_TOKENIZER]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(the training file, the output folder of a run of 8 steps with a checkpoint every 2 that was never stopped)."""
    root = tmp_path_factory.mktemp("killed_save")
    train_file = write_jsonl(root / "train.jsonl", classification_rows(16, 0))
    run_classification.main(arguments(train_file, root / "whole"))
    return train_file, root / "whole"


def save_order(folder):
    """The files of a complete checkpoint in the order Trainer's `_save_checkpoint` writes them: the model's
    (`save_model`: config, weights, code, tokenizer, training_args.bin), then the optimizer, the scheduler, the
    random states and trainer_state.json."""
    model_files = sorted((name for name in os.listdir(folder) if name not in LATER_FILES),
                         key=lambda name: (name != "config.json", name != "model.safetensors",
                                           name == "training_args.bin", name))
    return model_files + LATER_FILES


def killed_save(source, target, stopped_at: int, cut_short: bool):
    """`target`: checkpoint-2 of `source` whole, and checkpoint-4 as a save stopped at its file number `stopped_at`
    leaves it: the files before it whole, that one cut to half its size (`cut_short`) or not begun."""
    target.mkdir()
    shutil.copytree(source / "checkpoint-2", target / "checkpoint-2")
    (target / "checkpoint-4").mkdir()
    order = save_order(source / "checkpoint-4")
    for name in order[:stopped_at]:
        shutil.copy2(source / "checkpoint-4" / name, target / "checkpoint-4" / name)
    if cut_short:
        data = (source / "checkpoint-4" / order[stopped_at]).read_bytes()
        (target / "checkpoint-4" / order[stopped_at]).write_bytes(data[: len(data) // 2])
    return order[stopped_at]


def test_last_is_the_newest_complete_checkpoint_at_every_point_of_a_save(uninterrupted, tmp_path, caplog):
    _, whole = uninterrupted
    order = save_order(whole / "checkpoint-4")
    assert order[:2] == ["config.json", "model.safetensors"] and order[-1] == "trainer_state.json"
    for stopped_at in range(len(order)):
        for cut_short in (False, True):
            target = tmp_path / f"{stopped_at}-{cut_short}"
            name = killed_save(whole, target, stopped_at, cut_short)
            caplog.clear()
            found = trainer_setup.last_complete_checkpoint(str(target))
            assert found == str(target / "checkpoint-2"), (name, cut_short)
            skipped = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert len(skipped) == 1 and f"Skipping {target / 'checkpoint-4'}: an incomplete checkpoint" in skipped[0]
            assert ("no trainer_state.json" in skipped[0]) != (name == "trainer_state.json" and cut_short)
    complete = tmp_path / "complete"
    shutil.copytree(whole / "checkpoint-4", complete / "checkpoint-4")
    assert trainer_setup.last_complete_checkpoint(str(complete)) == str(complete / "checkpoint-4")
    # a checkpoint-<step> folder named explicitly is checked the same way
    killed_save(whole, tmp_path / "explicit", order.index("rng_state.pth"), cut_short=False)
    args = SimpleNamespace(resume_from_checkpoint=str(tmp_path / "explicit" / "checkpoint-4"), save_only_model=False,
                           output_dir=str(tmp_path / "explicit"))
    with pytest.raises(ValueError, match=r"checkpoint-4': an incomplete checkpoint \(no trainer_state.json; no "
                                         r"rng_state.pth\).*'last'"):
        trainer_setup.resolve_checkpoint(args)


def weights_equal(a, b):
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_a_run_resumed_after_a_save_killed_at_any_point_ends_with_the_uninterrupted_weights(uninterrupted, tmp_path,
                                                                                            capsys):
    train_file, whole = uninterrupted
    for stopped_at, name in enumerate(save_order(whole / "checkpoint-4")):
        run = tmp_path / str(stopped_at)
        killed_save(whole, run, stopped_at, cut_short=True)
        run_classification.main([*arguments(train_file, run), "--resume_from_checkpoint", "last"])
        logged = capsys.readouterr().out
        assert f"Skipping {run / 'checkpoint-4'}: an incomplete checkpoint" in logged, name
        assert f"Resuming from {run / 'checkpoint-2'}, the newest complete checkpoint" in logged, name
        assert weights_equal(run, whole), name


KILLED_IN_THE_SAVE_OF_STEP_4 = """
import os, signal, sys
from transformers import Trainer
from run_scripts import run_classification

save_rng_state = Trainer._save_rng_state

def save_rng_state_or_die(self, output_dir):
    if os.path.basename(output_dir) == "checkpoint-4":  # model, optimizer and scheduler written, the rest not yet
        os.kill(os.getpid(), signal.SIGKILL)
    save_rng_state(self, output_dir)

Trainer._save_rng_state = save_rng_state_or_die
run_classification.main(sys.argv[1:])
"""


def test_a_run_killed_while_saving_resumes_with_last(uninterrupted, tmp_path):
    train_file, whole = uninterrupted
    killed = subprocess.run([sys.executable, "-c", KILLED_IN_THE_SAVE_OF_STEP_4, *arguments(train_file, tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (tmp_path / "checkpoint-4" / "trainer_state.json").exists()
    assert (tmp_path / "checkpoint-4" / "optimizer.pt").exists()
    run_classification.main([*arguments(train_file, tmp_path), "--resume_from_checkpoint", "last"])
    assert weights_equal(tmp_path, whole)
