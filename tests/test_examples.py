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


@pytest.mark.slow
@pytest.mark.multi_device
def test_the_gemma_lora_fine_tune_is_sharded_by_auto_verified_and_learns_what_it_learns_plainly(tmp_path):
    """examples/gemma_lora: a Gemma built from a config, taught to count and saved as a local preset; the ordinary
    LoRA fine-tune of it, plainly and under `acceltrain run` on 8 simulated devices with 14 MiB each (its weights,
    6.4 MiB, and the activations of its step do not fit data parallel: 17.4 MiB compiled here). Under run 'auto'
    lays it out fsdp, --verify 3 passes, and its token accuracy is the plain run's within 0.01 (the same batches in
    the same order: only float sums in another order differ; measured equal to 4 digits); the adapters saved with
    save_lora_weights load back into the preset with the same predictions. Slow: about three minutes here."""
    from tests import support

    preset = tmp_path / "preset"
    made = support.python(EXAMPLES / "gemma_lora" / "make_preset.py", preset, timeout=900, KERAS_BACKEND="jax")
    assert made.returncode == 0, made.stderr
    plain = support.python(EXAMPLES / "gemma_lora" / "finetune.py", preset, timeout=900, KERAS_BACKEND="jax")
    assert plain.returncode == 0, plain.stderr
    run = support.run_cli("run", "--simulate-devices", "8", "--device-memory", "14MiB", "--verify", "3",
                          EXAMPLES / "gemma_lora" / "finetune.py", preset, timeout=900)
    assert run.returncode == 0, run.stderr

    def accuracy(stdout):
        return float(stdout.split("token accuracy: ")[1].split(" before, ")[1].split()[0])

    assert "of 14.0 MiB (--device-memory) → fsdp;" in run.stderr
    assert "→ training starts from the weights as they were" in run.stderr
    assert abs(accuracy(run.stdout) - accuracy(plain.stdout)) <= 0.01 and accuracy(plain.stdout) > 0.5
    assert "reloaded predictions the same: True" in run.stdout
