"""The same inputs behave the same on both backends: each test runs once per backend, in its own
process (a process holds one Keras backend), over 2 simulated devices."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import acceltrain as acceltrain_package

BACKENDS = ["jax", pytest.param("tensorflow", marks=[pytest.mark.tensorflow, pytest.mark.skipif(
    __import__("importlib").util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")])]


def this_acceltrain_env():
    """The environment for a child Python that imports this acceltrain, whatever its working folder."""
    src = str(Path(acceltrain_package.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("XLA_FLAGS", None)  # the test process's 8 simulated devices are not the child's
    return env


def run(args, cwd):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=this_acceltrain_env(),
                          timeout=600)


def write_data(path, *, x_train=None, y_train=None):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, size=(400, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=400, dtype=np.uint8)
    np.savez(path, x_train=x if x_train is None else x_train, y_train=y if y_train is None else y_train,
             x_test=x[:50], y_test=y[:50])
    return path


def nan_images():
    x = np.random.default_rng(0).random((400, 28, 28)).astype(np.float32)
    x[7, 3, 3] = np.nan
    return x


BAD_INPUTS = {
    "batch not divisible": ({}, ["--batch-size", "201"], "does not divide over 2 replicas"),
    "NaN inputs": ({"x_train": nan_images()}, [], "holds 1 NaN or infinite value"),
    "labels out of range": ({"y_train": np.arange(400) % 11}, [], "class labels from 0 to 10"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_inputs_are_refused_the_same_way(tmp_path, backend, case):
    arrays, flags, message = BAD_INPUTS[case]
    data = write_data(tmp_path / "data.npz", **arrays)
    result = run(["-m", "acceltrain", "train", "--backend", backend, "--simulate-devices", "2", "--data", str(data),
                  "--epochs", "1", "--batch-size", "200", *flags, "--out", "out"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


DATASET_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import acceltrain

    runtime = acceltrain.connect(sys.argv[1], simulate_devices=2, verbose=False)
    import keras
    import tensorflow as tf

    runtime.seed(0)
    with runtime.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.random.default_rng(0).random((21, 4)).astype(np.float32)
    y = (np.arange(21) % 3).astype(np.int32)
    # 21 samples in batches of 8: the last batch, 5, does not divide over 2 replicas.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    runtime.fit(model, dataset, epochs=2, validation_data=dataset, verbose=0)
    results = {
        "dataset": runtime.evaluate(model, dataset, verbose=0),
        "arrays": runtime.evaluate(model, x, y, batch_size=8, verbose=0),
        "errors": {},
    }
    bad = {
        "indivisible": dict(x=tf.data.Dataset.from_tensor_slices((x, y)).batch(7)),
        "unbatched": dict(x=tf.data.Dataset.from_tensor_slices((x, y))),
        "batch_size disagrees": dict(x=dataset, batch_size=16),
    }
    for name, arguments in bad.items():
        try:
            runtime.fit(model, epochs=1, verbose=0, **arguments)
        except acceltrain.UsageError as error:
            results["errors"][name] = str(error)
    print(json.dumps(results))
''')


@pytest.mark.parametrize("backend", BACKENDS)
def test_datasets_train_and_are_evaluated_whole(tmp_path, backend):
    script = tmp_path / "script.py"
    script.write_text(DATASET_SCRIPT)
    result = run([str(script), backend], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.splitlines()[-1])
    # Evaluated from the dataset, every one of the 21 samples counts, as with the arrays.
    assert results["dataset"]["accuracy"] == pytest.approx(results["arrays"]["accuracy"])
    assert results["dataset"]["loss"] == pytest.approx(results["arrays"]["loss"], rel=1e-5)
    assert "training batches all full (8)" in result.stderr
    errors = results["errors"]
    assert "batched by 7, which does not divide over 2 replicas" in errors["indivisible"]
    assert "the nearest are 6 or 8" in errors["indivisible"]
    assert "a tf.data.Dataset of single samples" in errors["unbatched"]
    assert "Received batch_size=16 with x, a dataset batched by 8" in errors["batch_size disagrees"]
