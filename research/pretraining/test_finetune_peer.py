"""The peers' classifiers: chunk-and-pool reads every 512-token chunk and equals plain BERT (or ModernBERT) on a short
document; the fine-tuning driver runs run_classification.py in both modes on a tiny BERT and a tiny ModernBERT peer."""

import json
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoModel, AutoTokenizer, BertConfig, BertForMaskedLM, ModernBertConfig, ModernBertForMaskedLM

from research.pretraining.bert_peer import CHUNK_POOL_CLASSES
from research.pretraining.finetune_peer import main, peer_arguments


STUDY = Path(__file__).resolve().parent


def tiny_config(**kwargs):
    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=kwargs.pop("max_position_embeddings", 12), pad_token_id=0,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kwargs)


def document(length, cls=2, sep=3):
    return [cls] + torch.randint(5, 50, (length - 2,)).tolist() + [sep]


def tiny_modernbert_config(**kwargs):
    return ModernBertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=kwargs.pop("max_position_embeddings", 12),
                            pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3,
                            global_attn_every_n_layers=1, **kwargs)


TINY_CONFIGS = {"bert": tiny_config, "modernbert": tiny_modernbert_config}


@pytest.mark.parametrize("model_type", ["bert", "modernbert"])
def test_chunk_pool_reads_every_chunk_and_equals_the_encoder_on_a_short_document(model_type):
    torch.manual_seed(0)
    model = CHUNK_POOL_CLASSES[model_type](TINY_CONFIGS[model_type](num_labels=3)).eval()
    short, long = document(9), document(25)  # pieces of 10: the long one is 3 chunks (10 + 10 + 3)
    ids = torch.zeros(2, 25, dtype=torch.long)
    ids[0, :9], ids[1] = torch.tensor(short), torch.tensor(long)
    mask = (ids != 0).long()
    chunk_ids, chunk_mask, rows = model.chunk(ids, mask)
    assert rows.tolist() == [0, 1, 1, 1] and chunk_mask.sum(-1).tolist() == [9, 12, 12, 5]
    assert chunk_ids[1, 0] == 2 and chunk_ids[1, 11] == 3 and chunk_ids[2, 1:11].tolist() == long[11:21]
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        alone = model(torch.tensor([short]), attention_mask=torch.ones(1, 9, dtype=torch.long)).logits
        cls = model.base_model(torch.tensor([short])).last_hidden_state[:, 0]
        chunks = model.base_model(chunk_ids[1:], attention_mask=chunk_mask[1:]).last_hidden_state[:, 0]
    torch.testing.assert_close(logits[0], alone[0])  # padding and batch-mates change nothing
    torch.testing.assert_close(logits[0], model.classifier(cls)[0])
    torch.testing.assert_close(logits[1], model.classifier(chunks.mean(0)))


def tiny_peer(folder: Path, model_type: str) -> str:
    """A tiny BertForMaskedLM or ModernBertForMaskedLM with the study's 16k tokenizer, saved as `collect.py` saves
    the peers."""
    tokenizer = AutoTokenizer.from_pretrained(STUDY / "tokenizer-16k")
    config = TINY_CONFIGS[model_type](max_position_embeddings=512)
    config.vocab_size, config.pad_token_id = len(tokenizer), tokenizer.pad_token_id
    torch.manual_seed(0)
    {"bert": BertForMaskedLM, "modernbert": ModernBertForMaskedLM}[model_type](config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


RUN = ["--torch_threads", "1", "--use_cpu", "--disable_tqdm", "True", "--max_train_samples", "16",
       "--max_eval_samples", "8", "--max_predict_samples", "8", "--max_steps", "1", "--per_device_train_batch_size",
       "4", "--per_device_eval_batch_size", "4"]


@pytest.fixture
def script_globals():
    """run_classification.py sets torch's thread count and the library's log level for its process: put them back."""
    import transformers

    threads, verbosity = torch.get_num_threads(), transformers.utils.logging.get_verbosity()
    yield
    torch.set_num_threads(threads)
    transformers.utils.logging.set_verbosity(verbosity)


@pytest.mark.usefixtures("script_globals")
@pytest.mark.parametrize("model_type", ["bert", "modernbert"])
def test_the_driver_fine_tunes_the_peer_in_both_modes(tmp_path, model_type, capsys):
    checkpoint = tiny_peer(tmp_path / "peer", model_type)
    encoder = AutoModel.from_pretrained(checkpoint).state_dict()
    names = {"first512": {"bert": "BertForSequenceClassification",
                          "modernbert": "ModernBertForSequenceClassification"}[model_type],
             "chunks": CHUNK_POOL_CLASSES[model_type].__name__}
    for mode in ("first512", "chunks"):
        out = tmp_path / mode
        results = main(["--checkpoint", checkpoint, "--mode", mode, "--output_dir", str(out), *RUN,
                        "--learning_rate", "0"])  # lr 0: the saved encoder is the checkpoint's
        assert results["test"]["test_samples"] == 8
        assert {"test_over_512_accuracy", "test_le_512_accuracy"} & set(results["test"])
        saved = json.loads((out / "config.json").read_text())
        assert saved["architectures"] == [names[mode]]
        table = capsys.readouterr().out.split("***** test results")[-1]
        assert f"| {names[mode]} (this run) |" in table and "RAN" not in table  # the table names the model it ran
        loaded = CHUNK_POOL_CLASSES[model_type].from_pretrained(out).base_model.state_dict()
        for name, value in encoder.items():
            if name in loaded:  # BERT's unused pooler is in AutoModel's encoder only
                torch.testing.assert_close(loaded[name], value, msg=name)
        assert set(loaded) <= set(encoder)
    first512 = peer_arguments(checkpoint, "first512", [])
    assert first512[first512.index("--max_length") + 1] == "512"
    with pytest.raises(ValueError, match="first512 reads the first 512 tokens"):
        peer_arguments(checkpoint, "first512", ["--max_length", "1024"])
    from run_scripts import run_classification
    assert run_classification.build_model.__module__ == "run_scripts.helpers.model_args"  # put back after the run


def test_chunks_mode_names_the_model_types_it_reads(tmp_path):
    folder = tmp_path / "gpt2"
    transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2).save_pretrained(folder)
    with pytest.raises(ValueError, match="bert or modernbert checkpoint.*'gpt2' model"):
        main(["--checkpoint", str(folder), "--mode", "chunks", "--output_dir", str(tmp_path / "out")])
