import numpy as np
import pytest

from acceltrain import decisions
from acceltrain.errors import UsageError


@pytest.mark.parametrize(
    "requested, loaded, env, jax_importable, expected",
    [
        (None, None, None, True, "jax"),
        (None, None, None, False, "tensorflow"),
        (None, None, "tensorflow", True, "tensorflow"),
        ("tensorflow", None, "jax", True, "tensorflow"),  # asked for beats the env
        (None, "tensorflow", "jax", True, "tensorflow"),  # already loaded beats everything
        ("jax", "jax", None, True, "jax"),
    ],
)
def test_choose_backend(requested, loaded, env, jax_importable, expected):
    choice, reason = decisions.choose_backend(requested, loaded, env, jax_importable)
    assert choice == expected
    assert reason


def test_choose_backend_refuses_a_switch_after_keras_loaded():
    with pytest.raises(UsageError, match=r"backend='tensorflow'.*already loaded with the 'jax'.*backend='jax'"):
        decisions.choose_backend("tensorflow", "jax", None, True)


@pytest.mark.parametrize("requested, env", [("torch", None), (None, "torch"), ("JAX", None)])
def test_choose_backend_names_an_unsupported_backend(requested, env):
    with pytest.raises(UsageError, match=r"'(torch|JAX)'.*Valid: jax, tensorflow"):
        decisions.choose_backend(requested, None, env, True)


@pytest.mark.parametrize(
    "requested, num_devices, expected",
    [("auto", 1, "none"), ("auto", 2, "data"), ("auto", 8, "data"), ("none", 8, "none"), ("data", 1, "data"),
     ("fsdp", 8, "fsdp"), ("model", 8, "model"), ("fsdp", 1, "none"), ("model", 1, "none")],
)
def test_choose_distribution(requested, num_devices, expected):
    assert decisions.choose_distribution(requested, num_devices)[0] == expected


def test_choose_distribution_rejects_unknown():
    with pytest.raises(UsageError, match=r"distribution='zero'.*Valid: auto, data, fsdp, model, none"):
        decisions.choose_distribution("zero", 8)


@pytest.mark.parametrize("requested", ["fsdp", "model"])
def test_sharded_distributions_are_refused_on_tensorflow(requested):
    with pytest.raises(UsageError, match=rf"distribution='{requested}' with the tensorflow backend.*--backend jax"):
        decisions.check_distribution(requested, "tensorflow")
    decisions.check_distribution(requested, "jax")
    decisions.check_distribution("data", "tensorflow")


@pytest.mark.parametrize(
    "platform, steps_per_epoch, compiled_with, expected",
    [
        ("cpu", 50, 1, 1),
        ("gpu", 50, 1, 8),
        ("tpu", 50, 1, 32),
        ("tpu", 10, 1, 10),  # never more than an epoch
        ("gpu", 50, 4, 4),  # the model's own compile() setting wins
    ],
)
def test_choose_steps_per_execution(platform, steps_per_epoch, compiled_with, expected):
    assert decisions.choose_steps_per_execution(platform, steps_per_epoch, compiled_with)[0] == expected


@pytest.mark.parametrize(
    "y, units, expected",
    [
        (np.array([0, 3, 9]), 10, "SparseCategoricalCrossentropy"),
        (np.array([[0], [3]]), 10, "SparseCategoricalCrossentropy"),
        (np.array([0, 1, 1]), 1, "BinaryCrossentropy"),
        (np.eye(10, dtype="float32")[[1, 2]], 10, "CategoricalCrossentropy"),
        (np.array([0.5, 1.7]), 1, "MeanSquaredError"),
        (np.array([0, 5, 7]), 1, "MeanSquaredError"),
    ],
)
def test_choose_loss(y, units, expected):
    assert decisions.choose_loss(y, units)[0] == expected
