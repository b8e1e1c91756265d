# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The compared models (RAN and BERT come from ran_hf / transformers; the chunk-pooling BERT, the BiLSTM, RAN on
MiniLM token embeddings and the two sentence models are defined here) and the batches each of them reads."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ran_hf import RANConfig, RANForSequenceClassification
from run_scripts.helpers.recipes import get_recipe


TOKEN_MODELS = ("ran", "ran_authors", "ran_no_mr", "bert512", "chunk_pool", "bilstm")  # the common tokenizer
MINILM_MODELS = ("ran_minilm",)  # MiniLM's own WordPiece tokenizer and pretrained token embeddings
SENTENCE_MODELS = ("aose", "ran_sent")  # frozen MiniLM sentence embeddings
MODELS = TOKEN_MODELS + MINILM_MODELS + SENTENCE_MODELS
RAN_MODELS = ("ran", "ran_authors", "ran_no_mr")
INPUT_KEY = {**{m: "ids" for m in TOKEN_MODELS}, **{m: "minilm_ids" for m in MINILM_MODELS},
             **{m: "sentences" for m in SENTENCE_MODELS}}
MODEL_NAMES = {
    "ran": "RAN (from-scratch recipe)", "ran_authors": "RAN (authors' defaults)",
    "ran_no_mr": "RAN, no memory review", "bert512": "BERT, first 512 tokens",
    "chunk_pool": "BERT chunks of 512, mean-pooled", "bilstm": "BiLSTM, max-pooled",
    "ran_minilm": "RAN on MiniLM token embeddings",
    "aose": "AoSE (frozen MiniLM sentences)", "ran_sent": "RAN over frozen MiniLM sentences",
}
MINILM_WIDTH = 384
CHUNK = 512  # BERT's position limit: the truncation and chunk length of the BERT baselines


class ChunkPoolClassifier(nn.Module):
    """A BERT encoder over 512-token chunks of a document; the chunks' [CLS] vectors are averaged and classified."""

    def __init__(self, bert_config, num_labels: int):
        super().__init__()
        from transformers import BertModel

        self.encoder = BertModel(bert_config, add_pooling_layer=False)
        self.dropout = nn.Dropout(bert_config.hidden_dropout_prob)
        self.classifier = nn.Linear(bert_config.hidden_size, num_labels)

    def forward(self, chunk_ids: torch.Tensor, chunk_mask: torch.Tensor, chunk_doc: torch.Tensor, num_docs: int):
        """chunk_ids/chunk_mask: (n_chunks, <=512) for all chunks of the batch; chunk_doc: (n_chunks,) their
        document index. Returns (num_docs, num_labels) logits."""
        cls = self.encoder(input_ids=chunk_ids, attention_mask=chunk_mask).last_hidden_state[:, 0]
        summed = torch.zeros(num_docs, cls.shape[-1], dtype=cls.dtype, device=cls.device).index_add_(0, chunk_doc, cls)
        counts = torch.bincount(chunk_doc, minlength=num_docs).clamp(min=1).unsqueeze(-1).to(cls.dtype)
        return self.classifier(self.dropout(summed / counts))


