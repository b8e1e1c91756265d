# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The pretraining peer of RAN: Transformers' BERT built from a config of the same width, depth and heads as the RAN it
is compared with, with a 512-token context (trained beside RAN by `research.pretraining.device_pretrain`).

Pretraining computes the masked-LM head only at the masked positions, as RAN's `sparse_prediction` does: the loss
is the same as `BertForMaskedLM`'s and the step is cheaper (the decoder over the whole vocabulary at every position
costs about as much as the four layers at D 256). The weights are those of `BertForMaskedLM`, so a saved checkpoint
loads with `AutoModelForMaskedLM` and `AutoModelForSequenceClassification` like any BERT."""

from __future__ import annotations

import torch
from torch import nn
from transformers import (BertConfig, BertForMaskedLM, BertModel, BertPreTrainedModel, ModernBertConfig,
                          ModernBertForMaskedLM, ModernBertModel, ModernBertPreTrainedModel)
from transformers.modeling_outputs import MaskedLMOutput, SequenceClassifierOutput


BERT_CONTEXT = 512


class BertForMaskedLMAtMaskedTokens(BertForMaskedLM):
    """`BertForMaskedLM` whose forward with `labels` runs the MLM head on the labelled (masked) positions only.

    With labels, `logits` has shape `(masked tokens, vocab_size)`, the masked positions in row-major order of
    `labels != -100` (what `pretraining.masked_predictions` expects); the loss equals the dense head's. Trainer's
    `num_items_in_batch` (the masked tokens of all accumulated micro-batches) divides the summed loss, as in RAN's
    heads; `BertForMaskedLM` itself takes that argument and ignores it, so with gradient accumulation its loss (and
    gradient) is the micro-batch mean, accumulated: as many times too large as there are micro-batches. Without
    labels the forward is `BertForMaskedLM`'s, logits `(batch, length, vocab_size)`."""

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> MaskedLMOutput:
        if labels is None:
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        hidden = self.bert(input_ids, attention_mask=attention_mask, return_dict=True, **kwargs).last_hidden_state
        scored = labels != -100
        logits = self.cls(hidden[scored])
        loss = self.loss_function(logits, labels[scored], vocab_size=self.config.vocab_size,
                                  num_items_in_batch=num_items_in_batch)
        return MaskedLMOutput(loss=loss, logits=logits)

    def save_pretrained(self, save_directory, is_main_process: bool = True, **kwargs) -> None:
        """Saved as what it is to every other program, `BertForMaskedLM` (the masked-only head is a training
        detail): `config.json` names that class, not this one, which exists only in this repository. Only the main
        process writes, as in `PreTrainedModel.save_pretrained`."""
        super().save_pretrained(save_directory, is_main_process=is_main_process, **kwargs)
        if is_main_process:
            self.config.architectures = [BertForMaskedLM.__name__]
            self.config.save_pretrained(save_directory)


def check_bert_peer_arguments(hidden_size: int, num_attention_heads: int, attention_head_size: int,
                              block_size: int) -> None:
    """Clear errors, before any data is read, for sizes that BERT cannot honour."""
    if block_size > BERT_CONTEXT:
        raise ValueError(f"The BERT peer has a context of {BERT_CONTEXT} tokens: pass --bert_block_size "
                         f"{BERT_CONTEXT} or less (got {block_size}).")
    if hidden_size != num_attention_heads * attention_head_size:
        raise ValueError(f"The BERT peer splits --hidden_size ({hidden_size}) into --num_attention_heads "
                         f"({num_attention_heads}) heads: pass --attention_head_size "
                         f"{hidden_size // max(num_attention_heads, 1)} so that heads x head size = hidden size.")


def bert_peer(vocab_size: int, pad_token_id: int, hidden_size: int, num_hidden_layers: int,
              num_attention_heads: int, dropout: float = 0.1) -> BertForMaskedLMAtMaskedTokens:
    """A BERT masked LM from scratch: RAN's hidden size, layers and heads, feed-forward 4 x hidden (BERT's ratio),
    the tokenizer's vocabulary and pad id, 512 positions."""
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                        num_attention_heads=num_attention_heads, intermediate_size=4 * hidden_size,
                        max_position_embeddings=BERT_CONTEXT, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, pad_token_id=pad_token_id)
    return BertForMaskedLMAtMaskedTokens(config)


