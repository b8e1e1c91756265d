# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Convert a checkpoint of the authors' `rannet` (TensorFlow) into a ran_hf directory.

    python -m ran_hf.convert_official_checkpoint --checkpoint PATH --config CONFIG.json --output DIR [--vocab vocab.txt]

PATH is the prefix of the released TensorFlow checkpoint (reading it needs `tensorflow`, the `convert` extra), or an
`.npz` whose keys are the released variable names (`rannet/token-embedding/embeddings`,
`rannet/ran-0/encode-attn/dense-q/kernel`, ...). An `.npz` laid out like the golden fixtures of this project
(`w/<keras name>` keys plus `weight_names_json`) is accepted too. CONFIG is the authors' `config.json`.

DIR is written with `save_pretrained` (`config.json`, `model.safetensors`, the modeling code and an `auto_map` of
every RAN head; the masked-LM head is kept when the checkpoint has it) and, with `--vocab`, the tokenizer.
`AutoModel.from_pretrained(DIR)` loads it after `import ran_hf`, and with `trust_remote_code=True` without ran_hf.

Layout changes (the converted model computes the same function):
* Keras kernels are `(in, out)`; `nn.Linear.weight` is `(out, in)`.
* q/k/v of the window attention are stored as one `qkv` projection; k/v of memory review as one `kv`; the `t` and
  `g` halves of every GLU as one `proj`.
* The authors rotate interleaved pairs; ran_hf rotates half-split pairs, so the columns of q and k are permuted
  inside every head to `[0, 2, 4, ..., 1, 3, 5, ...]` (attention scores are unchanged).
"""

import argparse
import json
import logging
import os
import re

import numpy as np
import torch


logger = logging.getLogger(__name__)

PREFIX = "rannet/"


def ran_config_kwargs(official: dict, cell_pooling: str | None = None) -> dict:
    """Map the authors' `config.json` to `RANConfig` keyword arguments.

    The authors' code ignores `cell_pooling` from its config file (a truthy keyword default wins, so released
    models pool with `"last"`); the converter follows the code unless `cell_pooling` is given explicitly.
    """
    missing = [k for k in ("vocab_size", "embedding_size") if k not in official]
    if missing:
        raise ValueError(f"official config: missing required keys {missing}.")
    if official.get("cell_pooling", "last") != "last" and cell_pooling is None:
        logger.warning(
            "config.json says cell_pooling=%r, but rannet 0.3.1 ignores it and pools with 'last'; converting with "
            "'last'. Pass --cell-pooling to override.", official["cell_pooling"]
        )
    dropout = float(official.get("dropout_rate", 0.1))
    return dict(
        vocab_size=int(official["vocab_size"]),
        hidden_size=int(official["embedding_size"]),
        num_hidden_layers=int(official.get("ran_layers", 2)),
        num_attention_heads=int(official.get("head_num", 8)),
        attention_head_size=int(official.get("head_size", 128)),
        window_size=int(official.get("window_size", 256)),
        min_window_size=int(official.get("min_window_size", 16)),
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        initializer_range=float(official.get("kernel_initializer_range", 0.02)),
        cell_pooling=cell_pooling or "last",
        hidden_act="swish",
        layer_norm_eps=1e-7,
        pad_token_id=0,
    )


def _rotary_permutation(num_heads: int, head_size: int) -> np.ndarray:
    """Column order that turns interleaved rotary pairs into half-split ones, inside every head."""
    within = np.concatenate([np.arange(0, head_size, 2), np.arange(1, head_size, 2)])
    return (np.arange(num_heads)[:, None] * head_size + within[None, :]).reshape(-1)


class _ReleasedWeights:
    """The released variables (without the `rannet/` prefix), read as ran_hf tensors: a Keras dense layer's
    `kernel` (in, out) becomes a `weight` (out, in), a layer norm's `gamma` / `beta` its `weight` / `bias`. Records
    which variables were read, so that none is left over unnoticed."""

    def __init__(self, weights: dict):
        self.weights = {k[len(PREFIX):] if k.startswith(PREFIX) else k: np.asarray(v) for k, v in weights.items()}
        self.used = set()

    def __contains__(self, name: str) -> bool:
        return name in self.weights

    def take(self, name: str) -> np.ndarray:
        if name not in self.weights:
            raise KeyError(f"checkpoint has no variable '{PREFIX}{name}'")
        self.used.add(name)
        return self.weights[name]

    def linear(self, name: str, columns: np.ndarray | None = None) -> dict:
        """A dense layer's weight (and bias), its output columns permuted by `columns` if given."""
        kernel = self.take(f"{name}/kernel")
        out = {"weight": (kernel if columns is None else kernel[:, columns]).T}
        if f"{name}/bias" in self.weights:
            bias = self.take(f"{name}/bias")
            out["bias"] = bias if columns is None else bias[columns]
        return out

    def glu(self, name: str) -> dict:
        """The authors' GLU (`dense-t`, `dense-g`) as ran_hf's one projection, the two halves stacked."""
        return _stacked(self.linear(f"{name}/dense-t"), self.linear(f"{name}/dense-g"))

    def norm(self, name: str) -> dict:
        return {"weight": self.take(f"{name}/gamma"), "bias": self.take(f"{name}/beta")}

    def layer_ids(self) -> list[int]:
        ids = sorted({int(m.group(1)) for k in self.weights if (m := re.match(r"ran-(\d+)/", k))})
        if ids != list(range(len(ids))) or not ids:
            raise KeyError(f"checkpoint RAN layers are {ids}; expected ran-0 .. ran-N")
        return ids

    def unused(self) -> list[str]:
        return [PREFIX + k for k in sorted(set(self.weights) - self.used)]


