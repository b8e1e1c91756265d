"""Why the full RAN stalls at chance from scratch: instrumented short training runs on an IMDB dev probe.

One run = one (variant, fix, recipe, seed): a width-128, 2-layer RAN classifier (4 heads of 32, window 128, the
compare_long_docs setup) trained for `--steps` AdamW steps of 8 documents cut to 512 tokens, with per-module
gradient norms and activation statistics logged every `--stats_every` steps and dev accuracy at the end (and every
`--eval_every` steps). Results are appended to a JSONL file; a run already there is skipped (resumable).

    python -m research.stall_diagnosis.probe --data_dir DATA --pooling max mean --review on off --seeds 0 1 2 --steps 200

Candidate fixes (the residual is the config option `memory_review_residual`; the memory review's internals are
recorded with forward hooks that leave the computation untouched):
  none          the authors' layer.
  residual      `RANConfig(memory_review_residual=True)`: memory review output `norm(o + GLU(q) + y)`, the layer
                input y (the window attention's token output) added before the norm.
  zero_o        memory review output projection `o` initialized to zero (weight and bias), so the review starts as
                `norm(GLU(q))` and its cell-read part grows from zero.
  init_scale    every kernel initialized with std `--init_std` instead of 0.02.
The pooling of the cell transform is `--pooling`; the recipe is `--lr`, `--warmup` (fraction of steps),
`--schedule` (constant or linear decay), `--batch_size`.
"""

import argparse
import gzip
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ran_hf import RANConfig, RANForSequenceClassification
from ran_hf import modeling_ran

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
IMDB_TOKENIZER = REPO / "research" / "compare_long_docs" / "tokenizers" / "imdb" / "tokenizer.json"
FIXES = ("none", "residual", "zero_o", "init_scale")
DEFAULT_TRAIN_SIZE, DEFAULT_DEV_SIZE = 2000, 300


# ----------------------------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------------------------


