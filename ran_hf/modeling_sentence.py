# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Sentence-level document classification: a document is the sequence of its sentence vectors.

Each sentence goes through a sentence encoder (a sentence-transformers model: a Transformers encoder, then mean,
[CLS] or max pooling and, optionally, L2 normalisation), frozen or fine-tuned end to end. A head turns the sentence
vectors into one document vector that a linear layer classifies:

* `"aose"`: attention over sentence embeddings (AoSE, Abdaoui and Dutta), `u_i = tanh(W s_i + b)`,
  `a_i = softmax_i(u_i . u_w)`, `d = sum_i a_i s_i`;
* `"ran"`: RAN over sentences, a linear map of every sentence vector to the RAN width, then [`RANModel`] with
  `inputs_embeds` (one window = a number of sentences) and its pooled output.

The model reads either sentence token ids `(batch, sentences, tokens)` through its encoder, or sentence vectors
`(batch, sentences, E)` computed beforehand by the same (frozen) encoder; both give the same logits.
[`DocumentSentenceProcessor`] (`processing_sentences.py`) turns raw documents into the token ids.
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from transformers import AutoConfig, AutoModel
from transformers import initialization as init
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.modeling_utils import PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple

from .configuration_sentence import RANSentenceConfig
from .input_checks import check_forward_kwargs, check_sequence_labels
from .modeling_ran import RANModel


class SentenceEncoder(nn.Module):
    """A sentence-transformers encoder: the Transformers model of `config.encoder_config`, then pooling of its token
    outputs into one vector per sentence and, if `config.normalize_sentences`, L2 normalisation."""

    def __init__(self, config: RANSentenceConfig):
        super().__init__()
        self.transformer = AutoModel.from_config(AutoConfig.for_model(**config.encoder_config))
        self.pooling = config.sentence_pooling
        self.normalize = config.normalize_sentences

    def forward(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask: `(num_sentences, tokens)`. Returns `(num_sentences, E)`."""
        tokens = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        if self.pooling == "mean":
            sentences = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        elif self.pooling == "cls":
            sentences = tokens[:, 0]
        else:
            sentences = tokens.masked_fill(mask == 0, torch.finfo(tokens.dtype).min).max(1).values
        return F.normalize(sentences, dim=-1) if self.normalize else sentences


class SentenceAttentionPooling(nn.Module):
    """AoSE: `u_i = tanh(W s_i + b)`, `a_i = softmax_i(u_i . u_w)` over the real sentences, `d = sum_i a_i s_i`."""

    def __init__(self, config: RANSentenceConfig):
        super().__init__()
        size = config.sentence_embedding_size
        self.projection = nn.Linear(size, size)
        self.context = nn.Parameter(torch.empty(size))
        self.output_size = size

    def forward(self, sentences: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        """sentences: `(batch, S, E)`; sentence_mask: `(batch, S)`, 1 for real sentences. Returns `(batch, E)`."""
        scores = torch.tanh(self.projection(sentences)) @ self.context
        weights = scores.masked_fill(~sentence_mask.bool(), float("-inf")).softmax(-1)
        return (weights.unsqueeze(-1) * sentences).sum(1)


class SentenceRANPooling(nn.Module):
    """RAN over sentences: `s_i -> W s_i + b` (E -> D), then [`RANModel`] over the sentence sequence, whose windows
    hold `window_size` sentences, and its pooled document vector."""

    def __init__(self, config: RANSentenceConfig):
        super().__init__()
        ran_config = config.sentence_ran_config()
        self.projection = nn.Linear(config.sentence_embedding_size, ran_config.hidden_size)
        self.ran = RANModel(ran_config)
        self.output_size = ran_config.hidden_size

    def forward(self, sentences: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        """sentences: `(batch, S, E)`; sentence_mask: `(batch, S)`. Returns `(batch, D)`."""
        return self.ran(inputs_embeds=self.projection(sentences), attention_mask=sentence_mask).pooler_output


class RANSentencePreTrainedModel(PreTrainedModel):
    config_class = RANSentenceConfig
    config: RANSentenceConfig
    base_model_prefix = "sentence_model"
    _no_split_modules = ["RANLayer", "RANEmbeddings"]
    supports_gradient_checkpointing = True  # the encoder's layers and the RAN head's layers

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The head's own layers (the encoder and the RAN inside keep their own initialisation): normal weights of
        std `initializer_range`, zero biases; the AoSE context vector `u_w` with std `1 / sqrt(E)`."""
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, SentenceAttentionPooling):
            init.normal_(module.context, mean=0.0, std=module.output_size ** -0.5)


