# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Trainer set-up shared by the scripts: argument parsing with script defaults, logging, threads, checkpoints,
the evaluation switches, the Trainer subclass, and ordering evaluation data by length."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import sys
import time
import zipfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

import datasets
import numpy as np
import torch
import transformers
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import ExportableState
from safetensors import SafetensorError, safe_open
from transformers.trainer_pt_utils import safe_globals
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy, get_last_checkpoint


if TYPE_CHECKING:
    from .model_args import RANModelArguments


logger = logging.getLogger("run_scripts")


def parse_args(parser, argv: Sequence[str] | None, script_defaults: Sequence[str] = ()):
    """Parse `script_defaults + argv` (later flags win) or a single .json / .yaml file of arguments. A script default
    that the user's own flags contradict is dropped with a logged notice (see `drop_contradicted_defaults`). In a
    process launched as one of several (`torchrun`), the `TrainingArguments` are checked to train data-parallel
    (`distributed_defaults`, `check_data_parallel`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        parsed = parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    elif len(argv) == 1 and argv[0].endswith((".yaml", ".yml")):
        parsed = parser.parse_yaml_file(yaml_file=os.path.abspath(argv[0]))
    else:
        defaults = distributed_defaults() + drop_contradicted_defaults(list(script_defaults), argv)
        parsed = parser.parse_args_into_dataclasses(args=defaults + argv)
    for arguments in parsed:
        if isinstance(arguments, TrainingArguments):
            check_data_parallel(arguments)
    return parsed


def launched_processes() -> int:
    """How many processes the launcher started for this job (`WORLD_SIZE`, which torchrun sets; 1 without one)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def distributed_defaults() -> list[str]:
    """`--use_cpu` for a process launched as one of several (`torchrun --nproc_per_node N`) on a machine without
    CUDA: Transformers (through Accelerate) trains CPU processes data-parallel, over gloo, only with `use_cpu`;
    without it every process trains the whole job alone into the same output folder."""
    return ["--use_cpu"] if launched_processes() > 1 and not torch.cuda.is_available() else []


