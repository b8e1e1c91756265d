# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The Trainer-based scripts of ran_hf (`python run_scripts/run_classification.py`, ...) and the helpers they share
(`run_scripts.helpers`, also used by `research/` and `benchmarks/`). Installed with the package (`pip install -e .`)
so the scripts import their helpers without editing `sys.path`."""
