# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Regression tests of script defects: the causal-LM tokenizer's template, the shared torch thread default, and a
user's --save_strategy against the script's best-model default; prediction order under
length-grouped training."""

import logging
import random

import numpy as np
import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models
from transformers import (AutoTokenizer, DataCollatorWithPadding, PreTrainedTokenizerFast, Trainer, TrainingArguments,
                          pipeline)

from conftest import tiny_config
from ran_hf import RANForSequenceClassification  # importing ran_hf registers RAN with the Auto classes
from run_scripts import run_classification, run_clm, run_mlm, run_ner
from run_scripts.helpers import model_args, trainer_setup


TINY = ["--hidden_size", "16", "--num_hidden_layers", "1", "--num_attention_heads", "2", "--attention_head_size", "8",
        "--window_size", "16", "--min_window_size", "4", "--tokenizer_vocab_size", "200", "--tokenizer_min_frequency",
        "1", "--hidden_dropout_prob", "0", "--attention_probs_dropout_prob", "0", "--use_cpu", "--report_to", "none",
        "--disable_tqdm", "True", "--dataloader_pin_memory", "False"]
WORDS = "the president said that a team won the match after the vote in the senate on the economy".split()


pytestmark = pytest.mark.usefixtures("restore_script_globals")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("lm") / "corpus.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(15, 40))) for _ in range(40)))
    return str(path)


def test_clm_tokenizer_encodes_a_prompt_the_way_training_did(corpus, tmp_path):
    """The saved tokenizer encodes a prompt as training saw text, not wrapped in `[CLS] ... [SEP]` with `[SEP]` the
    eos token (which would ask the text-generation pipeline to continue after an end of document)."""
    out = tmp_path / "clm"
    run_clm.main(["--train_file", corpus, "--output_dir", str(out), "--block_size", "64", "--max_steps", "2",
                  "--validation_split_percentage", "0", *TINY])
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.eos_token_id == tok.sep_token_id == tok.bos_token_id
    words = tok("the president said", add_special_tokens=False)["input_ids"]
    generator = pipeline("text-generation", model=str(out))
    prompt_ids = generator.preprocess("the president said")["input_ids"][0].tolist()
    # training: every document is preceded by [SEP] and the prompt's text is not followed by an end of document
    assert prompt_ids == [tok.sep_token_id, *words]
    assert tok.cls_token_id not in prompt_ids
    output = generator("the president said", max_new_tokens=4, do_sample=False, return_tensors=True)
    assert output[0]["generated_token_ids"][: len(prompt_ids)] == prompt_ids
    assert len(output[0]["generated_token_ids"]) > len(prompt_ids)

    # the training stream has the same layout: [SEP] doc [SEP] doc ...
    from run_scripts.helpers import language_modeling

    data_args = language_modeling.LMDataArguments(block_size=10_000)
    docs = ["the team won", "the vote"]
    (block,) = language_modeling.lm_datasets({"train": docs}, tok, data_args, causal=True)[0]["train"]["input_ids"]
    sep = tok.sep_token_id
    assert block == [sep, *tok(docs[0], add_special_tokens=False)["input_ids"], sep,
                     *tok(docs[1], add_special_tokens=False)["input_ids"], sep]


def test_every_script_defaults_to_the_same_thread_count(corpus, tmp_path):
    """Every script, run_mlm.py and run_clm.py included, defaults to one torch thread."""
    assert model_args.RANModelArguments().torch_threads == model_args.DEFAULT_TORCH_THREADS == 1
    for script in (run_classification, run_ner):
        assert script.ModelArguments().torch_threads == model_args.DEFAULT_TORCH_THREADS
    for script in (run_mlm, run_clm):
        torch.set_num_threads(2)
        script.main(["--train_file", corpus, "--output_dir", str(tmp_path / script.__name__), "--block_size", "64",
                     "--max_steps", "1", "--validation_split_percentage", "0", *TINY])
        assert torch.get_num_threads() == 1, script.__name__
    help_text = model_args.RANModelArguments.__dataclass_fields__["torch_threads"].metadata["help"]
    assert "0 keeps torch's default" in help_text


def test_save_strategy_no_wins_over_the_best_model_default(tmp_path, caplog):
    """`--save_strategy no` is accepted: it turns off the script's own --load_best_model_at_end default."""
    out = tmp_path / "cls"
    with caplog.at_level(logging.WARNING, logger="run_scripts"):
        results = run_classification.main(["--recipe", "from-scratch", "--save_strategy", "no",
                                           "--max_train_samples", "24",
                                           "--max_predict_samples", "4", "--max_length", "256", "--max_steps", "2",
                                           "--output_dir", str(out), *TINY])
    assert "load_best_model_at_end is off" in caplog.text
    assert results["test"]["test_samples"] == 4
    assert not any(p.name.startswith("checkpoint-") for p in out.iterdir())
    assert (out / "model.safetensors").is_file()  # the final model is still saved


