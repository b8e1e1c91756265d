# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Helpers of the scripts in `run_scripts/`, one module per concern:

- `dependencies`: the scripts' own dependencies (the `scripts` extra), named with the install command when missing;
- `data_files`: reading .jsonl/.json/.csv/.tsv/.txt files (optionally gzipped) with clear errors;
- `tokenizer`: training and loading a WordPiece tokenizer for RAN, and the causal-LM prompt template;
- `model_args`: the model arguments every script shares and building a RAN from scratch or a checkpoint;
- `trainer_setup`: argument parsing with script defaults, logging, threads, checkpoints, the Trainer;
- `recipes`: named from-scratch recipes (RANConfig fields and training flags);
- `reports`: length statistics, markdown tables, model cards, metrics, results logs;
- `collapse`: telling a run that collapsed to one class (constant predictions, validation loss back at ln K);
- `language_modeling`: the data and the shared main of run_mlm.py and run_clm.py;
- `corpus`: a corpus of long documents in jsonl shards, streamed and cut into blocks that never cross documents;
- `pretraining`: run_mlm.py's streamed-corpus flags, fixed-mask validation, masking collator and masked accuracy.

Not a public API of ran_hf: it changes with the scripts.
"""
