"""Hub readiness: save/load of every head (safetensors, tied weights, the code and `auto_map` for remote code, loaded
in a process that cannot import `ran_hf`), resizing, bf16, `device_map="auto"`, and the converter's tokenizer."""

import filecmp
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from safetensors import safe_open

import ran_hf
from ran_hf import (
    RANForMaskedLM,
    RANForQuestionAnswering,
    RANForSequenceClassification,
    RANForTokenClassification,
    RANModel,
)
from ran_hf.convert_official_checkpoint import main as convert_main
from conftest import FIXTURES, randomize, tiny_config


AUTO_NAMES = {
    RANModel: "AutoModel",
    RANForMaskedLM: "AutoModelForMaskedLM",
    RANForSequenceClassification: "AutoModelForSequenceClassification",
    RANForTokenClassification: "AutoModelForTokenClassification",
    RANForQuestionAnswering: "AutoModelForQuestionAnswering",
}
OUTPUT_NAMES = {
    RANModel: ("last_hidden_state", "pooler_output"),
    RANForMaskedLM: ("logits",),
    RANForSequenceClassification: ("logits",),
    RANForTokenClassification: ("logits",),
    RANForQuestionAnswering: ("start_logits", "end_logits"),
}
CLASSES = list(AUTO_NAMES)
PACKAGE_DIR = os.path.dirname(os.path.abspath(ran_hf.__file__))


pytestmark = pytest.mark.usefixtures("one_thread")


def padded_batch(lengths=(37, 20, 9), vocab=97, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, vocab, (n,), generator=generator)
    ids[1] = ids[1].roll(5)  # one row with pads on both sides
    return ids, (ids != 0).long()


