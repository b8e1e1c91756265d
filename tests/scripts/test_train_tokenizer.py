# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""train_tokenizer.py: WordPiece tokenizers from text, jsonl and csv files."""

import pytest
from transformers import AutoTokenizer

from run_scripts import train_tokenizer
from run_scripts.helpers import tokenizer as tokenizer_helpers
from script_data import data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def test_train_tokenizer(data_dir, tmp_path):
    out = tmp_path / "tok"
    train_tokenizer.main(["--train_files", str(data_dir / "corpus.txt"), str(data_dir / "train.jsonl.gz"),
                          "--vocab_size", "300", "--output_dir", str(out)])
    tok = AutoTokenizer.from_pretrained(out)
    assert [tok.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]] == [0, 1, 2, 3, 4]
    assert tok.pad_token_id == 0 and tok.mask_token == "[MASK]"
    assert tok.model_max_length > 10**9  # no 512 cap
    ids = tok("Goal " * 3000)["input_ids"]
    assert len(ids) == 3002 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.decode(tok("The TEAM Won")["input_ids"], skip_special_tokens=True) == "the team won"
    assert (out / "README.md").is_file()


def test_wordpiece_cased_option():
    tok = tokenizer_helpers.train_wordpiece_tokenizer(["Paris Paris London London"] * 3, vocab_size=100,
                                                      lowercase=False)
    assert tok.convert_ids_to_tokens(tok("Paris")["input_ids"])[1:-1] != tok.convert_ids_to_tokens(
        tok("paris")["input_ids"])[1:-1]
