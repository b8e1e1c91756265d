# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The WordPiece tokenizer the scripts train (BERT-style, no 512-token cap), loading a tokenizer for RAN, and the
causal-LM prompt template."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast


if TYPE_CHECKING:
    from .model_args import RANModelArguments


logger = logging.getLogger("run_scripts")

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4: RAN's pad id is 0
HUGE_MODEL_MAX_LENGTH = int(1e30)  # Transformers' "no limit" value (VERY_LARGE_INTEGER)


def train_wordpiece_tokenizer(texts: Iterable[str], vocab_size: int = 16000, min_frequency: int = 2,
                              lowercase: bool = True, limit_alphabet: int = 1000) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer trained with `tokenizers` on `texts`: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3,
    [MASK]=4, `[CLS] text [SEP]` templates, BERT normaliser (lower-cased and accents stripped if `lowercase`) and
    pre-tokeniser, and no length cap (`model_max_length` = 1e30)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=SPECIAL_TOKENS, limit_alphabet=limit_alphabet,
                                        continuing_subword_prefix="##")
    tok.train_from_iterator(texts, trainer=trainer)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    assert [ids[t] for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS))), ids
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=HUGE_MODEL_MAX_LENGTH, do_lower_case=lowercase, padding_side="right",
    )


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    if tokenizer.model_max_length < 100_000:
        logger.info(f"Tokenizer '{name_or_path}' has model_max_length={tokenizer.model_max_length}; RAN has no "
                    f"length cap, so it is lifted (truncation only at --max_length / --block_size).")
        tokenizer.model_max_length = HUGE_MODEL_MAX_LENGTH
    if tokenizer.pad_token is None:
        raise ValueError(f"Tokenizer '{name_or_path}' has no pad token; RAN batches need one (id 0 by default).")
    drop_token_type_ids(tokenizer)
    return tokenizer


def drop_token_type_ids(tokenizer) -> None:
    """RAN has no token types: a tokenizer (e.g. a BERT one) that returns `token_type_ids` stops returning them, and
    so does every copy the scripts save (`model_input_names` is stored in `tokenizer_config.json`)."""
    if "token_type_ids" in tokenizer.model_input_names:
        names = [name for name in tokenizer.model_input_names if name != "token_type_ids"]
        tokenizer.model_input_names = names
        tokenizer.init_kwargs["model_input_names"] = names  # what save_pretrained writes
        logger.info("The tokenizer's `token_type_ids` are dropped: RAN has no token types.")


def get_tokenizer(model_args: RANModelArguments, training_texts, output_dir: str | None = None,
                  resume_checkpoint: str | None = None):
    """The tokenizer named by `--tokenizer_name` / `--model_name_or_path`, the one saved in the checkpoint a run
    resumes from, or a new WordPiece tokenizer trained on `training_texts()` (a callable, called only then)."""
    if model_args.tokenizer_name:
        return load_tokenizer(model_args.tokenizer_name, model_args.trust_remote_code), model_args.tokenizer_name
    if model_args.model_name_or_path:
        return (load_tokenizer(model_args.model_name_or_path, model_args.trust_remote_code),
                model_args.model_name_or_path)
    if resume_checkpoint and Path(resume_checkpoint, "tokenizer.json").is_file():
        logger.info(f"Resuming: the tokenizer of {resume_checkpoint}.")
        return load_tokenizer(resume_checkpoint), resume_checkpoint
    tokenizer = on_the_first_process(lambda: _train_tokenizer(model_args, training_texts()))
    return tokenizer, f"WordPiece trained here on the training split (vocab {len(tokenizer)})"


def _train_tokenizer(model_args: RANModelArguments, texts: list[str]):
    logger.info(f"Training a WordPiece tokenizer (vocab {model_args.tokenizer_vocab_size}, lowercase="
                f"{model_args.tokenizer_lowercase}) on {len(texts)} training texts.")
    return train_wordpiece_tokenizer(texts, vocab_size=model_args.tokenizer_vocab_size,
                                     min_frequency=model_args.tokenizer_min_frequency,
                                     lowercase=model_args.tokenizer_lowercase)


def on_the_first_process(make):
    """`make()`, made on the first process of a distributed run and sent to the others, so that every process holds
    the same object (a tokenizer trained twice can differ: `tokenizers`' WordPiece trainer breaks frequency ties in
    hash-map order); `make()` itself in a single process."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return make()
    made = [make() if torch.distributed.get_rank() == 0 else None]
    torch.distributed.broadcast_object_list(made, src=0)
    return made[0]


def use_causal_lm_template(tokenizer) -> None:
    """Make `tokenizer(text)` encode a causal-LM prompt the way run_clm.py trains: `[SEP] text`.

    Training concatenates documents as `... [SEP] document [SEP] document ...`: `[SEP]` (the end-of-document and
    `eos_token`) is what precedes every document, and nothing follows the text of a prompt that is to be continued.
    So the template is `[SEP] $A` (no `[CLS]`, no trailing eos), `bos_token` and `eos_token` are `[SEP]`, and the
    same template tokenizes the training documents. A saved causal model's tokenizer then continues a prompt
    (e.g. in `pipeline("text-generation")`) instead of reading it as a finished document."""
    from tokenizers import processors

    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("run_clm.py needs a fast tokenizer (tokenizer.json) to set its causal-LM template; pass "
                         "--tokenizer_name with one, or leave it out to train one here.")
    if tokenizer.sep_token is None:
        raise ValueError("The tokenizer has no [SEP] token to start and end documents with.")
    sep, sep_id = tokenizer.sep_token, tokenizer.sep_token_id
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{sep} $A", pair=f"{sep} $A {sep} $B:1", special_tokens=[(sep, sep_id)])
    tokenizer.bos_token = sep
    tokenizer.eos_token = sep
