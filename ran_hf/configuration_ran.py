# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the Recurrent Attention Network (RAN, Li et al., ACL 2023, arXiv 2306.06843)."""

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
        cell_pooling (`str`, defaults to `"last"`): cell fed to the pooler: `"last"` (final cell), `"mean"` or
            `"max"` over the history of window cells of the last layer.
        pooler_pooling (`str`, defaults to `"max"`): pooling of token outputs inside the cell transform (eq. 10).
        pooler_type (`str`, defaults to `"cell"`): `"cell"` is the authors' cell transform (eq. 10); `"average"` is
            the Table 4 ablation that represents a document by the mean of its token outputs.
        pad_token_id (`int`, defaults to 0): id of the padding token (also the default of `attention_mask`).
        tie_word_embeddings (`bool`, defaults to `True`): tie LM decoders to the input embeddings.
        use_cache (`bool`, defaults to `True`): whether [`RANForCausalLM`] returns its recurrent cache.

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
    layer_norm_eps: float = 1e-7
    initializer_range: float = 0.02
    rope_theta: float | int = 10000.0
    use_memory_review: bool = True
    use_rotary: bool = True
    use_cell_residual: bool = True
    cell_pooling: str = "last"
    pooler_pooling: str = "max"
    pooler_type: str = "cell"
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    is_decoder: bool = False
    tie_word_embeddings: bool = True
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self._check_values()

    def _check_values(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "attention_head_size",
                     "window_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RANConfig: `{name}` must be a positive integer, got {value!r}.")
        if self.attention_head_size % 2 and self.use_rotary:
            raise ValueError(
                f"RANConfig: `attention_head_size` must be even for rotary embeddings, got {self.attention_head_size};"
                " use an even size or set `use_rotary=False`."
            )
        if not isinstance(self.min_window_size, int) or not 0 <= self.min_window_size <= self.window_size:
            raise ValueError(
                f"RANConfig: `min_window_size` must be an integer in [0, window_size={self.window_size}], got "
                f"{self.min_window_size!r} (0 or 1 turns the merge of a short last window off)."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"RANConfig: `{name}` must be in [0, 1), got {value!r}.")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"RANConfig: `layer_norm_eps` must be positive, got {self.layer_norm_eps!r}.")
        if not self.rope_theta > 0:
            raise ValueError(f"RANConfig: `rope_theta` must be positive, got {self.rope_theta!r}.")
        if self.hidden_act not in ACT2FN:
            raise ValueError(
                f"RANConfig: `hidden_act` must be one of transformers' activations (e.g. 'swish', 'gelu', 'relu'), "
                f"got {self.hidden_act!r}."
            )
        choices = {"cell_pooling": ("last", "mean", "max"), "pooler_pooling": ("max", "mean"),
                   "pooler_type": ("cell", "average")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"RANConfig: `{name}` must be one of {allowed}, got {getattr(self, name)!r}.")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"RANConfig: `pad_token_id` must be None or in [0, vocab_size={self.vocab_size}), got "
                f"{self.pad_token_id!r}."
            )

    @property
    def all_head_size(self) -> int:
        """A = H * d, the width of the window attention's q, k and v."""
        return self.num_attention_heads * self.attention_head_size


__all__ = ["RANConfig"]
