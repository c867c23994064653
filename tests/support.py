"""What many tests share: the `acceltrain` command in a fresh process, as a user runs it, importing this
source tree; a plain script run without acceltrain; a small slice of MNIST."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import acceltrain

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def env(**extra) -> dict:
    """This environment, with the acceltrain under test first on the path and no job of the caller's.
    `extra` adds variables; a PYTHONPATH given there goes after the source tree's."""
    source_root = str(Path(acceltrain.__file__).resolve().parent.parent)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELTRAIN_", "SLURM_", "OMPI_", "SKYPILOT_",
                                                                                    "JOB_COMPLETION"))}
    environment.pop("KERAS_BACKEND", None)
    environment.pop("XLA_FLAGS", None)
    extra_path = extra.pop("PYTHONPATH", None)
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (source_root, extra_path, os.environ.get("PYTHONPATH")) if p)
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    environment.update(extra)
    return environment


def command(*args) -> list[str]:
    return [sys.executable, "-m", "acceltrain", *map(str, args)]


def run_cli(*args, timeout: float = 300, cwd=None, **extra_env) -> subprocess.CompletedProcess:
    """`acceltrain ARGS`, its output captured. The hard timeout keeps a hang from stalling the suite."""
    return subprocess.run(command(*args), env=env(**extra_env), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def python(*args, timeout: float, **extra_env) -> subprocess.CompletedProcess:
    """`python ARGS`: a script run plainly, without acceltrain."""
    return subprocess.run([sys.executable, *map(str, args)], env=env(**extra_env), capture_output=True, text=True,
                          timeout=timeout)


def accuracy(stdout: str) -> float:
    lines = [line for line in stdout.splitlines() if "test accuracy:" in line]
    assert lines, f"no 'test accuracy' line in:\n{stdout}"
    return float(lines[-1].rsplit(":", 1)[1])


def check_ledger(saved: dict, started: float, ended: float | None = None) -> None:
    """A run's time ledger (metrics.json's, or `--ledger FILE`'s), against a clock outside the process: its parts sum
    to its wall time, and that wall is the time from `started` (taken before the command started) to `ended` (taken
    once the process had exited) within 5 %: start-up is counted from the interpreter's start (a launched process's:
    its launcher's), and the ledger ends with the last output (`train` then leaves at once). Without `ended`, to the
    ledger's own end: a `run`'s ledger leaves out the interpreter's finalization after it (which flushes what the
    user's script left open)."""
    assert abs(sum(saved["parts"].values()) - saved["wall_seconds"]) <= 1e-6 * saved["wall_seconds"], saved
    outside = (saved["ended"] if ended is None else ended) - started
    assert abs(outside - saved["wall_seconds"]) <= 0.05 * outside, (outside, saved)
    assert saved["parts"]["start_up"] > 0 and saved["parts"]["device_steps"] > 0, saved["parts"]


def write_small_mnist(path: Path, train: int = 2400, test: int = 600) -> Path:
    """A slice of the real MNIST as an .npz in the keras.datasets layout."""
    from acceltrain.datasets import load_npz

    full = load_npz()
    np.savez(path, x_train=full.x_train[:train], y_train=full.y_train[:train],
             x_test=full.x_test[:test], y_test=full.y_test[:test])
    return path


def per_process(text: str, processes: int = 2) -> str:
    """A launch's output with each "[all] LINE" (a line every process said alike, printed once) written out as each
    process's, "[0] LINE", "[1] LINE" ..., so that a test reads every process's lines as it said them."""
    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith("[all] "):
            lines += [f"[{index}] {line.removeprefix('[all] ')}" for index in range(processes)]
        else:
            lines.append(line)
    return "".join(lines)
