# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""A scripts dependency that is not installed (`pip install -e .` without the `scripts` extra) stops a script with an
error naming the package and the install command, simulated by blocking the module (`sys.modules[name] = None`)."""

import importlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from run_scripts.helpers import classification, dependencies, reports


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL = 'pip install -e ".[scripts]"'


def test_the_classification_script_without_sklearn_says_what_to_install(tmp_path):
    blocked = ("import runpy, sys; sys.modules['sklearn'] = None; "
               f"sys.argv = ['run_classification.py', '--output_dir', {str(tmp_path)!r}]; "
               "runpy.run_path('run_scripts/run_classification.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", blocked], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0
    assert last.startswith("ModuleNotFoundError: run_classification.py needs scikit-learn (module 'sklearn')"), last
    assert INSTALL in last
    assert not os.listdir(tmp_path)  # it stopped before any work


def test_the_ner_script_without_seqeval_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "seqeval", None)
    monkeypatch.setitem(sys.modules, "seqeval.metrics", None)
    monkeypatch.delitem(sys.modules, "run_scripts.run_ner", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r"run_ner\.py needs seqeval .*" + re.escape(INSTALL)):
        importlib.import_module("run_scripts.run_ner")


@pytest.mark.usefixtures("restore_script_globals")
def test_the_sentence_script_without_pysbd_says_what_to_install(monkeypatch, tmp_path):
    from run_scripts import run_sentence_classification

    monkeypatch.setitem(sys.modules, "pysbd", None)
    with pytest.raises(ModuleNotFoundError, match=r'run_sentence_classification\.py needs pysbd .*'
                                                  r'pip install -e "\.\[scripts,sentences\]"'):
        run_sentence_classification.main(["--output_dir", str(tmp_path)])


def test_the_shared_helpers_name_the_install_command_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)
    monkeypatch.setitem(sys.modules, "sklearn.model_selection", None)
    with pytest.raises(ModuleNotFoundError, match=r"need scikit-learn .*pip install"):
        reports.classification_scores(np.array([0, 1]), np.array([0, 1]))
    with pytest.raises(ModuleNotFoundError, match=r"need scikit-learn .*pip install"):
        classification.validation_indices(np.array([0, 1] * 10), 10, 0, 2)


def test_other_import_errors_pass_through_unchanged():
    with pytest.raises(ModuleNotFoundError, match="No module named 'no_such_module_here'") as caught:
        dependencies.require_modules("x.py", "no_such_module_here")
    assert caught.value.name == "no_such_module_here"
