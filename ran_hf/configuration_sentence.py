# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the sentence-level document classifiers: AoSE and RAN over sentence vectors."""

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig


# RAN over sentences when `ran_config` does not say otherwise: the width, depth and window (in sentences) with which
# RAN over frozen all-MiniLM-L6-v2 sentences was measured on Hyperpartisan, IMDB and 20 Newsgroups
DEFAULT_SENTENCE_RAN = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "attention_head_size": 32, "window_size": 16, "min_window_size": 4}


@strict
class RANSentenceConfig(PreTrainedConfig):
    r"""
    Configuration of [`RANSentenceForSequenceClassification`]: a document is a sequence of sentence vectors
    `s_1 .. s_n` (from a sentence encoder the model holds, or given directly), and a head turns them into a document
    vector that a linear layer classifies.

    Args:
        head (`str`, defaults to `"aose"`): `"aose"`, attention over sentence embeddings (Abdaoui and Dutta):
            `u_i = tanh(W s_i + b)`, `a_i = softmax_i(u_i . u_w)`, `d = sum_i a_i s_i`; or `"ran"`, a linear map of
            every `s_i` to the RAN width, then a [`RANModel`] whose windows hold `ran_config["window_size"]`
            sentences, and its pooled output.
        sentence_embedding_size (`int`, defaults to 384): width E of a sentence vector (the encoder's hidden size).
        encoder_config (`dict`, *optional*): the sentence encoder's Transformers config (`config.to_dict()` of e.g. a
            `BertConfig`); None builds a model without an encoder, which reads sentence vectors only.
        sentence_pooling (`str`, defaults to `"mean"`): how the encoder's token outputs become a sentence vector
            (`"mean"` over real tokens, `"cls"`, `"max"`), as the sentence-transformers model was trained.
        normalize_sentences (`bool`, defaults to `True`): L2-normalise sentence vectors (a sentence-transformers
            `Normalize` module).
        freeze_encoder (`bool`, defaults to `True`): keep the encoder's weights fixed (no gradient, dropout off), so
            its sentence vectors can be computed once and cached; False fine-tunes it end to end.
        max_sentence_length (`int`, defaults to 256): a sentence is cut at this many encoder tokens (special tokens
            included), the encoder's `max_seq_length`.
        encoder_batch_size (`int`, defaults to 16): sentences per call of the encoder when the model reads token ids;
            a batch's sentences are sorted by length and each call is padded to its own longest sentence only.
        min_sentence_tokens (`int`, defaults to 5): a sentence of fewer encoder tokens is merged with the next one
            (the last one with the one before it).
        max_sentences (`int`, *optional*, defaults to 64): a document keeps its first this many sentences; None
            keeps all.
        ran_config (`dict`, *optional*): [`RANConfig`] fields of the `"ran"` head, on top of `DEFAULT_SENTENCE_RAN`
            (width 128, 2 layers, 4 heads of 32, windows of 16 sentences, a last window under 4 merged).
        classifier_dropout (`float`, defaults to 0.1): dropout on the document vector of the `"aose"` head (the
            `"ran"` head uses the RAN config's `hidden_dropout_prob`).
        initializer_range (`float`, defaults to 0.02): std of the normal initialiser of the head's linear layers.
    """

    model_type = "ran_sentence"

    head: str = "aose"
    sentence_embedding_size: int = 384
    encoder_config: dict | None = None
    sentence_pooling: str = "mean"
    normalize_sentences: bool = True
    freeze_encoder: bool = True
    max_sentence_length: int = 256
    encoder_batch_size: int = 16
    min_sentence_tokens: int = 5
    max_sentences: int | None = 64
    ran_config: dict | None = None
    classifier_dropout: float = 0.1
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.head not in ("aose", "ran"):
            raise ValueError(f"RANSentenceConfig: `head` must be 'aose' or 'ran', got {self.head!r}.")
        if self.sentence_pooling not in ("mean", "cls", "max"):
            raise ValueError("RANSentenceConfig: `sentence_pooling` must be 'mean', 'cls' or 'max', got "
                             f"{self.sentence_pooling!r}.")
        for name in ("sentence_embedding_size", "max_sentence_length", "encoder_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"RANSentenceConfig: `{name}` must be a positive integer, got {getattr(self, name)}.")
        if self.max_sentences is not None and self.max_sentences < 1:
            raise ValueError(f"RANSentenceConfig: `max_sentences` must be positive or None, got {self.max_sentences}.")
        if self.encoder_config is not None and "model_type" not in self.encoder_config:
            raise ValueError("RANSentenceConfig: `encoder_config` must be a Transformers config dict with its "
                             "`model_type` (e.g. `BertConfig(...).to_dict()`).")
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"RANSentenceConfig: `classifier_dropout` must be in [0, 1), got {self.classifier_dropout}.")

        if self.encoder_config is not None and not getattr(self, "custom_pipelines", None):
            # `pipeline("text-classification", model=folder, trust_remote_code=True)` splits raw documents into
            # sentences (the class is saved with the model's code)
            self.custom_pipelines = {"text-classification": {
                "impl": "processing_sentences.DocumentClassificationPipeline",
                "pt": ["AutoModelForSequenceClassification"], "type": "text"}}

    def sentence_ran_config(self):
        """The [`RANConfig`] of the `"ran"` head: `DEFAULT_SENTENCE_RAN` updated with `ran_config`."""
        from .configuration_ran import RANConfig

        return RANConfig(**{"vocab_size": 8, **DEFAULT_SENTENCE_RAN, **(self.ran_config or {})})


__all__ = ["RANSentenceConfig"]