def outputs_of(model, ids, mask):
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
    return {name: getattr(out, name) for name in OUTPUT_NAMES[type(model)]}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Every head, randomized, saved to its own directory; with the in-process outputs on a padded batch."""
    root = tmp_path_factory.mktemp("saved_heads")
    ids, mask = padded_batch()
    result = {}
    for seed, cls in enumerate(CLASSES):
        torch.manual_seed(seed)
        model = randomize(cls(tiny_config(num_labels=3)), seed=seed).eval()
        path = root / cls.__name__
        model.save_pretrained(path)
        result[cls] = (model, str(path), outputs_of(model, ids, mask))
    return root, ids, mask, result


# ---------------------------------------------------------------------------------------------------------------------
# save_pretrained / from_pretrained
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_save_pretrained_writes_safetensors_config_and_code(saved, cls):
    _, _, _, result = saved
    _, path, _ = result[cls]
    files = set(os.listdir(path))
    assert {"config.json", "model.safetensors", "configuration_ran.py", "modeling_ran.py"} <= files
    assert not any(f.endswith((".bin", ".pt", ".pth")) for f in files)
    for name in ("configuration_ran.py", "modeling_ran.py"):  # the package's own sources, unchanged
        assert filecmp.cmp(os.path.join(path, name), os.path.join(PACKAGE_DIR, name), shallow=False)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "ran" and config["architectures"] == [cls.__name__]
    assert config["auto_map"]["AutoConfig"] == "configuration_ran.RANConfig"
    assert config["auto_map"][AUTO_NAMES[cls]] == f"modeling_ran.{cls.__name__}"


def test_auto_map_lists_every_head(saved):
    """A checkpoint saved from one head (e.g. the pretrained masked LM) must load into any head as remote code."""
    _, _, _, result = saved
    with open(os.path.join(result[RANForMaskedLM][1], "config.json")) as f:
        auto_map = json.load(f)["auto_map"]
    for cls, auto_name in AUTO_NAMES.items():
        assert auto_map.get(auto_name) == f"modeling_ran.{cls.__name__}"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_save_load_roundtrip_through_auto_classes(saved, cls):
    import transformers

    _, ids, mask, result = saved
    model, path, expected = result[cls]
    auto = getattr(transformers, AUTO_NAMES[cls])
    loaded, info = auto.from_pretrained(path, output_loading_info=True)
    assert type(loaded) is cls
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert not loaded.training  # from_pretrained returns an eval-mode model
    reference = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, reference[name]), name
    for name, value in outputs_of(loaded, ids, mask).items():
        assert torch.equal(value, expected[name]), name


def test_tied_weights_stay_tied_after_loading(saved):
    _, _, _, result = saved
    _, path, _ = result[RANForMaskedLM]
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "ran.embeddings.word_embeddings.weight" in keys and "lm_head.bias" in keys
    assert "lm_head.decoder.weight" not in keys  # stored once, as the embedding
    model = RANForMaskedLM.from_pretrained(path)
    embedding = model.ran.embeddings.word_embeddings.weight
    assert model.lm_head.decoder.weight is embedding and model.get_output_embeddings().weight is embedding
    assert model.lm_head.decoder.bias is model.lm_head.bias
    with torch.no_grad():  # tied, not merely equal: an update of the embedding moves the decoder
        embedding[5].add_(1.0)
    assert torch.equal(model.lm_head.decoder.weight[5], embedding[5])


@pytest.mark.parametrize("cls", [RANForSequenceClassification, RANForTokenClassification, RANForQuestionAnswering],
                         ids=lambda c: c.__name__)
def test_masked_lm_checkpoint_loads_into_every_task_head(saved, cls):
    _, _, _, result = saved
    mlm, path, _ = result[RANForMaskedLM]
    model, info = cls.from_pretrained(path, output_loading_info=True)
    assert not info["unexpected_keys"], f"lm_head weights should be ignored quietly: {info['unexpected_keys']}"
    assert all(not k.startswith("ran.") or k.startswith("ran.pooler.") for k in info["missing_keys"])
    for name, tensor in mlm.ran.state_dict().items():
        assert torch.equal(model.ran.state_dict()[name], tensor), name


# ---------------------------------------------------------------------------------------------------------------------
# resize, bf16, device_map
# ---------------------------------------------------------------------------------------------------------------------


def test_resize_token_embeddings_keeps_the_decoder_tied(tmp_path):
    torch.manual_seed(0)
    model = randomize(RANForMaskedLM(tiny_config())).eval()
    old_embedding = model.ran.embeddings.word_embeddings.weight.detach().clone()
    old_bias = model.lm_head.bias.detach().clone()
    model.resize_token_embeddings(120, mean_resizing=False)
    embedding = model.ran.embeddings.word_embeddings.weight
    assert model.config.vocab_size == 120 and embedding.shape == (120, 32)
    assert model.lm_head.decoder.weight is embedding
    assert model.lm_head.decoder.bias is model.lm_head.bias and model.lm_head.bias.shape == (120,)
    assert torch.equal(embedding[:97], old_embedding) and torch.equal(model.lm_head.bias[:97], old_bias)
    ids = torch.tensor([[5, 110, 119, 3, 100, 97, 12, 118, 1, 2]])
    out = model(ids, labels=ids)
    assert out.logits.shape == (1, 10, 120) and torch.isfinite(out.loss)
    out.loss.backward()
    assert embedding.grad[110].abs().sum() > 0  # the new rows are trained (input side and tied decoder)

    model.save_pretrained(tmp_path)
    loaded = RANForMaskedLM.from_pretrained(tmp_path).eval()
    assert loaded.lm_head.decoder.weight is loaded.ran.embeddings.word_embeddings.weight
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model.eval()(ids).logits)


@pytest.mark.parametrize("cls", CLASSES[1:], ids=lambda c: c.__name__)
def test_bf16_forward_is_close_to_fp32(saved, cls):
    _, ids, mask, result = saved
    _, path, expected = result[cls]
    model = cls.from_pretrained(path).to(torch.bfloat16)
    got = outputs_of(model, ids, mask)
    for name, value in got.items():
        assert value.dtype == torch.bfloat16
        assert bool(torch.isfinite(value).all()), name
        reference = expected[name]
        real = mask.bool() if reference.dim() == 2 and reference.shape == mask.shape else slice(None)
        error = float((value.float()[real] - reference[real]).abs().max())
        # bf16 keeps 8 bits of mantissa; through two RAN layers and a head the error is a few % of the output scale
        scale = float(reference[real].abs().max())
        assert error <= 0.1 * scale, f"{name}: bf16 error {error:.3g} vs scale {scale:.3g}"
    if cls is RANForQuestionAnswering:  # pads stay masked in bf16
        assert bool((got["start_logits"][mask == 0] == torch.finfo(torch.bfloat16).min).all())


def test_device_map_auto_and_no_split_modules(saved):
    from accelerate import infer_auto_device_map
    from accelerate.utils import compute_module_sizes

    _, ids, mask, result = saved
    _, path, expected = result[RANForMaskedLM]
    model = RANForMaskedLM.from_pretrained(path, device_map="auto")
    # a tiny model fits whole on the first accelerator, or on the CPU when there is none
    assert {p.device.type for p in model.parameters()} == {"cuda" if torch.cuda.is_available() else "cpu"}
    assert model.lm_head.decoder.weight is model.ran.embeddings.word_embeddings.weight
    device = model.device
    for name, value in outputs_of(model, ids.to(device), mask.to(device)).items():
        if device.type == "cpu":
            assert torch.equal(value, expected[name]), name
        else:
            torch.testing.assert_close(value.cpu(), expected[name], rtol=1e-4, atol=1e-5, msg=name)

    # what device_map="auto" does with several small devices: no RANLayer / RANEmbeddings is ever split
    assert {"RANLayer", "RANEmbeddings"} <= set(model._no_split_modules)
    layer_size = compute_module_sizes(model)["ran.layers.0"]
    budget = {i: int(1.3 * layer_size) for i in range(4)} | {"cpu": 10**9}
    device_map = infer_auto_device_map(model, max_memory=budget, no_split_module_classes=model._no_split_modules)
    assert len(set(device_map.values())) > 1  # the budget does force a split
    for name in device_map:
        assert not name.startswith(("ran.layers.0.", "ran.layers.1.", "ran.embeddings.")), f"split inside {name}"
    assert device_map["lm_head"] == device_map["ran.embeddings"]  # the tied decoder stays with its embedding
    # the check can fail: without _no_split_modules the same budget cuts a layer in pieces
    unconstrained = infer_auto_device_map(model, max_memory=budget, no_split_module_classes=[])
    assert any(name.startswith("ran.layers.0.") for name in unconstrained)


# ---------------------------------------------------------------------------------------------------------------------
# remote code, in a process that cannot import ran_hf
# ---------------------------------------------------------------------------------------------------------------------

HIDE_RAN_HF = textwrap.dedent(
    r'''
    import json, os, sys

    # Make the ran_hf package invisible: path entries holding it (the repository, an editable install's path hook)
    # and the editable-install meta path finder (`__editable___ran_hf_*_finder`).
    def _shows_ran_hf(entry):
        return "ran_hf" in str(entry) or os.path.isdir(os.path.join(entry or os.getcwd(), "ran_hf"))
    sys.path[:] = [p for p in sys.path if not _shows_ran_hf(p)]
    sys.meta_path[:] = [f for f in sys.meta_path if "ran_hf" not in repr(f) + getattr(f, "__module__", "")]
    sys.path_hooks[:] = [h for h in sys.path_hooks if "ran_hf" not in repr(h)]
    sys.path_importer_cache.clear()
    try:
        import ran_hf
    except ModuleNotFoundError:
        pass
    else:
        sys.exit(f"ran_hf is still importable from {ran_hf.__file__}")
    '''
)

REMOTE_SCRIPT = HIDE_RAN_HF + textwrap.dedent(
    r'''
    import torch
    import transformers

    torch.set_num_threads(1)
    jobs = json.loads(sys.argv[1])
    ids, mask = torch.load("inputs.pt")
    report, outputs = {}, {}
    for key, auto_name, path, names in jobs:
        model = getattr(transformers, auto_name).from_pretrained(path, trust_remote_code=True).eval()
        with torch.no_grad():
            out = model(ids, attention_mask=mask)
        outputs[key] = {name: getattr(out, name) for name in names}
        tied = None
        if hasattr(model, "lm_head"):
            tied = model.lm_head.decoder.weight is model.ran.embeddings.word_embeddings.weight
        report[key] = {"module": type(model).__module__, "class": type(model).__name__, "tied": tied}
    report["ran_hf_imported"] = any(m == "ran_hf" or m.startswith("ran_hf.") for m in sys.modules)
    torch.save(outputs, "outputs.pt")
    with open("report.json", "w") as f:
        json.dump(report, f)
    '''
)


def run_without_ran_hf(script, args, cwd):
    """Run `script` in a fresh isolated interpreter (`-I`: no PYTHONPATH, no user site) whose `sys.path` and import
    hooks cannot find ran_hf, offline, with cwd outside the repository."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_MODULES_CACHE=str(cwd / "modules"),
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-I", "-c", script, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]


