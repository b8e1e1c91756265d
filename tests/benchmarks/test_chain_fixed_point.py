"""The fixed-point test of the cell chain: n sweeps over n windows reproduce the model's own chain (the shift of the
guesses by one window is right), and with a reachable tolerance it stops as soon as the error is below it."""

from benchmarks import chain_fixed_point


def test_n_sweeps_reproduce_the_chain_of_every_layer():
    result = chain_fixed_point.main(["--random-weights", "--length", "700", "--tolerance", "1e-12"])
    assert [layer["layer"] for layer in result["layers"]] == [0, 1, 2, 3]
    for layer in result["layers"]:
        errors = layer["max_relative_error_per_sweep"]
        assert layer["windows"] == len(errors) == 3
        assert errors[0] > 0.1  # the guess s_0 is wrong for windows 2 and 3
        assert errors[-1] < 1e-4


def test_the_sweeps_stop_at_the_tolerance():
    result = chain_fixed_point.main(["--length", "700", "--tolerance", "1e-3"])
    for layer in result["layers"]:
        errors = layer["max_relative_error_per_sweep"]
        assert layer["sweeps_to_tolerance"] == len(errors) <= 3
        assert errors[-1] < 1e-3 <= min(errors[:-1], default=1.0)