def load_imdb(data_dir: Path, train_size: int, dev_size: int, max_length: int):
    """Fixed samples of IMDB *train* (seed 0): `train_size` training and `dev_size` dev documents (disjoint,
    stratified), tokenized with the committed WordPiece tokenizer and cut to `max_length` ([CLS] ... [SEP])."""
    from tokenizers import Tokenizer

    path = data_dir / "imdb" / "train.jsonl.gz"
    if not path.is_file():
        raise FileNotFoundError(f"--data_dir: {path} does not exist (pass the shared data folder).")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    labels = np.array([r["label"] for r in rows])
    rng = np.random.default_rng(0)
    picked = {"train": [], "dev": []}
    for label in (0, 1):
        members = rng.permutation(np.flatnonzero(labels == label))
        picked["dev"].extend(members[: dev_size // 2])
        picked["train"].extend(members[dev_size // 2: dev_size // 2 + train_size // 2])
    tokenizer = Tokenizer.from_file(str(IMDB_TOKENIZER))
    tokenizer.no_truncation()
    sep = tokenizer.token_to_id("[SEP]")
    out = {}
    for split, idx in picked.items():
        idx = np.sort(np.array(idx))
        encoded = tokenizer.encode_batch([rows[i]["text"].replace("<br />", "\n") for i in idx])
        ids = [e.ids[: max_length - 1] + [sep] if len(e.ids) > max_length else e.ids for e in encoded]
        out[split] = {"ids": ids, "label": labels[idx]}
    return out, tokenizer.get_vocab_size()


def batch_of(ids: list[list[int]]) -> dict:
    width = max(len(r) for r in ids)
    input_ids = torch.tensor([r + [0] * (width - len(r)) for r in ids])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


# ----------------------------------------------------------------------------------------------------------------------
# the candidate fixes, and hooks that record the memory review's internals
# ----------------------------------------------------------------------------------------------------------------------


class Recorder:
    """Holds the latest internals of every layer's memory review while `active`."""

    def __init__(self):
        self.active = False
        self.values: dict[str, torch.Tensor] = {}

    def put(self, name: str, value: torch.Tensor):
        if self.active:
            self.values[name] = value.detach()


RECORDER = Recorder()


def record_layout(layer, args, kwargs):
    """Forward pre-hook of a RANLayer: the (B, n*C) mask of real tokens on the window grid."""
    RECORDER.put("grid_mask", kwargs["layout"].token_mask.flatten(1, 2))


def record_review(layer_idx: int):
    """Forward hook of a RANMemoryReview: its input y and the parts of its output, recomputed from its own weights
    on the recorded input (eqs. 8-9: `norm(act(o(P v)) + GLU(act(q(y))) [+ y]`). Only while the recorder is active
    (the eval-mode probe batch): training runs ran_hf's computation untouched."""

    def hook(review, args, output):
        if not RECORDER.active:
            return
        tokens, keys, values, cell_mask = args[:4]
        query = review.act(review.q(tokens))
        scores = torch.matmul(query, keys.transpose(-1, -2)) / math.sqrt(query.shape[-1])
        scores = scores.masked_fill(~cell_mask, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1) * cell_mask.to(query.dtype)
        tag = f"layer{layer_idx}"
        RECORDER.put(f"{tag}.y", tokens)
        RECORDER.put(f"{tag}.query", query)
        RECORDER.put(f"{tag}.read", review.act(review.o(torch.matmul(probs, values))))
        RECORDER.put(f"{tag}.gated", review.glu(query))
        RECORDER.put(f"{tag}.probs", probs)

    return hook


def record_unreviewed(layer_idx: int):
    """Forward pre-hook of the output norm of a layer without memory review: its input y, as (B, n*C, D)."""

    def hook(norm, args):
        RECORDER.put(f"layer{layer_idx}.y", args[0].flatten(1, 2))

    return hook


def build_model(vocab_size: int, pooling: str, review: bool, fix: str, init_std: float, seed: int):
    torch.manual_seed(seed)
    config = RANConfig(vocab_size=vocab_size, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       attention_head_size=32, window_size=128, num_labels=2, pooler_mode=f"cell_{pooling}",
                       use_memory_review=review, memory_review_residual=review and fix == "residual",
                       initializer_range=init_std if fix == "init_scale" else 0.02)
    model = RANForSequenceClassification(config)
    for layer in model.ran.layers:  # hooks on these instances only; they read, never change, the computation
        layer.register_forward_pre_hook(record_layout, with_kwargs=True)
        if review:
            layer.memory_review.register_forward_hook(record_review(layer.layer_idx))
        else:
            layer.output_norm.register_forward_pre_hook(record_unreviewed(layer.layer_idx))
    if fix == "zero_o" and review:
        with torch.no_grad():
            for layer in model.ran.layers:
                layer.memory_review.o.weight.zero_()
                layer.memory_review.o.bias.zero_()
    return model


# ----------------------------------------------------------------------------------------------------------------------
# measurements
# ----------------------------------------------------------------------------------------------------------------------

GROUPS = ("embeddings", "layer0.window_attention", "layer0.cell", "layer0.memory_review", "layer1.window_attention",
          "layer1.cell", "layer1.memory_review", "pooler.cell_part", "pooler.pooling_dense", "classifier")


def group_of(name: str) -> str:
    if name.startswith("ran.embeddings"):
        return "embeddings"
    if name.startswith("ran.layers."):
        index, rest = name.split(".")[2], name.split(".", 3)[3]
        if rest.startswith("window_block"):
            return f"layer{index}.window_attention"
        if rest.startswith("memory_review") or rest.startswith("output_norm"):
            return f"layer{index}.memory_review"
        return f"layer{index}.cell"
    if name.startswith("ran.pooler.pooling_dense"):
        return "pooler.pooling_dense"
    if name.startswith("ran.pooler"):
        return "pooler.cell_part"
    return "classifier"


def grad_norms(model) -> dict:
    sums: dict[str, float] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            sums[group_of(name)] = sums.get(group_of(name), 0.0) + float(p.grad.float().square().sum())
    return {g: math.sqrt(v) for g, v in sums.items()}


def rms(x: torch.Tensor) -> float:
    return float(x.float().square().mean().sqrt())


def token_stats(tokens: torch.Tensor, mask: torch.Tensor) -> dict:
    """tokens (B, N, D), mask (B, N): how alike the tokens of one document are (mean cosine to the document's
    mean direction, `within_cos`), how alike documents are (cosine between document means, `across_cos`)."""
    unit = F.normalize(tokens.float(), dim=-1) * mask[..., None]
    count = mask.sum(1, keepdim=True).clamp(min=1)
    doc_mean = unit.sum(1) / count
    within = float((doc_mean.norm(dim=-1) ** 2).mean())  # = mean pairwise cosine of a doc's tokens (incl. self)
    doc_unit = F.normalize(doc_mean, dim=-1)
    sim = doc_unit @ doc_unit.T
    off = ~torch.eye(len(sim), dtype=torch.bool)
    return {"within_cos": within, "across_cos": float(sim[off].mean())}


@torch.no_grad()
def activation_stats(model, probe: dict) -> dict:
    """Statistics of one eval-mode forward of the fixed probe batch (16 dev documents)."""
    model.eval()
    RECORDER.active, RECORDER.values = True, {}
    out = model.ran(**probe, output_hidden_states=True)
    RECORDER.active = False
    mask = probe["attention_mask"].bool()
    stats = {}
    for i, hidden in enumerate(out.hidden_states[1:]):
        stats[f"layer{i}.out"] = token_stats(hidden, mask)
    grid_mask = RECORDER.values.pop("grid_mask")
    for name, value in RECORDER.values.items():
        if name.endswith(".probs"):
            p = value.float().clamp(min=1e-12)
            stats[name] = {"entropy": float(-(p * p.log()).sum(-1)[grid_mask].mean()),
                           "max_prob": float(value.amax(-1)[grid_mask].mean())}
        elif value.dim() == 3:
            stats[name] = {"rms": rms(value[grid_mask]), **token_stats(value, grid_mask)}
    layer = model.ran.layers[-1]
    if model.config.use_memory_review:
        read, gated = RECORDER.values[f"layer{layer.layer_idx}.read"], RECORDER.values[f"layer{layer.layer_idx}.gated"]
        # share of the review's pre-norm signal that varies across the tokens of a document
        for part, value in (("read", read), ("gated", gated)):
            m = grid_mask
            centred = value - (value * m[..., None]).sum(1, keepdim=True) / m.sum(1)[:, None, None]
            stats[f"last_review.{part}_token_varying_rms"] = rms(centred[m])
    tokens = out.last_hidden_state
    pooler = model.ran.pooler
    if model.config.pooler_mode == "cell_max":
        pooled = modeling_ran.masked_max(tokens, mask)
        argmax = tokens.masked_fill(~mask[..., None], -1e9).argmax(1)  # (B, D)
        stats["pool.distinct_argmax_share"] = float(np.mean([len(set(a.tolist())) / a.numel() for a in argmax]))
        lengths = mask.sum(1)
        stats["pool.argmax_at_special_share"] = float(((argmax == 0) | (argmax == lengths[:, None] - 1)).float().mean())
    else:
        pooled = modeling_ran.masked_mean(tokens, mask)
    cell_part = pooler.cell_glu(pooler.act(pooler.cell_dense(out.last_cell)))
    pool_part = pooler.pooling_dense(pooled)
    stats["pool.pooled"] = {"rms": rms(pooled), "across_cos": token_stats(pooled[:, None], mask[:, :1])["across_cos"],
                            "doc_std_over_rms": float(pooled.std(0).mean() / (rms(pooled) + 1e-12))}
    stats["pool.cell_part_rms"] = rms(cell_part)
    stats["pool.pool_part_rms"] = rms(pool_part)
    stats["pool.pool_part_doc_std"] = float(pool_part.std(0).mean())
    stats["pool.cell_part_doc_std"] = float(cell_part.std(0).mean())
    logits = model.classifier(out.pooler_output)
    stats["logits.doc_std"] = float(logits.std(0).mean())
    model.train()
    return stats


@torch.no_grad()
def evaluate(model, docs: dict, batch_size: int = 32) -> float:
    model.eval()
    order = np.argsort([len(d) for d in docs["ids"]])
    correct = 0
    for start in range(0, len(order), batch_size):
        idx = order[start: start + batch_size]
        logits = model(**batch_of([docs["ids"][i] for i in idx])).logits
        correct += int((logits.argmax(-1).numpy() == docs["label"][idx]).sum())
    model.train()
    return correct / len(order)


# ----------------------------------------------------------------------------------------------------------------------
# one run
# ----------------------------------------------------------------------------------------------------------------------


def run_key(args, pooling: str, review: bool, fix: str, seed: int) -> str:
    return (f"pool={pooling}|review={review}|fix={fix}|init_std={args.init_std if fix == 'init_scale' else 0.02}|"
            f"lr={args.lr}|warmup={args.warmup}|schedule={args.schedule}|batch={args.batch_size}|"
            f"steps={args.steps}|len={args.max_length}|seed={seed}{sample_key(args)}")


def sample_key(args) -> str:
    """The training / dev sample sizes, named in a run's key only when they differ from the defaults (2,000 / 300):
    a run of the default sample keeps the key format of the records in `results/`, so a re-run skips them."""
    if (args.train_size, args.dev_size) == (DEFAULT_TRAIN_SIZE, DEFAULT_DEV_SIZE):
        return ""
    return f"|train={args.train_size}|dev={args.dev_size}"


def train_run(args, data: dict, vocab_size: int, pooling: str, review: bool, fix: str, seed: int) -> dict:
    model = build_model(vocab_size, pooling, review, fix, args.init_std, seed)
    model.train()
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = int(args.warmup * args.steps)

    def factor(step: int) -> float:  # step counts from 0
        if warmup and step < warmup:
            return (step + 1) / warmup
        if args.schedule == "linear":
            return max(0.0, (args.steps - step) / max(1, args.steps - warmup))
        return 1.0

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    train = data["train"]
    probe_idx = np.arange(0, len(data["dev"]["ids"]), max(1, len(data["dev"]["ids"]) // 16))[:16]
    probe = batch_of([data["dev"]["ids"][i] for i in probe_idx])
    trace, curve, losses = [], [], []
    start = time.perf_counter()
    order = np.array([], dtype=int)
    for step in range(args.steps + 1):
        if len(order) < args.batch_size:
            order = np.concatenate([order, rng.permutation(len(train["ids"]))])
        idx, order = order[: args.batch_size], order[args.batch_size:]
        batch = batch_of([train["ids"][i] for i in idx])
        loss = F.cross_entropy(model(**batch).logits, torch.from_numpy(train["label"][idx]))
        loss.backward()
        losses.append(loss.item())
        if step % args.stats_every == 0:
            trace.append({"step": step, "loss": float(np.mean(losses[-args.stats_every:])), "grad": grad_norms(model),
                          "act": activation_stats(model, probe)})
        if step == args.steps:
            break
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            curve.append({"step": step + 1, "dev_accuracy": evaluate(model, data["dev"])})
    curve.append({"step": args.steps, "dev_accuracy": evaluate(model, data["dev"])})
    return {"key": run_key(args, pooling, review, fix, seed), "pooling": pooling, "review": review, "fix": fix,
            "init_std": args.init_std if fix == "init_scale" else 0.02, "lr": args.lr, "warmup": args.warmup,
            "schedule": args.schedule, "batch_size": args.batch_size, "steps": args.steps,
            "max_length": args.max_length, "train_size": args.train_size, "dev_size": args.dev_size, "seed": seed,
            "dev_accuracy": curve[-1]["dev_accuracy"], "best_dev_accuracy": max(c["dev_accuracy"] for c in curve),
            "curve": curve, "final_loss": float(np.mean(losses[-50:])),
            "seconds": round(time.perf_counter() - start, 1), "trace": trace}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", type=Path, required=True, help="Folder holding imdb/{train,test}.jsonl.gz.")
    parser.add_argument("--results", type=Path, default=RESULTS / "runs.jsonl")
    parser.add_argument("--pooling", nargs="+", default=["max"], choices=["max", "mean"])
    parser.add_argument("--review", nargs="+", default=["on"], choices=["on", "off"])
    parser.add_argument("--fix", nargs="+", default=["none"], choices=FIXES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=float, default=0.0, help="fraction of the steps")
    parser.add_argument("--schedule", choices=["constant", "linear"], default="constant")
    parser.add_argument("--init_std", type=float, default=0.02, help="kernel std for fix=init_scale")
    parser.add_argument("--max_length", type=int, default=512)
    parser.add_argument("--train_size", type=int, default=DEFAULT_TRAIN_SIZE)
    parser.add_argument("--dev_size", type=int, default=DEFAULT_DEV_SIZE)
    parser.add_argument("--stats_every", type=int, default=25)
    parser.add_argument("--eval_every", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    done = set()
    if args.results.is_file():
        done = {json.loads(line)["key"] for line in args.results.read_text().splitlines() if line.strip()}
    data, vocab_size = load_imdb(args.data_dir, args.train_size, args.dev_size, args.max_length)
    for seed in args.seeds:
        for review in args.review:
            for pooling in args.pooling:
                for fix in args.fix:
                    if fix != "none" and review == "off" and fix in ("residual", "zero_o"):
                        continue
                    key = run_key(args, pooling, review == "on", fix, seed)
                    if key in done:
                        print("skip", key, flush=True)
                        continue
                    result = train_run(args, data, vocab_size, pooling, review == "on", fix, seed)
                    print(f"{key}: dev acc {result['dev_accuracy']:.3f} (best {result['best_dev_accuracy']:.3f}), "
                          f"loss {result['final_loss']:.3f}, {result['seconds']} s", flush=True)
                    args.results.parent.mkdir(parents=True, exist_ok=True)
                    with args.results.open("a") as f:
                        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
