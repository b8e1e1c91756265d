# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The scripts, comparisons and benchmark import their helpers the normal way and name no machine path: a user's
clone has neither this machine's folders nor a `shared/` folder next to the repository."""

import pathlib
import re

import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ["run_scripts", "research", "benchmarks"]
FORBIDDEN = {
    "a sys.path edit": re.compile(r"sys\.path\.(insert|append)|sys\.path\[:?\d*\]\s*="),
    "a machine path": re.compile(r"(?<![\w>)\]])(/work/|/opt/|/home/|/root/)"),  # not `<output_dir>/work/`
    "a folder outside the repository": re.compile(r"REPO_ROOT\.parent|parents\[2\]\s*/\s*\"shared\"|\.\./shared"),
}


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_sys_path_edits_or_machine_paths(folder):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, folder
    found = [f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}"
             for path in files for number, line in enumerate(path.read_text().splitlines(), start=1)
             for what, pattern in FORBIDDEN.items() if pattern.search(line)]
    assert not found, "\n".join(found)


def test_the_helper_package_is_importable_and_split_by_concern():
    from run_scripts.helpers import data_files, language_modeling, model_args, reports, tokenizer, trainer_setup

    assert callable(data_files.read_records) and callable(tokenizer.train_wordpiece_tokenizer)
    assert callable(model_args.build_model) and callable(trainer_setup.parse_args)
    assert callable(reports.write_model_card) and callable(language_modeling.main)
    assert not (ROOT / "run_scripts" / "utils_ran.py").exists()
