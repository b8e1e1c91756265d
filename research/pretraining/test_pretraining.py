"""The pretraining study's device call rehearsed on CPU at a tiny scale, with the exact command path the GPU machine
runs (`device_call.sh` -> `device_pretrain`), from a payload packed by `pack.py` from a tiny corpus; `collect.py`
turns its output into model folders. Also the BERT peer's masked-only head and the pieces of the driver."""

import gzip
import json
import lzma
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

import ran_hf
from research.pretraining import collect, device_pretrain, pack
from research.pretraining.bert_peer import BertForMaskedLMAtMaskedTokens


REPO = Path(__file__).resolve().parents[2]
WORDS = ("the river ran past old houses where children played and the night was long and quiet while a ship "
         "sailed far from home").split()
# Tiny models and blocks: RAN blocks of 62 (bodies of 60), BERT blocks of 32 (bodies of 30), validation spans of 60.
TINY = ["--device", "cpu", "--hidden_size", "16", "--num_hidden_layers", "1", "--num_attention_heads", "2",
        "--attention_head_size", "8", "--window_size", "16", "--min_window_size", "4", "--ran_block_size", "62",
        "--bert_block_size", "32", "--min_block_size", "8", "--ran_batch_size", "4", "--bert_batch_size", "8",
        "--max_steps", "4", "--eval_every_tokens", "400", "--export_seconds", "0", "--log_every_steps", "1",
        "--train_seconds", "120", "--eval_tokens_per_batch", "256", "--shard_mib", "0.5"]


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    """A corpus laid out like the real one (gutenberg-more/ with a split field, gutenberg/ without), packed."""
    root = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    for folder, with_split in [("gutenberg-more", True), ("gutenberg", False)]:
        (root / folder).mkdir()
        with gzip.open(root / folder / "books-00.jsonl.gz", "wt", encoding="utf-8") as f:
            for i in range(4):
                record = {"text": " ".join(rng.choice(WORDS) for _ in range(800 if with_split and i == 0
                                                                           else rng.randint(100, 400)))}
                if with_split:
                    record["split"] = "validation" if i == 0 else "train"
                f.write(json.dumps(record) + "\n")
    out = tmp_path_factory.mktemp("payload")
    manifest = pack.main(["--data_dir", str(root), "--out_dir", str(out), "--in_domain", "--validation_spans", "6",
                          "--span_body", "60", "--shard_tokens", "1000"])
    return out, manifest


