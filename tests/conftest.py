"""Tests run on 8 simulated CPU devices, on the JAX backend, in this process.

The device count and the Keras backend are fixed when JAX and Keras first start, so they are set here,
before anything imports them. TensorFlow tests run in subprocesses (one Keras backend per process).
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

SIMULATED_DEVICES = 8
SRC = Path(__file__).resolve().parent.parent / "src"


@pytest.fixture(autouse=True)
def restore_env_and_distribution():
    """Fail no test for another's leftovers: env vars and Keras's global distribution are put back."""
    env_before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(env_before)
    import sys as _sys

    if "keras" in _sys.modules:
        import keras

        keras.distribution.set_distribution(None)


@pytest.fixture(scope="session")
def runtime():
    """The runtime every in-process test shares: 8 simulated CPU devices, data parallel."""
    import acceltrain

    return acceltrain.connect(simulate_devices=SIMULATED_DEVICES, verbose=False)


@pytest.fixture(scope="session")
def small_mnist(tmp_path_factory) -> Path:
    """A small slice of the real MNIST (2400 train, 600 test) as an .npz in the keras.datasets layout."""
    from acceltrain.datasets import load_npz

    full = load_npz()
    path = tmp_path_factory.mktemp("data") / "small_mnist.npz"
    np.savez(path, x_train=full.x_train[:2400], y_train=full.y_train[:2400],
             x_test=full.x_test[:600], y_test=full.y_test[:600])
    return path


def run_cli(*args, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    """`acceltrain ARGS` in a fresh process (its own backend and device count), as a user runs it."""
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("XLA_FLAGS", None)  # the child sees this machine as a user would
    return subprocess.run([sys.executable, "-m", "acceltrain", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


@pytest.fixture
def cli():
    """Run `acceltrain ARGS` in a subprocess: `cli("train", "--epochs", 1)`."""
    return run_cli
