# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the Recurrent Attention Network (RAN, Li et al., ACL 2023, arXiv 2306.06843)."""

import typing
import weakref
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.activations import ACT2FN


@strict
class RANConfig(PreTrainedConfig):
    r"""
    Configuration of a RAN encoder ([`RANModel`]) and its heads.

    The defaults are the authors' base-like setup (`rannet==0.3.1` with `embedding_size=768`, two RAN layers,
    12 heads of 64). Field names follow BERT; the authors' `config.json` keys map as: `embedding_size` ->
    `hidden_size`, `ran_layers` -> `num_hidden_layers`, `head_num` -> `num_attention_heads`, `head_size` ->
    `attention_head_size`, `dropout_rate` -> both dropout probabilities.

    Args:
        vocab_size (`int`, defaults to 30522): size of the token vocabulary.
        hidden_size (`int`, defaults to 768): width D of tokens and of the global perception cell.
        num_hidden_layers (`int`, defaults to 2): number of stacked RAN layers.
        num_attention_heads (`int`, defaults to 12): heads H of the window attention.
        attention_head_size (`int`, defaults to 64): size d of one head. `H * d` may differ from `hidden_size`.
        window_size (`int`, defaults to 256): tokens per window W.
        min_window_size (`int`, defaults to 16): a last window shorter than this is merged into the window before it
            (bidirectional mode only). 0 or 1 turns the merge off.
        hidden_act (`str`, defaults to `"swish"`): activation of every projection (q, k, v, o, memory review).
        hidden_dropout_prob (`float`, defaults to 0.1): dropout on hidden states.
        attention_probs_dropout_prob (`float`, defaults to 0.1): dropout on attention probabilities.
        layer_norm_eps (`float`, defaults to 1e-7): epsilon of the (uncentred) norms.
        initializer_range (`float`, defaults to 0.02): std of the truncated normal initialiser.
        rope_theta (`float`, defaults to 10000.0): base of the rotary embedding inside windows.
        use_memory_review (`bool`, defaults to `True`): memory review (paper section 3.3); Table 4 ablation when off.
        use_rotary (`bool`, defaults to `True`): rotary positions inside windows; Table 4 ablation when off.
        use_cell_residual (`bool`, defaults to `True`): GLU residual of the cell between windows (paper eq. 7);
            Table 4 ablation when off (the new cell replaces the old one).
        memory_review_residual (`bool`, defaults to `False`): not in the paper. When on, memory review adds its input
            token back before its norm, `norm(act(o(P v)) + GLU(act(q(y))) + y)`, so the token keeps a path of gain 1
            through the review. Without it that path has a gain of about 0.01 at initialisation, and from random
            weights the full model can collapse every token of a document to one vector within ~10 optimiser steps
            (`research/stall_diagnosis/README.md`). It adds no weight; the default is the authors' computation, so converted
            checkpoints are unchanged. Needs `use_memory_review=True`.
        cell_pooling (`str`, defaults to `"last"`): the cell returned as `last_cell` and fed to a cell pooler:
            `"last"` (final cell), `"mean"` or `"max"` over the history of window cells of the last layer. A field of
            its own because it also sets `last_cell` for every model, with or without a pooler.
        pooler_mode (`str`, defaults to `"cell_max"`): the document vector `pooler_output` (and the classifier's
            input):
            - `"cell_max"`: the authors' cell transform (eq. 10) of the cell and the max of the real token outputs;
            - `"cell_mean"`: the same cell transform with the mean of the real token outputs;
            - `"token_mean"`: the plain mean of the real token outputs, no pooler weights (the Table 4 ablation).
            Configs written before this field (`pooler_type` `"cell"` / `"average"` with `pooler_pooling` `"max"` /
            `"mean"`) load as `pooler_type="average"` -> `"token_mean"` (whatever `pooler_pooling` says: it had no
            effect there), `pooler_type="cell"` -> `"cell_" + pooler_pooling`.
        pad_token_id (`int`, defaults to 0): id of the padding token (also the default of `attention_mask`).
        tie_word_embeddings (`bool`, defaults to `True`): tie LM decoders to the input embeddings.
        use_cache (`bool`, defaults to `True`): whether [`RANForCausalLM`] returns its recurrent cache.
        sparse_prediction (`bool`, defaults to `False`): when [`RANForMaskedLM`] gets `labels`, run the LM head only
            at the positions whose label is not -100 and return `logits` of shape `(num_masked, vocab_size)` (in
            row-major order of those positions) instead of `(batch_size, sequence_length, vocab_size)`. The loss is
            the same; the decoder over the vocabulary, the largest single cost of an MLM step, shrinks about 7x at
            15% masking. Off by default, so outputs keep their usual shape.
        chain_implementation (`str`, defaults to `"eager"`): how each layer runs its cell chain, the one part of RAN
            that is sequential over windows (a few `D x D` mat-vecs and a one-row attention per window; the runners
            are in `cell_chain.py`, all tested against the eager one):
            - `"eager"`: PyTorch op by op, one window at a time;
            - `"compiled"`: blocks of windows (4 by default, `chain_compiled.configure`) and the windows left over
              go through `torch.compile` (inductor), compiled once per process and shared by every layer and
              model. Meant for GPUs, where the eager chain is bound by kernel launches (measured gains:
              `docs/speed.md`). The first training step compiles, and again at the first new batch size or window
              capacity, never for a new number of windows; outputs match eager up to float rounding. Needs what
              `torch.compile` needs (Triton on CUDA, a C++ compiler on CPU). Ignored inside a model that is itself
              under `torch.compile` or `torch.export`;
            - `"cuda_graphs"`: the compiled chain of every window of a layer captured as one CUDA graph for the
              forward and one for the backward, so a layer's chain is one host call each way. A layer captures once
              per window count (rounded up to a multiple of 16 windows), batch size, dtype and grad mode, and keeps
              its last 2 captures, so batches of one length and size (`padding="max_length"`) let one capture serve
              a whole run. Off CUDA and under gradient checkpointing the chain runs compiled, with a warning; so
              does, silently, a forward through a layer whose last capture still waits for its backward. Not timed
              on a GPU yet.
        window_block (`str`, defaults to `"ran"`): the block each layer runs on a window `[cell; tokens]`:
            - `"ran"`: the authors' block (concat norm, rotary PosMHA with swish projections, GLU residual, SN;
              eqs. 3-6);
            - `"bert"`: a BERT encoder layer (post-norm attention and feed-forward, as in BERT, MiniLM, bge), so a
              pretrained encoder's layers run inside RAN (`python -m ran_hf.convert_encoder`). The embeddings are
              BERT's, with absolute positions that restart in every window; the tokens read the cell through a
              per-head gate, and memory review is added through a per-channel gate, both zero at initialisation,
              so a converted model starts as the encoder run window by window. Needs `use_rotary=False` and
              `memory_review_residual=False`, and a window capacity within `max_position_embeddings`.
            The cell chain, pooling, the heads and the cache are the same for every block.
        intermediate_size (`int`, *optional*): `"bert"` block only: width of its feed-forward layer (None: 4 x
            `hidden_size`).
        max_position_embeddings (`int`, defaults to 512): `"bert"` block only: size of the absolute position table. A
            window's slots (`window_size`, plus `min_window_size - 1` when a short last window is merged) must fit.
        type_vocab_size (`int`, defaults to 2): `"bert"` block only: rows of the token-type table (RAN adds type 0).

    Every value is checked by `validate_architecture` (`ValueError` naming the field and the allowed values) on
    construction and `from_pretrained`, and on every later assignment (`config.window_size = 0` raises there, and
    the old value stays). Float fields also take integer literals (`layer_norm_eps=1` is `1.0`).

    Example:

    ```python
    >>> from ran_hf import RANConfig, RANModel
    >>> config = RANConfig(hidden_size=256, num_attention_heads=4, window_size=128)
    >>> model = RANModel(config)
    ```
    """

    model_type = "ran"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 2
    num_attention_heads: int = 12
    attention_head_size: int = 64
    window_size: int = 256
    min_window_size: int = 16
    hidden_act: str = "swish"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    layer_norm_eps: float | int = 1e-7
    initializer_range: float | int = 0.02
    rope_theta: float | int = 10000.0
    use_memory_review: bool = True
    use_rotary: bool = True
    use_cell_residual: bool = True
    memory_review_residual: bool = False
    cell_pooling: Literal["last", "mean", "max"] = "last"
    pooler_mode: Literal["cell_max", "cell_mean", "token_mean"] = "cell_max"
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    is_decoder: bool = False
    tie_word_embeddings: bool = True
    use_cache: bool = True
    sparse_prediction: bool = False
    chain_implementation: Literal["eager", "compiled", "cuda_graphs"] = "eager"
    window_block: Literal["ran", "bert"] = "ran"
    intermediate_size: int | None = None
    max_position_embeddings: int = 512
    type_vocab_size: int = 2

    def __post_init__(self, **kwargs):
        legacy_pooler_mode = _legacy_pooler_mode(kwargs.pop("pooler_type", None), kwargs.pop("pooler_pooling", None))
        if legacy_pooler_mode is not None:
            if self.pooler_mode not in ("cell_max", legacy_pooler_mode):
                raise ValueError(
                    f"RANConfig: `pooler_mode={self.pooler_mode!r}` contradicts the old fields `pooler_type` / "
                    f"`pooler_pooling` (which mean {legacy_pooler_mode!r}); pass `pooler_mode` alone."
                )
            self.pooler_mode = legacy_pooler_mode
        super().__post_init__(**kwargs)
        # called here as well as by strict's `validate()` (which runs it next, and on save): a call from here raises
        # the plain `ValueError`, where `validate()` would wrap it in a `StrictDataclassClassValidationError`
        self.validate_architecture()

    def __setattr__(self, name, value):
        """Runs after strict's type check of the field: an integer for a float field becomes a float
        (`layer_norm_eps=1`; the fields are typed `float | int`, as Transformers types such fields), and once the
        config is built, a RAN field's own range is checked where it is assigned (`config.window_size = 0` raises,
        the old value stays). Relations between fields are left to `validate_architecture`, because
        `from_pretrained(..., window_size=8, min_window_size=4)` assigns its keywords one by one."""
        if name in _FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if name in _FIELD_CHECKS and self.__dict__.get("_post_init_done"):
            _FIELD_CHECKS[name](name, value)
        if name in BUILD_FIELDS and _BUILT_CONFIGS.get(id(self)) is self and value != self.__dict__.get(name):
            raise ValueError(
                f"RANConfig: `{name}` is fixed once a model is built from this config (its modules were made with "
                f"{name}={self.__dict__.get(name)!r}), so this assignment would be silently ignored. Build a new model "
                f"with it: `AutoModel.from_pretrained(path, {name}={value!r})`, or `ModelClass(config)` with "
                f"`config = RANConfig(**{{**model.config.to_dict(), {name!r}: {value!r}}})`."
            )
        super().__setattr__(name, value)

    def mark_built(self) -> None:
        """Called by a model built from this config: from now on an assignment to a field in `BUILD_FIELDS` raises
        (fields that a forward reads, such as `window_size` or `chain_implementation`, stay assignable)."""
        _BUILT_CONFIGS[id(self)] = self

    def validate_architecture(self):
        """Raise a `ValueError` naming the first invalid field: the one place of RANConfig's checks (each field's
        range, then the relations between fields). Part of the strict config's validation (construction,
        `from_pretrained`, `save_pretrained`); `__setattr__` runs a field's own check on assignment."""
        super().validate_architecture()
        v = self.__dict__
        for name, check in _FIELD_CHECKS.items():
            check(name, v[name])
        if v["attention_head_size"] % 2 and v["use_rotary"]:
            raise ValueError(
                f"RANConfig: `attention_head_size` must be even for rotary embeddings, got {v['attention_head_size']};"
                " use an even size or set `use_rotary=False`."
            )
        if v["memory_review_residual"] and not v["use_memory_review"]:
            raise ValueError(
                "RANConfig: `memory_review_residual=True` needs `use_memory_review=True` (without memory review the "
                "layer output is already the normalised window output); set one of them differently."
            )
        if v["window_block"] == "bert":
            for name, reason in (("use_rotary", "its positions are the encoder's absolute ones"),
                                 ("memory_review_residual", "its memory review is always a gated residual")):
                if v[name]:
                    raise ValueError(f"RANConfig: `window_block='bert'` needs `{name}=False` ({reason}).")
        self.check_forward_relations()

    def check_forward_relations(self):
        """The relations read at every forward whose violation (by an edit after construction) would not fail in
        torch but window or mask the input wrongly: `min_window_size <= window_size` (the window split) and
        `pad_token_id < vocab_size` (the default mask). Two comparisons; `RANModel.forward` runs it."""
        v = self.__dict__
        if not v["min_window_size"] <= v["window_size"]:
            raise ValueError(
                f"RANConfig: `min_window_size` must be an integer in [0, window_size={v['window_size']}], got "
                f"{v['min_window_size']!r} (0 or 1 turns the merge of a short last window off)."
            )
        pad_token_id = v.get("pad_token_id")
        if pad_token_id is not None and not pad_token_id < v["vocab_size"]:
            raise ValueError(
                f"RANConfig: `pad_token_id` must be None or in [0, vocab_size={v['vocab_size']}), got "
                f"{pad_token_id!r}."
            )
        capacity = v["window_size"] + max(v["min_window_size"] - 1, 0)
        if v["window_block"] == "bert" and capacity > v["max_position_embeddings"]:
            raise ValueError(
                f"RANConfig: a window holds up to {capacity} tokens (window_size={v['window_size']} plus "
                f"min_window_size - 1 = {max(v['min_window_size'] - 1, 0)} for a merged short last window), more than "
                f"the encoder's position table (max_position_embeddings={v['max_position_embeddings']}). Use "
                f"window_size <= {v['max_position_embeddings'] - max(v['min_window_size'] - 1, 0)}, or "
                "min_window_size=1 to turn the merge off."
            )

    def _replaced_pooler_field(name: str):
        """`pooler_type` / `pooler_pooling`, replaced by `pooler_mode`: a config file or keyword argument with them
        still loads (see `__post_init__`), but reading or assigning them on a config raises, since an assignment
        would otherwise be silently ignored."""

        def fail(self, value=None):
            raise AttributeError(
                f"RANConfig: `{name}` was replaced by `pooler_mode` ('cell_max', 'cell_mean' or 'token_mean'); "
                f"this config has pooler_mode={self.pooler_mode!r}."
            )

        return property(fail, fail)

    pooler_type = _replaced_pooler_field("pooler_type")
    pooler_pooling = _replaced_pooler_field("pooler_pooling")
    del _replaced_pooler_field

    @property
    def feed_forward_size(self) -> int:
        """The `"bert"` block's feed-forward width: `intermediate_size`, or 4 x `hidden_size` when it is None."""
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def all_head_size(self) -> int:
        """A = H * d, the width of the window attention's q, k and v."""
        return self.num_attention_heads * self.attention_head_size


