# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Named recipes for training a RAN classifier from scratch: RANConfig fields plus `TrainingArguments` flags.

`from-scratch` (the default of `run_classification.py` when no `--model_name_or_path` is given) turns on
`memory_review_residual` and mean pooling in the cell transform. From random weights the authors' memory review
passes each token through a path of gain ~0.01, and in the first ~10 optimiser steps every token of a document
collapses to one vector, after which the model stays at chance (`docs/stall/README.md`). With the residual the full model trains. The pooling and the
learning rate were chosen on the dev split carved from Hyperpartisan's training data (README, "The main job").

`authors` is the authors' architecture exactly (what a converted checkpoint uses), with the script's own defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Recipe:
    name: str
    config: dict = field(default_factory=dict)  # RANConfig fields of a model built from scratch
    training_flags: tuple[str, ...] = ()  # TrainingArguments flags, put after the script's defaults (the user's win)


RECIPES = {
    recipe.name: recipe
    for recipe in (
        Recipe("from-scratch", config={"memory_review_residual": True, "pooler_pooling": "mean"},
               training_flags=("--learning_rate", "1e-3", "--warmup_steps", "0.1", "--lr_scheduler_type", "linear")),
        Recipe("authors"),
    )
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"--recipe must be one of {sorted(RECIPES)}, got {name!r}.")
    return RECIPES[name]
