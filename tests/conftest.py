import os
import sys

import pytest
import torch


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


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


@pytest.fixture
def fixtures_dir():
    return FIXTURES