# Fields a model reads only when it builds its modules (sizes, activations, dropout and norm constants, which
# modules exist, the pooler): assigning one on the config of a built model would change nothing, so it raises.
# (`vocab_size` is not one: `resize_token_embeddings` resizes the modules and then sets it.)
BUILD_FIELDS = frozenset((
    "hidden_size", "num_hidden_layers", "num_attention_heads", "attention_head_size", "hidden_act",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "rope_theta", "use_memory_review",
    "use_rotary", "memory_review_residual", "pooler_mode", "window_block", "intermediate_size",
    "max_position_embeddings", "type_vocab_size",
))
_BUILT_CONFIGS = weakref.WeakValueDictionary()  # id(config) -> config, for the configs that built a model

# `Literal` fields and their allowed values, and the float fields that also take an integer literal (`1` for `1.0`)
_CHOICE_FIELDS = {
    name: typing.get_args(annotation)
    for name, annotation in RANConfig.__annotations__.items()
    if typing.get_origin(annotation) is Literal
}
_FLOAT_FIELDS = frozenset(name for name, annotation in RANConfig.__annotations__.items()
                          if annotation == float | int)


def _check_choice(name: str, value) -> None:
    allowed = _CHOICE_FIELDS[name]
    if value not in allowed:
        raise ValueError(f"RANConfig: `{name}` must be one of {allowed}, got {value!r}.")


