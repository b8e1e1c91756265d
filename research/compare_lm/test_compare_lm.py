# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Tests of research/compare_lm on a tiny synthetic WikiText-like folder (offline, CPU, a few seconds)."""

import json
import math
import random

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from research.compare_lm import __main__ as cli
from research.compare_lm import data, models, train
from research.result_log import read_result_log


WINDOW = 8
BLOCK = 64
TINY_FLAGS = [
    "--window_size", str(WINDOW), "--block_size", str(BLOCK), "--tokens_per_step", "128", "--steps", "3",
    "--logging_steps", "1", "--vocab_size", "120", "--hidden_size", "16", "--num_layers", "2", "--num_heads", "2",
    "--head_size", "8", "--gpt2_inner_size", "32", "--eval_batch_tokens", "128", "--seeds", "0",
]
WORDS = ("river castle army song king league album season station church battle ship road island film band city "
         "player game war").split()


def wiki_lines(rng: random.Random, num_articles: int) -> list[str]:
    """WikiText-style lines: a title line, then paragraphs, with `<unk>` and ` @-@ ` like the real files."""
    lines = []
    for _ in range(num_articles):
        topic = rng.choice(WORDS)
        lines += [" ", f" = The {topic.title()} = ", " "]
        for _ in range(rng.randint(2, 4)):
            words = [rng.choice(WORDS + [topic] * 5) for _ in range(rng.randint(20, 50))]
            words[rng.randrange(len(words))] = "<unk>"
            lines.append(" " + " ".join(words) + " , the " + topic + " @-@ era . ")
    return lines


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wikitext-2")
    rng = random.Random(0)
    for name, articles in (("wiki.train.docshuf.tokens", 40), ("wiki.valid.tokens", 6), ("wiki.test.tokens", 6)):
        (folder / name).write_text("\n".join(wiki_lines(rng, articles)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tiny_run(data_dir, tmp_path_factory):
    torch.set_num_threads(1)
    output_dir = tmp_path_factory.mktemp("compare_lm")
    results = cli.main(["--data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_FLAGS])
    return results, output_dir


def test_results_json_has_every_model(tiny_run):
    returned, output_dir = tiny_run
    results = json.loads((output_dir / "results.json").read_text())
    assert results["models"].keys() == set(models.MODEL_NAMES)
    assert results["models"] == json.loads(json.dumps(returned["models"]))
    num_windows = BLOCK // WINDOW
    for name, entry in results["models"].items():
        for split in ("validation", "test"):
            ppl = entry[split]["ppl"]["mean"]
            assert math.isfinite(ppl) and 1.0 < ppl < 1e4, (name, split, ppl)
            windows = entry[split]["per_window_ppl"]
            assert len(windows) == num_windows and all(math.isfinite(x) and x > 1.0 for x in windows)
        assert entry["params"]["total"] > entry["params"]["non_embedding"] > 0
        assert ("test_fresh_state_per_window" in entry) == name.startswith("ran")
    runs = {run["model"]: run for run in results["runs"]}
    assert {name: run["rows_per_step"] for name, run in runs.items()} == {
        "ran": 128 // BLOCK, "ran_no_review": 128 // BLOCK, "gpt2_w": 128 // WINDOW, "gpt2_4w": 128 // (4 * WINDOW)}
    test_blocks = results["data"]["test_blocks"]
    assert test_blocks >= 2
    for run in runs.values():
        assert run["test"]["scored_tokens"] == test_blocks * (BLOCK - BLOCK // WINDOW)
        assert [point["step"] for point in run["loss_curve"]] == [1, 2, 3]
        assert run["train_wall_s"] > 0


def test_ran_window_one_is_its_own_fresh_state_and_later_windows_use_context(tiny_run):
    results, _ = tiny_run
    for name in ("ran", "ran_no_review"):
        run = next(r for r in results["runs"] if r["model"] == name)
        full, fresh = run["test"]["per_window_ppl"], run["test_fresh_state_per_window"]["per_window_ppl"]
        # window 1 has no earlier cell: reading it alone changes nothing
        assert full[0] == pytest.approx(fresh[0], rel=1e-5)
        # later windows read the cell of the windows before them, so a fresh state changes their scores
        assert max(abs(a - b) / b for a, b in zip(full[1:], fresh[1:])) > 1e-6


def test_table_and_tokenizer_cache(tiny_run, data_dir, tmp_path):
    results, output_dir = tiny_run
    table = (output_dir / "table.md").read_text()
    for entry in results["models"].values():
        assert f"| {entry['label']} |" in table
    assert "fresh state per window" in table
    meta = json.loads((output_dir / "tokenizer" / "compare_lm_tokenizer.json").read_text())
    assert meta["vocab_size"] == 120
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(output_dir / "tokenizer"))
    assert tokenizer.convert_tokens_to_ids("[UNK]") == 1
    assert tokenizer("a [UNK] b", add_special_tokens=False)["input_ids"].count(1) == 1


def test_finished_runs_are_reused_and_new_settings_retrain(tiny_run, data_dir, monkeypatch):
    results, output_dir = tiny_run
    flags = ["--data_dir", str(data_dir), "--output_dir", str(output_dir), *TINY_FLAGS]
    trained = []
    real_run_one = train.run_one

    def counting_run_one(name, seed, *args):
        trained.append((name, seed))
        return real_run_one(name, seed, *args)

    monkeypatch.setattr(train, "run_one", counting_run_one)
    again = cli.main([*flags, "--models", "ran", "gpt2_w"])
    assert trained == [] and again["models"]["ran"] == json.loads(json.dumps(results["models"]["ran"]))
    assert again["models"].keys() == {"ran", "gpt2_w"}
    # a new seed trains only that seed; a changed setting (here the step count) does not reuse the old runs
    assert cli.main([*flags, "--models", "gpt2_w", "--seeds", "0", "1"])["models"]["gpt2_w"]["seeds"] == [0, 1]
    assert trained == [("gpt2_w", 1)]
    cli.main([*flags, "--models", "gpt2_w", "--steps", "2"])
    assert trained == [("gpt2_w", 1), ("gpt2_w", 0)]
    runs = read_result_log(output_dir / "runs.jsonl")
    assert sorted((r["model"], r["seed"], r["setting"]["steps"]) for r in runs if r["model"] == "gpt2_w") == [
        ("gpt2_w", 0, 2), ("gpt2_w", 0, 3), ("gpt2_w", 1, 3)]


def test_gpt2_chunks_are_read_independently():
    args = cli.build_parser().parse_args(TINY_FLAGS)

    class Vocab:
        pad_token_id, sep_token_id = 0, 3

        def __len__(self):
            return 50

    torch.manual_seed(0)
    model = models.build_model("gpt2_w", args, Vocab())
    blocks = torch.randint(5, 50, (2, BLOCK))
    nll = train.token_nll(model, blocks, WINDOW, batch_tokens=3 * WINDOW)
    assert torch.isnan(nll[:, ::WINDOW]).all() and not torch.isnan(nll.view(2, -1, WINDOW)[:, :, 1:]).any()
    alone = train.token_nll(model, blocks[1:, 2 * WINDOW: 3 * WINDOW], WINDOW, batch_tokens=WINDOW)
    torch.testing.assert_close(nll[1:, 2 * WINDOW + 1: 3 * WINDOW], alone[:, 1:])
    scores = train.score(nll, WINDOW)
    assert scores["scored_tokens"] == 2 * (BLOCK - BLOCK // WINDOW)
    assert scores["loss"] == pytest.approx(nll.view(2, -1, WINDOW)[:, :, 1:].mean().item())


def test_segment_order_is_seeded_and_covers_every_segment():
    first = data.segment_order(10, 25, seed=1)
    assert first == data.segment_order(10, 25, seed=1)
    assert first != data.segment_order(10, 25, seed=2)
    assert sorted(first[:10]) == list(range(10)) and sorted(first[10:20]) == list(range(10))


@pytest.mark.parametrize(
    "flags, error, match",
    [
        (["--block_size", "60"], ValueError, "--block_size"),  # not a multiple of the window (8)
        (["--block_size", "16"], ValueError, "--block_size"),  # a multiple of W but not of the GPT-2 context 4W
        (["--tokens_per_step", "96"], ValueError, "--tokens_per_step"),
        (["--window_size", "0"], ValueError, "--window_size"),
    ],
)
def test_bad_arguments(data_dir, tmp_path, flags, error, match):
    with pytest.raises(error, match=match):
        cli.main(["--data_dir", str(data_dir), "--output_dir", str(tmp_path / "out"), *TINY_FLAGS, *flags])
    assert not (tmp_path / "out").exists()


def test_missing_data(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data_dir: no such directory"):
        cli.main(["--data_dir", str(tmp_path / "nowhere"), "--output_dir", str(tmp_path / "out"), *TINY_FLAGS])
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "wiki.valid.tokens").write_text(" some text \n")
    with pytest.raises(FileNotFoundError, match="--data_dir .* lacks wiki.train.docshuf.tokens, wiki.test.tokens"):
        cli.main(["--data_dir", str(tmp_path / "partial"), "--output_dir", str(tmp_path / "out"), *TINY_FLAGS])
    assert not (tmp_path / "out").exists()


def test_gpt2_only_needs_its_own_context(data_dir, tmp_path):
    """Without the 4W GPT-2, a block of 2W is valid; too few eval tokens for one block is a clear error."""
    flags = ["--data_dir", str(data_dir), "--output_dir", str(tmp_path / "out"), *TINY_FLAGS]
    with pytest.raises(ValueError, match="fewer than one --block_size"):
        cli.main([*flags, "--max_eval_tokens", str(BLOCK - 1)])
    results = cli.main([*flags, "--block_size", "16", "--models", "gpt2_w", "--steps", "1"])
    assert list(results["models"]) == ["gpt2_w"]
    assert len(results["models"]["gpt2_w"]["test"]["per_window_ppl"]) == 2


def test_gutenberg_books_are_split_by_book(tmp_path):
    """`--corpus gutenberg`: whole books go to one split each, paragraphs become lines, and every model trains."""
    import gzip

    rng = random.Random(1)
    folder = tmp_path / "gutenberg"
    folder.mkdir()
    with gzip.open(folder / "books-00.jsonl.gz", "wt", encoding="utf-8") as f:
        for number in range(10):
            paragraphs = []
            for _ in range(12):
                words = [rng.choice(WORDS) for _ in range(rng.randint(20, 40))]
                # hard-wrapped lines inside a paragraph, a blank line between paragraphs
                paragraphs.append("\n".join(" ".join(words[i: i + 8]) for i in range(0, len(words), 8)))
            f.write(json.dumps({"id": f"pg{number}", "title": f"Book {number}", "text": "\n\n".join(paragraphs)}) + "\n")
    splits = data.gutenberg_splits(str(folder))
    books = splits["books"]
    assert len(books["validation"]) == len(books["test"]) == data.GUTENBERG_HELD_OUT_BOOKS
    assert sorted(books["train"] + books["validation"] + books["test"]) == sorted(f"pg{i}" for i in range(10))
    assert len(splits["test"]) == 12 * len(books["test"]) and all("\n" not in line for line in splits["test"])
    assert splits["books"] == data.gutenberg_splits(str(folder))["books"]  # fixed, not drawn per run

    out = tmp_path / "out"
    results = cli.main(["--corpus", "gutenberg", "--data_dir", str(folder), "--output_dir", str(out),
                               *TINY_FLAGS, "--models", "ran", "gpt2_w"])
    assert results["data"]["books"] == books and results["data"]["corpus"] == "gutenberg"
    assert all(math.isfinite(m["test"]["ppl"]["mean"]) for m in results["models"].values())
    meta = json.loads((out / "tokenizer" / "compare_lm_tokenizer.json").read_text())
    assert meta["train_books"] == books["train"]
    with pytest.raises(FileNotFoundError, match="books-"):
        cli.main(["--corpus", "gutenberg", "--data_dir", str(tmp_path), "--output_dir", str(out), *TINY_FLAGS])


def test_data_comes_only_from_data_dir(tmp_path):
    """Without --data_dir the driver stops with an error that says what the folder must hold."""
    with pytest.raises(ValueError, match=r"--data_dir is required.*WikiText-2.*wiki\.train\.docshuf\.tokens"):
        cli.main(["--output_dir", str(tmp_path / "out")])
    with pytest.raises(ValueError, match=r"--data_dir is required.*Gutenberg.*books-"):
        cli.main(["--corpus", "gutenberg", "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
