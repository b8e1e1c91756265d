# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Argument checks of the RAN models: inputs, keyword arguments, labels and export paths.

Every check raises before torch would, with a message that names the argument and what it should be. Checks that
read tensor values (token ids, token types, mask values, label ranges) are skipped under `torch.compile` /
`torch.export`, where they would break the graph, and on an accelerator with gradients on, where each read is a
device-to-host sync that would stall a training step (`reads_values`); the input checks share one transfer.
"""

import difflib
import inspect

import torch
from torch import nn

from transformers.utils import TransformersKwargs

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


# Keyword arguments: a forward takes Transformers' shared keywords (`TransformersKwargs`: Trainer's
# `num_items_in_batch`, `output_attentions`, ...) and `generate()`'s `cache_position` (RAN's cache counts positions
# itself). Transformers' own models ignore any other keyword silently; RAN raises a `TypeError` naming it, because a
# misspelt `attn_mask=` would otherwise run unmasked. Keywords RAN cannot honour get a hint.
_KWARG_HINTS = {
    "position_ids": "RAN's positions are rotary and restart in every window; there are no position ids",
    "past_key_values": "RAN's recurrent state is passed as `cache`, to RANModel and RANForCausalLM only",
    "head_mask": "RAN has no head mask",
    "is_causal": "the class decides the mode: RANForCausalLM is causal, the task heads are bidirectional",
    **{name: "RAN windows each row by its `attention_mask`; packed sequences are not supported"
       for name in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")},
}
_ACCEPTED_KWARGS = frozenset(TransformersKwargs.__annotations__) - frozenset(_KWARG_HINTS) | {"cache_position"}


def check_forward_kwargs(model: nn.Module, kwargs: dict) -> None:
    """Raise a `TypeError` for a keyword outside `TransformersKwargs` (see `_ACCEPTED_KWARGS`), with a hint."""
    unknown = [name for name in kwargs if name not in _ACCEPTED_KWARGS]
    if not unknown:
        return
    name = unknown[0]
    known = [p for p in inspect.signature(type(model).forward).parameters if p not in ("self", "kwargs")]
    close = difflib.get_close_matches(name, known + sorted(_ACCEPTED_KWARGS), n=1)
    hint = _KWARG_HINTS.get(name, f"did you mean `{close[0]}`?" if close else f"it takes {', '.join(known)}")
    raise TypeError(f"{type(model).__name__}.forward() got an unexpected keyword argument `{name}` ({hint}).")


def reads_values(tensor: torch.Tensor) -> bool:
    """Whether a check may read `tensor`'s values. Not under compile / export (a graph break), and not on an
    accelerator with gradients on: there the read is a device-to-host sync that stalls a training step. CPU tensors
    and accelerator inference (pipelines, evaluation) are checked."""
    return not is_compiling() and (tensor.device.type == "cpu" or not torch.is_grad_enabled())


def _check_input_values(config: RANConfig, input_ids, attention_mask, token_type_ids) -> None:
    """The checks that read tensor values, with one device-to-host transfer for all of them."""
    checked = [t for t in (input_ids, attention_mask, token_type_ids) if t is not None and t.numel()]
    if not checked or not reads_values(checked[0]):
        return
    device = checked[0].device
    zero = torch.zeros((), dtype=torch.long, device=device)
    low, high = (input_ids.min().long(), input_ids.max().long()) if input_ids is not None else (zero, zero)
    bad_mask = zero if attention_mask is None or attention_mask.dtype == torch.bool else (
        ((attention_mask != 0) & (attention_mask != 1)).any().long())
    token_types = zero if token_type_ids is None else (token_type_ids != 0).any().long()
    low, high, bad_mask, token_types = torch.stack([low, high, bad_mask, token_types]).tolist()
    if input_ids is not None and (low < 0 or high >= config.vocab_size):
        raise ValueError(
            f"RANModel: `input_ids` must lie in [0, vocab_size={config.vocab_size}); got values in [{low}, {high}]. "
            "Check that the tokenizer matches the model (or call `model.resize_token_embeddings(len(tokenizer))`)."
        )
    if bad_mask:
        raise ValueError("RANModel: `attention_mask` must hold only 0 (padding) and 1 (real token).")
    if token_types:
        raise ValueError(
            "RANModel: `token_type_ids` must be all zero: RAN has no token types (a BERT tokenizer's all-zero ids are "
            "accepted and ignored). Encode the segments as one text, or call the tokenizer with "
            "`return_token_type_ids=False`."
        )


def check_inputs(
    config: RANConfig, embedding_dtype: torch.dtype, input_ids, attention_mask, inputs_embeds, initial_cell,
    token_type_ids=None, causal: bool = False,
) -> torch.Tensor:
    """Validate the arguments of `RANModel.forward` (and the two config relations a later edit could break silently,
    `RANConfig.check_forward_relations`) and return the (B, L) bool mask of real tokens. `embedding_dtype` is the
    dtype `inputs_embeds` must have."""
    config.check_forward_relations()
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
    else:
        _check_embeddings(config, embedding_dtype, inputs_embeds)
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
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if tensor is not None and (not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape):
            raise ValueError(
                f"RANModel: `{name}` must have the shape of the input, (batch_size, sequence_length) = "
                f"{shape}; got {tuple(getattr(tensor, 'shape', ()))}."
            )
    _check_input_values(config, input_ids, attention_mask, token_type_ids)
    device = input_ids.device if input_ids is not None else inputs_embeds.device
    if attention_mask is None:
        # causal LMs often share the pad id with a real token (eos): there the default is "all real", as in
        # Transformers' decoders; generate() passes the mask it builds
        if input_ids is not None and config.pad_token_id is not None and not causal:
            return input_ids != config.pad_token_id
        return torch.ones(shape, dtype=torch.bool, device=device)
    return attention_mask.to(device=device).bool()


def _check_embeddings(config: RANConfig, embedding_dtype: torch.dtype, inputs_embeds) -> None:
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
    if labels.numel() and reads_values(labels):
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
    if problem_type == "multi_label_classification" and labels.numel() and reads_values(labels):
        if bool(((labels < 0) | (labels > 1)).any()):
            raise ValueError(f"{model_name}: multi-label `labels` must lie in [0, 1] (one target per label).")


def answer_positions(model_name: str, name: str, positions, batch_size: int, length: int) -> torch.Tensor:
    """QA positions, shape (B,) or (B, 1), as Transformers' loss takes them, with -100 moved past the end of the
    input (Transformers would clamp it to 0 and train towards the first token). Other negatives raise."""
    check_labels(model_name, name, positions, ((batch_size,), (batch_size, 1)), None)
    if positions.dtype.is_floating_point or positions.dtype == torch.bool:
        raise TypeError(f"{model_name}: `{name}` must hold integer token indices, got {positions.dtype}.")
    if reads_values(positions) and bool(((positions < 0) & (positions != -100)).any()):
        raise ValueError(
            f"{model_name}: `{name}` must be token indices >= 0 (indices past the input, and -100, are ignored); got "
            f"{int(positions[(positions < 0) & (positions != -100)][0])}."
        )
    return positions.masked_fill(positions == -100, length)
