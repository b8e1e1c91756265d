"""Every command-line entry point answers `--help` with its usage and exit status 0 (argparse formats help strings
with %-interpolation, so a bare "10% linear" in a help text crashes `--help` with a TypeError)."""

import importlib
import importlib.util
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
MODULES = ["run_scripts.run_classification", "run_scripts.run_clm", "run_scripts.run_mlm", "run_scripts.run_ner",
           "run_scripts.train_tokenizer", "research.compare_long_docs.__main__", "research.compare_long_docs.estimate",
           "research.recipe_selection.__main__", "research.compare_lm.__main__",
           "research.tfidf_baseline.tfidf_baseline", "research.stall_diagnosis.first_steps",
           "research.stall_diagnosis.probe", "research.pretraining.pack", "research.pretraining.device_pretrain",
           "research.pretraining.collect", "run_scripts.run_sentence_classification",
           "research.sentence_classification.make_splits", "research.sentence_classification.report"]
FILES = ["benchmarks/ab_forward.py", "benchmarks/benchmark.py", "benchmarks/export_compile.py",
         "research/pretraining/step_speed.py"]


def load(entry: str):
    if entry in MODULES:
        return importlib.import_module(entry)
    spec = importlib.util.spec_from_file_location(Path(entry).stem, REPO / entry)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("entry", MODULES + FILES)
def test_help_prints_usage_and_exits_0(entry, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(entry).main(["--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out
