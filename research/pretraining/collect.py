# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Turn the folder a device call of `device_pretrain` returned into Hugging Face model folders.

    python -m research.pretraining.collect RUN_DIR --dest pretrained --names ran=ran-books-small bert=bert-books-small

For each model of `RUN_DIR/run.json`: the weight shards are joined and loaded into the model class (tied weights
checked), the dropout is set for fine-tuning (`--finetune_dropout`), and `save_pretrained` writes the folder with
the study tokenizer, `training_run.json` (the model's part of run.json: configuration of the run, validation curve,
training losses) and a model card (data, tokens seen, wall time, device, curve, licence). The RAN folder loads with
`AutoModelForMaskedLM` / `AutoModelForSequenceClassification` after `import ran_hf`; the BERT folder is a plain
`BertForMaskedLM`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, ModernBertConfig, ModernBertForMaskedLM

import ran_hf
from research.pretraining.device_pretrain import join_parts


STUDY = Path(__file__).resolve().parent
CLASSES = {"ran": (ran_hf.RANConfig, ran_hf.RANForMaskedLM), "bert": (BertConfig, BertForMaskedLM),
           "modernbert": (ModernBertConfig, ModernBertForMaskedLM)}
DROPOUT_FIELDS = {"ran": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
                  "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob"),
                  "modernbert": ("attention_dropout", "embedding_dropout", "mlp_dropout")}
TITLES = {"ran": "RAN masked language model, pretrained on public-domain books",
          "bert": "BERT masked language model (RAN's pretraining peer), pretrained on public-domain books",
          "modernbert": "ModernBERT masked language model (RAN's pretraining peer with rotary positions), pretrained "
                        "on public-domain books"}


