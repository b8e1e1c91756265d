# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Argument checks of the RAN models: inputs, keyword arguments, labels and export paths.

Every check raises before torch would, with a message that names the argument and what it should be. Checks that
read tensor values (token ids, label ranges, mask values) are skipped under `torch.compile` / `torch.export`, where
they would break the graph.
"""

import difflib
import inspect

import torch
from torch import nn

from .configuration_ran import RANConfig


def is_compiling() -> bool:
    """True under `torch.compile` and `torch.export` (Dynamo tracing): the layout is static, and checks that read
    tensor values are skipped (they would break the graph); eager calls get every check. (`torch.jit.trace` never
    gets this far: `check_export_path` refuses it at the top of `RANModel.forward`.)"""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def check_export_path(causal: bool) -> None:
    """Refuse the export paths that would silently bake one input's window grid into the graph.

    `torch.jit.trace` (and so the TorchScript-based `torch.onnx.export(..., dynamo=False)`) records the Python
    window loop and grid size of the example input: the result would be wrong at any other length or padding.
    `torch.export` / `torch.onnx.export(..., dynamo=True)` trace a grid sized by the symbolic length instead
    (bidirectional models); the causal model's recurrent state is not exportable.
    """
    if torch.jit.is_tracing():
        raise RuntimeError(
            "RAN cannot be traced with torch.jit.trace (used by the legacy `torch.onnx.export(..., dynamo=False)`): "
            "a trace records the window grid of the example input and would be silently wrong at other lengths or "
            "padding. Use `torch.onnx.export(model, args, dynamo=True, dynamic_shapes=...)` or "
            "`torch.export.export(model, args, dynamic_shapes=...)`, with a `torch.export.Dim` for the sequence "
            "length."
        )
    if causal and torch.compiler.is_exporting():
        raise RuntimeError(
            "RAN's causal mode (`config.is_decoder=True`, RANForCausalLM) cannot be exported: its windowing and "
            "recurrent cache depend on the input's values. Export a bidirectional model (RANModel, "
            "RANForSequenceClassification, RANForMaskedLM, ...), or run the causal model eagerly or with "
            "`torch.compile`."
        )


# keyword arguments a forward takes through `**kwargs` without naming them: Trainer's loss normaliser, and the
# cache position `generate()` may add (RAN's recurrent cache keeps its own count)
_PASS_THROUGH_KWARGS = frozenset({"num_items_in_batch", "cache_position"})
_KWARG_HINTS = {"token_type_ids": "RAN has no token types; call the tokenizer with `return_token_type_ids=False`",
                "position_ids": "RAN's positions are rotary and restart in every window; there are no position ids",
                "head_mask": "RAN has no head mask"}


def check_forward_kwargs(model: nn.Module, kwargs: dict) -> None:
    """A keyword the forward does not know would otherwise vanish into `**kwargs` (`attn_mask=` for
    `attention_mask=`): raise a `TypeError` naming it, as Python does for a function without `**kwargs`."""
    unknown = [name for name in kwargs if name not in _PASS_THROUGH_KWARGS]
    if not unknown:
        return
    name = unknown[0]
    known = [p for p in inspect.signature(type(model).forward).parameters if p not in ("self", "kwargs")]
    close = difflib.get_close_matches(name, known + sorted(_PASS_THROUGH_KWARGS), n=1)
    hint = _KWARG_HINTS.get(name, f"did you mean `{close[0]}`?" if close else f"it takes {', '.join(known)}")
    raise TypeError(f"{type(model).__name__}.forward() got an unexpected keyword argument `{name}` ({hint}).")


def resolve_cache_argument(model_name: str, cache, past_key_values):
    """The recurrent state passed as `cache` (Transformers >= 5.24) or as `past_key_values` (its name before, and
    what `generate()` of those versions passes); not both."""
    if past_key_values is None:
        return cache
    if cache is not None:
        raise ValueError(f"{model_name}: pass the state as `cache` or as `past_key_values` (its older name), not both.")
    return past_key_values


def check_inputs(
    config: RANConfig, embedding_dtype: torch.dtype, input_ids, attention_mask, inputs_embeds, initial_cell
) -> torch.Tensor:
    """Validate the arguments of `RANModel.forward` (and the config, which may have been edited since construction)
    and return the (B, L) bool mask of real tokens. `embedding_dtype` is the dtype `inputs_embeds` must have."""
    if not is_compiling():
        config._check_values()
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("RANModel: pass exactly one of `input_ids` and `inputs_embeds`.")
    if input_ids is not None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype.is_floating_point or input_ids.dim() != 2:
            raise TypeError(
                "RANModel: `input_ids` must be an integer tensor of shape (batch_size, sequence_length), got "
                f"{type(input_ids).__name__}{tuple(getattr(input_ids, 'shape', ()))}"
                f"{' of ' + str(input_ids.dtype) if isinstance(input_ids, torch.Tensor) else ''}."
            )
        shape = tuple(input_ids.shape)
        if input_ids.numel() and not is_compiling() and (
            int(input_ids.min()) < 0 or int(input_ids.max()) >= config.vocab_size
        ):
            raise ValueError(
                f"RANModel: `input_ids` must lie in [0, vocab_size={config.vocab_size}); got values in "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]. Check that the tokenizer matches the model "
                "(or call `model.resize_token_embeddings(len(tokenizer))`)."
            )
    else:
        if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3 or (
            inputs_embeds.shape[-1] != config.hidden_size
        ):
            raise ValueError(
                "RANModel: `inputs_embeds` must be a float tensor of shape (batch_size, sequence_length, "
                f"hidden_size={config.hidden_size}), got {tuple(getattr(inputs_embeds, 'shape', ()))}."
            )
        if inputs_embeds.dtype != embedding_dtype and not (
            inputs_embeds.dtype.is_floating_point and torch.is_autocast_enabled(inputs_embeds.device.type)
        ):
            raise TypeError(
                f"RANModel: `inputs_embeds` must have the model's dtype {embedding_dtype}, got "
                f"{inputs_embeds.dtype}; pass `inputs_embeds.to({embedding_dtype})` (or cast the model with "
                "`model.to(dtype)`)."
            )
        shape = tuple(inputs_embeds.shape[:2])
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"RANModel: the input is empty (shape {shape}); pass at least one token per row.")
    if initial_cell is not None and (
        not isinstance(initial_cell, torch.Tensor) or tuple(initial_cell.shape) != (shape[0], config.hidden_size)
    ):
        raise ValueError(
            f"RANModel: `initial_cell` must have shape (batch_size, hidden_size) = ({shape[0]}, "
            f"{config.hidden_size}); got {tuple(getattr(initial_cell, 'shape', ()))}."
        )
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    if attention_mask is None:
        # causal LMs often share the pad id with a real token (eos): there the default is "all real", as in
        # Transformers' decoders; generate() passes the mask it builds
        if input_ids is not None and config.pad_token_id is not None and not config.is_decoder:
            return input_ids != config.pad_token_id
        return torch.ones(shape, dtype=torch.bool, device=device)
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != shape:
        raise ValueError(
            f"RANModel: `attention_mask` must have the shape of the input, (batch_size, sequence_length) = "
            f"{shape}; got {tuple(getattr(attention_mask, 'shape', ()))}."
        )
    if attention_mask.dtype != torch.bool and not is_compiling() and bool(
        ((attention_mask != 0) & (attention_mask != 1)).any()
    ):
        raise ValueError("RANModel: `attention_mask` must hold only 0 (padding) and 1 (real token).")
    return attention_mask.to(device=device).bool()


def check_labels(model_name: str, name: str, labels, shapes: tuple, num_classes: int | None) -> None:
    """`labels` must be a tensor of one of `shapes`; with `num_classes`, integer class indices in
    `[0, num_classes)` or -100 (ignored)."""
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{model_name}: `{name}` must be a tensor, got {type(labels).__name__}.")
    if tuple(labels.shape) not in shapes:
        raise ValueError(
            f"{model_name}: `{name}` must have shape {' or '.join(str(shape) for shape in shapes)}, got "
            f"{tuple(labels.shape)}."
        )
    if num_classes is None:
        return
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"{model_name}: `{name}` must hold integer class indices, got {labels.dtype}.")
    if labels.numel() and not is_compiling():
        bad = ((labels < 0) & (labels != -100)) | (labels >= num_classes)
        if bool(bad.any()):
            raise ValueError(
                f"{model_name}: `{name}` must lie in [0, {num_classes}) or be -100 (ignored); got "
                f"{int(labels[bad][0])}."
            )


def check_sequence_labels(model_name: str, labels, config: RANConfig, batch_size: int) -> None:
    """Labels of [`RANForSequenceClassification`] for the problem type Transformers' loss will pick (set in
    `config.problem_type`, else regression for one label, single-label for integer labels, multi-label otherwise)."""
    num_labels = config.num_labels
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{model_name}: `labels` must be a tensor, got {type(labels).__name__}.")
    problem_type = config.problem_type
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type == "single_label_classification":
        check_labels(model_name, "labels", labels, ((batch_size,), (batch_size, 1)), num_labels)
        return
    one_per_row = ((batch_size,), (batch_size, 1)) if num_labels == 1 else ()
    check_labels(model_name, "labels", labels, one_per_row + ((batch_size, num_labels),), None)
    if not labels.dtype.is_floating_point:
        raise TypeError(
            f"{model_name}: `labels` must be floats for {problem_type} (num_labels={num_labels}), got {labels.dtype}; "
            "single-label classification takes torch.long class indices and num_labels >= 2."
        )
    if problem_type == "multi_label_classification" and labels.numel() and not is_compiling():
        if bool(((labels < 0) | (labels > 1)).any()):
            raise ValueError(f"{model_name}: multi-label `labels` must lie in [0, 1] (one target per label).")


def answer_positions(model_name: str, name: str, positions, batch_size: int, length: int) -> torch.Tensor:
    """QA positions, shape (B,) or (B, 1), as Transformers' loss takes them, with -100 moved past the end of the
    input (Transformers would clamp it to 0 and train towards the first token). Other negatives raise."""
    check_labels(model_name, name, positions, ((batch_size,), (batch_size, 1)), None)
    if positions.dtype.is_floating_point or positions.dtype == torch.bool:
        raise TypeError(f"{model_name}: `{name}` must hold integer token indices, got {positions.dtype}.")
    if not is_compiling() and bool(((positions < 0) & (positions != -100)).any()):
        raise ValueError(
            f"{model_name}: `{name}` must be token indices >= 0 (indices past the input, and -100, are ignored); got "
            f"{int(positions[(positions < 0) & (positions != -100)][0])}."
        )
    return positions.masked_fill(positions == -100, length)
