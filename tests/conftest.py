import contextlib
import json
import os
import re
import sys

import numpy as np

import pytest
import torch


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")

# The device the model tests run on: `RAN_TEST_DEVICE=cuda python -m pytest tests/model` (default cpu).
DEVICE = torch.device(os.environ.get("RAN_TEST_DEVICE", "cpu"))


def tiny_config(**overrides):
    from ran_hf import RANConfig

    kwargs = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, attention_head_size=8,
                  window_size=8, min_window_size=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    kwargs.update(overrides)
    return RANConfig(**kwargs)


def randomize(model, seed=0, bias_scale=0.1):
    """Give every weight (norm gains and biases included) a random value, so nothing is trivially zero or one."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
            elif name.endswith("bias"):
                p.copy_(bias_scale * torch.randn(p.shape, generator=generator))
            elif p.dim() == 2 and "embeddings" not in name:
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=generator))
    return model



def make_encoder(seed=0, **overrides):
    """A tiny `RANModel` with random weights (see `randomize`), in eval mode on the test device."""
    from ran_hf import RANModel

    torch.manual_seed(seed)
    return randomize(RANModel(tiny_config(**overrides)), seed=seed).to(DEVICE).eval()


def random_documents(lengths, vocab=97, seed=0):
    """One 1-D tensor of random token ids (never 0, the pad id) per length, on the test device."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=generator).to(DEVICE) for n in lengths]


def random_ids(batch, length, seed=0, vocab=97):
    """(batch, length) random token ids without the pad id 0, on the test device."""
    return torch.randint(1, vocab, (batch, length), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def pad_batch(docs, length=None, left=False):
    """Pad 1-D id tensors with 0 to `length` (default: the longest), on the right or the left: (ids, attention_mask)."""
    length = length or max(len(d) for d in docs)
    ids = torch.zeros(len(docs), length, dtype=torch.long, device=DEVICE)
    for i, d in enumerate(docs):
        if left:
            ids[i, length - len(d):] = d
        else:
            ids[i, : len(d)] = d
    return ids, (ids != 0).long()


def max_abs_error(a, b) -> float:
    return float((a - b).detach().abs().max())



README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def readme_block(marker: str, language: str = "python") -> str:
    """The code block right after `<!-- marker -->` in README.md, for tests that run the README's examples verbatim."""
    with open(README, encoding="utf-8") as f:
        match = re.search(rf"<!-- {marker} -->\n```{language}\n(.*?)```", f.read(), re.S)
    assert match, f"README.md lost its `<!-- {marker} -->` code block"
    return match.group(1)

@contextlib.contextmanager
def aot_eager_chain_blocks(block_size: int = 2):
    """`chain_implementation="compiled"` traced by Dynamo and AOTAutograd but run by eager kernels
    (`backend="aot_eager"`, through the public `chain_compiled.configure`): the same graphs as inductor's, without
    the kernel compile time and with eager's numerics, in blocks of `block_size` windows (tiny documents of 3 to 6
    windows then go through both the block graph and the one-window graph). The defaults come back on exit."""
    import torch._dynamo

    from ran_hf import chain_compiled

    torch._dynamo.reset()
    chain_compiled.configure(block_size=block_size, backend="aot_eager", fullgraph=True)
    try:
        yield
    finally:
        chain_compiled.configure()
        torch._dynamo.reset()


def chain_twins(model_class, chain: str, seed=0, **overrides):
    """An eager model and a copy whose cell chain runs as `chain` (`config.chain_implementation`), same weights,
    training mode, on the test device."""
    import copy

    torch.manual_seed(seed)
    eager = randomize(model_class(tiny_config(num_hidden_layers=3, **overrides)), seed=seed).to(DEVICE).train()
    other = copy.deepcopy(eager)
    other.config.chain_implementation = chain
    return eager, other


def loss_and_gradients(model, ids, mask):
    """A loss over every real token's output (or the logits), its backward, and (outputs, gradients by name)."""
    model.zero_grad(set_to_none=True)
    out = model(ids, attention_mask=mask)
    logits = out.logits if hasattr(out, "logits") else out.last_hidden_state
    loss = (logits.float().square() * mask[..., None]).sum() if logits.dim() == 3 else logits.square().sum()
    loss.backward()
    return logits.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_gradients_close(got: dict, expected: dict, relative: float):
    """Every parameter's gradient within `relative` of eager's, in norm (`||got - expected|| / ||expected||`): a
    compiled graph sums a gradient in another order, which moves its small elements by more than an elementwise
    tolerance allows and the gradient as a whole by float32 rounding only."""
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        assert (got[name] - grad).norm() <= relative * grad.norm() + 1e-12, name


@pytest.fixture
def device():
    """The model tests' device (`RAN_TEST_DEVICE`, default cpu)."""
    return DEVICE


@pytest.fixture
def fixtures_dir():
    return FIXTURES


@pytest.fixture
def restore_script_globals():
    """The run_scripts set torch's thread count and library log levels for the whole process (as a script should):
    restore them after each test that runs one in-process."""
    import logging

    import transformers

    threads = torch.get_num_threads()
    verbosity = transformers.utils.logging.get_verbosity()
    yield
    torch.set_num_threads(threads)
    transformers.utils.logging.set_verbosity(verbosity)
    logging.getLogger("run_scripts").setLevel(logging.NOTSET)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: single-threaded (OpenMP spin-waiting on a busy 2-core machine is far slower); restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def convert_fixture(fixture_path, work):
    """Run the converter CLI on a golden fixture, as a user would on the released checkpoint: an .npz keyed by the
    released variable names plus the authors' config.json. Returns (model directory, the fixture npz)."""
    from ran_hf.convert_official_checkpoint import main as convert_main

    fixture = np.load(fixture_path)
    meta = json.loads(str(fixture["config_json"]))
    table = json.loads(str(fixture["weight_names_json"]))
    np.savez(work / "released.npz", **{released: fixture[key] for key, _, released in table})
    with open(work / "config.json", "w") as f:
        json.dump(meta["config"], f)
    convert_main(["--checkpoint", str(work / "released.npz"), "--config", str(work / "config.json"),
                  "--output", str(work / "model")])
    return str(work / "model"), fixture
