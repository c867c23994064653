"""Checkpoints and exact resume: unit tests here, and real kills of real runs (subprocesses)."""

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from acceltrain.training import checkpoint
from acceltrain.training.checkpoint import Checkpoints, Every, State
from acceltrain.errors import UsageError
from tests import support


# --- Pieces -----------------------------------------------------------------------------------

def test_epoch_order_depends_only_on_seed_and_epoch():
    a = checkpoint.epoch_order(3, 5, 1000)
    np.testing.assert_array_equal(a, checkpoint.epoch_order(3, 5, 1000))
    assert not np.array_equal(a, checkpoint.epoch_order(3, 6, 1000))
    assert not np.array_equal(a, checkpoint.epoch_order(4, 5, 1000))
    assert sorted(a) == list(range(1000))


@pytest.mark.parametrize("text, expected", [
    ("1 epoch", Every(1, "epochs")), ("3", Every(3, "epochs")), ("200 steps", Every(200, "steps")),
    ("5steps", Every(5, "steps")), ("2 epochs", Every(2, "epochs")), ("auto", Every(auto=True)),
    (" auto ", Every(auto=True)),
])
def test_every_parses(text, expected):
    assert Every.parse(text) == expected


@pytest.mark.parametrize("text", ["0", "-1 epochs", "ten steps", "3 minutes", "", "Auto", "auto 2"])
def test_every_rejects_bad_values(text):
    with pytest.raises(UsageError, match="--checkpoint-every.*'200 steps'"):
        Every.parse(text)


def _tiny_model():
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model


def test_the_first_writes_time_is_what_its_save_took_and_stays_the_first(tmp_path):
    model = _tiny_model()
    store = Checkpoints(tmp_path / "checkpoints")
    assert store.first_write_seconds() is None and store.agree(7) == 7
    started = time.perf_counter()
    store.save(model, State(epoch=1))
    took = time.perf_counter() - started
    first = store.first_write_seconds()
    assert 0 < first <= took
    store.save(model, State(epoch=2))
    assert store.first_write_seconds() == first


def test_save_keeps_the_newest_k_and_skips_a_damaged_one(tmp_path, capsys):
    model = _tiny_model()
    store = Checkpoints(tmp_path / "checkpoints", keep=2)
    for epoch in (1, 2, 3):
        store.save(model, State(epoch=epoch))
    assert [p.name for p in store.list()] == ["epoch-0002-step-00000", "epoch-0003-step-00000"]
    newest = store.list()[-1] / checkpoint.WEIGHTS
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as by a full disk or a kill mid-copy
    path, state = store.latest()
    assert state.epoch == 2 and path.name == "epoch-0002-step-00000"
    assert "skipping damaged checkpoint epoch-0003-step-00000" in capsys.readouterr().err


def test_a_partial_checkpoint_folder_is_never_listed(tmp_path):
    store = Checkpoints(tmp_path, keep=2)
    (tmp_path / ".epoch-0009-step-00000.123.partial").mkdir()
    assert store.list() == [] and store.latest() is None


def test_a_failed_write_leaves_nothing_and_says_what_to_do(tmp_path, monkeypatch):
    model = _tiny_model()
    store = Checkpoints(tmp_path / "checkpoints")
    store.save(model, State(epoch=1))

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model, "save_weights", disk_full)
    with pytest.raises(Exception, match="No space left on device.*previous checkpoint is intact.*--resume"):
        store.save(model, State(epoch=2))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["epoch-0001-step-00000"]


def test_restore_brings_back_the_optimizer_state(tmp_path):
    model = _tiny_model()
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=2, verbose=0)
    Checkpoints(tmp_path).save(model, State(epoch=2))
    fresh = _tiny_model()
    checkpoint.restore(fresh, Checkpoints(tmp_path).latest()[0])
    assert int(fresh.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()) == 2
    for a, b in zip(fresh.weights, model.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))



# --- Resuming: no checkpoint, damaged ones, another model's (issue 20, item 13) ---------------------