def _check_positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"RANConfig: `{name}` must be a positive integer, got {value!r}.")


def _check_min_window_size(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(
            f"RANConfig: `min_window_size` must be an integer in [0, window_size], got {value!r} (0 or 1 turns the "
            "merge of a short last window off)."
        )


def _check_probability(name: str, value) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"RANConfig: `{name}` must be in [0, 1), got {value!r}.")


def _check_positive(name: str, value) -> None:
    if not value > 0:
        raise ValueError(f"RANConfig: `{name}` must be positive, got {value!r}.")


def _check_activation(name: str, value) -> None:
    if value not in ACT2FN:
        raise ValueError(
            f"RANConfig: `hidden_act` must be one of transformers' activations (e.g. 'swish', 'gelu', 'relu'), got "
            f"{value!r}."
        )


def _check_pad_token_id(name: str, value) -> None:
    if value is not None and value < 0:
        raise ValueError(f"RANConfig: `pad_token_id` must be None or in [0, vocab_size), got {value!r}.")


# Each RAN field's own range (relations between fields: `RANConfig.validate_architecture`)
_FIELD_CHECKS = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "attention_head_size",
                     "window_size", "max_position_embeddings", "type_vocab_size"), _check_positive_int),
    "intermediate_size": lambda name, value: value is None or _check_positive_int(name, value),
    "min_window_size": _check_min_window_size,
    **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob"), _check_probability),
    **dict.fromkeys(("layer_norm_eps", "rope_theta", "initializer_range"), _check_positive),
    "hidden_act": _check_activation,
    **dict.fromkeys(_CHOICE_FIELDS, _check_choice),
    "pad_token_id": _check_pad_token_id,
}


