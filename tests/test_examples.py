"""The examples run as they are: here on the CPU, unchanged from a Colab TPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import acceltrain

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.tensorflow
@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_colab_tpu_trains_one_epoch_and_saves_its_weights(tmp_path):
    src = str(Path(acceltrain.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.pop("XLA_FLAGS", None)  # the test process's 8 simulated devices are not the example's
    result = subprocess.run([sys.executable, str(EXAMPLES / "colab_tpu.py"), "1"], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    accuracy = float(result.stdout.strip().rsplit(" ", 1)[1])
    assert accuracy > 0.85  # one epoch of the seed's MLP reaches about 0.93
    assert (tmp_path / "mnist_mlp.weights.h5").stat().st_size > 1_000_000
    assert "tensorflow on cpu" in result.stdout
