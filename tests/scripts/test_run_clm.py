# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""run_clm.py end to end on a tiny corpus, its text-field errors and block grouping."""

import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from run_scripts import run_clm, run_mlm
from run_scripts.helpers import language_modeling
from script_data import TINY, write_jsonl, data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def test_clm(data_dir, tmp_path):
    out = tmp_path / "clm"
    results = run_clm.main(["--train_file", str(data_dir / "corpus.txt"), "--output_dir", str(out),
                            "--block_size", "64", "--per_device_train_batch_size", "4", "--num_train_epochs", "1",
                            "--validation_split_percentage", "20", *TINY])
    ppl = results["eval"]["perplexity"]
    assert np.isfinite(ppl) and ppl == pytest.approx(np.exp(results["eval"]["eval_loss"]))
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert model.config.is_decoder and model.config.eos_token_id == tok.sep_token_id
    assert model.config.use_cache  # saved for generation (Trainer turns it off while training)
    prompt = tok("the team", add_special_tokens=False, return_tensors="pt")
    generated = model.generate(**prompt, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert generated.shape[1] <= prompt["input_ids"].shape[1] + 5
    assert "perplexity" in (out / "README.md").read_text()


def test_lm_text_field_errors(tmp_path):
    path = write_jsonl(tmp_path / "lm.jsonl", [{"text": "a b c"}, {"body": "d e f"}])
    with pytest.raises(ValueError, match=r"lm\.jsonl', line 2: no field 'text'.*--text_column_name"):
        run_clm.main(["--train_file", path, "--output_dir", str(tmp_path / "o"), *TINY])
    with pytest.raises(ValueError, match=r"lm\.jsonl', line 1: no field 'body'"):
        run_mlm.main(["--train_file", path, "--text_column_name", "body", "--output_dir", str(tmp_path / "o"), *TINY])


def test_group_into_blocks():
    blocks = language_modeling.group_into_blocks([[5, 6, 7], [8, 9]], block_size=3, separator=[3])
    assert blocks == [[5, 6, 7], [3, 8, 9]]  # the 1-token tail [3] is dropped
    assert language_modeling.group_into_blocks([[5, 6, 7, 8, 9]], block_size=3) == [[5, 6, 7], [8, 9]]
