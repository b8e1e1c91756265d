# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The pretraining peer of RAN: Transformers' BERT built from a config of the same width, depth and heads as the RAN it
is compared with, with a 512-token context (trained beside RAN by `research.pretraining.device_pretrain`).

Pretraining computes the masked-LM head only at the masked positions, as RAN's `sparse_prediction` does: the loss
is the same as `BertForMaskedLM`'s and the step is cheaper (the decoder over the whole vocabulary at every position
costs about as much as the four layers at D 256). The weights are those of `BertForMaskedLM`, so a saved checkpoint
loads with `AutoModelForMaskedLM` and `AutoModelForSequenceClassification` like any BERT."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertForMaskedLM
from transformers.modeling_outputs import MaskedLMOutput


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
