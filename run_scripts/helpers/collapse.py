# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Telling a training run that collapsed to one class from a result.

A learning rate too high for a model can make it collapse once the schedule peaks: it predicts one class for every
document, its validation loss climbs back to that of a uniform guess (ln K for K classes), and early stopping or
best-model selection may keep an epoch from before or after the collapse without a word. The classification-style
scripts count the distinct predictions of every evaluation (`distinct_predictions`, logged as
`eval_predicted_classes` / `eval_predicted_tags`); `check_collapse` reads the evaluations of a run and, where it
collapsed, says so in a WARNING with what to try, and in the results and the model card (`collapse_section`)."""

from __future__ import annotations

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


def collapse_findings(history: Sequence[dict], count_key: str, num_classes: int | None,
                      loss_key: str = "eval_loss") -> list[str]:
    """What in a run's validation evaluations (`history`, in order; each a dict of metrics with its `epoch`) says
    it collapsed: predictions constant on the validation split (`count_key`, the number of distinct predictions,
    is 1), or, for single-label classification into `num_classes` classes (None: not checked), the validation
    cross-entropy back at the level of a uniform guess, ln K (within `UNIFORM_LOSS_TOLERANCE`), after it had been
    lower. Empty when neither happened."""
    findings = []
    constant = [e for e in history if e.get(count_key) == 1]
    if constant:
        findings.append(f"the predictions on the validation split are constant (one class for every example) at "
                        f"epoch(s) {_epochs(constant)}")
    if num_classes is not None:
        uniform = math.log(num_classes)
        tolerance, lowest = UNIFORM_LOSS_TOLERANCE * uniform, math.inf
        for entry in (e for e in history if e.get(loss_key) is not None):
            loss = float(entry[loss_key])
            if abs(loss - uniform) <= tolerance and lowest < uniform - tolerance:
                findings.append(f"the validation loss came back to the uniform level ln {num_classes} "
                                f"= {uniform:.4f} ({loss:.4f} at epoch {_epochs([entry])}) after it had been down "
                                f"to {lowest:.4f}")
                break
            lowest = min(lowest, loss)
    return findings


def check_collapse(trainer, final_metrics: dict | None, count_key: str, num_classes: int | None) -> dict | None:
    """Whether the run of `trainer` collapsed (`collapse_findings` over its evaluations during training and
    `final_metrics`, the validation scores of the model it keeps): a loud WARNING naming what happened and what to
    try, and the finding for the results (None when it did not collapse)."""
    history = [entry for entry in trainer.state.log_history if count_key in entry]
    if final_metrics is not None:
        history.append(final_metrics)
    findings = collapse_findings(history, count_key, num_classes)
    if not findings:
        return None
    kept_constant = final_metrics is not None and final_metrics.get(count_key) == 1
    learning_rate = trainer.args.learning_rate
    always_constant = all(entry.get(count_key) == 1 for entry in history)
    advice = (f"Try a lower --learning_rate (this run's peak was {learning_rate:g}; e.g. {learning_rate / 3:.2g}), "
              f"or a longer warm-up (--warmup_steps)"
              + ("; as it predicted one class at every evaluation, more epochs may be what it needs." if always_constant
                 else "."))
    kept = ("The model this run keeps predicts one class on the validation split: its validation and test scores "
            "are those of a collapsed model, not a result." if kept_constant else
            "The model this run keeps may predate the collapse (best-model selection), but the training did not "
            "converge: read its scores as those of a failed run.")
    summary = f"Training collapsed: {'; '.join(findings)}. {kept} {advice}"
    logger.warning("!" * 100 + f"\n{summary}\n" + "!" * 100)
    return {"findings": findings, "kept_model_constant": kept_constant, "advice": advice, "summary": summary}


def collapse_section(results: dict) -> dict[str, str]:
    """The model card's warning section (heading -> text) for a run that collapsed (`results["collapse"]`); empty
    for one that did not."""
    collapse = results.get("collapse")
    return {"Warning: training collapsed": collapse["summary"]} if collapse else {}
