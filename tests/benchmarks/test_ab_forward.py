# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""benchmarks/ab_forward.py against this checkout itself: the two sides agree exactly, in every mode. Each run is its
own process: loading the other checkout registers its classes with the Auto classes, in place of ran_hf's."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--other", str(ROOT), "--length", "40", "--hidden-size", "64", "--num-layers", "2", "--window-size", "16",
        "--rounds", "2"]


def run(*flags):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ab_forward.py"), *TINY, *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("mode", [[], ["--train"], ["--decode", "3"]])
def test_each_mode_times_both_sides_on_the_same_weights(mode):
    done = run(*mode)
    assert done.returncode == 0, done.stderr
    assert "max abs output difference 0.00e+00" in done.stdout
    assert ("3 decoding steps" if mode[:1] == ["--decode"] else "training step" if mode else "forward") in done.stdout
    assert "speed this/other:" in done.stdout


def test_train_and_decode_are_refused_together():
    done = run("--train", "--decode", "2")
    assert done.returncode == 2 and "--train and --decode time different things" in done.stderr


def test_the_compiled_chain_is_timed_against_the_eager_one():
    done = run("--other-chain", "compiled", "--length", "80")  # 5 windows: a block of 4 and one window
    assert done.returncode == 0, done.stderr
    difference = float(done.stdout.split("max abs output difference ")[1].split()[0])
    assert difference < 1e-4 and "speed this/other:" in done.stdout