@pytest.fixture(scope="module")
def device_run(payload, tmp_path_factory):
    """`bash research/pretraining/device_call.sh` as the device runs it, OUT and PAYLOAD set, tiny flags."""
    out = tmp_path_factory.mktemp("OUT")
    env = {**os.environ, "OUT": str(out), "PAYLOAD": str(payload[0]), "PYTHONPATH": str(REPO),
           "PYTHON": sys.executable}
    result = subprocess.run(["bash", "research/pretraining/device_call.sh", *TINY], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout


def test_pack_round_trips_the_books_and_masks_the_validation_once(payload):
    out, manifest = payload
    tokenizer = transformers.AutoTokenizer.from_pretrained(pack.TOKENIZER)
    assert manifest["train"]["books"] == 7 and manifest["validation"]["books"] == 1  # 3 + 4 train, 1 held out
    tokens = np.concatenate([np.frombuffer(lzma.decompress((out / s["file"]).read_bytes()), "<u2")
                             for s in manifest["train"]["shards"]])
    assert len(tokens) == manifest["train"]["tokens"] == sum(b["tokens"] for s in manifest["train"]["shards"]
                                                               for b in s["books"])
    assert set(np.unique(tokens)) <= set(tokenizer.convert_tokens_to_ids(WORDS))  # no special token in a book
    with np.load(out / "validation.npz") as validation:
        inputs, labels = validation["input_ids"], validation["labels"]
    assert inputs.shape == labels.shape == (6, 60)
    scored = labels != -100
    assert 0.05 < scored.mean() < 0.3
    assert (inputs[scored] == tokenizer.mask_token_id).mean() > 0.5  # 80% [MASK]
    assert (inputs[~scored] != tokenizer.mask_token_id).all()


def test_block_table_and_frames_never_cross_books():
    books = np.array([[0, 10], [10, 3], [13, 25]])
    table = device_pretrain.block_table(books, block_size=8, min_block_size=4)
    # bodies of 6: book 0 -> 6 + 4, book 1 -> 3 (block of 5 >= 4), book 2 -> 6 + 6 + 6 + 6 + 1 (block of 3 dropped)
    assert table.tolist() == [[0, 6], [6, 4], [10, 3], [13, 6], [19, 6], [25, 6], [31, 6]]
    tokens = torch.arange(100, 140, dtype=torch.int32)
    ids, mask = device_pretrain.frame_blocks(tokens, table[[1, 2]], block_size=8)
    cls, sep, pad = device_pretrain.CLS, device_pretrain.SEP, device_pretrain.PAD
    assert ids.tolist() == [[cls, 106, 107, 108, 109, sep, pad, pad], [cls, 110, 111, 112, sep, pad, pad, pad]]
    assert mask.tolist() == [[1] * 6 + [0] * 2, [1] * 5 + [0] * 3]


def test_masking_scores_word_pieces_only_at_the_bert_rates():
    ids = torch.randint(5, 1000, (64, 512))
    ids[:, 0], ids[:, -1] = device_pretrain.CLS, device_pretrain.SEP
    inputs, labels = device_pretrain.mask_tokens(ids, 1000, torch.Generator().manual_seed(0))
    scored = labels != -100
    assert abs(scored.float().mean().item() - 0.15) < 0.01
    assert not scored[:, 0].any() and not scored[:, -1].any()
    assert torch.equal(labels[scored], ids[scored]) and torch.equal(inputs[~scored], ids[~scored])
    masked = (inputs[scored] == device_pretrain.MASK).float().mean().item()
    kept = (inputs[scored] == ids[scored]).float().mean().item()
    assert abs(masked - 0.8) < 0.02 and 0.08 < kept < 0.13


def test_both_models_score_the_same_validation_tokens(payload):
    with np.load(payload[0] / "validation.npz") as validation:
        held_out = {"input_ids": validation["input_ids"], "labels": validation["labels"]}
    ran_ids, ran_labels = device_pretrain.validation_batches(held_out, 62, "cpu")
    bert_ids, bert_labels = device_pretrain.validation_batches(held_out, 32, "cpu")
    assert ran_ids.shape == (6, 62) and bert_ids.shape == (12, 32)
    assert torch.equal(device_pretrain.validation_batches(held_out, 4096, "cpu")[0], ran_ids)  # a span fits whole
    assert (ran_ids[:, 0] == device_pretrain.CLS).all() and (bert_ids[:, -1] == device_pretrain.SEP).all()
    assert torch.equal(ran_labels[ran_labels != -100], bert_labels[bert_labels != -100])
    with pytest.raises(ValueError, match="--span_body a multiple of 40"):
        device_pretrain.validation_batches(held_out, 42, "cpu")


def test_learning_rate_warms_up_holds_and_decays_on_the_wall_clock():
    lr = lambda f: device_pretrain.learning_rate(f, 1e-3, warmup=0.05, decay=0.15)
    assert lr(0.025) == pytest.approx(5e-4) and lr(0.05) == lr(0.5) == lr(0.85) == 1e-3
    assert lr(0.925) == pytest.approx(5e-4) and lr(1.0) == 0 and 0 < lr(0.0) <= 0.02 * 1e-3


def test_the_schedule_follows_the_token_budget_when_it_is_further_along():
    fraction = device_pretrain.schedule_fraction
    assert fraction(30, 120, 500, 0) == 0.25  # no token budget: the wall clock
    assert fraction(30, 120, 500, 1000) == 0.5 and fraction(90, 120, 500, 1000) == 0.75
    lr = lambda f: device_pretrain.learning_rate(f, 1e-3, warmup=0.05, decay=0.15)
    assert lr(fraction(10, 120, 999, 1000)) == pytest.approx(1e-3 * 0.001 / 0.15)  # decayed by tokens, not time


def test_device_call_writes_sharded_weights_curve_and_log(device_run, payload):
    out, stdout = device_run
    files = sorted(p.name for p in out.iterdir())
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "done" and len(files) <= 8 and not [f for f in files if f.endswith(".partial")]
    for name in ("ran", "bert"):
        record = run["models"][name]
        assert record["failed"] is None and record["steps"] == 4 and record["tokens_seen"] > 0
        assert len(record["weights"]) >= 2 and set(record["weights"]) <= set(files)  # sharded at 0.5 MiB
        assert all((out / w).stat().st_size <= 2**19 for w in record["weights"])  # header included
        assert [c["tokens"] for c in record["curve"]] == sorted(c["tokens"] for c in record["curve"])
        assert all(0 <= c["accuracy"] <= 1 and np.isfinite(c["loss"]) for c in record["curve"])
        assert record["curve"][-1]["tokens"] == record["tokens_seen"]
    assert run["models"]["bert"]["tokens_seen"] <= run["models"]["ran"]["tokens_seen"] + 8 * 32  # the token cap
    log = (out / "log.txt").read_text()
    assert "eval ran at" in log and "eval bert at" in log and "done in" in log and "done in" in stdout


def test_collected_folders_load_with_the_auto_classes(device_run, tmp_path):
    out, _ = device_run
    folders = collect.main([str(out), "--dest", str(tmp_path)])
    ran = transformers.AutoModelForMaskedLM.from_pretrained(folders["ran"])
    assert isinstance(ran, ran_hf.RANForMaskedLM) and ran.config.memory_review_residual
    assert ran.config.sparse_prediction and ran.config.hidden_dropout_prob == 0.1
    shards = {}
    for shard in json.loads((out / "run.json").read_text())["models"]["ran"]["weights"]:
        shards.update(load_file(out / shard))
    assert any("#part" in name for name in shards)  # the word embeddings (16000 x 16 x 4 bytes) exceed 0.5 MiB
    shards = device_pretrain.join_parts(shards)
    for name, tensor in shards.items():
        torch.testing.assert_close(ran.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    assert isinstance(ran_hf.RANForMaskedLM.from_pretrained(folders["ran"]), ran_hf.RANForMaskedLM)
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(folders["ran"], num_labels=2)
    assert isinstance(classifier, ran_hf.RANForSequenceClassification)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folders["ran"])
    assert tokenizer.mask_token_id == device_pretrain.MASK
    fill = transformers.pipeline("fill-mask", model=str(folders["ran"]))
    assert len(fill("the river [MASK] past old houses " + "and the night was long " * 20, top_k=3)) == 3
    card = (folders["ran"] / "README.md").read_text()
    assert "Validation curve" in card and "tokens seen" in card and "Licence" in card
    run = json.loads((folders["ran"] / "training_run.json").read_text())
    assert run["model"]["curve"] and run["device"].startswith("cpu")


def test_bert_peer_pretrains_and_loads_as_plain_bert(device_run, tmp_path):
    """The peer of the device call: validation accuracy is logged, and the collected folder loads as Transformers'
    BertForMaskedLM with the head computed everywhere."""
    out, _ = device_run
    record = json.loads((out / "run.json").read_text())["models"]["bert"]
    assert 0 <= record["curve"][-1]["accuracy"] <= 1
    folder = collect.main([str(out), "--dest", str(tmp_path), "--names", "bert=bert"])["bert"]
    card = (folder / "README.md").read_text()
    assert "BERT" in card and "import ran_hf" not in card
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder)
    assert isinstance(model, transformers.BertForMaskedLM) and model.config.hidden_size == 16
    assert model.config.intermediate_size == 64 and model.config.max_position_embeddings == 512
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3)
    assert classifier.config.model_type == "bert"


