"""Pretraining on a streamed corpus (run_mlm.py --train_dirs, train_tokenizer.py --train_dirs) on a tiny synthetic
corpus of gzipped jsonl shards written to a tmp dir: the tokenizer trains on the training split of the stream, blocks
never cross two documents, the stream yields exactly the blocks of a plain reading, validation loss and accuracy
are logged (the same with masked-only logits), and a resumed run ends where an uninterrupted one does."""

import gzip
import json
import random
import shutil

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoTokenizer

from run_scripts import run_mlm, train_tokenizer
from run_scripts.helpers.corpus import corpus_shards, read_blocks, streamed_blocks, streamed_documents
from run_scripts.helpers.pretraining import masked_accuracy, masked_predictions


MODEL = ["--hidden_size", "16", "--num_hidden_layers", "1", "--num_attention_heads", "2", "--attention_head_size", "8",
         "--window_size", "16", "--min_window_size", "4", "--hidden_dropout_prob", "0",
         "--attention_probs_dropout_prob", "0", "--torch_threads", "1", "--use_cpu", "--report_to", "none",
         "--disable_tqdm", "True", "--logging_steps", "1", "--dataloader_pin_memory", "False"]
BLOCK = 40
HELD_OUT_WORD = "zyzzyva"  # only in the validation book


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def book(rng, words, paragraphs):
    return "\n\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 25))) + "."
                       for _ in range(paragraphs))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two shards with a split field (7 train books, 1 validation book) and one shard without it (2 books): each
    book has words of its own (`b3w0 ... b3w7`), so a block that crossed two books would hold words of both."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    books = {}
    split_dir = _mkdir(root / "split")
    for shard, ids in [("books-00.jsonl.gz", [0, 1, 2, 3]), ("books-01.jsonl.gz", [4, 5, 6, 7])]:
        with gzip.open(split_dir / shard, "wt", encoding="utf-8") as f:
            for i in ids:
                words = [f"b{i}w{j}" for j in range(8)] + ["the", "and"]
                if i == 5:
                    words += [HELD_OUT_WORD] * 4
                books[i] = book(rng, words, rng.randint(2, 12))
                f.write(json.dumps({"id": f"pg{i}", "text": books[i], "split": "validation" if i == 5 else "train"})
                        + "\n")
    with open(_mkdir(root / "plain") / "more.jsonl", "w", encoding="utf-8") as f:
        for i in (8, 9):
            books[i] = book(rng, [f"b{i}w{j}" for j in range(8)] + ["the", "and"], 6)
            f.write(json.dumps({"text": books[i]}) + "\n")
    return {"dirs": [str(root / "split"), str(root / "plain")], "books": books}


def _mkdir(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer.main(["--train_dirs", *corpus["dirs"], "--split_column", "split", "--vocab_size", "200",
                          "--min_frequency", "1", "--output_dir", str(out)])
    return str(out)


def test_tokenizer_trains_on_the_streamed_training_split(corpus, tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    stats = json.load(open(f"{tokenizer_dir}/tokenizer_stats.json"))
    assert stats["documents"] == 9  # 10 books, one held out
    assert stats["heldout"]["documents"] == 1 and stats["heldout"]["pieces_per_word"] >= 1
    assert len(tok.tokenize("b3w1")) == 1  # a training word is whole
    assert tok.tokenize(HELD_OUT_WORD) != [HELD_OUT_WORD]  # the held-out book was not trained on
    assert "held-out" in open(f"{tokenizer_dir}/README.md").read()


def reference_blocks(corpus, tok, split):
    """Blocks by hand: every document of the split tokenized whole, cut every BLOCK - 2 tokens, framed by
    [CLS] .. [SEP], a last piece kept if the block has at least 8 tokens."""
    blocks = []
    for i, text in corpus["books"].items():
        if (i == 5) != (split == "validation"):
            continue
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids), BLOCK - 2):
            piece = [tok.cls_token_id, *ids[start: start + BLOCK - 2], tok.sep_token_id]
            if len(piece) >= 8:
                blocks.append(piece)
    return blocks


def stream(corpus, tok, split="train"):
    docs = streamed_documents(corpus_shards(corpus["dirs"], "train_dirs"), split_column="split", split=split)
    return streamed_blocks(docs, tok, block_size=BLOCK, min_block_size=8, documents_per_batch=3)


