"""`acceltrain run --checkpoint-dir`: a plain script's fit stopped by SIGTERM and resumed with --resume ends
with the weights of an uninterrupted run (each run a fresh process, on 2 simulated devices)."""

import signal
import subprocess
import time

import numpy as np
import pytest

from tests import support

SCRIPT = support.SCRIPTS / "plain_checkpointed.py"


def _run(folder, out, *flags, script_args=(), resume=False):
    return support.run_cli("run", "--simulate-devices", "2", "--checkpoint-dir", folder, "--checkpoint-every", "10 steps",
                           *(["--resume"] if resume else []), *flags, SCRIPT, out, *script_args, timeout=300)


def _sigterm_once_training(folder, out, script_args=()):
    """The run started, SIGTERMed once its first checkpoint is written (so it is training); its result."""
    process = subprocess.Popen(
        support.command("run", "--simulate-devices", "2", "--checkpoint-dir", folder, "--checkpoint-every", "10 steps",
                        SCRIPT, out, *script_args),
        env=support.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not list((folder / "fit-1").glob("epoch-*")) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be signalled:\n" + process.stderr.read()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stdout, stderr


def _weights(path):
    with np.load(path) as saved:
        return [saved[name] for name in sorted(saved.files, key=lambda n: int(n.split("_")[1]))]


def _assert_stopped_and_resumed_like_uninterrupted(tmp_path, script_args=()):
    whole = _run(tmp_path / "whole", tmp_path / "whole.npz", script_args=script_args)
    assert whole.returncode == 0, whole.stderr

    code, _, stderr = _sigterm_once_training(tmp_path / "stopped", tmp_path / "stopped.npz", script_args)
    # The kill landed while it trained: the handler of the checkpointed fit took it and saved mid-run.
    assert code == 128 + signal.SIGTERM, stderr
    assert "SIGTERM received: finishing this step and writing a checkpoint" in stderr
    assert f"Resume with the same command plus --resume (acceltrain run ... --checkpoint-dir {tmp_path / 'stopped'} " \
           f"--resume {SCRIPT}" in stderr
    assert not (tmp_path / "stopped.npz").exists()  # the script did not go on past its fit
    assert not (tmp_path / "stopped" / "fit-1" / "epoch-0003-step-00000").exists()  # nor did its fit finish

    # Born with other weights: only a restored checkpoint can bring it back to the same end.
    resumed = _run(tmp_path / "stopped", tmp_path / "stopped.npz", script_args=[*script_args, "--init-seed", "7"],
                   resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from epoch-" in resumed.stderr
    # Same mesh, same CPU: the same steps on the same batches in the same order, so bit-identical.
    for got, expected in zip(_weights(tmp_path / "stopped.npz"), _weights(tmp_path / "whole.npz"), strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.multi_device
def test_a_plain_script_stopped_by_sigterm_resumes_to_the_uninterrupted_weights(tmp_path):
    _assert_stopped_and_resumed_like_uninterrupted(tmp_path)


@pytest.mark.slow
@pytest.mark.multi_device
def test_a_plain_tf_data_script_stopped_by_sigterm_resumes_to_the_uninterrupted_weights(tmp_path):
    _assert_stopped_and_resumed_like_uninterrupted(tmp_path, ["--dataset"])