def load_model(run_dir: Path, name: str, record: dict, dropout: float | None) -> torch.nn.Module:
    """The model of `record` with the weights of its shards; every parameter not in the shards must be tied to one
    that is (the LM decoder to the word embeddings)."""
    config_class, model_class = CLASSES[name]
    config = config_class.from_dict(record["config"])
    if dropout is not None:
        for field in DROPOUT_FIELDS[name]:
            setattr(config, field, dropout)
    state = {}
    for shard in record["weights"]:
        state.update(load_file(str(run_dir / shard)))
    state = join_parts(state)
    model = model_class(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise ValueError(f"{run_dir}: {name} shards hold weights the model does not have: {unexpected}.")
    model.tie_weights()
    loaded = {tensor.data_ptr() for key, tensor in model.state_dict().items() if key in state}
    untied = [key for key in missing if model.state_dict()[key].data_ptr() not in loaded]
    if untied:
        raise ValueError(f"{run_dir}: {name} shards lack {untied}, which are not tied to any loaded weight.")
    return model.eval()


def curve_table(curve: list[dict]) -> str:
    rows = ["| tokens seen | step | masked-token loss | masked-token accuracy | minute |",
            "| ---: | ---: | ---: | ---: | ---: |"]
    rows += [f"| {c['tokens'] / 1e6:.1f} M | {c['step']} | {c['loss']:.4f} | {c['accuracy']:.4f} | "
             f"{c['elapsed_s'] / 60:.1f} |" for c in curve]
    return "\n".join(rows)


def model_card(name: str, folder_name: str, run: dict, record: dict, saved_config) -> str:
    payload, args = run["payload"], run["args"]
    config = record["config"]
    final = record["curve"][-1] if record.get("curve") else None
    in_domain = ", ".join(payload.get("in_domain") or []) or "none"
    load = ("import ran_hf  # registers RAN with the Auto classes (or pass trust_remote_code=True to both "
            "from_pretrained calls)\n" if name == "ran" else "")
    load += "from transformers import AutoModelForMaskedLM, AutoTokenizer\n\n"
    load += (f'model = AutoModelForMaskedLM.from_pretrained("{folder_name}")\n'
             f'tokenizer = AutoTokenizer.from_pretrained("{folder_name}")')
    architecture = (f"RAN, hidden size {config['hidden_size']}, {config['num_hidden_layers']} layers of "
                    f"{config['num_attention_heads']} x {config['attention_head_size']} heads, window "
                    f"{config['window_size']}, `memory_review_residual`, masked-only logits in training "
                    f"(`sparse_prediction`: with `labels`, the logits of the labelled positions only)"
                    if name == "ran" else
                    f"{'BERT' if name == 'bert' else 'ModernBERT'}, hidden size {config['hidden_size']}, "
                    f"{config['num_hidden_layers']} layers of {config['num_attention_heads']} heads, feed-forward "
                    f"{config['intermediate_size']}, {config['max_position_embeddings']} positions")
    lines = [
        "---", "license: apache-2.0", "language: en", "library_name: transformers", "tags:", "- fill-mask",
        "- long-documents" if name == "ran" else "- ran-peer", "---", "", f"# {TITLES[name]}", "",
        f"{architecture}; vocabulary {config['vocab_size']:,} (uncased WordPiece, "
        f"`research/pretraining/tokenizer-16k`). Trained from random weights with "
        f"`research/pretraining/device_pretrain.py` of ran_hf, blocks of {record['block_size']:,} tokens.", "",
        "```python", load, "```", "",
        "## Data", "",
        f"{payload['train_tokens']:,} word pieces of text in {payload['train_books']} documents: books of Project "
        f"Gutenberg (public domain in the USA; `gutenberg-more` train split and `gutenberg`), in-domain training "
        f"text: {in_domain} (train split only; no test text). Held out: {payload['validation']['books']} books, "
        f"scored on {payload['validation']['spans']} spans of {payload['validation']['span_body']:,} word pieces "
        f"masked once (15%, BERT's 80/10/10), {payload['validation']['scored_tokens']:,} scored tokens; RAN and the "
        "BERT peer are scored on exactly the same masked tokens.", "",
        "## Training", "",
        f"{record['tokens_seen']:,} tokens seen ({record['passes']:.2f} passes over the corpus) in {record['steps']} "
        f"steps of up to {record['batch_size']} blocks; {run['train_elapsed_s']:.0f} s of wall time shared "
        f"with the {'peer' if name == 'ran' else 'RAN model'} on one {run['device']} "
        f"({record['gpu_seconds']:.0f} s of it this model's steps), bf16 autocast: {args['bf16']}. AdamW (0.9, 0.98), peak learning rate "
        f"{args['learning_rate'] if name == 'ran' else args.get('bert_learning_rate', args['learning_rate']):g}, warm-up over the first {args['warmup_fraction']:.0%} of the wall budget, "
        f"constant, linear decay to 0 over the last {args['decay_fraction']:.0%}; weight decay "
        f"{args['weight_decay']:g}, gradient clipping {args['max_grad_norm']:g}, dropout {args['dropout']:g} in "
        f"pretraining ({getattr(saved_config, DROPOUT_FIELDS[name][0]):g} in this folder's config, for fine-tuning). torch "
        f"{run['torch']}, transformers {run['transformers']}.", "",
        "## Validation curve", "",
        "Masked-token loss and accuracy on the held-out spans:", "", curve_table(record.get("curve", [])), "",
    ]
    if final:
        lines += [f"Final: loss {final['loss']:.4f}, accuracy {final['accuracy']:.4f}.", ""]
    if record.get("failed"):
        lines += [f"Training of this model stopped early with an error:\n\n```\n{record['failed']}\n```", ""]
    lines += ["## Licence", "",
              "Weights: Apache-2.0, as ran_hf. Training text: Project Gutenberg books (public domain in the USA; "
              "the PG licence header and footer stripped)"
              + (f", plus the training split of {in_domain} (see the data README of ran_hf for their licences)."
                 if in_domain != "none" else "."), ""]
    return "\n".join(lines)


def collect(run_dir: Path, dest: Path, names: dict[str, str], tokenizer: str = str(STUDY / "tokenizer-16k"),
            finetune_dropout: float | None = 0.1) -> dict[str, Path]:
    run = json.loads((run_dir / "run.json").read_text())
    written = {}
    for name, record in run["models"].items():
        if name not in names or not record.get("weights"):
            continue
        folder = dest / names[name]
        model = load_model(run_dir, name, record, finetune_dropout)
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
        run_part = {key: value for key, value in run.items() if key != "models"}
        (folder / "training_run.json").write_text(json.dumps({**run_part, "model": record}, indent=1) + "\n")
        (folder / "README.md").write_text(model_card(name, str(folder), run, record, model.config))
        written[name] = folder
        print(f"{name}: {folder} ({record['tokens_seen']:,} tokens seen)")
    return written


def main(argv=None) -> dict[str, Path]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="The folder the device call returned (run.json, shards, log.txt).")
    parser.add_argument("--dest", default="pretrained")
    parser.add_argument("--names", nargs="+", default=["ran=ran-books-small", "bert=bert-books-small"],
                        help="model=folder pairs; a model not named is skipped.")
    parser.add_argument("--tokenizer", default=str(STUDY / "tokenizer-16k"))
    parser.add_argument("--finetune_dropout", type=float, default=0.1,
                        help="Dropout written into the saved configs (fine-tuning starts from them).")
    args = parser.parse_args(argv)
    names = dict(pair.split("=", 1) for pair in args.names)
    return collect(Path(args.run_dir), Path(args.dest), names, args.tokenizer, args.finetune_dropout)


if __name__ == "__main__":
    main()
