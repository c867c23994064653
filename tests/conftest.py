"""Tests run on 8 simulated CPU devices, on the JAX backend, in this process.

The device count and the Keras backend are fixed when JAX and Keras first start, so they are set here,
before anything imports them. TensorFlow tests run in subprocesses (one Keras backend per process).
"""

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from tests import support  # noqa: E402
from tests.support import write_small_mnist  # noqa: E402

SIMULATED_DEVICES = 8

# Set once per process by the libraries themselves as they are first imported or started (JAX's TPU/libtpu
# set-up, TensorFlow's import, h5py's), whichever test that happens in: not a leak of that test's, and
# needed afterwards.
SET_BY_FRAMEWORK_START = {"TF_FORCE_GPU_ALLOW_GROWTH", "TPU_LIBRARY_PATH", "TPU_SKIP_MDS_QUERY",
                          "TF2_BEHAVIOR", "TPU_ML_PLATFORM", "TPU_ML_PLATFORM_VERSION",
                          "ENABLE_RUNTIME_UPTIME_TELEMETRY", "HDF5_PLUGIN_PATH"}


@pytest.fixture(autouse=True)
def leave_no_global_state_behind():
    """Fail a test that leaves environment variables, Keras's global distribution or its dtype policy
    changed (then put them back, so the next test is not blamed too). Restore what a test changes in the
    test itself: monkeypatch, or try/finally (Runtime.scope and precision.scope restore their own)."""
    env_before = dict(os.environ)
    policy_before = _dtype_policy()
    yield
    leaks = []
    changed = sorted(name for name in set(env_before) | set(os.environ)
                     if env_before.get(name) != os.environ.get(name) and name != "PYTEST_CURRENT_TEST"  # pytest's own
                     and not (name in SET_BY_FRAMEWORK_START and name not in env_before))
    if changed:
        leaks.append(f"environment variables {changed}")
        for name in changed:
            os.environ.pop(name, None)
            if name in env_before:
                os.environ[name] = env_before[name]
    if "keras" in sys.modules:
        import keras

        if keras.distribution.distribution() is not None:
            leaks.append(f"Keras's global distribution ({keras.distribution.distribution()!r})")
            keras.distribution.set_distribution(None)
        if _dtype_policy() != policy_before:
            leaks.append(f"Keras's dtype policy ({policy_before} → {_dtype_policy()})")
            keras.config.set_dtype_policy(policy_before)
    if leaks:
        pytest.fail(f"the test left {' and '.join(leaks)} changed: restore them in the test", pytrace=False)


def _dtype_policy() -> str:
    if "keras" not in sys.modules:
        return "float32"
    import keras

    return keras.config.dtype_policy().name


@pytest.fixture(scope="session")
def runtime():
    """The runtime every in-process test shares: 8 simulated CPU devices, data parallel."""
    import acceltrain

    return acceltrain.connect(simulate_devices=SIMULATED_DEVICES, verbose=False)


@pytest.fixture(scope="session")
def small_mnist(tmp_path_factory) -> Path:
    """A small slice of the real MNIST (2400 train, 600 test) as an .npz in the keras.datasets layout."""
    return write_small_mnist(tmp_path_factory.mktemp("data") / "small_mnist.npz")


@pytest.fixture
def cli():
    """Run `acceltrain ARGS` in a subprocess: `cli("train", "--epochs", 1)`."""
    return support.run_cli
