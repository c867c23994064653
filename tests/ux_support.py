"""Helpers for the tests of the run report, doctor, config files and CLI (kept out of conftest.py,
which the core's tests own): a small MNIST file and the CLI in a fresh process.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parent.parent / "src"


def write_small_mnist(path: Path, train: int = 2400, test: int = 600) -> Path:
    """A slice of the real MNIST as an .npz in the keras.datasets layout."""
    from acceltrain.datasets import load_npz

    full = load_npz()
    np.savez(path, x_train=full.x_train[:train], y_train=full.y_train[:train],
             x_test=full.x_test[:test], y_test=full.y_test[:test])
    return path


def run_cli(*args, timeout=300, cwd=None, env=None) -> subprocess.CompletedProcess:
    """`acceltrain ARGS` in a fresh process (its own backend and device count), as a user runs it."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)  # the child sees this machine as a user would
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.run([sys.executable, "-m", "acceltrain", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)