def check_data_parallel(training_args: TrainingArguments) -> None:
    """A ValueError naming the fix when this process is one of several launched (`WORLD_SIZE` > 1) but Trainer would
    train it alone (its world size is 1, as on CPUs with `--use_cpu False`), which would train the whole job once
    per process into the same folder."""
    launched = launched_processes()
    if launched > 1 and training_args.world_size != launched:
        raise ValueError(
            f"This process is one of {launched} launched together (WORLD_SIZE={launched}, e.g. torchrun "
            f"--nproc_per_node {launched}), but Trainer would train it alone (world size "
            f"{training_args.world_size}), so each process would train the whole job into the same output folder. "
            f"On CPUs, leave --use_cpu on (the scripts turn it on without CUDA) so the processes train "
            f"data-parallel over gloo; on GPUs, give each process one (CUDA_VISIBLE_DEVICES).")


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` in `args` (`--flag value` or `--flag=value`); "true" for a bare boolean flag;
    None when absent."""
    value = None
    for i, arg in enumerate(args):
        name, sep, inline = arg.partition("=")
        if name != flag:
            continue
        if sep:
            value = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
        else:
            value = "true"
    return value


def _remove_flag(args: list[str], flag: str) -> list[str]:
    """`args` without `flag` and its value (if it has one)."""
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name, sep, _ = arg.partition("=")
        if name == flag:
            skip = not sep and i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(arg)
    return out


def drop_contradicted_defaults(defaults: list[str], argv: Sequence[str]) -> list[str]:
    """The script defaults without best-model selection when the user's strategies rule it out.

    The scripts that select a model (classification, NER) default to `--load_best_model_at_end` with epoch-wise
    evaluation and saving. Transformers refuses that combination unless evaluation and saving follow the same
    schedule, so a user's `--save_strategy no` (or `--eval_strategy no`, or a save schedule different from the
    evaluation one) would be rejected by the script's own default. The user's flag wins: unless the user asked for
    `--load_best_model_at_end` too, it and `--metric_for_best_model` are dropped from the defaults, with a notice."""
    if "--load_best_model_at_end" not in defaults or flag_value(argv, "--load_best_model_at_end") is not None:
        return defaults
    eval_strategy = flag_value(argv, "--eval_strategy") or flag_value(defaults, "--eval_strategy") or "no"
    save_strategy = flag_value(argv, "--save_strategy") or flag_value(defaults, "--save_strategy") or "steps"
    if eval_strategy != "no" and save_strategy != "no" and (save_strategy == "best" or save_strategy == eval_strategy):
        return defaults
    logger.warning(f"--eval_strategy {eval_strategy} with --save_strategy {save_strategy}: the best checkpoint "
                   f"cannot be selected on validation, so this script's default --load_best_model_at_end is off "
                   f"(the model after the last step is saved). Pass matching strategies to select the best one.")
    if flag_value(argv, "--metric_for_best_model") is None:
        defaults = _remove_flag(defaults, "--metric_for_best_model")
    return _remove_flag(defaults, "--load_best_model_at_end")


def trainer_defaults(output_dir: str, learning_rate: str, epochs: str, train_batch_size: str, eval_batch_size: str,
                     logging_steps: str, warmup: str, save_total_limit: str = "1",
                     best_metric: str | None = None) -> list[str]:
    """The `TrainingArguments` flags a script puts in front of the user's (later flags win): epoch-wise evaluation and
    checkpoints, no reporting integrations, seed 42, and no pinned memory without CUDA."""
    flags = ["--output_dir", output_dir, "--learning_rate", learning_rate, "--num_train_epochs", epochs,
             "--warmup_steps", warmup, "--weight_decay", "0.01", "--per_device_train_batch_size", train_batch_size,
             "--per_device_eval_batch_size", eval_batch_size, "--eval_strategy", "epoch", "--save_strategy", "epoch",
             "--save_total_limit", save_total_limit, "--logging_steps", logging_steps, "--report_to", "none",
             "--seed", "42"]
    if best_metric:
        flags += ["--train_sampling_strategy", "group_by_length", "--load_best_model_at_end",
                  "--metric_for_best_model", best_metric]
    if not torch.cuda.is_available():
        flags += ["--dataloader_pin_memory", "False"]
    return flags


def steps_given(argv: Sequence[str]) -> bool:
    """Whether the command line names --do_train / --do_eval / --do_predict."""
    return any(a.split("=", 1)[0] in ("--do_train", "--do_eval", "--do_predict") for a in argv)


def setup_logging(training_args: TrainingArguments) -> None:
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)], force=True)
    level = training_args.get_process_log_level()
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.setLevel(min(level, logging.INFO) if training_args.should_log else level)
    datasets.disable_progress_bars()
    if training_args.world_size > 1:
        logger.info(f"Data-parallel training: {training_args.world_size} processes on "
                    f"{training_args.device.type} ({training_args.ddp_backend or 'default'} backend); each step "
                    f"averages the gradients of {training_args.world_size} batches of "
                    f"{training_args.per_device_train_batch_size} (--per_device_train_batch_size).")


def setup_threads(model_args: RANModelArguments) -> None:
    if model_args.torch_threads:
        torch.set_num_threads(model_args.torch_threads)
    logger.info(f"torch threads: {torch.get_num_threads()}")


CHECKPOINT_FOLDER = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
TRAINER_STATE = "trainer_state.json"
# the model weights Trainer's save_model writes: one file, or an index of shards (the shards are checked as files)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin")


def file_is_whole(path: str) -> bool:
    """Whether a checkpoint file was written to its end: a .json file parses, a .safetensors file's header covers the
    file, a torch.save file (.pt/.pth/.bin, a zip archive) ends with the zip directory. Other files count as whole."""
    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                json.load(f)
        elif path.endswith(".safetensors"):
            with safe_open(path, "pt"):
                pass
        elif path.endswith((".pt", ".pth", ".bin")):
            return zipfile.is_zipfile(path)
    except (OSError, ValueError, SafetensorError):  # (json.JSONDecodeError, UnicodeDecodeError are ValueErrors)
        return False
    return True


def checkpoint_problems(folder: str, save_only_model: bool = False) -> list[str]:
    """What keeps the Trainer checkpoint `folder` from being complete; empty when it is complete.

    Trainer's `_save_checkpoint` writes, in this order, the model (config, weights, tokenizer, training_args.bin),
    the optimizer and scheduler (`optimizer.pt`, `scheduler.pt`; not with `save_only_model`), the random states
    (`rng_state.pth`, one per process in distributed training) and last `trainer_state.json`. A process killed
    while saving leaves the files up to that point, the last one possibly cut short. Complete: every one of them is
    there and whole (`file_is_whole`), and `trainer_state.json` holds the step of the folder's name."""
    names = set(os.listdir(folder))
    problems = [f"no {TRAINER_STATE}"] if TRAINER_STATE not in names else []
    if not names & set(WEIGHT_FILES):
        problems.append("no model weights")
    if not save_only_model:
        if not any(name.startswith(("optimizer", "global_step")) for name in names):  # (DeepSpeed: global_step*/)
            problems.append("no optimizer.pt")
        if "scheduler.pt" not in names and not any(name.startswith("global_step") for name in names):
            problems.append("no scheduler.pt")
        if not any(name.startswith("rng_state") for name in names):
            problems.append("no rng_state.pth")
    problems += [f"{name} is cut short" for name in sorted(names)
                 if os.path.isfile(os.path.join(folder, name)) and not file_is_whole(os.path.join(folder, name))]
    named = CHECKPOINT_FOLDER.match(os.path.basename(os.path.normpath(folder)))
    if not problems and named:
        with open(os.path.join(folder, TRAINER_STATE), encoding="utf-8") as f:
            step = json.load(f).get("global_step")
        if step != int(named.group(1)):
            problems.append(f"{TRAINER_STATE} is of step {step}, not {named.group(1)}")
    return problems


def last_complete_checkpoint(output_dir: str, save_only_model: bool = False) -> str | None:
    """The `checkpoint-<step>` folder of `output_dir` with the highest step that is complete
    (`checkpoint_problems`), or None. Every newer one that is incomplete, as a process killed while saving leaves
    it, is skipped with a warning naming what it lacks."""
    if not os.path.isdir(output_dir):
        return None
    steps = {int(m.group(1)): name for name in os.listdir(output_dir)
             if (m := CHECKPOINT_FOLDER.match(name)) and os.path.isdir(os.path.join(output_dir, name))}
    for step in sorted(steps, reverse=True):
        folder = os.path.join(output_dir, steps[step])
        problems = checkpoint_problems(folder, save_only_model)
        if not problems:
            return folder
        logger.warning(f"Skipping {folder}: an incomplete checkpoint ({'; '.join(problems)}), as a run stopped "
                       f"while saving it leaves it. Resuming from the newest complete one instead.")
    return None


def resolve_checkpoint(training_args: TrainingArguments) -> str | None:
    """`--resume_from_checkpoint DIR`, or `--resume_from_checkpoint last` for the newest complete checkpoint in
    output_dir (`last_complete_checkpoint`: one a killed save left incomplete is skipped, with a warning). A
    `checkpoint-<step>` DIR that is incomplete is a ValueError naming what it lacks."""
    resume = training_args.resume_from_checkpoint
    if resume in (None, "", "False", "false"):
        if os.path.isdir(training_args.output_dir) and get_last_checkpoint(training_args.output_dir):
            logger.warning(f"{training_args.output_dir} already holds checkpoints; this run starts over (pass "
                           f"--resume_from_checkpoint last to continue the newest one).")
        return None
    if resume in ("last", "latest", "True", "true"):
        found = last_complete_checkpoint(training_args.output_dir, training_args.save_only_model)
        if found is None:
            some = os.path.isdir(training_args.output_dir) and get_last_checkpoint(training_args.output_dir)
            raise FileNotFoundError(f"--resume_from_checkpoint {resume}: no {'complete ' if some else ''}"
                                    f"checkpoint-* folder in {training_args.output_dir}"
                                    f"{' (the incomplete ones are listed above)' if some else ''}.")
        logger.info(f"Resuming from {found}, the newest complete checkpoint.")
        return found
    if not os.path.isdir(resume):
        raise FileNotFoundError(f"--resume_from_checkpoint: no such directory: '{resume}'.")
    is_trainer_checkpoint = CHECKPOINT_FOLDER.match(os.path.basename(os.path.normpath(resume)))
    problems = checkpoint_problems(resume, training_args.save_only_model) if is_trainer_checkpoint else []
    if problems:
        raise ValueError(f"--resume_from_checkpoint '{resume}': an incomplete checkpoint ({'; '.join(problems)}), as "
                         f"a run stopped while saving it leaves it. Pass an older checkpoint, or 'last' for the newest "
                         f"complete one.")
    return resume


def disable_eval_if_no_data(training_args: TrainingArguments, has_eval: bool) -> None:
    """Without validation data, turn off periodic evaluation and best-model selection (the scripts' defaults)."""
    if not has_eval and training_args.eval_strategy != IntervalStrategy.NO:
        logger.info("No validation data: eval_strategy=no, load_best_model_at_end=False.")
        training_args.eval_strategy = IntervalStrategy.NO
        training_args.load_best_model_at_end = False
        training_args.metric_for_best_model = None


def resumed_callback_attributes(callback: ExportableState, state) -> dict | None:
    """The attributes `callback` stored in the checkpoint this run resumes from (`stateful_callbacks` of its
    `trainer_state.json`), or None for a run from step 0 or a checkpoint written before the callback existed. Also
    gives the callback an entry in `state.stateful_callbacks` if it has none, since Trainer's save looks it up."""
    stored = state.stateful_callbacks.get(type(callback).__name__) if state.global_step > 0 else None
    if isinstance(stored, list):  # Trainer keeps a list when several callbacks of one class were saved
        stored = stored[-1] if stored else None
    state.stateful_callbacks.setdefault(type(callback).__name__, callback.state())
    return stored["attributes"] if stored else None


class TrainingClock(TrainerCallback, ExportableState):
    """Wall time spent in `Trainer.train`, summed over the processes of a run that was stopped and resumed.

    Trainer's `train_runtime` counts the last process only. The clock stores its total in every checkpoint's
    `trainer_state.json` (`stateful_callbacks`) and, on resuming, starts from the total of the checkpoint it resumes
    from; time spent after a run's last checkpoint is not counted, since that work is done again."""

    def __init__(self):
        self.seconds_before = 0.0
        self.started: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        stored = resumed_callback_attributes(self, state)
        self.seconds_before = float(stored["seconds"]) if stored else 0.0
        self.started = time.perf_counter()

    def seconds(self) -> float:
        """Training seconds so far, this process's and those of the processes before it."""
        return self.seconds_before + (time.perf_counter() - self.started if self.started is not None else 0.0)

    def state(self) -> dict:
        return {"args": {}, "attributes": {"seconds": self.seconds()}}


class TimedCheckpoints(TrainerCallback):
    """Asks Trainer for a checkpoint once `minutes` of training have passed since the last checkpoint (of any kind)
    or since training began, so a long epoch is not lost when the process is stopped. The checkpoint is a plain
    Trainer checkpoint: no evaluation, and `--resume_from_checkpoint` continues from it mid-epoch."""

    def __init__(self, minutes: float, clock=time.monotonic):
        if not minutes > 0:
            raise ValueError(f"TimedCheckpoints needs minutes > 0, got {minutes}.")
        self.seconds, self.clock = 60.0 * minutes, clock
        self.since = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.since = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        due = self.since is not None and self.clock() - self.since >= self.seconds
        # distributed: every process saves together (a save waits for all of them), on the first process's clock
        if getattr(args, "world_size", 1) > 1:
            decision = [due]
            torch.distributed.broadcast_object_list(decision, src=0)
            due = decision[0]
        if due:
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        self.since = self.clock()


def sized_length(loader) -> int | None:
    """len(loader), or None for a loader over an iterable dataset (or no loader)."""
    try:
        return len(loader)
    except TypeError:
        return None


class EpochStartRandomState(TrainerCallback, ExportableState):
    """Lets a run resumed from a mid-epoch checkpoint see the rest of that epoch's batches in the order the
    uninterrupted run saw them.

    The length-grouped sampler (`--train_sampling_strategy group_by_length`, the classification default) shuffles
    with torch's global generator when an epoch's batch iterator is created. Resuming at an epoch boundary, Trainer
    puts the checkpoint's generator state back before that, so the order matches; resuming mid-epoch, it does so only
    after the iterator exists, so the rest of the epoch would come from another shuffle. This callback stores the
    generator state each epoch began with in every checkpoint (`stateful_callbacks` of `trainer_state.json`), and
    on resuming mid-epoch puts it back before the iterator is created; Trainer then restores the checkpoint's own
    state after skipping the trained batches, as it always does. Single-process training only."""

    def __init__(self):
        self.epoch_start: torch.Tensor | None = None  # torch's CPU generator state when this epoch began
        self.stored: torch.Tensor | None = None  # the same, read from the checkpoint being resumed
        self.resume_from: str | None = None  # that checkpoint's folder (set by RANTrainer.train)
        self.first_epoch = True

    def on_train_begin(self, args, state, control, **kwargs):
        encoded = (resumed_callback_attributes(self, state) or {}).get("torch_cpu_state")
        self.stored = torch.frombuffer(bytearray(base64.b64decode(encoded)), dtype=torch.uint8) if encoded else None
        self.first_epoch = True

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        resumed, self.first_epoch = self.first_epoch and state.global_step > 0, False
        batches = sized_length(train_dataloader)  # None for a streamed dataset (its shuffle is seeded by itself)
        if resumed and batches is not None and args.world_size == 1 and not args.ignore_data_skip:
            accumulation = args.gradient_accumulation_steps
            steps_per_epoch = max(batches // accumulation + int(batches % accumulation > 0), 1)
            if state.global_step % steps_per_epoch == 0:  # Trainer loads the checkpoint's state before shuffling
                rng_file = os.path.join(self.resume_from or "", "rng_state.pth")
                if self.resume_from and os.path.isfile(rng_file):
                    with safe_globals():  # (the file holds numpy's state too)
                        self.epoch_start = torch.load(rng_file, weights_only=True)["cpu"]
                    return
            elif self.stored is not None:
                torch.random.set_rng_state(self.stored)
            else:
                logger.warning("The checkpoint does not record the random state its epoch began with (it predates "
                               "that record), so the rest of this epoch is shuffled anew.")
        self.epoch_start = torch.random.get_rng_state()

    def state(self) -> dict:
        encoded = None if self.epoch_start is None else base64.b64encode(self.epoch_start.numpy().tobytes()).decode()
        return {"args": {}, "attributes": {"torch_cpu_state": encoded}}


class RANTrainer(Trainer):
    """Trainer whose evaluation and prediction read the dataset in order (even with
    `train_sampling_strategy=group_by_length`), so predictions line up with the examples, whose
    `training_clock` counts the training time of every process of a resumed run, which can also checkpoint every
    `save_every_minutes` of training (`TimedCheckpoints`; 0: off), and whose runs resumed mid-epoch keep the
    uninterrupted run's batch order (`EpochStartRandomState`). `learning_rates` (parameter name -> learning rate)
    gives those parameters their own peak learning rate under the same schedule (`--head_learning_rate`)."""

    def __init__(self, *args, callbacks=None, save_every_minutes: float = 0.0,
                 learning_rates: dict[str, float] | None = None, **kwargs):
        self.learning_rates = learning_rates or {}
        self.training_clock, self.epoch_start_state = TrainingClock(), EpochStartRandomState()
        callbacks = [*(callbacks or []), self.training_clock, self.epoch_start_state]
        if save_every_minutes:
            callbacks.append(TimedCheckpoints(save_every_minutes))
        super().__init__(*args, callbacks=callbacks, **kwargs)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir, self.args.save_only_model)
        self.epoch_start_state.resume_from = resume_from_checkpoint or None
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def create_optimizer(self, model=None):
        """Trainer's optimizer, with one parameter group per (weight decay, learning rate) pair when
        `learning_rates` is given."""
        if self.optimizer is not None or not self.learning_rates:
            return super().create_optimizer(model)
        model = self.model if model is None else model
        unknown = set(self.learning_rates) - {name for name, _ in model.named_parameters()}
        if unknown:
            raise ValueError(f"learning_rates names parameters the model does not have: {sorted(unknown)}.")
        decayed = set(self.get_decay_parameter_names(model))
        groups: dict[tuple[bool, float], list] = {}
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                key = (name in decayed, self.learning_rates.get(name, self.args.learning_rate))
                groups.setdefault(key, []).append(parameter)
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        if {"params", "model", "optimizer_dict"} & set(optimizer_kwargs) or not isinstance(optimizer_cls, type):
            raise ValueError(f"Per-parameter learning rates need a plain torch optimizer; --optim {self.args.optim} "
                             "builds its own parameter groups.")
        self.optimizer = optimizer_cls(
            [{"params": params, "lr": lr, "weight_decay": self.args.weight_decay if decay else 0.0}
             for (decay, lr), params in groups.items()], **optimizer_kwargs)
        return self.optimizer

    def _get_eval_sampler(self, eval_dataset):
        if self.args.world_size <= 1 and eval_dataset is not None:
            return torch.utils.data.SequentialSampler(eval_dataset)
        return super()._get_eval_sampler(eval_dataset)


def train_and_save(trainer: Trainer, resume: str | None, **extra_metrics) -> dict:
    """Train (resuming from `resume` if given), save the model and tokenizer into output_dir, and log and save the
    training metrics (plus `extra_metrics`) and the trainer state. Returns the metrics."""
    train_result = trainer.train(resume_from_checkpoint=resume)
    if getattr(trainer.model.config, "is_decoder", False):
        trainer.model.config.use_cache = True  # Trainer turns the cache off for training; generation wants it
    trainer.save_model()
    metrics = {**train_result.metrics, **extra_metrics}
    clock = getattr(trainer, "training_clock", None)
    if clock is not None:  # with every process of a resumed run; train_runtime is this process's only
        metrics["train_runtime_all_processes"] = round(clock.seconds(), 4)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    if trainer.state.best_model_checkpoint:
        logger.info(f"Best checkpoint (on validation {trainer.args.metric_for_best_model}): "
                    f"{trainer.state.best_model_checkpoint}")
    return metrics


def sort_by_length(dataset: datasets.Dataset, column: str = "input_ids") -> tuple[datasets.Dataset, np.ndarray]:
    """The dataset sorted by decreasing length (less padding in evaluation batches) and the permutation used:
    `sorted[i] = dataset[order[i]]`."""
    lengths = np.array([len(x) for x in dataset[column]])
    order = np.argsort(-lengths, kind="stable")
    return dataset.select(order.tolist()), order


def unsort(values: np.ndarray | list, order: np.ndarray) -> list:
    out = [None] * len(order)
    for position, index in enumerate(order):
        out[int(index)] = values[position]
    return out
