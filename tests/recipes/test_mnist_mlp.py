import json

import numpy as np
import pytest

from acceltrain.recipes import mnist_mlp


def test_preprocess_flattens_and_scales():
    x, y = mnist_mlp.preprocess(np.full((3, 28, 28), 255, np.uint8), np.array([1, 2, 3], np.uint8))
    assert x.shape == (3, 784) and x.dtype == np.float32 and x.max() == 1.0
    assert y.dtype == np.int32


def test_the_model_is_the_seeds():
    import keras

    model = mnist_mlp.build_model()
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert [layer.units for layer in dense] == [512, 256, 128, 64, 10]
    assert [layer.activation.__name__ for layer in dense] == ["relu"] * 4 + ["softmax"]
    assert isinstance(model.optimizer, keras.optimizers.RMSprop)
    assert model.loss == "sparse_categorical_crossentropy"


def test_a_learning_rate_is_constant_and_the_default_decays_to_zero():
    import keras

    constant = mnist_mlp.build_model(learning_rate=1e-2)
    assert float(constant.optimizer.learning_rate) == pytest.approx(1e-2)
    schedule = mnist_mlp.build_model(total_steps=1000).optimizer._learning_rate
    assert isinstance(schedule, keras.optimizers.schedules.CosineDecay)
    assert float(schedule(0)) == pytest.approx(mnist_mlp.PEAK_LEARNING_RATE)
    assert float(schedule(1000)) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_the_default_job_converges_on_every_seed(seed, tmp_path, cli):
    """The issue's bar: ≥ 97.5 % test accuracy in the default 20 epochs, seeds 0-4 (minutes each)."""
    result = cli("train", "--seed", seed, "--out", tmp_path / "run", timeout=1800)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["test_accuracy"] >= 0.975


@pytest.mark.slow
def test_eight_simulated_devices_reach_the_same_accuracy(tmp_path, cli):
    runs = {}
    for devices in (1, 8):
        out = tmp_path / f"d{devices}"
        result = cli("train", "--simulate-devices", devices, "--out", out, timeout=1800)
        assert result.returncode == 0, result.stderr
        runs[devices] = json.loads((out / "metrics.json").read_text())
    assert runs[8]["runtime"]["num_replicas"] == 8
    assert abs(runs[8]["test_accuracy"] - runs[1]["test_accuracy"]) <= 0.005