def test_remote_code_loads_every_head_without_the_package(saved, tmp_path):
    _, ids, mask, result = saved
    torch.save((ids, mask), tmp_path / "inputs.pt")
    jobs = [[cls.__name__, AUTO_NAMES[cls], result[cls][1], OUTPUT_NAMES[cls]] for cls in CLASSES]
    mlm_path = result[RANForMaskedLM][1]  # a masked-LM checkpoint fine-tuned as another head
    jobs += [["mlm_as_" + cls.__name__, AUTO_NAMES[cls], mlm_path, OUTPUT_NAMES[cls][:1]]
             for cls in (RANModel, RANForTokenClassification)]
    run_without_ran_hf(REMOTE_SCRIPT, [json.dumps(jobs)], tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    outputs = torch.load(tmp_path / "outputs.pt")
    assert report.pop("ran_hf_imported") is False
    for key, info in report.items():
        assert info["module"].startswith("transformers_modules."), (key, info)
    for cls in CLASSES:
        assert report[cls.__name__]["class"] == cls.__name__
        for name, value in result[cls][2].items():
            torch.testing.assert_close(outputs[cls.__name__][name], value, rtol=0, atol=0)
    assert report[RANForMaskedLM.__name__]["tied"] is True
    assert report["mlm_as_RANModel"]["class"] == "RANModel"
    assert report["mlm_as_RANForTokenClassification"]["class"] == "RANForTokenClassification"
    mlm = result[RANForMaskedLM][0]
    with torch.no_grad():
        encoder = mlm.ran(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(outputs["mlm_as_RANModel"]["last_hidden_state"], encoder, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------------------------
# the converter's tokenizer
# ---------------------------------------------------------------------------------------------------------------------

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "long", "document", "model", "reads", "every", "word", "of",
         "##s", "##ing", "##ed", "."]


def write_vocab(path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    path.write_text("\n".join(tokens) + "\n")
    return tokens


def test_converter_vocab_writes_an_uncapped_bert_tokenizer(tmp_path):
    from transformers import AutoTokenizer, BertTokenizerFast

    fixture = np.load(os.path.join(FIXTURES, "fixture_mlm.npz"))
    meta = json.loads(str(fixture["config_json"]))
    table = json.loads(str(fixture["weight_names_json"]))
    np.savez(tmp_path / "released.npz", **{released: fixture[key] for key, _, released in table})
    (tmp_path / "config.json").write_text(json.dumps(meta["config"]))
    tokens = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "model"
    convert_main(["--checkpoint", str(tmp_path / "released.npz"), "--config", str(tmp_path / "config.json"),
                  "--output", str(out), "--vocab", str(tmp_path / "vocab.txt")])

    tokenizer = AutoTokenizer.from_pretrained(out)  # offline (conftest sets HF_HUB_OFFLINE=1): a local directory
    assert isinstance(tokenizer, BertTokenizerFast)
    assert tokenizer.get_vocab() == {token: i for i, token in enumerate(tokens)}
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id,
            tokenizer.mask_token_id) == (0, 1, 2, 3, 4)
    assert tokenizer.pad_token_id == RANForMaskedLM.from_pretrained(out).config.pad_token_id
    assert tokenizer.model_max_length > 10**9

    # lower-cased WordPiece
    encoded = tokenizer("The CATS sat on a Mat, reading.")
    assert tokenizer.convert_ids_to_tokens(encoded["input_ids"]) == [
        "[CLS]", "the", "cat", "##s", "sat", "on", "a", "mat", "[UNK]", "[UNK]", ".", "[SEP]"]
    assert set(encoded) == {"input_ids", "attention_mask"}  # RAN has no token types

    text = " ".join(WORDS[i % 14] for i in range(5000))  # 5,000 whole words
    for kwargs in ({}, {"truncation": True}):
        ids = tokenizer(text, **kwargs)["input_ids"]
        assert len(ids) == 5002 > 512, kwargs


# ---------------------------------------------------------------------------------------------------------------------
# the converter's directory, loaded where ran_hf is not installed
# ---------------------------------------------------------------------------------------------------------------------

CONVERTED_SCRIPT = HIDE_RAN_HF + textwrap.dedent(
    r'''
    import torch
    import transformers

    torch.set_num_threads(1)
    jobs, text = json.loads(sys.argv[1]), sys.argv[2]
    report, outputs = {}, {}
    for key, auto_name, path, names in jobs:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        batch = tokenizer([text, text[: len(text) // 3]], padding=True, return_tensors="pt")
        model = getattr(transformers, auto_name).from_pretrained(path, trust_remote_code=True).eval()
        with torch.no_grad():
            out = model(**batch)
        outputs[key] = {"input_ids": batch["input_ids"], **{name: getattr(out, name) for name in names}}
        report[key] = {"module": type(model).__module__, "class": type(model).__name__,
                       "tokenizer": type(tokenizer).__name__, "inputs": sorted(batch)}
    report["ran_hf_imported"] = any(m == "ran_hf" or m.startswith("ran_hf.") for m in sys.modules)
    torch.save(outputs, "outputs.pt")
    with open("report.json", "w") as f:
        json.dump(report, f)
    '''
)


def convert_released(fixture_name, work, vocab=True):
    """The converter CLI on a golden fixture written as the released checkpoint (variable names) plus the authors'
    config.json and a vocab.txt; returns the output directory."""
    fixture = np.load(os.path.join(FIXTURES, fixture_name))
    meta = json.loads(str(fixture["config_json"]))
    table = json.loads(str(fixture["weight_names_json"]))
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "released.npz", **{released: fixture[key] for key, _, released in table})
    (work / "config.json").write_text(json.dumps(meta["config"]))
    write_vocab(work / "vocab.txt")
    out = work / "model"
    convert_main(["--checkpoint", str(work / "released.npz"), "--config", str(work / "config.json"),
                  "--output", str(out), *(["--vocab", str(work / "vocab.txt")] if vocab else [])])
    return out


def test_converted_checkpoint_loads_without_the_package(tmp_path):
    from transformers import AutoTokenizer

    mlm = convert_released("fixture_mlm.npz", tmp_path / "mlm")
    encoder = convert_released("fixture_encoder.npz", tmp_path / "encoder")
    for out in (mlm, encoder):  # as complete as save_pretrained: the code, and every head in auto_map
        assert {"configuration_ran.py", "modeling_ran.py", "model.safetensors", "tokenizer.json"} <= set(
            os.listdir(out))
        saved_config = json.loads((out / "config.json").read_text())
        assert set(saved_config["auto_map"]) == {"AutoConfig", *AUTO_NAMES.values(), "AutoModelForCausalLM"}
    assert json.loads((mlm / "config.json").read_text())["architectures"] == ["RANForMaskedLM"]
    assert json.loads((encoder / "config.json").read_text())["architectures"] == ["RANModel"]

    text = "the long document model reads every word of the dogs sat on a mat . " * 12
    jobs = [["mlm", "AutoModelForMaskedLM", str(mlm), ["logits"]],
            ["encoder", "AutoModel", str(encoder), ["last_hidden_state", "pooler_output"]]]
    run_without_ran_hf(CONVERTED_SCRIPT, [json.dumps(jobs), text], tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    outputs = torch.load(tmp_path / "outputs.pt")
    assert report.pop("ran_hf_imported") is False
    in_process = {"mlm": RANForMaskedLM.from_pretrained(mlm).eval(),
                  "encoder": RANModel.from_pretrained(encoder).eval()}
    for key, _, path, names in jobs:
        assert report[key]["module"].startswith("transformers_modules."), report[key]
        assert report[key]["class"] == type(in_process[key]).__name__
        tokenizer = AutoTokenizer.from_pretrained(path)
        assert report[key]["tokenizer"] == type(tokenizer).__name__ and tokenizer.is_fast
        assert report[key]["inputs"] == ["attention_mask", "input_ids"]  # no token_type_ids
        batch = tokenizer([text, text[: len(text) // 3]], padding=True, return_tensors="pt")
        assert torch.equal(outputs[key]["input_ids"], batch["input_ids"]) and batch["input_ids"].shape[1] > 100
        with torch.no_grad():
            expected = in_process[key](**batch)
        for name in names:
            torch.testing.assert_close(outputs[key][name], getattr(expected, name), rtol=0, atol=0)


def test_converter_keeps_the_pooler_of_a_masked_lm_checkpoint(tmp_path):
    """A released checkpoint with both the masked-LM head and the cell pooler: the masked LM loads every weight it
    has, and `AutoModel` of the same directory gets the authors' pooler rather than a fresh one."""
    released = {}
    for name in ("fixture_encoder.npz", "fixture_mlm.npz"):  # the same config: the pooler of one, the head of the other
        fixture = np.load(os.path.join(FIXTURES, name))
        released.update({r: fixture[key] for key, _, r in json.loads(str(fixture["weight_names_json"]))})
        meta = json.loads(str(fixture["config_json"]))
    np.savez(tmp_path / "released.npz", **released)
    (tmp_path / "config.json").write_text(json.dumps(meta["config"]))
    out = tmp_path / "model"
    convert_main(["--checkpoint", str(tmp_path / "released.npz"), "--config", str(tmp_path / "config.json"),
                  "--output", str(out)])
    _, info = RANForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"]
    encoder, info = RANModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"]
    kernel = released["rannet/output-pooling-dense/kernel"]
    torch.testing.assert_close(encoder.pooler.pooling_dense.weight, torch.from_numpy(kernel.T.copy()))
