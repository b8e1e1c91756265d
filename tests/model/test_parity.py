"""Parity with the authors' package: golden fixtures made by rannet==0.3.1 (TensorFlow), loaded through the converter.

`tests/fixtures/fixture_*.npz` are data produced by the authors' code (see tests/fixtures/README.md).
"""

import json
import os

import numpy as np
import pytest
import torch

from ran_hf import RANConfig, RANModel
from ran_hf.convert_official_checkpoint import main as convert_main
from conftest import DEVICE, FIXTURES, convert_fixture


ENCODER = os.path.join(FIXTURES, "fixture_encoder.npz")
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Run the converter CLI on the fixture: an .npz keyed by the released checkpoint variable names."""
    path, fixture = convert_fixture(ENCODER, tmp_path_factory.mktemp("converted"))
    return path, fixture, json.loads(str(fixture["config_json"]))


def max_error(tensor, expected):
    return float(np.abs(tensor.detach().cpu().numpy() - expected).max())


def test_converted_directory_loads_with_all_weights(converted):
    path, _, _ = converted
    model, info = RANModel.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert sum(p.numel() for p in model.parameters()) == 150_912  # the authors' count_params() for this config


@pytest.mark.parametrize("case", ["b2_l70", "b1_l10", "b1_l16", "b1_l32", "b1_l66"])
def test_encoder_outputs_match_rannet(converted, case):
    path, fixture, _ = converted
    ids = torch.from_numpy(fixture[f"{case}/input_ids"]).long().to(DEVICE)
    model = RANModel.from_pretrained(path).to(DEVICE).eval()
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    assert max_error(out.last_hidden_state, fixture[f"{case}/sequence_output"]) <= TOLERANCE
    assert max_error(out.pooler_output, fixture[f"{case}/cell"]) <= TOLERANCE
    assert max_error(out.last_cell, fixture[f"{case}/last_cell"]) <= TOLERANCE
    assert max_error(out.hidden_states[0], fixture[f"{case}/debug_embedding_layernorm"]) <= TOLERANCE
    assert max_error(out.hidden_states[1], fixture[f"{case}/debug_ran0_sequence_output"]) <= TOLERANCE

    # layer 0's last cell is the cell layer 1 starts from: read it from a one-layer model with the same weights
    one_layer = RANModel.from_pretrained(path, num_hidden_layers=1).to(DEVICE).eval()
    with torch.no_grad():
        assert max_error(one_layer(ids).last_cell, fixture[f"{case}/debug_ran0_last_cell"]) <= TOLERANCE


@pytest.mark.parametrize("case", ["b2_l70", "b1_l10", "b1_l32", "b1_l66"])
@pytest.mark.parametrize(
    "overrides, output, expected",
    [
        (dict(pooler_mode="cell_mean"), "pooler_output", "cell_transformed_meanpool"),
        (dict(cell_pooling="mean"), "last_cell", "cell_pool_mean"),
        (dict(cell_pooling="max"), "last_cell", "cell_pool_max"),
    ],
)
def test_pooling_variants_match_rannet(converted, case, overrides, output, expected):
    path, fixture, _ = converted
    ids = torch.from_numpy(fixture[f"{case}/input_ids"]).long().to(DEVICE)
    model = RANModel.from_pretrained(path, **overrides).to(DEVICE).eval()
    with torch.no_grad():
        out = model(ids)
    assert max_error(getattr(out, output), fixture[f"{case}/{expected}"]) <= TOLERANCE


def test_converter_rejects_incomplete_checkpoints(converted, tmp_path):
    _, fixture, meta = converted
    table = json.loads(str(fixture["weight_names_json"]))
    weights = {released: fixture[key] for key, _, released in table}
    del weights["rannet/ran-1/concat-layernorm/gamma"]
    np.savez(tmp_path / "broken.npz", **weights)
    with open(tmp_path / "config.json", "w") as f:
        json.dump(meta["config"], f)
    with pytest.raises(KeyError, match="ran-1/concat-layernorm/gamma"):
        convert_main(["--checkpoint", str(tmp_path / "broken.npz"), "--config", str(tmp_path / "config.json"),
                      "--output", str(tmp_path / "out")])
    with pytest.raises(FileNotFoundError, match="--checkpoint"):
        convert_main(["--checkpoint", str(tmp_path / "nope.npz"), "--config", str(tmp_path / "config.json"),
                      "--output", str(tmp_path / "out")])


def test_converted_config_maps_the_authors_keys(converted):
    path, _, meta = converted
    config = RANConfig.from_pretrained(path)
    official = meta["config"]
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.attention_head_size,
            config.window_size, config.min_window_size) == (
        official["embedding_size"], official["ran_layers"], official["head_num"], official["head_size"],
        official["window_size"], official["min_window_size"])
    assert config.hidden_act == "swish" and config.layer_norm_eps == 1e-7 and config.cell_pooling == "last"