def _stacked(*parts: dict) -> dict:
    """Linear layers over the same input as one layer: weights (and biases) stacked along the output axis."""
    return {key: np.concatenate([p[key] for p in parts], axis=0) for key in parts[0]}


def _layer_weights(released: _ReleasedWeights, src: str, rotary: np.ndarray) -> dict[str, dict]:
    """One RAN layer, `ran-i` of the release: ran_hf module name (relative to the layer) -> its tensors. q and k
    are permuted inside each head (`rotary`) so that half-split rotary gives the authors' interleaved scores."""
    attention = f"{src}/encode-attn"
    modules = {
        "window_block.qkv": _stacked(released.linear(f"{attention}/dense-q", rotary),
                                         released.linear(f"{attention}/dense-k", rotary),
                                         released.linear(f"{attention}/dense-v")),
        "window_block.o": released.linear(f"{attention}/dense-o"),
        "window_block.glu.proj": released.glu(f"{attention}/glu"),
        "window_block.norm": released.norm(f"{attention}/layernorm"),
        "cell_initializer": released.linear(f"{src}/cell-initializer"),
        "cell_initializer_norm": released.norm(f"{src}/cell-initializer-layernorm"),
        "cell_glu.proj": released.glu(f"{src}/cell-glu"),
        "cell_residual_norm": released.norm(f"{src}/cell-residual-layernorm"),
        "window_block.input_norm": released.norm(f"{src}/concat-layernorm"),
    }
    review = f"{src}/output-attn"
    if f"{review}/dense-q/kernel" in released:  # memory review
        modules.update({
            "memory_review.q": released.linear(f"{review}/dense-q"),
            "memory_review.kv": _stacked(released.linear(f"{review}/dense-k"), released.linear(f"{review}/dense-v")),
            "memory_review.o": released.linear(f"{review}/dense-o"),
            "memory_review.glu.proj": released.glu(f"{review}/glu"),
            "memory_review.norm": released.norm(f"{review}/layernorm"),
        })
    else:
        modules["output_norm"] = released.norm(f"{src}/output-layernorm")
    return modules


def convert_official_weights(weights: dict, num_heads: int, head_size: int) -> dict:
    """Released variable names -> ran_hf state dict of a `RANForMaskedLM` (keys `ran.*` and, if present,
    `lm_head.*`). Raises `KeyError` naming any variable that is missing or left over."""
    released = _ReleasedWeights(weights)
    modules = {"ran.embeddings.word_embeddings": {"weight": released.take("token-embedding/embeddings")},
               "ran.embeddings.norm": released.norm("embedding-layernorm")}
    rotary = _rotary_permutation(num_heads, head_size)
    for i in released.layer_ids():
        for name, tensors in _layer_weights(released, f"ran-{i}", rotary).items():
            modules[f"ran.layers.{i}.{name}"] = tensors
    if "output-cell-dense/kernel" in released:
        modules.update({"ran.pooler.cell_dense": released.linear("output-cell-dense"),
                        "ran.pooler.cell_glu.proj": released.glu("output-cell-glu"),
                        "ran.pooler.pooling_dense": released.linear("output-pooling-dense")})
    if "mlm-hidden/dense/kernel" in released:
        modules.update({"lm_head.dense": released.linear("mlm-hidden/dense"),
                        "lm_head.norm": released.norm("mlm-hidden/layernorm"),
                        "lm_head": {"bias": released.take("mlm-matching/bias")}})
    unused = released.unused()
    if unused:
        raise KeyError(f"checkpoint variables not understood: {unused}")
    return {f"{module}.{key}": torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
            for module, tensors in modules.items() for key, value in tensors.items()}


