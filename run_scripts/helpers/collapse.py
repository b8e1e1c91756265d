# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Telling a training run that collapsed to one class from a result.

A learning rate too high for a model can make it collapse once the schedule peaks: it predicts one class for every
document, its validation loss climbs back to that of a uniform guess (ln K for K classes), and early stopping or
best-model selection may keep an epoch from before or after the collapse without a word. The classification-style
scripts count the distinct predictions of every evaluation (`distinct_predictions`, logged as
`eval_predicted_classes` / `eval_predicted_tags`); `check_collapse` reads the evaluations of a run and, where it
ended collapsed, says so in a WARNING with what to try, and in the results and the model card (`collapse_section`).
A run that predicts one class for an epoch or two before it learns, or dips into one class and climbs out again,
did not collapse: it gets one warning line."""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence

import numpy as np


logger = logging.getLogger("run_scripts")

# how close to ln K (relative) a validation loss counts as back at the uniform level
UNIFORM_LOSS_TOLERANCE = 0.03


def distinct_predictions(predictions) -> int:
    """How many different predictions `predictions` holds: class ids (N,), multi-hot rows (N, K) (each distinct row
    one), or a flat sequence of tags."""
    array = np.asarray(predictions)
    if array.ndim <= 1:
        return len(np.unique(array))
    return len(np.unique(array.reshape(len(array), -1), axis=0))


def _epochs(entries: Sequence[dict]) -> str:
    epochs = sorted({round(float(e["epoch"]), 2) for e in entries if e.get("epoch") is not None})
    return ", ".join(f"{epoch:g}" for epoch in epochs) if epochs else "the final evaluation"


def fell_back_to_chance(history: Sequence[dict], num_classes: int, accuracy_key: str) -> bool:
    """Whether the last evaluation's accuracy fell at least halfway back from the run's best to chance (1 / K); True
    when accuracy is not logged. An overfitting model's validation loss can pass ln K while it still classifies
    well (confidently right on most examples, very wrong on a few); a collapsed one's accuracy is gone."""
    accuracies = [float(e[accuracy_key]) for e in history if e.get(accuracy_key) is not None]
    if history[-1].get(accuracy_key) is None or not accuracies:
        return True
    chance = 1 / num_classes
    return accuracies[-1] <= chance + (max(accuracies) - chance) / 2


def collapse_findings(history: Sequence[dict], count_key: str, num_classes: int | None,
                      loss_key: str = "eval_loss", accuracy_key: str = "eval_accuracy") -> list[str]:
    """What in a run's validation evaluations (`history`, in order; each a dict of metrics with its `epoch`) says
    it ended collapsed: its last evaluation predicts one class for every example (`count_key`, the number of distinct
    predictions, is 1; the findings name the epochs since the predictions became constant), or, for single-label
    classification into `num_classes` classes (None: not checked), its validation cross-entropy is back at the
    level of a uniform guess, ln K (within `UNIFORM_LOSS_TOLERANCE`), after it had been lower, with its accuracy
    gone too (`fell_back_to_chance`). Empty when the last evaluation shows neither: a run whose predictions were
    constant for a while and then varied again recovered (`recovered_epochs`), and a loss that passes ln K on its
    way up is overfitting."""
    if not history:
        return []
    findings = []
    constant_tail = list(itertools.takewhile(lambda e: e.get(count_key) == 1, reversed(history)))[::-1]
    if constant_tail:
        findings.append(f"the predictions on the validation split are constant (one class for every example) at "
                        f"epoch(s) {_epochs(constant_tail)}")
    losses = [float(e[loss_key]) for e in history if e.get(loss_key) is not None]
    if num_classes is not None and history[-1].get(loss_key) is not None and len(losses) > 1:
        uniform = math.log(num_classes)
        tolerance, last, lowest = UNIFORM_LOSS_TOLERANCE * uniform, losses[-1], min(losses[:-1])
        if abs(last - uniform) <= tolerance and lowest < uniform - tolerance and fell_back_to_chance(
                history, num_classes, accuracy_key):
            findings.append(f"the validation loss came back to the uniform level ln {num_classes} = {uniform:.4f} "
                            f"({last:.4f} at epoch {_epochs(history[-1:])}) after it had been down to {lowest:.4f}")
    return findings


