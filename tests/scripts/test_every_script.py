# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""What every script shares: a missing file is a clear error naming it, and the product scripts have no
--model_type flag."""

import pytest

from run_scripts import run_classification, run_clm, run_mlm, run_ner, train_tokenizer
from script_data import TINY, data_dir  # noqa: F401 (data_dir: a fixture)


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def test_missing_file_errors(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        run_classification.main(["--train_file", missing, "--output_dir", str(tmp_path / "o"), *TINY])
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        run_mlm.main(["--train_file", str(tmp_path / "nope.txt"), "--output_dir", str(tmp_path / "o"), *TINY])
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        run_clm.main(["--train_file", str(tmp_path / "nope.txt"), "--output_dir", str(tmp_path / "o"), *TINY])
    with pytest.raises(FileNotFoundError, match="conll.txt"):
        run_ner.main(["--train_file", str(tmp_path / "conll.txt"), "--output_dir", str(tmp_path / "o"), *TINY])
    with pytest.raises(FileNotFoundError, match="x.txt"):
        train_tokenizer.main(["--train_files", str(tmp_path / "x.txt"), "--output_dir", str(tmp_path / "t")])


def test_model_type_is_not_a_flag_of_the_product_scripts(data_dir, tmp_path):
    """The BERT peer of the pretraining study is trained by research/pretraining, not by the product scripts."""
    for main, data in [(run_classification.main, str(data_dir / "train.jsonl.gz")),
                       (run_mlm.main, str(tmp_path / "x.txt")), (run_clm.main, str(tmp_path / "x.txt"))]:
        with pytest.raises(ValueError, match=r"not used by the HfArgumentParser: \['--model_type', 'bert'\]"):
            main(["--train_file", data, "--output_dir", str(tmp_path / "o"), "--model_type", "bert", *TINY])
