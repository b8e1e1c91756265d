# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The shipped pretrained checkpoint `pretrained/ran-books-small`: it loads through the Auto classes, fills masks
in a 5,000-token text with `pipeline("fill-mask")`, and predicts held-out book text far better than chance.

The held-out text is `tests/fixtures/heldout_book_excerpt.txt`, 4,966 word pieces from Anthony Trollope's "An Old
Man's Love" (Project Gutenberg, public domain), one of the ten books kept out of pretraining."""

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer, pipeline

import ran_hf


ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = str(ROOT / "pretrained" / "ran-books-small")
EXCERPT = (ROOT / "tests" / "fixtures" / "heldout_book_excerpt.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(CHECKPOINT)


@pytest.fixture(scope="module")
def masked_lm():
    return AutoModelForMaskedLM.from_pretrained(CHECKPOINT).eval()


def masked_token_accuracy(model, tokenizer, every: int = 8) -> tuple[float, int]:
    """Top-1 accuracy at every `every`-th word piece of the excerpt, all masked at once, in one forward pass."""
    input_ids = tokenizer(EXCERPT, return_tensors="pt")["input_ids"]
    positions = torch.arange(5, input_ids.shape[1] - 1, every)
    masked = input_ids.clone()
    masked[0, positions] = tokenizer.mask_token_id
    with torch.inference_mode():
        logits = model(input_ids=masked).logits
    correct = logits[0, positions].argmax(-1) == input_ids[0, positions]
    return correct.float().mean().item(), len(positions)


def test_auto_classes_load_every_pretrained_weight(masked_lm):
    assert type(masked_lm) is ran_hf.RANForMaskedLM
    assert masked_lm.config.hidden_size == 256 and masked_lm.config.vocab_size == 16000
    _, info = AutoModelForMaskedLM.from_pretrained(CHECKPOINT, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]

    classifier, info = AutoModelForSequenceClassification.from_pretrained(CHECKPOINT, num_labels=3,
                                                                          output_loading_info=True)
    assert type(classifier) is ran_hf.RANForSequenceClassification
    assert info["missing_keys"] and all(key.startswith(("classifier.", "ran.pooler.")) for key in info["missing_keys"])
    body = dict(masked_lm.ran.named_parameters())
    for name, parameter in classifier.ran.named_parameters():
        if name in body and not name.startswith("pooler."):
            assert torch.equal(parameter, body[name]), name


def test_masked_token_accuracy_on_held_out_text(masked_lm, tokenizer):
    accuracy, scored = masked_token_accuracy(masked_lm, tokenizer)
    assert scored == 621
    assert accuracy > 0.4  # 0.491 measured; the pretraining run's held-out accuracy was 0.401 at 15% masking
    torch.manual_seed(0)
    untrained = AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(CHECKPOINT)).eval()
    assert masked_token_accuracy(untrained, tokenizer)[0] < 0.05


def test_fill_mask_pipeline_on_a_5000_token_text(masked_lm, tokenizer):
    fill_mask = pipeline("fill-mask", model=masked_lm, tokenizer=tokenizer)
    input_ids = tokenizer(EXCERPT)["input_ids"]
    assert len(input_ids) == 4968
    for position, word in ((4001, "have"), (4012, "think")):
        assert tokenizer.convert_ids_to_tokens(input_ids[position]) == word
        masked = list(input_ids)
        masked[position] = tokenizer.mask_token_id
        predictions = fill_mask(tokenizer.decode(masked[1:-1]), top_k=5)
        assert predictions[0]["token_str"] == word, predictions


def remote_code_files() -> list[str]:
    """`modeling_ran.py` and every module it imports relatively, as `save_pretrained` copies them."""
    from transformers.dynamic_module_utils import get_relative_import_files

    modeling = Path(ran_hf.__file__).parent / "modeling_ran.py"
    return sorted({"modeling_ran.py", *(Path(f).name for f in get_relative_import_files(modeling))})


def test_the_remote_code_files_include_the_chain_runners():
    assert {"cell_chain.py", "chain_eager.py", "chain_compiled.py", "chain_cuda_graphs.py", "chain_while_loop.py",
            "cache_ran.py", "window_layout.py", "input_checks.py", "configuration_ran.py"} <= set(remote_code_files())


@pytest.mark.parametrize("name", remote_code_files())
def test_the_checkpoints_remote_code_is_the_packages(name):
    """`trust_remote_code=True` without ran_hf installed runs the folder's copies: they must be this package's code
    (copy `ran_hf/*.py` into the folder after changing the model)."""
    package = Path(ran_hf.__file__).parent
    assert (Path(CHECKPOINT) / name).read_text() == (package / name).read_text()
