# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The model arguments every script shares (`RANModelArguments`) and building a RAN from scratch or from a
checkpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from transformers import AutoConfig

from ran_hf import RANConfig
from ran_hf.convert_encoder import added_parameter_names


logger = logging.getLogger("run_scripts")

DEFAULT_TORCH_THREADS = 1  # the same in every script; the reason is in the --torch_threads help


@dataclass
class RANModelArguments:
    """Where the model and tokenizer come from; the config of a model trained from scratch."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A checkpoint directory (or Hub id) to start from. Leave unset to train from scratch with "
                          "the config flags below."},
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={"help": "A tokenizer directory. Default: the one of --model_name_or_path, or else a WordPiece "
                          "tokenizer trained on the training split (see --tokenizer_vocab_size)."},
    )
    tokenizer_vocab_size: int = field(default=16000, metadata={"help": "Vocabulary of a tokenizer trained here."})
    tokenizer_min_frequency: int = field(default=2,
                                         metadata={"help": "Min pair frequency of a tokenizer trained here."})
    tokenizer_lowercase: bool = field(default=True, metadata={"help": "Lower-case in a tokenizer trained here."})
    hidden_size: int = field(default=128, metadata={"help": "From scratch: hidden size D."})
    num_hidden_layers: int = field(default=2, metadata={"help": "From scratch: number of RAN layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "From scratch: attention heads."})
    attention_head_size: int = field(default=32, metadata={"help": "From scratch: size of one head."})
    window_size: int = field(default=128, metadata={"help": "From scratch: tokens per window."})
    min_window_size: int = field(default=16, metadata={"help": "From scratch: a shorter last window is merged."})
    hidden_dropout_prob: float = field(default=0.1, metadata={"help": "From scratch: hidden dropout."})
    attention_probs_dropout_prob: float = field(default=0.1, metadata={"help": "From scratch: attention dropout."})
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "More RANConfig fields, 'key=value,key=value' (e.g. 'pooler_mode=token_mean,rope_theta=5e4'); "
                          "applied from scratch and to a loaded config."},
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow code from the checkpoint directory."})
    torch_threads: int = field(
        default=DEFAULT_TORCH_THREADS,
        metadata={"help": "torch.set_num_threads for this run; 0 keeps torch's default (one thread per core). The "
                          "default is 1 in every script: the default RAN (hidden 128) runs its window recurrence as "
                          "many small sequential matrix products, which extra threads mostly synchronise rather "
                          "than speed up, and a single thread leaves the other cores to data loading and to other "
                          "jobs. Raise it for wide models (hidden 512 and more) or long --block_size."},
    )

    head_learning_rate: float | None = field(
        default=None,
        metadata={"help": "With --model_name_or_path: the learning rate of the weights the checkpoint does not hold "
                          "(the task head, and the pooler of a masked-LM checkpoint), which start from random "
                          "values, and of a RAN around a pretrained encoder (python -m ran_hf.convert_encoder) the "
                          "weights RAN adds to the encoder (cell chain, memory review, gates), while the loaded "
                          "weights train at --learning_rate; both follow the same schedule. Default: "
                          "--learning_rate for every weight."},
    )
    save_every_minutes: float = field(
        default=0.0,
        metadata={"help": "Also write a checkpoint (without evaluating) whenever this many minutes of training have "
                          "passed since the last checkpoint, so that a run stopped mid-epoch continues from near "
                          "where it stopped with --resume_from_checkpoint last. 0 (the default): only the "
                          "checkpoints of --save_strategy. These checkpoints count towards --save_total_limit; the "
                          "best one (--load_best_model_at_end) is always kept."},
    )

    def __post_init__(self):
        if self.head_learning_rate is not None and not self.head_learning_rate > 0:  # (also catches NaN)
            raise ValueError(f"--head_learning_rate must be a positive learning rate, got {self.head_learning_rate}.")
        if self.head_learning_rate is not None and not self.model_name_or_path:
            raise ValueError("--head_learning_rate sets the learning rate of the weights a checkpoint does not hold; "
                             "from scratch every weight is new: pass --model_name_or_path, or use --learning_rate "
                             "alone.")
        if not self.save_every_minutes >= 0:  # (also catches NaN)
            raise ValueError(f"--save_every_minutes must be 0 (off) or a positive number of minutes, got "
                             f"{self.save_every_minutes}.")

    def parsed_config_overrides(self) -> dict:
        """`--config_overrides` as a dict, values typed like RANConfig's defaults."""
        if not self.config_overrides:
            return {}
        defaults = RANConfig()
        out = {}
        for item in self.config_overrides.split(","):
            key, sep, value = item.partition("=")
            key = key.strip()
            if key in ("pooler_type", "pooler_pooling"):
                raise ValueError(f"--config_overrides: {key} was replaced by pooler_mode (cell_max, cell_mean or "
                                 "token_mean; pooler_type=average is pooler_mode=token_mean).")
            if not sep or not hasattr(defaults, key):
                raise ValueError(f"--config_overrides: {item!r} is not 'field=value' with a RANConfig field.")
            default = getattr(defaults, key)
            value = value.strip()
            if isinstance(default, bool):
                if value.lower() not in ("true", "false"):
                    raise ValueError(f"--config_overrides: {key} needs true or false, got {value!r}.")
                out[key] = value.lower() == "true"
            elif isinstance(default, int) and not isinstance(default, bool):
                out[key] = int(value)
            elif isinstance(default, float):
                out[key] = float(value)
            elif value.lower() in ("none", "null"):
                out[key] = None
            else:
                out[key] = value
        return out

    @property
    def starting_point(self) -> str:
        """'from <checkpoint>' or 'from scratch', for logs and model cards."""
        return f"from {self.model_name_or_path}" if self.model_name_or_path else "from scratch"

    def scratch_config_kwargs(self) -> dict:
        return dict(hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
                    num_attention_heads=self.num_attention_heads, attention_head_size=self.attention_head_size,
                    window_size=self.window_size, min_window_size=min(self.min_window_size, self.window_size),
                    hidden_dropout_prob=self.hidden_dropout_prob,
                    attention_probs_dropout_prob=self.attention_probs_dropout_prob)