def test_bert_peer_masked_only_loss_equals_the_dense_head():
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    torch.manual_seed(0)
    sparse = BertForMaskedLMAtMaskedTokens(config).eval()
    dense = transformers.BertForMaskedLM(config).eval()
    dense.load_state_dict(sparse.state_dict())
    input_ids = torch.randint(5, 50, (2, 12))
    labels = torch.full_like(input_ids, -100)
    labels[0, [1, 4]], labels[1, 7] = input_ids[0, [1, 4]], input_ids[1, 7]
    with torch.no_grad():
        got, expected = sparse(input_ids, labels=labels), dense(input_ids, labels=labels)
    torch.testing.assert_close(got.loss, expected.loss)
    with torch.no_grad():  # Trainer's gradient accumulation: the sum over the micro-batch divided by all its items
        accumulated = sparse(input_ids, labels=labels, num_items_in_batch=torch.tensor(12))
    torch.testing.assert_close(accumulated.loss, expected.loss * 3 / 12)
    torch.testing.assert_close(got.logits, expected.logits[labels != -100])
    torch.testing.assert_close(sparse(input_ids).logits, dense(input_ids).logits)


def test_bert_peer_saves_as_bert_from_the_main_process_only(tmp_path):
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32)
    model = BertForMaskedLMAtMaskedTokens(config)
    model.save_pretrained(tmp_path / "other_rank", is_main_process=False)
    assert not (tmp_path / "other_rank" / "config.json").exists()
    model.save_pretrained(tmp_path / "main")
    assert json.loads((tmp_path / "main" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]


def test_bert_peer_bad_arguments():
    with pytest.raises(ValueError, match="context of 512 tokens: pass --bert_block_size 512"):
        device_pretrain.parse_args(["--bert_block_size", "1024"])
    with pytest.raises(ValueError, match="--attention_head_size 8"):
        device_pretrain.parse_args(["--hidden_size", "16", "--num_attention_heads", "2", "--attention_head_size", "4"])


def test_slim_wheel_drops_model_folders_and_their_record_lines(tmp_path):
    wheel = tmp_path / "transformers-0-py3-none-any.whl"
    names = ["transformers/__init__.py", "transformers/models/__init__.py", "transformers/models/bert/x.py",
             "transformers/models/llama/x.py", "transformers/models/auto/x.py", "transformers-0.dist-info/RECORD"]
    with zipfile.ZipFile(wheel, "w") as z:
        for name in names[:-1]:
            z.writestr(name, "x = 1\n")
        z.writestr(names[-1], "".join(f"{n},sha256=0,6\n" for n in names[:-1]))
    pack.slim_wheel(wheel)
    with zipfile.ZipFile(wheel) as z:
        kept = set(z.namelist())
        record = z.read(names[-1]).decode()
    assert kept == set(names) - {"transformers/models/llama/x.py"} and "llama" not in record and "bert" in record


def test_a_payload_packed_with_another_tokenizer_is_refused(payload, tmp_path):
    other = tmp_path / "tokenizer"
    other.mkdir()
    for file in Path(pack.TOKENIZER).iterdir():
        (other / file.name).write_bytes(file.read_bytes())
    (other / "tokenizer.json").write_text((other / "tokenizer.json").read_text() + "\n")
    with pytest.raises(ValueError, match="packed with another tokenizer"):
        device_pretrain.main(["--payload", str(payload[0]), "--tokenizer", str(other), "--out_dir",
                              str(tmp_path / "out"), *TINY])


def test_order_probe_shuffles_only_the_unmasked_body_tokens():
    from research.pretraining.order_probe import shuffle_context

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (3, 40), generator=generator)
    labels = torch.where(torch.rand(ids.shape, generator=generator) < 0.15, ids, -100)
    labels[:, [0, -1]] = -100
    shuffled = shuffle_context(ids, labels, torch.Generator().manual_seed(1))
    fixed = labels != -100
    fixed[:, [0, -1]] = True
    assert torch.equal(shuffled[fixed], ids[fixed])  # masked positions and the frame stay put
    for row in range(len(ids)):
        assert sorted(shuffled[row][~fixed[row]].tolist()) == sorted(ids[row][~fixed[row]].tolist())
    assert not torch.equal(shuffled, ids)


