# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""benchmarks/ab_forward.py against this checkout itself: the two sides agree exactly, in every mode."""

from pathlib import Path

import pytest

from benchmarks import ab_forward

ROOT = str(Path(__file__).resolve().parents[2])
TINY = ["--other", ROOT, "--length", "40", "--hidden-size", "64", "--num-layers", "2", "--window-size", "16",
        "--rounds", "2"]


@pytest.mark.parametrize("mode", [[], ["--train"], ["--decode", "3"]])
def test_each_mode_times_both_sides_on_the_same_weights(mode, capsys):
    ab_forward.main([*TINY, *mode])
    printed = capsys.readouterr().out
    assert "max abs output difference 0.00e+00" in printed
    assert ("3 decoding steps" if mode[:1] == ["--decode"] else "training step" if mode else "forward") in printed
    assert "speed this/other:" in printed


def test_train_and_decode_are_refused_together():
    with pytest.raises(SystemExit):
        ab_forward.main([*TINY, "--train", "--decode", "2"])