def reversal_index(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """(batch, length) positions that reverse each row's first `lengths[b]` entries and keep its padding in place.
    Gathering with it twice is the identity."""
    positions = torch.arange(length, device=lengths.device).unsqueeze(0)
    return torch.where(positions < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - positions, positions)


class BiLSTM(nn.Module):
    """A bidirectional LSTM layer over right-padded sequences, equal on the real tokens to `nn.LSTM(bidirectional=True)`
    over a packed sequence. The backward direction reads each sequence reversed within its length, so both
    directions run as plain batched LSTMs: PyTorch's CPU backward pass over a packed sequence is about 65 times slower
    (batch 8 x 2,048 tokens x 128 units, one thread: 39 s against 0.6 s for forward and backward)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.forward_lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.backward_lstm = nn.LSTM(input_size, hidden_size, batch_first=True)

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """inputs: (batch, length, input_size), right-padded; lengths: (batch,). Returns (batch, length,
        2 * hidden_size), the forward then the backward state of each position (padding positions hold junk)."""
        forward_states, _ = self.forward_lstm(inputs)
        index = reversal_index(lengths, inputs.shape[1]).unsqueeze(-1)
        reversed_states, _ = self.backward_lstm(inputs.gather(1, index.expand_as(inputs)))
        backward_states = reversed_states.gather(1, index.expand_as(reversed_states))
        return torch.cat([forward_states, backward_states], dim=-1)


class BiLSTMClassifier(nn.Module):
    """Embeddings, one bidirectional LSTM layer over the whole document, max-pooling over real tokens, linear."""

    def __init__(self, vocab_size: int, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.lstm = BiLSTM(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        states = self.lstm(self.dropout(self.embeddings(input_ids)), attention_mask.sum(1))
        states = states.masked_fill(~attention_mask.bool().unsqueeze(-1), float("-inf"))
        return self.classifier(self.dropout(states.max(1).values))


class SentenceAttentionClassifier(nn.Module):
    """AoSE: attention over sentence embeddings s_i, u_i = tanh(W s_i + b), a_i = softmax_i(u_i . u_w),
    document = sum_i a_i s_i, then dropout and a linear classifier."""

    def __init__(self, embedding_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.projection = nn.Linear(embedding_size, embedding_size)
        self.context = nn.Parameter(torch.randn(embedding_size) / math.sqrt(embedding_size))
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(embedding_size, num_labels)

    def forward(self, sentences: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        """sentences: (B, S, E); sentence_mask: (B, S) with 1 for real sentences."""
        scores = torch.tanh(self.projection(sentences)) @ self.context
        weights = scores.masked_fill(~sentence_mask.bool(), float("-inf")).softmax(-1)
        return self.classifier(self.dropout((weights.unsqueeze(-1) * sentences).sum(1)))


class SentenceRANClassifier(nn.Module):
    """RAN over frozen sentence embeddings: a linear map to the RAN width, then `RANForSequenceClassification`
    with `inputs_embeds` (one window = `window_size` sentences)."""

    def __init__(self, embedding_size: int, config: RANConfig):
        super().__init__()
        self.projection = nn.Linear(embedding_size, config.hidden_size)
        self.ran = RANForSequenceClassification(config)

    def forward(self, sentences: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        return self.ran(inputs_embeds=self.projection(sentences), attention_mask=sentence_mask).logits


class MiniLMRANClassifier(nn.Module):
    """RAN whose token embeddings start from all-MiniLM-L6-v2's (30522 x 384 WordPiece table, trained on with the
    rest): embedding, a learned linear map 384 -> D, then `RANForSequenceClassification` with `inputs_embeds` (its
    own embedding norm and dropout apply). The map keeps the RAN encoder the same size as the other RAN rows, so the
    row differs from `ran` only in the tokenizer and where the embeddings start."""

    def __init__(self, config: RANConfig, vocab_size: int = 30522, embedding_size: int = MINILM_WIDTH):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.projection = nn.Linear(embedding_size, config.hidden_size)
        self.ran = RANForSequenceClassification(config)

    def load_minilm_embeddings(self, path) -> None:
        from safetensors import safe_open

        with safe_open(str(path / "model.safetensors"), "pt") as f:
            weight = f.get_tensor("embeddings.word_embeddings.weight")
        if weight.shape != self.embeddings.weight.shape:
            raise ValueError(f"MiniLM's word embeddings are {tuple(weight.shape)}, expected "
                             f"{tuple(self.embeddings.weight.shape)}.")
        with torch.no_grad():
            self.embeddings.weight.copy_(weight)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.ran(inputs_embeds=self.projection(self.embeddings(input_ids)),
                        attention_mask=attention_mask).logits


# RANConfig fields the comparison sets from its own flags (None: from the data and its tokenizer), which --ran_option
# may not override
_SET_BY_THE_COMPARISON = {
    "vocab_size": None, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None, "num_labels": None,
    "hidden_size": "--hidden_size", "num_hidden_layers": "--num_layers", "num_attention_heads": "--num_heads",
    "attention_head_size": "--hidden_size / --num_heads", "window_size": "--window_size"}
OPTION_MODELS = RAN_MODELS + MINILM_MODELS  # the token RAN models --ran_option applies to


def _option_value(field: str, text: str):
    """`text` as the type of RANConfig's `field` (bool: true/false, int, float, or the string itself)."""
    kind = RANConfig.__annotations__.get(field, str)  # `pooler_type` / `pooler_pooling`: strings
    kind = float if kind == float | int else kind  # float fields also take integer literals
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"--ran_option {field}={text}: {field} takes true or false.")
        return text.lower() == "true"
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"--ran_option {field}={text}: {field} takes a {kind.__name__}.") from None
    return text


