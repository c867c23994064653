"""The upstream failure behind acceltrain's refusal of multi-worker TensorFlow, reproduced: Keras 3's fit
under MultiWorkerMirroredStrategy with two local workers (keras-team/keras#20585). When a Keras or TensorFlow
upgrade fixes it, this test fails, saying the refusal (backends/tensorflow.py::_refuse_multi_worker) can go."""

import json
import socket
import subprocess
import sys
import time

import pytest

from tests import support

pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
UPSTREAM_ERROR = "with an unsupported type"  # "Attempt to convert a value (PerReplica:...) with an unsupported type"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_workers(count: int, timeout: float = 240) -> list[tuple[str, str]]:
    """(stdout, stderr) of each of `count` local workers of one TF_CONFIG cluster running the script."""
    workers = [f"localhost:{port}" for port in free_ports(count)]
    processes = []
    for index in range(count):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen([sys.executable, str(support.SCRIPTS / "tf_multiworker_fit.py")],
                                          env=support.env(TF_CONFIG=tf_config, CUDA_VISIBLE_DEVICES=""),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for process in processes:  # a worker left waiting for a failed peer is stopped at the deadline
            try:
                outputs.append(process.communicate(timeout=max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                process.kill()
                outputs.append(process.communicate())
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


@pytest.mark.slow
@pytest.mark.tensorflow
def test_keras_fit_still_fails_under_multi_worker_mirrored_strategy():
    # The control: the same script as the only worker of its cluster trains.
    (alone, alone_err), = run_workers(1)
    assert "fit finished" in alone, f"the script fails even with one worker:\n{alone_err[-3000:]}"
    outputs = run_workers(2)
    finished = [stdout for stdout, _ in outputs if "fit finished" in stdout]
    assert not finished, ("Keras's fit trained under MultiWorkerMirroredStrategy: keras-team/keras#20585 looks fixed "
                          "in this Keras/TensorFlow; lift backends/tensorflow.py::_refuse_multi_worker and its README "
                          "note, with a test of a 2-worker run")
    stderr = "\n".join(err for _, err in outputs)
    assert UPSTREAM_ERROR in stderr, f"the workers failed otherwise than keras#20585 says:\n{stderr[-4000:]}"
