"""The decoding-step counter: a RAN step that finishes no window reads only its layout's values from the device
(no layer commits), and launches several times GPT-2's operations per layer; GPT-2 reads nothing."""

from benchmarks import decode_ops


def test_decode_step_counts_per_layer_on_a_tiny_model():
    result = decode_ops.main(["--hidden-size", "32", "--heads", "2", "--head-size", "16", "--layers", "3",
                              "--window", "16", "--vocab-size", "101", "--context", "40", "--warm-tokens", "3"])
    ran, gpt2 = result["models"]["ran"], result["models"]["gpt2"]
    assert ran["per_layer"]["host_reads"] == 0 < ran["step"]["host_reads"]  # token 44 of 16-token windows
    assert gpt2["step"]["host_reads"] == 0
    assert 0 < gpt2["per_layer"]["aten_ops"] < ran["per_layer"]["aten_ops"]
    assert "aten::dropout" not in ran["step"]["top_ops"]  # eval-mode dropout launches nothing
    assert ran["step"]["aten_ops"] > 3 * ran["per_layer"]["aten_ops"]  # the layout's own operations come on top