def parse_ran_options(items: list[str]) -> dict:
    """`--ran_option FIELD=VALUE ...` as a dict of RANConfig overrides, each value typed as its field and the whole
    checked by RANConfig itself (its `ValueError` names the field). The size fields come from the comparison's own
    flags, the token ids from the data's tokenizer; both are refused here."""
    options = {}
    for item in items:
        field, sep, text = item.partition("=")
        if not sep or not field:
            raise ValueError(f"--ran_option takes FIELD=VALUE, got {item!r} (e.g. hidden_dropout_prob=0.3).")
        if field in _SET_BY_THE_COMPARISON:
            where = _SET_BY_THE_COMPARISON[field]
            raise ValueError(f"--ran_option {field}: the comparison sets it " +
                             (f"from {where}; use that flag." if where else "from the data."))
        # `pooler_type` / `pooler_pooling` (replaced by `pooler_mode`, still read by RANConfig) keep the runs
        # recorded with them resumable under the same key
        if field not in RANConfig.__annotations__ and field not in ("pooler_type", "pooler_pooling"):
            raise ValueError(f"--ran_option {field}: not a RANConfig field (e.g. hidden_dropout_prob, pooler_mode, "
                             f"cell_pooling, memory_review_residual, initializer_range).")
        options[field] = _option_value(field, text)
    RANConfig(**options)
    return options


def run_key(model: str, seed: int, options: dict) -> tuple:
    """What tells runs apart in an output folder: the model, the seed and (for the RAN models) the overrides."""
    return model, seed, tuple(sorted(options.items())) if model in OPTION_MODELS else ()


def key_of(run: dict) -> tuple:
    return run_key(run["model"], run["seed"], run["setting"].get("ran_options", {}))


def run_folder_name(model: str, seed: int, options: dict) -> str:
    """`<model>-seed<k>`, then `-FIELD=VALUE` per override: a run's checkpoint folder."""
    return f"{model}-seed{seed}" + "".join(f"-{k}={v}" for k, v in run_key(model, seed, options)[2])


def model_label(run: dict) -> str:
    """A run's name in the tables: the model's, with its --ran_option overrides when it had any."""
    options = run["setting"].get("ran_options")
    label = MODEL_NAMES.get(run["model"], run["model"])
    return label + (" [" + ", ".join(f"{k}={v}" for k, v in options.items()) + "]" if options else "")


def ran_config(name: str, args, vocab_size: int, num_labels: int) -> RANConfig:
    """`ran`, `ran_no_mr`, `ran_minilm`: the `from-scratch` recipe's RANConfig fields (memory-review residual, mean
    pooling in the cell transform; without memory review the residual does not exist, so `ran_no_mr` keeps only the
    mean pooling) at the comparison's size (--hidden_size, --num_layers, --num_heads, --window_size);
    `ran_authors`: the authors' architecture as is (max pooling, no residual), the `authors` recipe. The
    `--ran_option` overrides (`args.ran_options`) go on top."""
    recipe = dict(get_recipe("authors" if name == "ran_authors" else "from-scratch").config)
    if name == "ran_no_mr":
        recipe.pop("memory_review_residual", None)
        recipe["use_memory_review"] = False
    if {"pooler_type", "pooler_pooling"} & set(args.ran_options):  # the replaced fields: the recipe's mode in them
        pooler_type, _, pooling = recipe.pop("pooler_mode", "cell_max").partition("_")
        recipe.update(pooler_type="average" if pooler_type == "token" else "cell", pooler_pooling=pooling)
    width, heads = args.hidden_size, args.num_heads
    return RANConfig(vocab_size=vocab_size, hidden_size=width, num_hidden_layers=args.num_layers,
                     num_attention_heads=heads, attention_head_size=width // heads, window_size=args.window_size,
                     num_labels=num_labels, **{**recipe, **args.ran_options})


