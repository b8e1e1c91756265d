# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The scripts' own dependencies, which `pip install -e .` leaves out (the `scripts` and `sentences` extras of
setup.cfg): a missing one is an error that names the package and the install command, not a bare
`ModuleNotFoundError`."""

from __future__ import annotations

import contextlib
import importlib

# the top-level module -> (the package on PyPI, the extras of setup.cfg that install it)
SCRIPT_DEPENDENCIES = {
    "sklearn": ("scikit-learn", "scripts"),
    "seqeval": ("seqeval", "scripts"),
    "pysbd": ("pysbd", "scripts,sentences"),
    "sentence_transformers": ("sentence-transformers", "scripts,sentences"),
    "filelock": ("filelock", "scripts,sentences"),
}


def missing_dependency_error(module: str, script: str | None = None) -> ModuleNotFoundError | None:
    """The error for a script dependency `module` that cannot be imported: it names the package, the script that
    needs it and the pip command that installs the scripts' dependencies. None for a module that is not one of them."""
    top = module.split(".", 1)[0]
    if top not in SCRIPT_DEPENDENCIES:
        return None
    package, extras = SCRIPT_DEPENDENCIES[top]
    needs = f"{script} needs" if script else "The scripts in run_scripts/ need"
    return ModuleNotFoundError(
        f"{needs} {package} (module '{top}'), one of the training scripts' dependencies that `pip install -e .` "
        f"leaves out. Install them from the repository's root with: pip install -e \".[{extras}]\" (from a wheel: "
        f"pip install \"ran_hf[{extras}]\").", name=top)


@contextlib.contextmanager
def script_dependencies(script: str | None = None):
    """Within the block, a failed import of a script dependency is `missing_dependency_error`'s error; other import
    errors pass through as they are."""
    try:
        yield
    except ModuleNotFoundError as error:
        replacement = missing_dependency_error(error.name or "", script)
        if replacement is None:
            raise
        raise replacement from error


def require_modules(script: str, *modules: str) -> None:
    """Import `modules` now, so that `script` stops before any work when one is missing (`script_dependencies`)."""
    with script_dependencies(script):
        for module in modules:
            importlib.import_module(module)