@pytest.mark.parametrize("user, kept", [
    (["--save_strategy", "no"], False),
    (["--eval_strategy=no"], False),
    (["--eval_strategy", "steps"], False),  # saving stays epoch-wise: the schedules differ
    (["--eval_strategy", "steps", "--save_strategy", "steps"], True),
    (["--save_strategy", "no", "--load_best_model_at_end"], True),  # asked for explicitly: Transformers decides
    ([], True),
])
def test_contradicted_defaults(user, kept):
    defaults = trainer_setup.trainer_defaults("o", "1e-3", "1", "2", "2", "1", "0", best_metric="f1")
    resolved = trainer_setup.drop_contradicted_defaults(defaults, user)
    assert ("--load_best_model_at_end" in resolved) == kept
    assert ("--metric_for_best_model" in resolved) == kept
    assert resolved[:4] == defaults[:4]


def test_prediction_order_survives_length_grouped_training(tmp_path):
    """The scripts train with `train_sampling_strategy=group_by_length`, which Trainer also applies to evaluation and
    prediction: its predictions then come back in a length-grouped order, and the scripts' per-document results
    (test_predictions.jsonl, the <= / > 512-token scores) would be paired with the wrong documents. RANTrainer reads
    evaluation data in order."""
    torch.manual_seed(0)
    model = RANForSequenceClassification(tiny_config(num_labels=3)).eval()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1},
                                                                                    unk_token="[UNK]")),
                                        pad_token="[PAD]")
    lengths = [3, 17, 5, 30, 9, 2, 24, 11]
    rows = {"input_ids": [[2 + (i * 7 + j) % 45 for j in range(n)] for i, n in enumerate(lengths)]}
    rows["attention_mask"] = [[1] * n for n in lengths]
    dataset = Dataset.from_dict(rows)
    with torch.no_grad():
        expected = torch.cat([model(input_ids=torch.tensor([ids])).logits for ids in rows["input_ids"]]).numpy()

    args = TrainingArguments(str(tmp_path), per_device_eval_batch_size=2, train_sampling_strategy="group_by_length",
                             use_cpu=True, report_to="none", dataloader_pin_memory=False)

    def predictions(trainer_class):
        trainer = trainer_class(model=model, args=args, processing_class=tokenizer,
                                data_collator=DataCollatorWithPadding(tokenizer))
        return trainer.predict(dataset).predictions

    torch.testing.assert_close(predictions(trainer_setup.RANTrainer), expected, rtol=1e-4, atol=1e-5)
    # the plain Trainer reorders them (if it stops doing so, RANTrainer's override can go)
    assert not np.allclose(predictions(Trainer), expected, atol=1e-3)


def test_config_overrides_name_pooler_mode_for_the_replaced_pooling_fields():
    arguments = model_args.RANModelArguments(config_overrides="pooler_mode=token_mean,cell_pooling=mean")
    assert arguments.parsed_config_overrides() == {"pooler_mode": "token_mean", "cell_pooling": "mean"}
    for old in ("pooler_type=average", "pooler_pooling=mean"):
        with pytest.raises(ValueError, match="replaced by pooler_mode"):
            model_args.RANModelArguments(config_overrides=old).parsed_config_overrides()
