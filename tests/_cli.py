"""Run the `acceltrain` command in a fresh process, as a user would, importing this source tree."""

import os
import subprocess
import sys
from pathlib import Path

import acceltrain

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def env(**extra) -> dict:
    """This environment, with the acceltrain under test first on the path and no job of the caller's."""
    source_root = str(Path(acceltrain.__file__).resolve().parent.parent)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELTRAIN_", "SLURM_", "OMPI_"))}
    environment.pop("KERAS_BACKEND", None)
    environment.pop("XLA_FLAGS", None)
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, os.environ.get("PYTHONPATH")) if p)
    environment.update(extra)
    return environment


def command(*args) -> list[str]:
    return [sys.executable, "-m", "acceltrain", *map(str, args)]


def run(*args, timeout: float, cwd=None, **extra_env) -> subprocess.CompletedProcess:
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