def build_model(name: str, args, vocab_size: int, num_labels: int) -> nn.Module:
    """A freshly initialised `name` (seed the global RNG first); `ran_minilm` gets MiniLM's token embeddings."""
    from transformers import BertConfig, BertForSequenceClassification

    width, heads = args.hidden_size, args.num_heads
    if name in RAN_MODELS:
        return RANForSequenceClassification(ran_config(name, args, vocab_size, num_labels))
    if name == "ran_minilm":
        from .data import minilm_dir

        model = MiniLMRANClassifier(ran_config(name, args, 8, num_labels))  # RAN's own table is unused: 8 rows
        model.load_minilm_embeddings(minilm_dir())
        return model
    bert_config = BertConfig(vocab_size=vocab_size, hidden_size=width, num_hidden_layers=args.num_layers,
                             num_attention_heads=heads, intermediate_size=4 * width, max_position_embeddings=CHUNK,
                             num_labels=num_labels)
    if name == "bert512":
        return BertForSequenceClassification(bert_config)
    if name == "chunk_pool":
        return ChunkPoolClassifier(bert_config, num_labels)
    if name == "bilstm":
        return BiLSTMClassifier(vocab_size, width, num_labels)
    if name == "aose":
        return SentenceAttentionClassifier(args.sentence_dim, num_labels)
    if name == "ran_sent":
        return SentenceRANClassifier(args.sentence_dim, RANConfig(
            vocab_size=8, hidden_size=width, num_hidden_layers=args.num_layers, num_attention_heads=heads,
            attention_head_size=width // heads, window_size=args.sentence_window, min_window_size=4,
            num_labels=num_labels))
    raise ValueError(f"--models: unknown model {name!r}; choose from {MODELS}.")


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())



def _pad(rows: list, value=0) -> torch.Tensor:
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


def make_batch(name: str, docs: list, cls_id: int, sep_id: int) -> dict:
    """Model inputs for `docs`: token ids (lists or int arrays, with [CLS] ... [SEP]) for token models, `(n, 384)`
    arrays for the sentence models."""
    if name in SENTENCE_MODELS:
        size = max(len(d) for d in docs)
        sentences = torch.zeros(len(docs), size, docs[0].shape[1])
        mask = torch.zeros(len(docs), size, dtype=torch.long)
        for i, d in enumerate(docs):
            sentences[i, : len(d)] = torch.from_numpy(d)
            mask[i, : len(d)] = 1
        return {"sentences": sentences, "sentence_mask": mask}
    if name == "chunk_pool":
        chunks, owner = [], []
        for i, ids in enumerate(docs):
            body = np.asarray(ids)[1:-1]
            for start in range(0, max(len(body), 1), CHUNK - 2):
                chunks.append(np.concatenate([[cls_id], body[start: start + CHUNK - 2], [sep_id]]))
                owner.append(i)
        chunk_ids = _pad(chunks)
        return {"chunk_ids": chunk_ids, "chunk_mask": (chunk_ids != 0).long(), "chunk_doc": torch.tensor(owner),
                "num_docs": len(docs)}
    if name == "bert512":
        docs = [np.concatenate([np.asarray(ids)[: CHUNK - 1], [sep_id]]) if len(ids) > CHUNK else ids for ids in docs]
    input_ids = _pad(docs)
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


def to_device(batch: dict, device: torch.device) -> dict:
    """`batch` with its tensors on `device` (counts such as `num_docs` stay as they are)."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def logits_of(model: nn.Module, name: str, batch: dict) -> torch.Tensor:
    if name in RAN_MODELS or name == "bert512":
        return model(**batch).logits
    return model(**batch)


def batch_tokens(batch: dict) -> int:
    """The input positions a batch feeds the model, padding left out: tokens (for chunk_pool with each chunk's
    added [CLS]/[SEP]; for bert512 only the 512 it reads) or, for the sentence models, sentences."""
    mask = batch.get("attention_mask", batch.get("chunk_mask", batch.get("sentence_mask")))
    return int(mask.sum())
