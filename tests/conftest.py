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
    """Fail a test that leaves global state changed (then put it back where it can, so the next test is not
    blamed too): environment variables, Keras's global distribution or dtype policy, Keras's trainer methods
    (fit/evaluate/predict) or keras.Model's save/save_weights replaced, signal handlers, sys.argv, sys.path,
    the working directory, or files left in it. Restore what a test changes in the test itself: monkeypatch,
    or try/finally (Runtime.scope, precision.scope and the hooks restore their own); write into tmp_path."""
    env_before = dict(os.environ)
    policy_before = _dtype_policy()
    methods_before = _keras_methods()
    signals_before = _signal_handlers()
    argv_before, path_before = list(sys.argv), list(sys.path)
    cwd_before = os.getcwd()
    files_before = set(os.listdir(cwd_before))
    from acceltrain import opened

    runtimes_before = set(opened.OPTIONS.keys())
    yield
    for runtime in set(opened.OPTIONS.keys()) - runtimes_before:  # a runtime this test opened and left open is
        opened.OPTIONS.pop(runtime, None)  # never given back to a later test's connect(): each starts as it would
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
    leaks += _methods_left_replaced(methods_before)
    leaks += _signal_handlers_left_changed(signals_before)
    if sys.argv != argv_before:
        leaks.append(f"sys.argv ({argv_before} → {sys.argv})")
        sys.argv[:] = argv_before
    if sys.path != path_before:
        leaks.append(f"sys.path (added {[p for p in sys.path if p not in path_before]}, removed "
                     f"{[p for p in path_before if p not in sys.path]})")
        sys.path[:] = path_before
    if os.getcwd() != cwd_before:
        leaks.append(f"the working directory ({cwd_before} → {os.getcwd()})")
        os.chdir(cwd_before)
    left = sorted(set(os.listdir(cwd_before)) - files_before - LEFT_BY_TOOLS)
    if left:
        leaks.append(f"files in the working directory {cwd_before}: {left} (write into tmp_path, or pass cwd=)")
    if leaks:
        pytest.fail(f"the test left {' and '.join(leaks)} changed: restore them in the test", pytrace=False)


LEFT_BY_TOOLS = {".pytest_cache", "__pycache__"}  # pytest's and Python's own


def _keras_methods() -> dict:
    """{"JAXTrainer.fit": the function, ...}: the methods every model's fit/evaluate/predict and save run, as they
    are now (only for the trainer modules already imported: importing TensorFlow's here would cost seconds)."""
    if "keras" not in sys.modules:
        return {}
    import keras

    owners = [(keras.Model, ("save", "save_weights"))]
    for module, name in (("keras.src.backend.jax.trainer", "JAXTrainer"),
                         ("keras.src.backend.tensorflow.trainer", "TensorFlowTrainer")):
        if module in sys.modules:
            trainer = getattr(sys.modules[module], name, None) or sys.modules[module].Trainer  # 3.16: Trainer
            owners.append((trainer, ("fit", "evaluate", "predict")))
    return {f"{owner.__name__}.{name}": (owner, name, getattr(owner, name)) for owner, names in owners for name in names}


def _methods_left_replaced(before: dict) -> list:
    """Those that are not Keras's own after the test (put back as they were before it)."""
    left = {}  # "JAXTrainer.fit": the file of the code that replaced it
    for key, (owner, name, method) in _keras_methods().items():
        if not _keras_own(method):
            left[key] = _defined_in(method)
            if key in before:
                setattr(owner, name, before[key][2])
    return [f"Keras's {', '.join(left)} replaced (by code in {sorted(set(left.values()))})"] if left else []


def _keras_own(method) -> bool:
    """Keras's own method, or Keras's own under the one interception while a runtime is open (installed by the
    first connect() and taken off by the last close(): interception.intercept; the session's runtime keeps it
    on, so whether it is on depends on which tests ran before, not on this one)."""
    code = getattr(method, "__code__", None)
    if code is not None and code.co_qualname.startswith("_intercepted.") and hasattr(method, "__wrapped__"):
        from acceltrain.backends import interception

        if interception.runtimes_open():
            method = method.__wrapped__
    return "keras" in Path(_defined_in(method)).parts


def _defined_in(function) -> str:
    """The file of a function's code (functools.wraps copies __module__, not the code)."""
    code = getattr(function, "__code__", None)
    return code.co_filename if code is not None else "?"


def _signal_handlers() -> dict:
    import signal

    handlers = {}
    for signum in signal.valid_signals():
        try:
            handlers[signum] = signal.getsignal(signum)
        except (OSError, ValueError):
            pass
    return handlers


def _signal_handlers_left_changed(before: dict) -> list:
    import signal

    changed = [signum for signum, handler in _signal_handlers().items() if before.get(signum) is not handler
               and before.get(signum) != handler]
    for signum in changed:
        if before.get(signum) is not None:
            signal.signal(signum, before[signum])
    return [f"signal handlers of {[signal.Signals(signum).name for signum in changed]}"] if changed else []


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


def pytest_configure(config):
    """When each slow test last ran, for the validation page (tests/slow_runs.py)."""
    from tests import slow_runs

    config.pluginmanager.register(slow_runs.Recorder(), "acceltrain-slow-runs")
