# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Pretrain RAN and its BERT peer side by side on one GPU within a wall-clock budget, from a packed corpus.

    python -m research.pretraining.device_pretrain --payload .pretrain_payload --out_dir OUT --train_seconds 420

One process trains both models, one optimizer step at a time, always the model that is furthest below its share of
the GPU time (`--ran_share`; each step is timed to its end). The peer never gets ahead of RAN in tokens seen
(`--peer_token_cap`, on by default): when BERT is the cheaper model its unused share goes to RAN, and at every point
the two have seen as many tokens of the same books. One process rather than two sharing the GPU: without MPS two
processes' kernels do not run at the same time anyway, the GPU time-slices between them, and one process measures
and enforces the share exactly, keeps one copy of the corpus on the GPU and has one writer for the output folder.

* **Data** (`research/pretraining/pack.py`): the training books as uint16 token ids, unpacked once into one tensor on
  the device; each model cuts every book into blocks `[CLS] ... [SEP]` of its block size (RAN 4,096, BERT 512) that
  never span two books, a book's last block padded, and goes through them in a seeded random order, pass after
  pass. Masks are drawn per batch on the device (15%, BERT's 80/10/10), from a generator of each model's own.
* **Schedule** without a step count: the learning rate warms up linearly over the first `--warmup_fraction` of the
  wall budget, stays at the model's peak (`--learning_rate` for RAN, `--bert_learning_rate` for the peer), and
  decays linearly to zero over the last `--decay_fraction`.
* **Validation** on held-out books masked once by the packer: each model is scored on the same masked tokens
  (RAN in blocks of `span + 2`, BERT in blocks of 512) every `--eval_every_tokens` tokens it has seen, and at the
  end: masked-token loss and accuracy.
* **Output**, every `--export_seconds` and at the end, overwritten in place (the device tool brings back at most 8
  files of 16 MiB): `ran-0000i-of-0000n.safetensors` and `bert-...` (fp32 weights, shards of at most
  `--shard_mib`), `run.json` (configs, validation curves, training losses, timings, device) and `log.txt`.
  `python -m research.pretraining.collect` turns that folder into Hugging Face model folders.

bf16 autocast on CUDA (fp32 weights and optimizer). A CUDA out-of-memory error in a step halves that model's batch
and goes on; any other error in one model's step stops that model, logs the traceback and lets the other go on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import platform
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import ran_hf
from research.pretraining.bert_peer import BERT_CONTEXT, bert_peer, check_bert_peer_arguments, modernbert_peer


STUDY = Path(__file__).resolve().parent
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # the study tokenizer's special ids (checked against its vocabulary)
FIRST_WORD_PIECE = 5


# ----------------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------------


def load_payload(payload: Path, log, eval_spans: int = 0) -> tuple[np.ndarray, np.ndarray, dict, dict]:
    """The training tokens (one uint16 array), each book's (offset, length) in it, the validation arrays (the first
    `eval_spans`, 0: all) and the manifest. Every shard's uncompressed tokens are checked against the manifest's
    sha256."""
    manifest = json.loads((payload / "manifest.json").read_text())
    started = time.time()
    arrays, books, offset = [], [], 0
    for shard in manifest["train"]["shards"]:
        raw = lzma.decompress((payload / shard["file"]).read_bytes())
        if hashlib.sha256(raw).hexdigest() != shard["sha256_tokens"]:
            raise ValueError(f"{payload / shard['file']}: its tokens do not match manifest.json; pack it again.")
        arrays.append(np.frombuffer(raw, dtype="<u2"))
        books += [(offset + book["offset"], book["tokens"]) for book in shard["books"]]
        offset += shard["tokens"]
    with np.load(payload / manifest["validation"]["file"]) as validation:
        held_out = {"input_ids": validation["input_ids"][:eval_spans or None],
                    "labels": validation["labels"][:eval_spans or None]}
    log(f"unpacked {offset:,} training tokens in {len(books)} documents and {len(held_out['input_ids'])} validation "
        f"spans in {time.time() - started:.1f} s")
    return np.concatenate(arrays), np.asarray(books, dtype=np.int64), held_out, manifest


def block_table(books: np.ndarray, block_size: int, min_block_size: int) -> torch.Tensor:
    """(blocks, 2): the (start, length) of every block body, `block_size - 2` word pieces cut straight through each
    book; a book's last, shorter body is kept if its block ([CLS] body [SEP]) has at least `min_block_size`
    tokens."""
    body = block_size - 2
    starts, lengths = [], []
    for offset, length in books:
        cuts = np.arange(0, length, body)
        sizes = np.minimum(body, length - cuts)
        keep = sizes + 2 >= min_block_size
        starts.append(offset + cuts[keep])
        lengths.append(sizes[keep])
    return torch.from_numpy(np.stack([np.concatenate(starts), np.concatenate(lengths)], axis=1))


def frame_blocks(tokens: torch.Tensor, table: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The blocks `[CLS] body [SEP] [PAD]...` (batch, block_size) of the rows of `table`, and the attention mask."""
    starts, lengths = table[:, 0], table[:, 1]
    position = torch.arange(block_size - 2, device=tokens.device)
    inside = position[None, :] < lengths[:, None]
    body = tokens[(starts[:, None] + position[None, :]).clamp(max=len(tokens) - 1)].long()
    body = torch.where(inside, body, PAD)
    ids = torch.cat([torch.full_like(body[:, :1], CLS), body, torch.full_like(body[:, :1], PAD)], dim=1)
    ids.scatter_(1, (lengths + 1)[:, None].long(), SEP)
    mask = torch.arange(block_size, device=tokens.device)[None, :] < (lengths + 2)[:, None]
    return ids, mask.long()


def mask_tokens(ids: torch.Tensor, vocab_size: int, generator: torch.Generator,
                probability: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: `probability` of the word pieces are scored, 80% of them replaced by [MASK], 10% by a random
    word piece, 10% kept. Returns (inputs, labels with -100 where nothing is scored)."""
    draw = torch.rand(ids.shape, device=ids.device, generator=generator)
    scored = (draw < probability) & (ids >= FIRST_WORD_PIECE)
    labels = torch.where(scored, ids, -100)
    action = draw / probability  # uniform in [0, 1) on the scored positions
    random_ids = torch.randint(FIRST_WORD_PIECE, vocab_size, ids.shape, device=ids.device, generator=generator)
    inputs = torch.where(scored & (action < 0.8), MASK, ids)
    inputs = torch.where(scored & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, labels


def validation_batches(held_out: dict, block_size: int, device) -> list[tuple[torch.Tensor, ...]]:
    """The packed validation spans as one model's blocks framed by [CLS] .. [SEP] (labels -100 on the frame): a
    span as one block if it fits in `block_size`, else cut into bodies of `block_size - 2` (the span length must
    then be a multiple of it)."""
    inputs = torch.from_numpy(held_out["input_ids"].astype(np.int64))
    labels = torch.from_numpy(held_out["labels"].astype(np.int64))
    body = min(inputs.shape[1], block_size - 2)
    if inputs.shape[1] % body:
        raise ValueError(f"The validation spans ({inputs.shape[1]} word pieces) do not split into blocks of "
                         f"{block_size}: pack them with --span_body a multiple of {body}.")
    inputs, labels = inputs.reshape(-1, body), labels.reshape(-1, body)
    frame = lambda x, value: torch.nn.functional.pad(x, (1, 1), value=value)
    ids = frame(inputs, CLS)
    ids[:, -1] = SEP
    return [ids.to(device), frame(labels, -100).to(device)]


# ----------------------------------------------------------------------------------------------------------------------
# Models and their training state
# ----------------------------------------------------------------------------------------------------------------------


def build_ran(args, vocab_size: int) -> torch.nn.Module:
    config = ran_hf.RANConfig(
        vocab_size=vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads, attention_head_size=args.attention_head_size,
        window_size=args.window_size, min_window_size=args.min_window_size, memory_review_residual=True,
        sparse_prediction=True, hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
        pad_token_id=PAD)
    return ran_hf.RANForMaskedLM(config)


def build_bert(args, vocab_size: int) -> torch.nn.Module:
    return bert_peer(vocab_size, PAD, args.hidden_size, args.num_hidden_layers, args.num_attention_heads,
                     dropout=args.dropout)


def build_modernbert(args, vocab_size: int) -> torch.nn.Module:
    return modernbert_peer(vocab_size, PAD, CLS, SEP, args.hidden_size, args.num_hidden_layers,
                           args.num_attention_heads, dropout=args.dropout)


@dataclass
class Trainee:
    """One model with its optimizer, data order and bookkeeping."""

    name: str
    model: torch.nn.Module
    block_size: int
    batch_size: int
    share: float
    table: torch.Tensor
    generator: torch.Generator
    seed: int
    peak_lr: float
    optimizer: torch.optim.Optimizer = None
    order: torch.Tensor = None
    cursor: int = 0
    passes: int = 0
    steps: int = 0
    tokens: int = 0  # real tokens of the blocks trained on ([CLS] and [SEP] included, pads not)
    gpu_seconds: float = 0.0
    next_eval: int = 0
    failed: str | None = None
    curve: list = field(default_factory=list)
    losses: list = field(default_factory=list)

    def next_rows(self) -> torch.Tensor:
        """The table rows of the next batch, in a seeded random order renewed at every pass."""
        if self.order is None or self.cursor + self.batch_size > len(self.order):
            self.passes += self.order is not None
            self.order = torch.randperm(len(self.table), generator=torch.Generator().manual_seed(
                self.seed + 1000 * self.passes))
            self.cursor = 0
        rows = self.order[self.cursor: self.cursor + self.batch_size]
        self.cursor += self.batch_size
        return self.table[rows]


def adamw(model: torch.nn.Module, args, device) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on biases, norms or embeddings' norm gains)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.learning_rate,
                             betas=(0.9, 0.98), eps=1e-6, fused=device.type == "cuda")


def schedule_fraction(elapsed: float, budget: float, tokens: int, max_tokens: int) -> float:
    """How far a model is through its budget: the wall clock's share, or its tokens' share of `max_tokens` when that
    is further (0: the wall clock only). Whichever budget runs out first then ends the decay at zero."""
    fraction = elapsed / budget
    return max(fraction, tokens / max_tokens) if max_tokens else fraction


def learning_rate(fraction: float, peak: float, warmup: float, decay: float) -> float:
    """Warm-up over the first `warmup` of the wall budget, constant, linear decay to 0 over the last `decay`."""
    if fraction < warmup:
        return peak * max(fraction, 1e-3) / warmup
    if fraction > 1 - decay:
        return peak * max(0.0, 1 - fraction) / decay
    return peak


# ----------------------------------------------------------------------------------------------------------------------
# Steps, evaluation, export
# ----------------------------------------------------------------------------------------------------------------------


def autocast(device, bf16: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)


def train_step(trainee: Trainee, tokens: torch.Tensor, args, device, lr: float) -> float:
    """One optimizer step on one batch; returns the loss (mean over the masked tokens)."""
    rows = trainee.next_rows().to(device)
    ids, attention_mask = frame_blocks(tokens, rows, trainee.block_size)
    inputs, labels = mask_tokens(ids, args.vocab_size, trainee.generator)
    for group in trainee.optimizer.param_groups:
        group["lr"] = lr
    with autocast(device, args.bf16):
        loss = trainee.model(input_ids=inputs, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainee.model.parameters(), args.max_grad_norm)
    trainee.optimizer.step()
    trainee.optimizer.zero_grad(set_to_none=True)
    trainee.steps += 1
    trainee.tokens += int(rows[:, 1].sum()) + 2 * len(rows)
    return float(loss.detach())


@torch.no_grad()
def evaluate(trainee: Trainee, batches, args, device) -> dict:
    """Masked-token loss and accuracy on the validation blocks."""
    ids, labels = batches
    model = trainee.model.eval()
    loss_sum, correct, scored = 0.0, 0, 0
    per_batch = max(1, args.eval_tokens_per_batch // trainee.block_size)
    for start in range(0, len(ids), per_batch):
        batch_ids, batch_labels = ids[start: start + per_batch], labels[start: start + per_batch]
        with autocast(device, args.bf16):
            logits = model(input_ids=batch_ids, labels=batch_labels).logits.float()
        target = batch_labels[batch_labels != -100]
        if logits.dim() == 3:
            logits = logits[batch_labels != -100]
        loss_sum += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(-1) == target).sum())
        scored += len(target)
    model.train()
    return {"loss": loss_sum / scored, "accuracy": correct / scored, "scored_tokens": scored}


SHARD_HEADER_BYTES = 16384  # room for a shard's safetensors header (names, shapes, offsets: about 150 bytes a tensor)
PART = "#part"  # a tensor larger than a shard is saved as row blocks `name#part0`, `name#part1`, ...


def state_shards(model: torch.nn.Module, shard_bytes: int) -> list[dict]:
    """The state dict (tied weights once, contiguous fp32 copies on the CPU) cut into shards of at most
    `shard_bytes`, in the state dict's order; a tensor larger than that (the word embeddings at a 16k vocabulary and
    D 256: 15.6 MiB) is cut into blocks of rows named `name#partI` (`join_parts` puts them back)."""
    seen, pieces = set(), []
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen and tensor.numel():
            continue  # a tied weight (the LM decoder = the word embeddings)
        seen.add(tensor.data_ptr())
        tensor = tensor.detach().to("cpu", copy=True).contiguous()
        if tensor.numel() * tensor.element_size() <= shard_bytes:
            pieces.append((name, tensor))
            continue
        rows = max(1, shard_bytes // (tensor[0].numel() * tensor.element_size()))
        pieces += [(f"{name}{PART}{i}", part.contiguous()) for i, part in enumerate(tensor.split(rows))]
    shards, current, size = [], {}, 0
    for name, tensor in pieces:
        nbytes = tensor.numel() * tensor.element_size()
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensor
        size += nbytes
    if current:
        shards.append(current)
    return shards


def join_parts(state: dict) -> dict:
    """The state dict of `state_shards`' shards with every tensor cut into `name#partI` rows joined again."""
    joined, parts = {}, {}
    for name, tensor in state.items():
        if PART in name:
            base, index = name.rsplit(PART, 1)
            parts.setdefault(base, {})[int(index)] = tensor
        else:
            joined[name] = tensor
    for base, pieces in parts.items():
        joined[base] = torch.cat([pieces[i] for i in range(len(pieces))])
    return joined


def export(trainees: list[Trainee], out_dir: Path, run_record: dict, args) -> None:
    """Write each model's weights as safetensors shards, then run.json; each file is written beside its final name
    and renamed over it, so a folder read at any moment holds complete files."""
    for trainee in trainees:
        shards = state_shards(trainee.model, int(args.shard_mib * 2**20) - SHARD_HEADER_BYTES)
        names = [f"{trainee.name}-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        for name, tensors in zip(names, shards):
            save_file(tensors, str(out_dir / f"{name}.partial"), metadata={"format": "pt"})
            os.replace(out_dir / f"{name}.partial", out_dir / name)
        run_record["models"][trainee.name]["weights"] = names
    partial = out_dir / "run.json.partial"
    partial.write_text(json.dumps(run_record, indent=1) + "\n")
    os.replace(partial, out_dir / "run.json")


def describe_device(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


# ----------------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--payload", default=".pretrain_payload", help="Folder written by research.pretraining.pack.")
    add("--out_dir", default=os.environ.get("OUT", "outputs/device_pretrain"))
    add("--tokenizer", default=str(STUDY / "tokenizer-16k"))
    add("--models", nargs="+", default=["ran", "bert"], choices=["ran", "bert", "modernbert"],
        help="RAN and at most one peer: BERT, or ModernBERT (rotary positions, pre-norm layers).")
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add("--bf16", choices=["auto", "yes", "no"], default="auto", help="bf16 autocast (auto: on CUDA only).")
    # budget
    add("--train_seconds", type=float, default=420.0, help="Wall-clock budget of training (both models).")
    add("--deadline_seconds", type=float, default=515.0,
        help="Training stops this long after the process started, minus --final_reserve_seconds, if sooner.")
    add("--final_reserve_seconds", type=float, default=25.0, help="Kept for the last evaluation and export.")
    add("--max_steps", type=int, default=0, help="Stop a model after this many steps (0: the wall budget only).")
    add("--max_tokens", type=int, default=0,
        help="Stop a model once it has seen this many training tokens; its learning-rate schedule then runs on the "
             "larger of its token and wall-clock fractions (0: the wall budget only). Gives a peer trained alone "
             "the token count of an earlier RAN run.")
    add("--ran_share", type=float, default=0.6, help="RAN's share of the GPU time; the peer has the rest.")
    add("--peer_token_cap", type=int, default=1, help="1: the peer never gets ahead of RAN in tokens seen.")
    # models
    add("--hidden_size", type=int, default=256)
    add("--num_hidden_layers", type=int, default=4)
    add("--num_attention_heads", type=int, default=4)
    add("--attention_head_size", type=int, default=64)
    add("--window_size", type=int, default=256)
    add("--min_window_size", type=int, default=16)
    add("--dropout", type=float, default=0.0, help="Dropout in pretraining (the exported configs keep it).")
    # data and optimization
    add("--ran_block_size", type=int, default=4096)
    add("--bert_block_size", type=int, default=BERT_CONTEXT)
    add("--min_block_size", type=int, default=64)
    add("--ran_batch_size", type=int, default=64, help="Blocks per RAN step (64 x 4,096 = 262k tokens).")
    add("--bert_batch_size", type=int, default=256, help="Blocks per BERT step (256 x 512 = 131k tokens).")
    add("--learning_rate", type=float, default=1e-3, help="RAN's peak learning rate.")
    add("--bert_learning_rate", type=float, default=5e-4,
        help="The peer's peak learning rate. At 1e-3 the post-norm BERT peer stalled at unigram predictions "
             "(held-out masked-token accuracy 0.155 after 232 M tokens); 5e-4 is ELECTRA-small's rate for the same "
             "post-norm layer.")
    add("--warmup_fraction", type=float, default=0.05)
    add("--decay_fraction", type=float, default=0.15)
    add("--weight_decay", type=float, default=0.01)
    add("--max_grad_norm", type=float, default=1.0)
    add("--seed", type=int, default=42)
    # evaluation and export
    add("--eval_every_tokens", type=int, default=10_000_000)
    add("--eval_tokens_per_batch", type=int, default=65536)
    add("--eval_spans", type=int, default=0, help="Score only the first N validation spans (0: all).")
    add("--export_seconds", type=float, default=120.0)
    add("--shard_mib", type=float, default=15.0)
    add("--log_every_steps", type=int, default=20)
    args = parser.parse_args(argv)
    if not 0 < args.ran_share < 1 and len(args.models) == 2:
        raise ValueError(f"--ran_share must lie in (0, 1), got {args.ran_share}.")
    if args.ran_block_size < 3 or args.min_block_size > args.bert_block_size:
        raise ValueError("--min_block_size must not exceed the block sizes, which must be at least 3.")
    if len([name for name in args.models if name != "ran"]) > 1:
        raise ValueError(f"--models takes RAN and at most one peer, got {args.models}.")
    if "bert" in args.models or "modernbert" in args.models:
        check_bert_peer_arguments(args.hidden_size, args.num_attention_heads, args.attention_head_size,
                                  args.bert_block_size)
    return args


def check_tokenizer(path: str) -> int:
    """The vocabulary size of the study tokenizer, whose special ids the masking hard-codes."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    expected = {"[PAD]": PAD, "[UNK]": UNK, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK}
    found = {token: tokenizer.convert_tokens_to_ids(token) for token in expected}
    if found != expected:
        raise ValueError(f"--tokenizer {path}: special ids {found}, expected {expected}.")
    return len(tokenizer)


def main(argv=None) -> dict:
    process_start = time.time()
    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_file = open(out_dir / "log.txt", "a", encoding="utf-8")

    def log(message: str) -> None:
        line = f"[{time.time() - process_start:7.1f}s] {message}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    device = torch.device(args.device)
    args.bf16 = args.bf16 == "yes" or (args.bf16 == "auto" and device.type == "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    import transformers

    log(f"device {describe_device(device)}; torch {torch.__version__}, transformers {transformers.__version__} "
        f"({Path(transformers.__file__).parent}), ran_hf from {Path(ran_hf.__file__).parent}; bf16 {args.bf16}")
    args.vocab_size = check_tokenizer(args.tokenizer)
    tokens_np, books, held_out, manifest = load_payload(Path(args.payload), log, args.eval_spans)
    tokenizer_sha256 = hashlib.sha256((Path(args.tokenizer) / "tokenizer.json").read_bytes()).hexdigest()
    if manifest["tokenizer_sha256"] != tokenizer_sha256:
        raise ValueError(f"--payload {args.payload} was packed with another tokenizer than --tokenizer "
                         f"{args.tokenizer} (sha256 of tokenizer.json differs): pack it again.")
    tokens = torch.from_numpy(tokens_np.astype(np.int32)).to(device)

    peer = (args.bert_block_size, args.bert_batch_size, 1 - args.ran_share, args.bert_learning_rate)  # either peer
    builders = {"ran": (build_ran, args.ran_block_size, args.ran_batch_size, args.ran_share, args.learning_rate),
                "bert": (build_bert, *peer), "modernbert": (build_modernbert, *peer)}
    trainees, validation = [], {}
    for index, name in enumerate(args.models):
        build, block_size, batch_size, share, peak_lr = builders[name]
        torch.manual_seed(args.seed)
        model = build(args, args.vocab_size).to(device).train()
        generator = torch.Generator(device=device).manual_seed(args.seed + index)
        table = block_table(books, block_size, args.min_block_size)
        trainee = Trainee(name, model, block_size, min(batch_size, len(table)),
                          share if len(args.models) == 2 else 1.0, table, generator, args.seed + index, peak_lr)
        trainee.optimizer = adamw(model, args, device)
        trainee.next_eval = args.eval_every_tokens
        trainees.append(trainee)
        validation[name] = validation_batches(held_out, block_size, device)
        log(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, {len(trainee.table):,} "
            f"blocks of {block_size}, {batch_size} blocks per step, share {trainee.share:.2f}")

    run_record = {
        "status": "training", "device": describe_device(device), "torch": torch.__version__,
        "transformers": transformers.__version__, "args": {k: v for k, v in vars(args).items()},
        "payload": {"train_tokens": manifest["train"]["tokens"], "train_books": manifest["train"]["books"],
                    "in_domain": manifest["train"].get("in_domain", []), "validation": manifest["validation"],
                    "tokenizer_sha256": manifest["tokenizer_sha256"], "command": manifest.get("command")},
        "models": {t.name: {"class": type(t.model).__name__, "config": t.model.config.to_dict(),
                            "block_size": t.block_size} for t in trainees},
    }

    def record_progress(elapsed: float) -> None:
        run_record["elapsed_s"] = round(elapsed, 1)
        run_record["train_elapsed_s"] = round(min(time.time(), train_end) - train_start, 1)
        for t in trainees:
            run_record["models"][t.name].update({
                "steps": t.steps, "tokens_seen": t.tokens, "passes": round(t.tokens / max(1, tokens_np.size), 3),
                "gpu_seconds": round(t.gpu_seconds, 1), "batch_size": t.batch_size, "failed": t.failed,
                "curve": t.curve, "train_loss": t.losses})

    def run_eval(trainee: Trainee, elapsed: float) -> None:
        started = time.time()
        try:
            metrics = evaluate(trainee, validation[trainee.name], args, device)
        except Exception:  # a failed evaluation must not cost the training run
            trainee.model.train()
            log(f"eval {trainee.name} failed:\n{traceback.format_exc()}")
            return
        metrics.update(tokens=trainee.tokens, step=trainee.steps, elapsed_s=round(elapsed, 1))
        trainee.curve.append(metrics)
        log(f"eval {trainee.name} at {trainee.tokens / 1e6:.1f} M tokens (step {trainee.steps}): loss "
            f"{metrics['loss']:.4f}, accuracy {metrics['accuracy']:.4f} ({time.time() - started:.1f} s)")

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    train_start = time.time()
    train_end = min(train_start + args.train_seconds,
                    process_start + args.deadline_seconds - args.final_reserve_seconds)
    budget = train_end - train_start
    last_export = train_start
    log(f"training for {budget:.0f} s (warm-up {args.warmup_fraction:.0%}, decay over the last "
        f"{args.decay_fraction:.0%})")
    while True:
        now = time.time()
        if now >= train_end:
            break
        active = [t for t in trainees if t.failed is None and not (args.max_steps and t.steps >= args.max_steps)
                  and not (args.max_tokens and t.tokens >= args.max_tokens)]
        if not active:
            break
        ran = next((t for t in trainees if t.name == "ran"), None)
        if args.peer_token_cap and ran is not None and ran in active and len(active) == 2:
            active = [t for t in active if t.name == "ran" or t.tokens <= ran.tokens]
        trainee = min(active, key=lambda t: t.gpu_seconds / t.share)
        fraction = schedule_fraction(now - train_start, budget, trainee.tokens, args.max_tokens)
        lr = learning_rate(fraction, trainee.peak_lr, args.warmup_fraction, args.decay_fraction)
        started = time.time()
        try:
            loss = train_step(trainee, tokens, args, device, lr)
            synchronize()
        except torch.cuda.OutOfMemoryError:
            trainee.optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            if trainee.batch_size == 1:
                trainee.failed = "out of memory at batch size 1"
            trainee.batch_size = max(1, trainee.batch_size // 2)
            log(f"{trainee.name}: CUDA out of memory; batch size now {trainee.batch_size}")
            continue
        except Exception:  # one model's bug must not cost the other model's run
            trainee.failed = traceback.format_exc()
            log(f"{trainee.name} stopped by an error:\n{trainee.failed}")
            continue
        trainee.gpu_seconds += time.time() - started
        elapsed = time.time() - train_start
        if trainee.steps % args.log_every_steps == 0 or trainee.steps == 1:
            trainee.losses.append({"step": trainee.steps, "tokens": trainee.tokens, "loss": round(loss, 4),
                                   "lr": lr, "elapsed_s": round(elapsed, 1)})
            log(f"{trainee.name} step {trainee.steps}: loss {loss:.4f}, lr {lr:.2e}, {trainee.tokens / 1e6:.2f} M "
                f"tokens, {trainee.tokens / max(trainee.gpu_seconds, 1e-9) / 1e3:.0f} k tokens/s of its own time")
        if trainee.tokens >= trainee.next_eval:
            run_eval(trainee, elapsed)
            trainee.next_eval += args.eval_every_tokens
        if time.time() - last_export >= args.export_seconds:
            record_progress(time.time() - process_start)
            export(trainees, out_dir, run_record, args)
            last_export = time.time()
            log(f"exported the weights ({last_export - process_start:.0f} s)")

    for trainee in trainees:
        if trainee.steps and (not trainee.curve or trainee.curve[-1]["tokens"] != trainee.tokens):
            run_eval(trainee, time.time() - train_start)
    run_record["status"] = "done"
    record_progress(time.time() - process_start)
    export(trainees, out_dir, run_record, args)
    for t in trainees:
        share = t.gpu_seconds / max(budget, 1e-9)
        log(f"{t.name}: {t.steps} steps, {t.tokens / 1e6:.2f} M tokens ({t.tokens / tokens_np.size:.2f} passes), "
            f"{t.gpu_seconds:.0f} s of its own ({share:.0%} of the budget)"
            + (f", final accuracy {t.curve[-1]['accuracy']:.4f}" if t.curve else "") + (", FAILED" if t.failed else ""))
    log(f"done in {time.time() - process_start:.0f} s; output in {out_dir}")
    log_file.close()
    return run_record


if __name__ == "__main__":
    main()
