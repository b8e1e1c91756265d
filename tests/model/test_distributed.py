"""Distributed data-parallel training.

`Trainer` under `torchrun --nproc_per_node 2` (two CPU processes, gloo) must end at the parameters of a single-process
run with the same global batch: DDP averages the two half-batch gradients, which is the full-batch gradient. Tiny
config, no dropout, a fixed dataset with padding, a handful of AdamW steps. This file is also the worker script that
torchrun launches (`python -m torch.distributed.run --nproc_per_node 2 tests/model/test_distributed.py OUT 2`).
"""

import os
import subprocess
import sys

import torch


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for conftest

from conftest import randomize, tiny_config  # noqa: E402


GLOBAL_BATCH = 4
STEPS = 5
TOLERANCE = 1e-6


def dataset(count=GLOBAL_BATCH * STEPS, length=20):
    """Fixed documents of 11..20 real tokens (right-padded) with labels in {0, 1, 2}."""
    generator = torch.Generator().manual_seed(0)
    examples = []
    for i in range(count):
        ids = torch.randint(1, 97, (length,), generator=generator)
        real = 11 + i % 10
        ids[real:] = 0
        examples.append({"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": torch.tensor(i % 3)})
    return examples


def initial_model():
    from ran_hf import RANForSequenceClassification

    torch.manual_seed(0)
    return randomize(RANForSequenceClassification(tiny_config(num_labels=3)), seed=0)


def train(output_dir: str, per_device_batch: int) -> dict:
    """Train the same tiny classifier for STEPS steps; return its final parameters (every process holds the same)."""
    from transformers import Trainer, TrainingArguments

    model = initial_model()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    args = TrainingArguments(
        output_dir, per_device_train_batch_size=per_device_batch, max_steps=STEPS, learning_rate=1e-3,
        warmup_steps=0, weight_decay=0.01, seed=0, use_cpu=True, ddp_backend="gloo" if distributed else None,
        report_to="none",
        save_strategy="no", logging_strategy="no", dataloader_num_workers=0, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset())
    trainer.train()
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def test_two_process_ddp_equals_one_process_with_the_same_global_batch(tmp_path, one_thread):
    repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([repository, os.environ.get("PYTHONPATH", "")])}
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
         str(tmp_path / "ddp"), str(GLOBAL_BATCH // 2)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    distributed = torch.load(tmp_path / "ddp" / "params.pt")
    assert distributed["world_size"] == 2

    single = train(str(tmp_path / "single"), GLOBAL_BATCH)
    initial = dict(initial_model().named_parameters())
    assert single.keys() == distributed["params"].keys()
    for name, value in single.items():
        torch.testing.assert_close(distributed["params"][name], value, rtol=0, atol=TOLERANCE, msg=name)
    moved = max(float((single[n] - initial[n]).detach().abs().max()) for n in single)
    assert moved > 100 * TOLERANCE, "training did not move the parameters; the comparison would be vacuous"


if __name__ == "__main__":  # a torchrun worker
    output, per_device = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    params = train(output, per_device)
    import torch.distributed as dist

    if dist.get_rank() == 0:
        torch.save({"params": params, "world_size": dist.get_world_size()}, os.path.join(output, "params.pt"))
    # Tear the gloo group down before the interpreter exits: leaving it to interpreter shutdown can abort a rank
    # ("terminate called without an active exception", exit -6), and torchrun then kills the other rank.
    dist.barrier()
    dist.destroy_process_group()
