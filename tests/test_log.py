"""log.py's start-up noise filter: which lines are TensorFlow's, XLA's and libtpu's start-up noise (each seen here on
a JAX-backend command), and the filter on a real `acceltrain run`: the noise gone, everything else passed on in order,
even the last words of a process that aborts; -v shows it all."""

import pytest

from acceltrain import log
from tests import support

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "WARNING: Logging before InitGoogle() is written to STDERR",
    "I0000 00:00:1796340692.713354   23683 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors",
    "I0000 00:00:1796340692.714547   23683 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will "
    "not be used.",
    "E0000 00:00:1796340604.408938   20762 cuda_executor.cc:1309] failed call to cuInit: UNKNOWN ERROR (303)",
    "E0000 00:00:1796340604.408938   20762 common_lib.cc:554] INVALID_ARGUMENT: Error: unexpected worker hostname "
    "'WARNING: could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES.",
    "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, please set "
    "env var `TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.",
    "=== Source Location Trace: ===",
    "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327",
    "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1",  # on stdout
    "\x1b[1m 3/32\x1b[0m [Gloo] Rank 0 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3",
]
KEPT = [
    "acceltrain: jax on cpu: 1 × cpu → no distribution (backend: the default; one device)",
    "Traceback (most recent call last):",
    "ValueError: process 0's own failure",
    "F0000 00:00:1.2 3 client.cc:12] Terminating process because the coordinator is gone",  # a fatal error: its cause
    "E0000 00:00:1796340604.4 20762 pjrt_client.cc:99] Gloo AllGather failed: connection closed",  # not start-up
    "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed. Falling back to cpu.",
    "45/45 - 2s - 35ms/step - accuracy: 0.9348 - loss: 0.2171",
]


@pytest.mark.parametrize("line", NOISE)
def test_start_up_noise_is_recognised(line):
    assert log.is_start_up_noise(line + "\n")


@pytest.mark.parametrize("line", KEPT)
def test_what_a_person_needs_is_kept(line):
    assert not log.is_start_up_noise(line + "\n")


SCRIPT = """import os, sys
import tensorflow  # TensorFlow's own start-up lines, from C++, before anything can configure its logging
os.write(2, b"learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327\\n")
print("the script's own line", file=sys.stderr, flush=True)
os.write(2, b"its last words, written just before it aborts\\n")
os.abort()
"""


@pytest.mark.tensorflow
def test_acceltrain_run_prints_no_start_up_noise_and_an_aborting_script_s_last_words_still_come(tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text(SCRIPT)
    quiet = support.run_cli("run", script, timeout=300)
    assert quiet.returncode != 0
    lines = quiet.stderr.splitlines()
    assert [line for line in lines if log.is_start_up_noise(line)] == []
    assert lines.index("the script's own line") < lines.index("its last words, written just before it aborts")

    shown = support.run_cli("run", "-v", script, timeout=300)  # -v: nothing dropped
    assert "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327" in shown.stderr.splitlines()