def read_checkpoint(path: str) -> dict:
    """Released variable name -> array, from an `.npz` or a TensorFlow checkpoint prefix."""
    if path.endswith(".npz"):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--checkpoint: no such file {path}")
        with np.load(path) as npz:
            if "weight_names_json" in npz.files:  # golden-fixture layout: w/<keras name> keys plus a name table
                table = json.loads(str(npz["weight_names_json"]))
                return {released: npz[key] for key, _, released in table}
            return {key: npz[key] for key in npz.files}
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError(
            "Reading a TensorFlow checkpoint needs tensorflow: `pip install ran_hf[convert]`, or pass an .npz of the "
            "variables instead."
        ) from error
    reader = tf.train.load_checkpoint(path)
    weights = {}
    for name in reader.get_variable_to_shape_map():
        clean = name.split("/.ATTRIBUTES")[0]
        if clean.startswith(PREFIX) and not re.search(r"/(adam|Adam|_optimizer|slot)", clean):
            weights[clean] = reader.get_tensor(name)
    if not weights:
        raise KeyError(f"no '{PREFIX}*' variables in checkpoint {path}")
    return weights


def convert(checkpoint: str, config_path: str, output_dir: str, vocab: str | None = None,
            cell_pooling: str | None = None) -> str:
    """Write a ran_hf directory converted from the authors' checkpoint; returns `output_dir`.

    The converted weights are loaded into a ran_hf model (`RANForMaskedLM` when the checkpoint has the masked-LM
    head, else `RANModel`) that is written with `save_pretrained`: the directory holds the modeling code and an
    `auto_map` naming every RAN head, so it loads with `trust_remote_code=True` where ran_hf is not installed.
    """
    from .configuration_ran import RANConfig
    from .modeling_ran import RANForMaskedLM, RANModel, RANPooler

    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"--config: no such file {config_path}")
    with open(config_path) as f:
        official = json.load(f)
    config = RANConfig(**ran_config_kwargs(official, cell_pooling))
    state = convert_official_weights(read_checkpoint(checkpoint), config.num_attention_heads,
                                     config.attention_head_size)
    has_pooler = "ran.pooler.cell_dense.weight" in state
    if "lm_head.bias" in state:
        model = RANForMaskedLM(config)
        if has_pooler:  # kept, so that `AutoModel` of the directory gets the authors' pooler too
            model.ran.pooler = RANPooler(config)
    else:
        model = RANModel(config, add_pooling_layer=has_pooler)
        state = {k[len("ran."):]: v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.decoder.weight", "lm_head.decoder.bias"}  # the embedding table and `lm_head.bias`
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise KeyError(f"converted weights do not fit {type(model).__name__}: missing {missing}, unexpected "
                       f"{unexpected}")
    model.save_pretrained(output_dir)
    if vocab is not None:
        _save_tokenizer(vocab, output_dir)
    return output_dir


def _save_tokenizer(vocab: str, output_dir: str):
    """The authors' WordPiece vocabulary (lower-cased, BERT-style) as a fast tokenizer without a 512 cap.

    Transformers 5 tokenizers take the vocabulary itself (`vocab=`): a `vocab_file=` keyword is silently ignored and
    leaves a tokenizer of the five special tokens only, so the file is read here (one token a line, id = line).
    RAN has no token types, so the tokenizer returns only `input_ids` and `attention_mask`.
    """
    from transformers import BertTokenizerFast

    if not os.path.isfile(vocab):
        raise FileNotFoundError(f"--vocab: no such file {vocab}")
    with open(vocab, encoding="utf-8") as f:
        tokens = [line.rstrip("\r\n") for line in f]
    while tokens and not tokens[-1]:
        tokens.pop()
    vocabulary = {token: index for index, token in enumerate(tokens)}
    if "[UNK]" not in vocabulary:
        raise ValueError(f"--vocab: {vocab} has no [UNK] token; expected a BERT-style WordPiece vocab.txt")
    tokenizer = BertTokenizerFast(vocab=vocabulary, do_lower_case=True, model_max_length=int(1e30),
                                  model_input_names=["input_ids", "attention_mask"])
    tokenizer.save_pretrained(output_dir)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="TF checkpoint prefix, or .npz of the variables")
    parser.add_argument("--config", required=True, help="the authors' config.json")
    parser.add_argument("--output", required=True, help="directory to write")
    parser.add_argument("--vocab", default=None, help="the authors' vocab.txt (WordPiece, lower-cased)")
    parser.add_argument("--cell-pooling", choices=["last", "mean", "max"], default=None,
                        help="override the cell pooling (rannet 0.3.1 always uses 'last')")
    args = parser.parse_args(argv)
    out = convert(args.checkpoint, args.config, args.output, args.vocab, args.cell_pooling)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