def test_modernbert_peer_pretrains_alone_and_loads_as_plain_modernbert(payload, tmp_path):
    """The rotary, pre-norm peer through the device call's own script, alone, up to a token budget: sharded weights
    and a curve come back, and the collected folder loads as Transformers' ModernBertForMaskedLM with the head
    computed everywhere."""
    out = tmp_path / "OUT"
    env = {**os.environ, "OUT": str(out), "PAYLOAD": str(payload[0]), "PYTHONPATH": str(REPO), "PYTHON": sys.executable}
    result = subprocess.run(["bash", "research/pretraining/device_call.sh", *TINY, "--models", "modernbert",
                             "--max_tokens", "600"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads((out / "run.json").read_text())["models"]["modernbert"]
    # at most 8 blocks of 32 tokens per step: the budget of 600 tokens stops it after 3 of its 4 allowed steps
    assert record["steps"] == 3 and 600 <= record["tokens_seen"] < 600 + 8 * 32
    assert 0 <= record["curve"][-1]["accuracy"] <= 1
    folder = collect.main([str(out), "--dest", str(tmp_path), "--names", "modernbert=peer"])["modernbert"]
    assert "ModernBERT" in (folder / "README.md").read_text()
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder)
    assert isinstance(model, transformers.ModernBertForMaskedLM) and model.config.hidden_size == 16
    assert model.config.attention_dropout == 0.1 and model.config.max_position_embeddings == 512
    ids = torch.tensor([[device_pretrain.CLS, 40, 41, device_pretrain.MASK, 42, device_pretrain.SEP]])
    assert model(input_ids=ids).logits.shape == (1, 6, model.config.vocab_size)


def test_device_call_takes_at_most_one_peer():
    with pytest.raises(ValueError, match="at most one peer"):
        device_pretrain.parse_args(["--models", "ran", "bert", "modernbert"])


def run_jobs(payload, out, *flags):
    env = {**os.environ, "OUT": str(out), "PAYLOAD": str(payload[0]), "PYTHONPATH": str(REPO), "PYTHON": sys.executable}
    return subprocess.run(["bash", "research/pretraining/device_jobs.sh", *flags], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_one_device_command_runs_the_peer_then_the_gpu_suite(payload, tmp_path):
    """`device_jobs.sh`: the ModernBERT peer's call, then the suite, in one command; what comes back fits the
    device tool's return (at most 8 files, at most 2 folders down)."""
    out = tmp_path / "OUT"
    result = run_jobs(payload, out, *TINY, "--models", "modernbert", "--max_tokens", "600", "--",
                         "--scale", "tiny", "--parts", "env", "--budget-s", "120")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["models"]["modernbert"]["steps"] == 3
    suite = json.loads((out / "suite" / "results.json").read_text())
    assert suite["parts"]["env"]["status"] == "ok" and "parts: env: ok" in (out / "suite" / "log.txt").read_text()
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 3 for p in files)
    assert "== pretraining call: exit 0" in result.stdout and "== GPU suite: exit 0" in result.stdout


def test_the_suite_still_runs_when_the_pretraining_call_fails(payload, tmp_path):
    result = run_jobs(payload, tmp_path / "OUT", "--no_such_flag", "--", "--scale", "tiny", "--parts", "env",
                         "--budget-s", "120")
    assert result.returncode == 2 and "== pretraining call: exit 2" in result.stdout
    assert "== GPU suite: exit 0" in result.stdout