def test_stream_yields_the_blocks_of_a_plain_reading(corpus, tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    for split in ("train", "validation"):
        streamed = [row["input_ids"] for row in stream(corpus, tok, split)]
        assert streamed == reference_blocks(corpus, tok, split)
    held_out, lengths = read_blocks(corpus_shards(corpus["dirs"], "train_dirs"), tok, BLOCK, 8,
                                    split_column="split", split="validation")
    assert held_out == reference_blocks(corpus, tok, "validation")
    assert lengths == [len(tok(corpus["books"][5])["input_ids"])]
    shuffled = [row["input_ids"] for row in stream(corpus, tok).shuffle(seed=1, buffer_size=5)]
    assert sorted(shuffled) == sorted(reference_blocks(corpus, tok, "train")) != shuffled


def test_blocks_never_cross_documents(corpus, tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    blocks = [row["input_ids"] for row in stream(corpus, tok)]
    assert len(blocks) > 2 * len(corpus["books"])  # books span several blocks
    for block in blocks:
        assert len(block) <= BLOCK and block[0] == tok.cls_token_id and block[-1] == tok.sep_token_id
        books = {word.split("w")[0] for word in tok.decode(block[1:-1]).split() if word.startswith("b")}
        assert len(books) == 1, books


def run(corpus, tokenizer_dir, out, *extra):
    return run_mlm.main(["--train_dirs", *corpus["dirs"], "--split_column", "split", "--tokenizer_name",
                         tokenizer_dir, "--output_dir", str(out), "--block_size", str(BLOCK), "--min_block_size", "8",
                         "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
                         "--shuffle_buffer_size", "6", "--eval_strategy", "steps", "--eval_steps", "2",
                         "--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "5", *MODEL, *extra])


@pytest.fixture(scope="module")
def trained(corpus, tokenizer_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlm")
    results = run(corpus, tokenizer_dir, out, "--max_steps", "4", "--config_overrides", "sparse_prediction=true")
    return out, results


def test_validation_loss_and_accuracy_are_logged(trained):
    out, results = trained
    history = json.load(open(out / "trainer_state.json"))["log_history"]
    evals = [h for h in history if "eval_accuracy" in h]
    assert [h["step"] for h in evals][:2] == [2, 4]
    assert all(0 <= h["eval_accuracy"] <= 1 and np.isfinite(h["eval_loss"]) for h in evals)
    assert 0 <= results["eval"]["eval_accuracy"] <= 1
    assert "accuracy" in (out / "README.md").read_text()


def test_masked_only_logits_evaluate_like_the_dense_head(trained, corpus, tmp_path):
    """The saved model evaluated on the same masked validation blocks: same loss and accuracy either way."""
    out, _ = trained
    validation = tmp_path / "valid.jsonl"
    validation.write_text(json.dumps({"text": corpus["books"][5]}) + "\n")
    metrics = {}
    for sparse in ("true", "false"):
        metrics[sparse] = run_mlm.main(["--model_name_or_path", str(out), "--validation_file", str(validation),
                                        "--do_eval", "--output_dir", str(tmp_path / sparse), "--block_size", "32",
                                        "--config_overrides", f"sparse_prediction={sparse}", *MODEL])["eval"]
    assert metrics["true"]["eval_loss"] == pytest.approx(metrics["false"]["eval_loss"], abs=1e-5)
    assert metrics["true"]["eval_accuracy"] == metrics["false"]["eval_accuracy"]


def test_masked_accuracy_from_dense_and_sparse_logits():
    labels = torch.tensor([[-100, 7, -100, 3], [5, -100, -100, -100]])
    dense_logits = torch.nn.functional.one_hot(torch.tensor([[1, 7, 2, 4], [5, 0, 0, 0]]), 10).float()
    sparse_logits = dense_logits[labels != -100]
    for logits in (dense_logits, sparse_logits):
        predictions = masked_predictions(logits, labels)
        assert predictions.shape == labels.shape
        result = masked_accuracy(transformers.EvalPrediction(predictions=predictions.numpy(), label_ids=labels.numpy()))
        assert result["accuracy"] == pytest.approx(2 / 3)


def test_resumed_run_ends_where_an_uninterrupted_one_does(trained, corpus, tokenizer_dir, tmp_path):
    """Resuming the streamed run from its step-2 checkpoint replays the stream and the masks: the weights after
    step 4 are the uninterrupted run's."""
    out, _ = trained
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "checkpoint-2", resumed / "checkpoint-2")
    run(corpus, tokenizer_dir, resumed, "--max_steps", "4", "--config_overrides", "sparse_prediction=true",
        "--resume_from_checkpoint", "last")
    expected, got = load_file(out / "model.safetensors"), load_file(resumed / "model.safetensors")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0, msg=name)
    losses = lambda d: [h["loss"] for h in json.load(open(d / "trainer_state.json"))["log_history"] if "loss" in h]
    assert losses(resumed)[-2:] == losses(out)[-2:]


def test_bad_arguments(corpus, tokenizer_dir, tmp_path):
    with pytest.raises(ValueError, match="--max_steps"):
        run(corpus, tokenizer_dir, tmp_path / "a")
    with pytest.raises(ValueError, match="--tokenizer_name"):
        run_mlm.main(["--train_dirs", *corpus["dirs"], "--max_steps", "1", "--output_dir", str(tmp_path / "b"),
                      *MODEL])
    with pytest.raises(FileNotFoundError, match="--train_dirs"):
        run_mlm.main(["--train_dirs", str(tmp_path / "missing"), "--max_steps", "1", "--tokenizer_name",
                      tokenizer_dir, "--output_dir", str(tmp_path / "c"), *MODEL])
    with pytest.raises(ValueError, match="no document has split == 'dev'"):
        run(corpus, tokenizer_dir, tmp_path / "d", "--max_steps", "1", "--validation_split", "dev")


def test_step_speed_script_runs(tmp_path):
    """research/pretraining/step_speed.py on a tiny model: one row per case, with positive timings."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "research" / "pretraining" / "step_speed.py"
    spec = importlib.util.spec_from_file_location("step_speed", path)
    step_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_speed)
    rows = step_speed.main(["--hidden_sizes", "32", "--head_size", "16", "--blocks", "48", "--threads", "1",
                            "--layers", "1", "--window", "16", "--vocab_sizes", "60", "--rounds", "1", "--warmup", "0",
                            "--extra", "32:48:1:1:80", "--json", str(tmp_path / "speed.json")])
    assert [(r["sparse"], r["vocab"]) for r in rows] == [(0, 60), (1, 60), (1, 80)]
    assert all(r["tokens_per_s"] > 0 for r in rows)
    assert json.load(open(tmp_path / "speed.json"))["rows"] == rows

