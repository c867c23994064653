"""The keras-nightly lane (issue 43): a named selection of the suite run on Keras's next release.

A venv made under tmp_path takes keras-nightly (pure Python, installed with --no-deps) into its own site-packages and
reaches this interpreter's packages and acceltrain's source through a .pth, which Python reads after the venv's own
folder: its `import keras` is the nightly, everything else (JAX, TensorFlow, pytest, acceltrain from this tree) is
what CI runs. The selection is then run there and must pass.
"""

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The one place the nightly is pinned (docs/validation.md names it, checked below): a newer one is tried by changing
# this line and running `pytest -m slow tests/test_keras_nightly.py`.
KERAS_NIGHTLY = "3.16.0.dev2026102704"
# What runs on it: Keras's private code acceltrain relies on, exact resume, the device data (which steps aside where
# Keras scans steps_per_execution itself), connect()'s runtime and its fit/evaluate/predict, the one assembly's walk
# (Runtime's calls and a script's under `acceltrain run`), and run's plain-script fits.
SELECTION = (
    "tests/backends/test_keras_internals.py",
    "tests/training/test_resumable.py",
    "tests/backends/jax/test_resident.py",
    "tests/test_runtime.py",
    "tests/test_assembly.py",
    "tests/commands/test_run.py::test_plain_script_trains_on_8_replicas_to_its_plain_accuracy",
    "tests/commands/test_run.py::test_each_fit_warning_fires_once_on_its_own_pitfall",
    "tests/commands/test_run.py::test_predict_on_4_simulated_devices_returns_what_a_plain_run_returns",
)
# pip's words when the registry cannot be reached (the lane then skips, saying so); any other failure fails it.
_UNREACHABLE = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
                "Network is unreachable", "ProxyError", "ConnectTimeout", "Failed to establish a new connection")


def _venv_with_nightly(folder: Path) -> Path:
    """A venv whose keras is keras-nightly==KERAS_NIGHTLY, reaching this interpreter's packages after its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    own = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    import acceltrain

    parents = [path for path in sys.path if path and Path(path).name in ("site-packages", "dist-packages")]
    source = str(Path(acceltrain.__file__).resolve().parents[1])
    # A .pth's lines are put on sys.path after the venv's own site-packages: the nightly's keras shadows this one's.
    (own / "zz-parent-packages.pth").write_text("\n".join([*parents, source]) + "\n")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                          "--retries", "1", "--timeout", "20", "--target", str(own), f"keras-nightly=={KERAS_NIGHTLY}"],
                         capture_output=True, text=True)
    said = pip.stdout + pip.stderr
    if pip.returncode != 0 and ("No module named pip" in said or any(word in said for word in _UNREACHABLE)):
        pytest.skip(f"keras-nightly=={KERAS_NIGHTLY} could not be installed (pip or the registry out of reach): "
                    f"{said.strip().splitlines()[-1]}")
    assert pip.returncode == 0, said
    return folder / "bin" / "python"


@pytest.mark.slow
def test_the_named_selection_passes_on_keras_nightly(tmp_path):
    python = _venv_with_nightly(tmp_path / "venv")
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_", "KERAS_"))}
    shown = subprocess.run([str(python), "-c", "import keras, acceltrain; print(keras.__version__, acceltrain.__file__)"],
                           capture_output=True, text=True, env=env, cwd=REPO)
    assert shown.stdout.split() == [KERAS_NIGHTLY, str(REPO / "src" / "acceltrain" / "__init__.py")], shown.stderr
    run = subprocess.run([str(python), "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", *SELECTION],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=1500)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 60 and "failed" not in summary and "error" not in summary, summary


def test_the_manual_names_the_pinned_nightly_and_what_runs_on_it():
    page = (REPO / "docs" / "validation.md").read_text()
    section = page.split("## Keras 3.16 (keras-nightly)", 1)[1].split("\n## ", 1)[0]
    assert f"keras-nightly=={KERAS_NIGHTLY}" in section
    for selected in SELECTION:
        assert f"`{selected}`" in section, selected
