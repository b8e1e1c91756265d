# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Benchmark drivers (a regular package, so `benchmarks.*` resolves to this folder before any installed namesake)."""