def _store_with(tmp_path, epochs, model=None, keep=3):
    model = model or _tiny_model()
    model.fit(np.ones((8, 3)), np.ones((8, 2)), epochs=1, verbose=0)  # the optimizer built, as after training
    store = Checkpoints(tmp_path / "checkpoints", keep=keep)
    for epoch in epochs:
        store.save(model, State(epoch=epoch))
    return store


def _damage(folder: Path) -> None:
    weights = folder / checkpoint.WEIGHTS
    weights.write_bytes(weights.read_bytes()[:100])


def test_resuming_where_there_is_no_checkpoint_starts_from_the_beginning(tmp_path):
    assert Checkpoints(tmp_path / "checkpoints").restore_latest(_tiny_model()) is None


def test_resuming_where_every_checkpoint_is_damaged_stops_leaving_them_as_they_are(tmp_path):
    store = _store_with(tmp_path, (1, 2))
    for folder in store.list():
        _damage(folder)
    with pytest.raises(UsageError, match=r"Every checkpoint in .*checkpoints is damaged \(epoch-0002-step-00000: "
                                         r"ValueError: the weights do not match.*To start over instead, remove"):
        store.restore_latest(_tiny_model())
    assert [p.name for p in store.list()] == ["epoch-0001-step-00000", "epoch-0002-step-00000"]


@pytest.mark.parametrize("other, difference", [
    (lambda keras: keras.layers.Dense(3), r"trainable variable sequential_\d+/dense_\d+/kernel is \(3, 3\) float32 "
                                          r"here; the checkpoint's sequential_\d+/dense_\d+/kernel is \(3, 2\) float32"),
    (lambda keras: keras.layers.Dense(2, use_bias=False),
     r"the model has 1 trainable variables here, the checkpoint 2 \(first unmatched: sequential_\d+/dense_\d+/bias\)"),
])
def test_resuming_with_another_model_names_what_differs_and_stops(tmp_path, other, difference):
    import keras

    store = _store_with(tmp_path, (1,))
    changed = keras.Sequential([keras.Input((3,)), other(keras)])
    changed.compile("adam", "mse")
    with pytest.raises(UsageError, match=r"The checkpoint .*epoch-0001-step-00000 was written by a different model: "
                                         + difference + r".*Resume with the model that wrote it\. To start over"):
        store.restore_latest(changed)
    assert [p.name for p in store.list()] == ["epoch-0001-step-00000"]  # nothing deleted, nothing loaded


def test_a_run_resumed_past_a_damaged_checkpoint_never_prunes_its_own_new_ones(tmp_path, capsys):
    store = _store_with(tmp_path, (1, 2), keep=2)
    store.keep = 1  # the resumed run keeps one
    _damage(store.list()[-1])  # epoch 2 damaged
    model = _tiny_model()
    path, state = store.restore_latest(model)
    assert state.epoch == 1 and "skipping damaged checkpoint epoch-0002-step-00000" in capsys.readouterr().err
    store.save(model, State(epoch=1, step=5))  # the resumed run's first: the stale epoch 2 goes, not this one
    assert [p.name for p in store.list()] == ["epoch-0001-step-00005"]


@pytest.mark.parametrize("folders, saved, keep, deleted", [
    (["epoch-0001-step-00000", "epoch-0002-step-00000", "epoch-0003-step-00000"], "epoch-0003-step-00000", 2,
     ["epoch-0001-step-00000"]),
    (["epoch-0001-step-00005", "epoch-0002-step-00000"], "epoch-0001-step-00005", 1,  # resumed from 1 past a stale 2
     ["epoch-0002-step-00000"]),
    (["epoch-0001-step-00000", "epoch-0001-step-00005", "epoch-0005-step-00000"], "epoch-0001-step-00005", 2,
     ["epoch-0005-step-00000"]),
    (["epoch-0009-step-00000", "epoch-0010-step-00000"], "epoch-0010-step-00000", 2, []),  # numbers, not text
])
def test_to_prune_keeps_the_newest_up_to_the_save_and_drops_what_comes_after_it(folders, saved, keep, deleted):
    assert [p.name for p in checkpoint.to_prune([Path(f) for f in folders], Path(saved), keep)] == deleted


