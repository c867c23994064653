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


FILE = "/home/me/.keras/keras.json"


@pytest.mark.parametrize(
    "requested, loaded, env, in_file, expected, reason",
    [
        (None, None, None, "tensorflow", "tensorflow", f"set in {FILE}"),  # Keras's own config file, over jax
        (None, None, "jax", "tensorflow", "jax", "KERAS_BACKEND"),  # as Keras reads them: the env var wins
        ("jax", None, None, "tensorflow", "jax", "asked for"),
        (None, "jax", None, "tensorflow", "jax", "already loaded"),
        (None, None, None, None, "jax", "the default"),
    ],
)
def test_choose_backend_reads_keras_config_file_after_the_env(requested, loaded, env, in_file, expected, reason):
    choice, why = decisions.choose_backend(requested, loaded, env, True, (in_file, FILE))
    assert choice == expected and reason in why


def test_choose_backend_names_the_config_file_of_an_unsupported_backend():
    with pytest.raises(UsageError, match=r"from /home/me/.keras/keras.json: 'torch'.*Valid: jax, tensorflow"):
        decisions.choose_backend(None, None, None, True, ("torch", FILE))


def test_keras_config_backend_reads_the_users_file_not_the_one_keras_writes_itself(tmp_path):
    import json

    from acceltrain import backends

    env = {"KERAS_HOME": str(tmp_path)}
    assert backends.keras_config_backend(env) == (None, str(tmp_path / "keras.json"))  # no file
    (tmp_path / "keras.json").write_text(json.dumps(backends.KERAS_WRITTEN_CONFIG))
    assert backends.keras_config_backend(env)[0] is None  # Keras's own defaults, written on its first import
    (tmp_path / "keras.json").write_text(json.dumps({**backends.KERAS_WRITTEN_CONFIG, "backend": "jax"}))
    assert backends.keras_config_backend(env)[0] == "jax"
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "tensorflow", "floatx": "float32"}))
    assert backends.keras_config_backend(env)[0] == "tensorflow"  # written by someone: a choice
    (tmp_path / "keras.json").write_text("{not json")
    assert backends.keras_config_backend(env)[0] is None


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


def test_steps_per_execution_asked_for_in_fit_wins_and_is_checked():
    assert decisions.choose_steps_per_execution("tpu", 50, 1, requested=1) == (1, "asked for in fit")
    with pytest.raises(UsageError, match=r"steps_per_execution=0.*at least 1"):
        decisions.choose_steps_per_execution("tpu", 50, 1, requested=0)


def test_steps_per_execution_override_is_said_with_the_way_to_keep_the_models():
    assert decisions.steps_per_execution_override(4, 4, "gpu") is None
    said = decisions.steps_per_execution_override(1, 32, "tpu")
    assert "steps_per_execution 32 on tpu, not the model's 1" in said and "steps_per_execution=1 to runtime.fit" in said


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
