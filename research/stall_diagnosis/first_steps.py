"""Step-by-step view of the first training steps (where the stall is decided), for one or more variants.

    python -m research.stall_diagnosis.first_steps --data_dir DATA --pooling max mean --steps 30

Per step (on the fixed 16-document dev probe, eval mode): how alike the tokens of a document are after each
layer (`within_cos`), the spread across documents of the pooler's token part, and the norms of the memory-review
biases; at step 0 the five parameters with the largest gradient. Writes `research/stall_diagnosis/results/first_steps.json`.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from research.stall_diagnosis import probe


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", type=Path, required=True, help="Folder holding imdb/{train,test}.jsonl.gz.")
    parser.add_argument("--pooling", nargs="+", default=["max", "mean"])
    parser.add_argument("--review", nargs="+", default=["on"])
    parser.add_argument("--fix", nargs="+", default=["none"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--output", type=Path, default=probe.RESULTS / "first_steps.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data, vocab_size = probe.load_imdb(args.data_dir, 2000, 300, 512)
    probe_idx = np.arange(0, 300, 300 // 16)[:16]
    probe_batch = probe.batch_of([data["dev"]["ids"][i] for i in probe_idx])
    results = json.loads(args.output.read_text()) if args.output.is_file() else {}
    for review in args.review:
        for pooling in args.pooling:
            for fix in args.fix:
                name = f"{pooling}|review={review}|fix={fix}|seed={args.seed}|lr={args.lr}"
                model = probe.build_model(vocab_size, pooling, review == "on", fix, 0.02, args.seed)
                optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
                rng = np.random.default_rng(args.seed)
                order = rng.permutation(len(data["train"]["ids"]))
                rows = []
                for step in range(args.steps + 1):
                    stats = probe.activation_stats(model, probe_batch)
                    row = {"step": step,
                           "layer0.out_within": stats["layer0.out"]["within_cos"],
                           "layer1.y_within": stats["layer1.y"]["within_cos"],
                           "layer1.out_within": stats["layer1.out"]["within_cos"],
                           "pool_part_doc_std": stats["pool.pool_part_doc_std"],
                           "logits_doc_std": stats["logits.doc_std"]}
                    if review == "on":
                        for i, layer in enumerate(model.ran.layers):
                            mr = layer.memory_review
                            row[f"layer{i}.query_within"] = stats[f"layer{i}.query"]["within_cos"]
                            row[f"layer{i}.read_rms"] = stats[f"layer{i}.read"]["rms"]
                            row[f"layer{i}.gated_rms"] = stats[f"layer{i}.gated"]["rms"]
                            row[f"layer{i}.q_bias"] = float(mr.q.bias.detach().norm())
                            row[f"layer{i}.q_weight"] = float(mr.q.weight.detach().norm())
                    idx = order[step * 8: step * 8 + 8]
                    batch = probe.batch_of([data["train"]["ids"][i] for i in idx])
                    loss = F.cross_entropy(model(**batch).logits, torch.from_numpy(data["train"]["label"][idx]))
                    loss.backward()
                    row["loss"] = loss.item()
                    if step == 0:
                        norms = sorted(((float(p.grad.norm()), n) for n, p in model.named_parameters()
                                        if p.grad is not None), reverse=True)
                        row["top_grads"] = [[n, round(g, 4)] for g, n in norms[:5]]
                    rows.append(row)
                    print(name, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                results[name] = rows
                args.output.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