# --- Real runs, killed and resumed --------------------------------------------------------------

def _train_args(data, out, backend):
    return ["train", "--data", data, "--epochs", 3, "--batch-size", 240, "--checkpoint-every", "2 steps",
            "--out", out, "--backend", backend, "--quiet"]


def _start(args):
    return subprocess.Popen(support.command(*args), env=support.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _weights(path: Path) -> dict:
    arrays = {}
    with h5py.File(path) as file:
        file.visititems(lambda name, item: arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def _kill_after_first_checkpoint(args, out: Path, sig, rng) -> tuple[int, str]:
    """Start a run and send `sig` at a random moment after it has written a checkpoint; fails the test if
    the run had already ended (a signal that never landed proves nothing). Returns the exit code and stderr."""
    process = _start(args)
    deadline = time.monotonic() + 240
    # A whole checkpoint, as a resume lists them: Orbax's unfinished folder (epoch-....orbax-checkpoint-tmp-*) is not one.
    while not Checkpoints(out / "checkpoints").list() and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    time.sleep(rng.uniform(0, 1.0))
    alive = process.poll() is None
    if alive:
        process.send_signal(sig)
    _, stderr = process.communicate(timeout=240)
    assert alive, f"the run ended before {signal.Signals(sig).name} was sent:\n{stderr}"
    return process.returncode, stderr


BACKENDS = ["jax", pytest.param("tensorflow", marks=pytest.mark.tensorflow)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_and_resumed_runs_end_with_identical_weights(tmp_path, small_mnist, backend):
    """SIGKILL at random moments, resumed each time, ends bit-identical to the uninterrupted run."""
    reference = _start(_train_args(small_mnist, tmp_path / "whole", backend))
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    rng = random.Random(7)
    out = tmp_path / "killed"
    args = _train_args(small_mnist, out, backend)
    assert _kill_after_first_checkpoint(args, out, signal.SIGKILL, rng)[0] == -signal.SIGKILL
    for attempt in range(2):
        assert _kill_after_first_checkpoint(args + ["--resume"], out, signal.SIGKILL, rng)[0] == -signal.SIGKILL
    newest = Checkpoints(out / "checkpoints").list()[-1].name
    # Born from another seed: a resume that restarted from scratch (training is deterministic) would end elsewhere.
    final = _start([arg for arg in args if arg != "--quiet"] + ["--resume", "--seed", "7"])  # its resume line shown
    stdout, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr
    assert f"resuming from {newest}" in stderr and "keeping 0 so the data order stays the same" in stderr
    expected, got = _weights(tmp_path / "whole" / "model.weights.h5"), _weights(out / "model.weights.h5")
    assert expected.keys() == got.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


@pytest.mark.parametrize("backend, sig", [("jax", signal.SIGTERM), ("jax", signal.SIGINT),
                                         pytest.param("tensorflow", signal.SIGTERM, marks=pytest.mark.tensorflow)])
def test_sigterm_and_ctrl_c_write_a_checkpoint_and_say_how_to_resume(tmp_path, small_mnist, backend, sig):
    out = tmp_path / "run"
    args = _train_args(small_mnist, out, backend)
    returncode, stderr = _kill_after_first_checkpoint(args, out, sig, random.Random(1))
    assert returncode == {signal.SIGTERM: 42, signal.SIGINT: 130}[sig]  # a notice: restart me; Ctrl-C: as a shell says
    assert f"Stopped by {signal.Signals(sig).name}" in stderr and "--resume" in stderr and "Traceback" not in stderr
    resumed = _start(args + ["--resume"])
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["history"]["loss"]) == 3


def test_rerun_into_a_used_folder_refuses(tmp_path, cli):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text("{}")
    result = cli("train", "--out", out, "--epochs", 1)
    assert result.returncode == 2
    assert "already holds files (metrics.json)" in result.stderr and "--resume" in result.stderr
    assert (out / "metrics.json").read_text() == "{}"


def test_resume_and_overwrite_together_are_refused(tmp_path, cli):
    result = cli("train", "--out", tmp_path / "x", "--resume", "--overwrite")
    assert result.returncode == 2 and "both --resume and --overwrite" in result.stderr


def test_a_disk_too_small_fails_before_training(tmp_path, monkeypatch, capsys):
    import shutil

    from acceltrain.commands import outputs
    from acceltrain.cli import main

    monkeypatch.setattr(outputs.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    code = main(["train", "--out", str(tmp_path / "run"), "--epochs", "1"])
    assert code == 2
    assert "has 0.0 MB free" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_an_eight_device_run_resumes_on_one_device(tmp_path, small_mnist, cli):
    out = tmp_path / "run"
    first = cli("train", "--data", small_mnist, "--epochs", 1, "--batch-size", 240, "--out", out,
                "--simulate-devices", 8, "--quiet")
    assert first.returncode == 0, first.stderr
    resumed = cli("train", "--data", small_mnist, "--epochs", 2, "--batch-size", 240, "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "written by 8 replicas; continuing on 1" in resumed.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["history"]["loss"]) == 2 and metrics["runtime"]["num_replicas"] == 1


def _train_job_of_two_processes(args, timeout=400):
    """`acceltrain train ARGS` as both processes of one jax.distributed job (as on two hosts)."""
    import socket

    from acceltrain import cluster

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes = [
        subprocess.Popen(support.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=support.env(**{cluster.ENV_COORDINATOR: f"127.0.0.1:{port}",
                                            cluster.ENV_NUM_PROCESSES: "2", cluster.ENV_PROCESS_ID: str(index)}))
        for index in (0, 1)]
    try:
        return [(p.wait(timeout=timeout), *p.communicate()) for p in processes]
    finally:
        for p in processes:
            p.kill()


@pytest.mark.multi_device
def test_a_two_process_job_trains_writes_once_and_resumes(tmp_path, small_mnist):
    """Two processes × 2 devices: global batches as on one process, process 0 alone writes, resume works."""
    out = tmp_path / "run"
    args = ["train", "--data", small_mnist, "--batch-size", 240, "--simulate-devices", 2, "--out", out, "--quiet"]
    results = _train_job_of_two_processes([*args, "--epochs", 1])
    for code, stdout, stderr in results:
        assert code == 0, stderr
    accuracies = {float(stdout.splitlines()[-1].split(": ")[1]) for _, stdout, _ in results}
    assert len(accuracies) == 1  # both processes report the same global metrics
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["runtime"]["num_processes"], metrics["runtime"]["num_replicas"]) == (2, 4)
    assert _checkpoints(out) == ["epoch-0001-step-00000"]

    results = _train_job_of_two_processes([*args, "--epochs", 2, "--resume"])
    for code, _, stderr in results:
        assert code == 0, stderr
    assert len(json.loads((out / "metrics.json").read_text())["history"]["loss"]) == 2
    assert _checkpoints(out) == ["epoch-0001-step-00000", "epoch-0002-step-00000"]


def _checkpoints(out) -> list[str]:
    """The checkpoints in a run's folder (beside them, reached.json: how far training got, for the ledger)."""
    return sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("epoch-"))


def test_a_second_ctrl_c_stops_at_once():
    """The first SIGINT is noted (the step finishes, a checkpoint is written); a second one does not wait."""
    from acceltrain.training import resumable

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started in a shell's background
    with pytest.raises(KeyboardInterrupt):
        with resumable._deferred_signals() as received:
            os.kill(os.getpid(), signal.SIGINT)
            _wait_until(lambda: received)  # the first: noted, nothing raised
            assert received == [signal.SIGINT]
            os.kill(os.getpid(), signal.SIGINT)
            _wait_until(lambda: False)  # the second raises KeyboardInterrupt here
    assert signal.getsignal(signal.SIGINT) == before  # the previous handler is back


def _wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