def recovered_epochs(history: Sequence[dict], count_key: str) -> str | None:
    """The epochs at which a run predicted one class on the validation split before its predictions varied again
    (None when it never did, or never recovered)."""
    last_varied = max((i for i, e in enumerate(history) if e.get(count_key, 1) != 1), default=-1)
    constant = [e for e in history[:last_varied] if e.get(count_key) == 1]
    return _epochs(constant) if constant else None


def training_log(log_history: Sequence[dict]) -> Sequence[dict]:
    """Trainer's log entries up to the end of training (its summary, `train_runtime`): the evaluations of the model it
    keeps, logged after it, are left out (all entries when there is no summary)."""
    ends = [i for i, entry in enumerate(log_history) if "train_runtime" in entry]
    return log_history[: ends[-1]] if ends else log_history


def run_findings(log_history: Sequence[dict], final_metrics: dict | None, count_key: str,
                 num_classes: int | None) -> tuple[list[dict], list[str], bool]:
    """A finished run judged from Trainer's `log_history` and the kept model's validation scores (`final_metrics`):
    its evaluations during training, the findings that it ended collapsed (`collapse_findings`, or a kept model that
    predicts one class), and whether the kept model does."""
    history = [entry for entry in training_log(log_history) if count_key in entry]
    findings = collapse_findings(history, count_key, num_classes)
    kept_constant = final_metrics is not None and final_metrics.get(count_key) == 1
    if kept_constant and not findings:
        findings = ["the model it keeps predicts one class for every example of the validation split"]
    return history, findings, kept_constant


def check_collapse(trainer, final_metrics: dict | None, count_key: str, num_classes: int | None) -> dict | None:
    """Whether the run of `trainer` collapsed: its evaluations during training ended collapsed
    (`collapse_findings`), or the model it keeps (`final_metrics`, its validation scores) predicts one class. Then a
    loud WARNING naming what happened and what to try, and the finding for the results; None otherwise (a run that
    recovered from constant predictions gets a one-line warning only)."""
    history, findings, kept_constant = run_findings(trainer.state.log_history, final_metrics, count_key, num_classes)
    if not findings:
        recovered = recovered_epochs(history, count_key)
        if recovered:
            logger.warning(f"The predictions on the validation split were constant at epoch(s) {recovered} and "
                           f"varied again later: a passing collapse, not where the run ended.")
        return None
    learning_rate = trainer.args.learning_rate
    always_constant = bool(history) and all(entry.get(count_key) == 1 for entry in history)
    advice = (f"Try a lower --learning_rate (this run's peak was {learning_rate:g}; e.g. {learning_rate / 3:.2g}), "
              f"or a longer warm-up (--warmup_steps)"
              + ("; as it predicted one class at every evaluation, more epochs may be what it needs." if always_constant
                 else "."))
    kept = ("The model this run keeps predicts one class on the validation split: its validation and test scores "
            "are those of a collapsed model, not a result." if kept_constant else
            "The model this run keeps may predate the collapse (best-model selection), but the training ended "
            "collapsed: read its scores as those of a failed run.")
    summary = f"Training collapsed: {'; '.join(findings)}. {kept} {advice}"
    logger.warning("!" * 100 + f"\n{summary}\n" + "!" * 100)
    return {"findings": findings, "kept_model_constant": kept_constant, "advice": advice, "summary": summary}


def collapse_section(results: dict) -> dict[str, str]:
    """The model card's warning section (heading -> text) for a run that collapsed (`results["collapse"]`); empty
    for one that did not."""
    collapse = results.get("collapse")
    return {"Warning: training collapsed": collapse["summary"]} if collapse else {}