def modernbert_peer(vocab_size: int, pad_token_id: int, cls_token_id: int, sep_token_id: int, hidden_size: int,
                    num_hidden_layers: int, num_attention_heads: int, dropout: float = 0.0) -> ModernBertForMaskedLM:
    """The peer with rotary positions and pre-norm layers: Transformers' ModernBERT at RAN's hidden size, layers and
    heads, a 512-token context, its own local / global attention pattern, and a gated feed-forward of width
    `8 * hidden / 3` (the parameters of BERT's `4 * hidden` one). `sparse_prediction` computes the masked-LM head at
    the labelled positions only when labels are given, as RAN's and the BERT peer's pretraining heads do."""
    config = ModernBertConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                              num_attention_heads=num_attention_heads, intermediate_size=8 * hidden_size // 3,
                              max_position_embeddings=BERT_CONTEXT, pad_token_id=pad_token_id,
                              cls_token_id=cls_token_id, sep_token_id=sep_token_id, bos_token_id=cls_token_id,
                              eos_token_id=sep_token_id, attention_dropout=dropout, embedding_dropout=dropout,
                              mlp_dropout=dropout, sparse_prediction=True)
    return ModernBertForMaskedLM(config)


class ChunkPoolMixin:
    """A pretrained encoder over a whole document in chunks of its context ("chunk-and-pool"): the document's tokens
    between its [CLS] and [SEP] are cut into pieces of `max_position_embeddings - 2`, each piece is read as
    `[CLS] piece [SEP]`, and the pieces' [CLS] outputs are averaged into the document vector that a linear layer
    classifies. The encoder is the model's `base_model` (a masked-LM checkpoint's encoder loads into it); the
    classifier starts new."""

    def chunk(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                                     torch.Tensor]:
        """input_ids, attention_mask: `(batch, length)`, each row `[CLS] tokens [SEP]` then padding (each chunk is
        wrapped in its row's own first and last token). Returns the chunks' ids and mask `(chunks, <= context)` and
        each chunk's row in the batch `(chunks,)`."""
        piece = self.config.max_position_embeddings - 2
        chunks, documents = [], []
        for row, (ids, length) in enumerate(zip(input_ids, attention_mask.sum(-1).tolist())):
            first, body, last = ids[:1], ids[1:max(length - 1, 1)], ids[max(length - 1, 1):length]
            for start in range(0, max(len(body), 1), piece):
                chunks.append(torch.cat([first, body[start:start + piece], last]))
                documents.append(row)
        width = max(len(c) for c in chunks)
        chunk_ids = input_ids.new_full((len(chunks), width), self.config.pad_token_id)
        chunk_mask = torch.zeros_like(chunk_ids)
        for i, c in enumerate(chunks):
            chunk_ids[i, :len(c)] = c
            chunk_mask[i, :len(c)] = 1
        return chunk_ids, chunk_mask, input_ids.new_tensor(documents)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> SequenceClassifierOutput:
        """input_ids, attention_mask: `(batch, length)`; labels `(batch,)`. Returns logits `(batch, num_labels)`.
        Other keywords (a BERT tokenizer's `token_type_ids`) are dropped: every chunk is one segment."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        chunk_ids, chunk_mask, documents = self.chunk(input_ids, attention_mask)
        cls = self.base_model(input_ids=chunk_ids, attention_mask=chunk_mask).last_hidden_state[:, 0]
        summed = cls.new_zeros(input_ids.shape[0], cls.shape[-1]).index_add_(0, documents, cls)
        counts = torch.bincount(documents, minlength=input_ids.shape[0]).unsqueeze(-1).to(cls.dtype)
        logits = self.classifier(self.dropout(summed / counts))
        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return SequenceClassifierOutput(loss=loss, logits=logits)


class BertChunkPoolForSequenceClassification(ChunkPoolMixin, BertPreTrainedModel):
    """Chunk-and-pool over BERT (`ChunkPoolMixin`); loads the encoder of a `BertForMaskedLM` checkpoint (`bert.*`)."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class ModernBertChunkPoolForSequenceClassification(ChunkPoolMixin, ModernBertPreTrainedModel):
    """Chunk-and-pool over ModernBERT (`ChunkPoolMixin`); loads the encoder of a `ModernBertForMaskedLM` checkpoint
    (`model.*`). The [CLS] output is the encoder's, after its final norm."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ModernBertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


# The chunk-and-pool classifier of each peer, by the checkpoint's `model_type`.
CHUNK_POOL_CLASSES = {"bert": BertChunkPoolForSequenceClassification,
                      "modernbert": ModernBertChunkPoolForSequenceClassification}
