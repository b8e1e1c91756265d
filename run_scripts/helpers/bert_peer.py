# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The pretraining peer of RAN (`run_mlm.py --model_type bert`): Transformers' BERT built from a config of the same
width, depth and heads as the RAN it is compared with, with a 512-token context.

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


def check_bert_peer_arguments(model_args, block_size: int, causal: bool) -> None:
    """Clear errors, before any data is read, for flags that `--model_type bert` cannot honour."""
    if causal:
        raise ValueError("--model_type bert is a masked LM: use it with run_mlm.py, not run_clm.py.")
    if model_args.model_name_or_path:
        raise ValueError("--model_type bert builds a BERT from scratch; to continue a BERT checkpoint leave out "
                         "--model_type and pass --model_name_or_path alone.")
    if model_args.config_overrides:
        raise ValueError("--config_overrides sets RANConfig fields; it does not apply with --model_type bert.")
    if block_size > BERT_CONTEXT:
        raise ValueError(f"--model_type bert has a context of {BERT_CONTEXT} tokens: pass --block_size "
                         f"{BERT_CONTEXT} or less (got {block_size}).")
    if model_args.hidden_size != model_args.num_attention_heads * model_args.attention_head_size:
        raise ValueError(f"--model_type bert splits --hidden_size ({model_args.hidden_size}) into "
                         f"--num_attention_heads ({model_args.num_attention_heads}) heads: pass "
                         f"--attention_head_size {model_args.hidden_size // max(model_args.num_attention_heads, 1)} "
                         f"so that heads x head size = hidden size.")


def bert_peer(model_args, tokenizer) -> BertForMaskedLMAtMaskedTokens:
    """A BERT masked LM from scratch: the RAN config flags' hidden size, layers, heads and dropout, feed-forward
    4 x hidden (BERT's ratio), vocabulary and pad id of `tokenizer`, 512 positions."""
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=model_args.hidden_size,
                        num_hidden_layers=model_args.num_hidden_layers,
                        num_attention_heads=model_args.num_attention_heads,
                        intermediate_size=4 * model_args.hidden_size, max_position_embeddings=BERT_CONTEXT,
                        hidden_dropout_prob=model_args.hidden_dropout_prob,
                        attention_probs_dropout_prob=model_args.attention_probs_dropout_prob,
                        pad_token_id=tokenizer.pad_token_id)
    return BertForMaskedLMAtMaskedTokens(config)
