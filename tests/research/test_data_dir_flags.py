# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The comparisons read their data only from --data_dir: without it they stop with an error that says what the folder
must hold and where the data comes from (no default path outside the repository)."""

import pytest

from research.compare_lm import __main__ as compare_lm


def test_compare_lm_needs_a_data_dir(tmp_path):
    with pytest.raises(ValueError, match=r"--data_dir is required.*WikiText-2.*wiki\.train\.docshuf\.tokens"):
        compare_lm.main(["--output_dir", str(tmp_path / "out")])
    with pytest.raises(ValueError, match=r"--data_dir is required.*Gutenberg.*books-"):
        compare_lm.main(["--corpus", "gutenberg", "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