class RANSentenceForSequenceClassification(RANSentencePreTrainedModel):
    """Document classifier over sentence vectors with the AoSE or the RAN head (`config.head`).

    Build one around a sentence-transformers model with [`~RANSentenceForSequenceClassification.from_sentence_encoder`];
    `save_pretrained` / `from_pretrained` keep the encoder inside the checkpoint.
    """

    def __init__(self, config: RANSentenceConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.encoder = SentenceEncoder(config) if config.encoder_config is not None else None
        self.pooling = SentenceAttentionPooling(config) if config.head == "aose" else SentenceRANPooling(config)
        dropout = config.classifier_dropout if config.head == "aose" else self.pooling.ran.config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(self.pooling.output_size, config.num_labels)
        self.post_init()
        self.set_encoder_frozen(config.freeze_encoder)

    @classmethod
    def from_sentence_encoder(cls, encoder_path: str | Path, **config_kwargs) -> "RANSentenceForSequenceClassification":
        """A new classifier around the sentence-transformers model in `encoder_path` (a folder with `modules.json`,
        e.g. all-MiniLM-L6-v2, or a plain Transformers encoder folder, then mean-pooled): its weights, pooling,
        normalisation and `max_seq_length` are taken from there; `config_kwargs` set the other
        [`RANSentenceConfig`] fields (`head`, `num_labels`, `freeze_encoder`, ...)."""
        from .processing_sentences import read_sentence_encoder_settings

        settings = read_sentence_encoder_settings(encoder_path)
        transformer = AutoModel.from_pretrained(settings.pop("transformer_path"))
        config = RANSentenceConfig(encoder_config=transformer.config.to_dict(),
                                   sentence_embedding_size=transformer.config.hidden_size,
                                   **{**settings, **config_kwargs})
        model = cls(config)
        model.encoder.transformer.load_state_dict(transformer.state_dict())
        return model

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`; the encoder stays frozen as `config.freeze_encoder` says (loading puts
        fresh parameters in place, which would otherwise take gradients again)."""
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading_info) with output_loading_info
        model.set_encoder_frozen(model.config.freeze_encoder)
        return loaded

    def set_encoder_frozen(self, frozen: bool) -> None:
        """Freeze (no gradient, dropout off) or unfreeze the sentence encoder; recorded in `config.freeze_encoder`."""
        self.config.freeze_encoder = frozen
        if self.encoder is not None:
            self.encoder.requires_grad_(not frozen)
            self.encoder.train(self.training and not frozen)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.encoder is not None and self.config.freeze_encoder:
            self.encoder.eval()
        return self

    def encode_sentences(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor,
                         sentence_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask: `(batch, S, tokens)`; sentence_mask: `(batch, S)`. Returns the sentence vectors
        `(batch, S, E)`, zero at padding sentences. Only the real sentences go through the encoder."""
        if self.encoder is None:
            raise ValueError("RANSentenceForSequenceClassification: this model has no sentence encoder "
                             "(`config.encoder_config` is None); pass `sentence_embeddings`, or build the model with "
                             "`from_sentence_encoder(path)`.")
        real = sentence_mask.bool()
        ids, token_mask = input_ids[real], attention_mask[real]
        lengths = token_mask.sum(-1)
        # longest first, `encoder_batch_size` at a time, each call cut at its own longest sentence: a batch's
        # sentences then cost about their real tokens instead of all of them padded to the longest one
        order = lengths.argsort(descending=True)
        longest = lengths[order].tolist()  # one host sync for all chunks
        step = self.config.encoder_batch_size
        vectors = []
        # a frozen encoder runs without autograd, unless adapters (e.g. PEFT's LoRA) added trainable parameters
        trainable = any(p.requires_grad for p in self.encoder.parameters())
        with torch.set_grad_enabled(torch.is_grad_enabled() and trainable):
            for start in range(0, len(longest), step):
                chunk, length = order[start:start + step], max(longest[start], 1)
                vectors.append(self.encoder(ids[chunk, :length], token_mask[chunk, :length]))
        vectors = torch.cat(vectors)[order.argsort()]
        sentences = vectors.new_zeros(*real.shape, vectors.shape[-1])
        sentences[real] = vectors
        return sentences

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        sentence_embeddings: torch.FloatTensor | None = None,
        sentence_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        inputs_embeds: None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, num_sentences, sentence_length)`, *optional*):
                Encoder token ids of each sentence ([CLS] ... [SEP]), right-padded with rows of padding for absent
                sentences. Exactly one of `input_ids` and `sentence_embeddings` must be given.
            attention_mask (`torch.Tensor` of shape `(batch_size, num_sentences, sentence_length)`, *optional*):
                1 for real tokens. Defaults to `input_ids != pad_token_id` of the encoder.
            sentence_embeddings (`torch.FloatTensor` of shape `(batch_size, num_sentences, E)`, *optional*):
                Sentence vectors of this model's (frozen) encoder, e.g. cached ones.
            sentence_mask (`torch.Tensor` of shape `(batch_size, num_sentences)`, *optional*):
                1 for real sentences. Defaults to the sentences with a real token (all of them with
                `sentence_embeddings`).
            labels (`torch.Tensor` of shape `(batch_size,)`, or `(batch_size, num_labels)` for multi-label):
                Class indices, or 0/1 floats per label.
            inputs_embeds (`None`):
                Not read (wrappers such as PEFT's pass `inputs_embeds=None`); sentence vectors go in
                `sentence_embeddings`.
        """
        if inputs_embeds is not None:
            raise ValueError(f"{type(self).__name__}: pass sentence vectors as `sentence_embeddings` (batch x "
                             "sentences x E); `inputs_embeds` is not read.")
        if "token_type_ids" in kwargs:  # a plain tokenizer's output, e.g. from the generic text-classification pipeline
            raise TypeError(f"{type(self).__name__}: got `token_type_ids`; this model reads a document as sentences: "
                            "make its inputs with `DocumentSentenceProcessor`, or use `pipeline('text-classification', "
                            "model=..., trust_remote_code=True)` (or `pipeline_class=DocumentClassificationPipeline`).")
        check_forward_kwargs(self, kwargs)
        sentences, sentence_mask = self._sentence_inputs(input_ids, attention_mask, sentence_embeddings, sentence_mask)
        logits = self.classifier(self.dropout(self.pooling(sentences, sentence_mask)))
        loss = None
        if labels is not None:
            check_sequence_labels(type(self).__name__, labels, self.config, logits.shape[0])
            loss = self.loss_function(labels, logits, self.config, **kwargs)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def _sentence_inputs(self, input_ids, attention_mask, sentence_embeddings, sentence_mask):
        """The sentence vectors `(batch, S, E)` and the sentence mask `(batch, S)` of either kind of input."""
        name = type(self).__name__
        if (input_ids is None) == (sentence_embeddings is None):
            raise ValueError(f"{name}: pass exactly one of `input_ids` (sentence token ids, batch x sentences x "
                             "tokens) and `sentence_embeddings` (batch x sentences x E).")
        if input_ids is not None:
            if input_ids.dim() != 3:
                raise ValueError(f"{name}: `input_ids` must be (batch, sentences, tokens), got shape "
                                 f"{tuple(input_ids.shape)}; `DocumentSentenceProcessor` makes them from raw text (and "
                                 "`DocumentClassificationPipeline` runs it inside `pipeline`).")
            if attention_mask is None:
                attention_mask = (input_ids != self.encoder.transformer.config.pad_token_id).long()
            if sentence_mask is None:
                sentence_mask = attention_mask.any(-1).long()
        else:
            if sentence_embeddings.dim() != 3 or sentence_embeddings.shape[-1] != self.config.sentence_embedding_size:
                raise ValueError(f"{name}: `sentence_embeddings` must be (batch, sentences, "
                                 f"{self.config.sentence_embedding_size}), got {tuple(sentence_embeddings.shape)}.")
            if sentence_mask is None:
                sentence_mask = torch.ones(sentence_embeddings.shape[:2], dtype=torch.long,
                                           device=sentence_embeddings.device)
        empty = (~sentence_mask.bool().any(-1)).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"{name}: document(s) {empty} of the batch have no sentence; every document needs at "
                             "least one (drop empty documents before classifying).")
        if input_ids is not None:
            sentence_embeddings = self.encode_sentences(input_ids, attention_mask, sentence_mask)
        return sentence_embeddings, sentence_mask


__all__ = ["RANSentencePreTrainedModel", "RANSentenceForSequenceClassification"]
