"""Speed and memory benchmarks of ran_hf (run from the repository root)."""