# The fields `pooler_type` and `pooler_pooling` that `pooler_mode` replaced, with their allowed values
_LEGACY_POOLER_FIELDS = {"pooler_type": ("cell", "average"), "pooler_pooling": ("max", "mean")}


def _legacy_pooler_mode(pooler_type: str | None, pooler_pooling: str | None) -> str | None:
    """`pooler_mode` from the fields it replaced (configs written before it), or None when neither is given."""
    if pooler_type is None and pooler_pooling is None:
        return None
    for name, value in (("pooler_type", pooler_type), ("pooler_pooling", pooler_pooling)):
        allowed = _LEGACY_POOLER_FIELDS[name]
        if value is not None and value not in allowed:
            raise ValueError(
                f"RANConfig: `{name}` must be one of {allowed}, got {value!r}; better, use `pooler_mode` "
                "('cell_max', 'cell_mean' or 'token_mean'), which replaces `pooler_type` and `pooler_pooling`."
            )
    if pooler_type == "average":  # the average pooler never read `pooler_pooling`
        return "token_mean"
    return f"cell_{pooler_pooling or 'max'}"


def _check_choice_first(strict_setattr):
    """Wraps strict's `__setattr__` for one reason: strict checks a `Literal` field before any method of the class
    runs and reports a value outside it as a `StrictDataclassFieldValidationError`, not a `ValueError`; this raises
    the config's `ValueError` naming the allowed values first. Every other check is `validate_architecture`'s."""

    def __setattr__(self, name, value):
        if name in _CHOICE_FIELDS:
            _check_choice(name, value)
        strict_setattr(self, name, value)

    return __setattr__


RANConfig.__setattr__ = _check_choice_first(RANConfig.__setattr__)


__all__ = ["RANConfig"]