def build_model(auto_class, model_args: RANModelArguments, tokenizer, config_overrides: dict | None = None,
                ignore_mismatched_sizes: bool = False, recipe_config: dict | None = None):
    """A RAN from `--model_name_or_path` (with `config_overrides`, e.g. the labels) or from scratch (the config flags,
    `vocab_size` = the tokenizer's size, `pad_token_id` = the tokenizer's pad id). `recipe_config` (a recipe's
    RANConfig fields) applies under the config flags and `--config_overrides`. With `--head_learning_rate` the model's
    `head_parameter_names` holds the names of the weights the checkpoint did not provide (see
    `parameter_learning_rates`)."""
    config_overrides = {**model_args.parsed_config_overrides(), **(config_overrides or {})}
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path,
                                            trust_remote_code=model_args.trust_remote_code)
        if getattr(config, "model_type", None) != "ran":
            logger.warning(f"--model_name_or_path {model_args.model_name_or_path} is a '{config.model_type}' "
                           f"model, not RAN.")
        for key, value in {**(recipe_config or {}), **config_overrides}.items():
            setattr(config, key, value)
        model, loading_info = auto_class.from_pretrained(model_args.model_name_or_path, config=config,
                                                         trust_remote_code=model_args.trust_remote_code,
                                                         ignore_mismatched_sizes=ignore_mismatched_sizes,
                                                         output_loading_info=True)
        if model_args.head_learning_rate is not None:
            mismatched = {key for key, *_shapes in loading_info["mismatched_keys"]}  # (name, loaded, expected)
            new = set(loading_info["missing_keys"]) | mismatched
            if getattr(model.config, "window_block", None) == "bert":  # a RAN around a pretrained encoder
                new |= set(added_parameter_names(model))
            model.head_parameter_names = sorted(new)
    else:
        config = RANConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                           **{**(recipe_config or {}), **model_args.scratch_config_kwargs(), **config_overrides})
        model = auto_class.from_config(config)
    if len(tokenizer) > model.config.vocab_size:
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
                         f"{model.config.vocab_size}; use the tokenizer the model was trained with (--tokenizer_name).")
    if model.config.pad_token_id != tokenizer.pad_token_id:
        raise ValueError(f"The tokenizer's pad id ({tokenizer.pad_token_id}) differs from the model's "
                         f"config.pad_token_id ({model.config.pad_token_id}).")
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Model: {type(model).__name__}, {n_params / 1e6:.2f}M parameters, "
                f"{model_args.starting_point}.")
    return model


def parameter_learning_rates(model, model_args: RANModelArguments) -> dict[str, float] | None:
    """`--head_learning_rate` for each weight the checkpoint did not hold (`RANTrainer(learning_rates=...)`), or None
    when the flag is not given."""
    if model_args.head_learning_rate is None:
        return None
    names = getattr(model, "head_parameter_names", [])
    if not names:
        raise ValueError(f"--head_learning_rate: {model_args.model_name_or_path} holds every weight of "
                         f"{type(model).__name__}, so no weight would train at it; leave the flag out.")
    logger.info(f"--head_learning_rate {model_args.head_learning_rate} for the {len(names)} weights "
                f"{model_args.model_name_or_path} does not hold: {', '.join(names)}.")
    return dict.fromkeys(names, model_args.head_learning_rate)


# The saved config's record of the `--max_length` a model was trained and selected at (0: no limit). Not a RANConfig
# field: any config keeps an extra attribute through save_pretrained / from_pretrained (remote code too).
TRAINED_LENGTH = "max_length_trained"


def record_trained_length(config, max_length: int | None) -> None:
    """Write the length the model trains at (`--max_length`; None or 0: no limit) into its config, which its
    checkpoints and the saved model carry."""
    setattr(config, TRAINED_LENGTH, int(max_length or 0))


def _length(max_length: int | None) -> str:
    return f"{max_length} tokens per document" if max_length else "whole documents (no limit)"


def prediction_length(model_args: RANModelArguments, max_length: int | None, explicit: bool) -> int | None:
    """The `--max_length` to evaluate or predict at without training: the one the model of `--model_name_or_path` was
    trained at (its config's `max_length_trained`) unless `--max_length` is `explicit` on the command line, which
    wins. Logged either way. Returns the length (None: no limit)."""
    source = model_args.model_name_or_path
    config = AutoConfig.from_pretrained(source, trust_remote_code=model_args.trust_remote_code)
    trained = getattr(config, TRAINED_LENGTH, None)
    if trained is None:
        logger.info(f"{source} does not record the length it was trained at; reading {_length(max_length)} "
                    f"(--max_length).")
        return max_length
    trained = int(trained) or None
    if not explicit:
        logger.info(f"Reading {_length(trained)}, the length {source} was trained and selected at "
                    f"(config.{TRAINED_LENGTH}); pass --max_length to read another length.")
        return trained
    if max_length != trained:
        logger.warning(f"--max_length: reading {_length(max_length)}, but {source} was trained and selected at "
                       f"{_length(trained)}; its probabilities for documents longer than that differ from the ones "
                       f"its validation measured.")
    else:
        logger.info(f"Reading {_length(max_length)} (--max_length), the length {source} was trained at.")
    return max_length
