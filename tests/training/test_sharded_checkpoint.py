"""Orbax checkpoints on JAX: sharded, asynchronous, atomic, restored on another mesh; real kills of real runs."""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from acceltrain.training.checkpoint import State
from acceltrain.training.sharded_checkpoint import ShardedCheckpoints
from tests import support

pytestmark = pytest.mark.multi_device

# Resumed on another mesh, the same run reaches the same weights up to float32 round-off: the sums of a
# step are split differently over the devices. Measured here: at most 3e-8 apart (weights up to 0.5).
OTHER_MESH_ATOL = 1e-6


def _sharded_model(devices, model_axis: int):
    """A small MLP whose kernels are split along a "model" mesh axis over `devices` (None: unsharded)."""
    import keras

    def build():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64), keras.layers.Dropout(0.2),
                                  keras.layers.Dense(8)])
        model.compile("adam", "mse")
        model.optimizer.build(model.trainable_variables)
        return model

    if devices is None:
        return build()
    mesh = keras.distribution.DeviceMesh((len(devices) // model_axis, model_axis), ["batch", "model"], devices)
    layouts = keras.distribution.LayoutMap(mesh)
    layouts[".*kernel"] = (None, "model")
    with keras.distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch").scope():
        return build()


def _trained(model):
    model.fit(np.ones((32, 16)), np.zeros((32, 8)), batch_size=8, epochs=1, verbose=0)
    return model


def _assert_same_state(a, b):
    import keras

    for x, y in zip(a.variables, b.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(x.value), keras.ops.convert_to_numpy(y.value),
                                      err_msg=x.path)


@pytest.mark.parametrize("saved_on, restored_on", [((8, 4), (4, 4)), ((8, 4), None), (None, (8, 2)), ((8, 4), (8, 2))])
def test_a_checkpoint_restores_onto_another_mesh(runtime, tmp_path, saved_on, restored_on):
    """8 devices → 4, → 1 (no distribution), 1 → 8, and another split of the same 8: the values move
    into the new layouts unchanged (weights, optimizer slots, the dropout's seed state)."""
    import keras

    devices = keras.distribution.list_devices()

    def on(spec):
        return _sharded_model(None if spec is None else devices[: spec[0]], 1 if spec is None else spec[1])

    saved = _trained(on(saved_on))
    store = ShardedCheckpoints(tmp_path, keep=2)
    store.save(saved, State(epoch=1, step=3, seed=5))
    store.close()
    fresh = on(restored_on)
    path, state = ShardedCheckpoints(tmp_path).restore_latest(fresh)
    assert (path.name, state.epoch, state.step, state.seed) == ("epoch-0001-step-00003", 1, 3, 5)
    _assert_same_state(fresh, saved)
    if restored_on is not None:  # each array landed in the layout of the model being resumed
        assert fresh.layers[0].kernel.value.sharding.mesh.size == restored_on[0]


def test_the_first_writes_time_runs_to_its_files_complete_in_the_background(runtime, tmp_path):
    """Orbax's save returns before the files are written; the time 'auto' decides on runs until they are."""
    model = _trained(_sharded_model(None, 1))
    store = ShardedCheckpoints(tmp_path, keep=2)
    store.open()  # Orbax imported and its writer started before any save
    assert store.first_write_seconds() is None
    started = time.perf_counter()
    store.save(model, State(epoch=1))
    first = store.first_write_seconds()  # waits for the files
    assert 0 < first <= time.perf_counter() - started
    assert [p.name for p in store.list()] == ["epoch-0001-step-00000"]
    store.save(model, State(epoch=2))
    assert store.first_write_seconds() == first
    store.close()
    assert store.agree(7) == 7  # one process


def test_each_save_keeps_the_newest_k_and_a_damaged_one_is_skipped(runtime, tmp_path, capsys):
    import keras

    model = _trained(_sharded_model(keras.distribution.list_devices(), 4))
    store = ShardedCheckpoints(tmp_path / "checkpoints", keep=2)
    for epoch in (1, 2, 3):
        store.save(model, State(epoch=epoch))
    store.close()
    assert [p.name for p in store.list()] == ["epoch-0002-step-00000", "epoch-0003-step-00000"]
    newest = store.list()[-1]
    for data_file in (newest / "pytree").rglob("d/*"):  # tensorstore's chunks, truncated as by a full disk
        data_file.write_bytes(data_file.read_bytes()[:10])
    path, state = ShardedCheckpoints(tmp_path / "checkpoints").restore_latest(_sharded_model(None, 1))
    assert state.epoch == 2 and path.name == "epoch-0002-step-00000"
    assert "skipping damaged checkpoint epoch-0003-step-00000" in capsys.readouterr().err


def test_a_kill_during_a_save_leaves_the_previous_checkpoint_loadable(runtime, tmp_path):
    folder = tmp_path / "checkpoints"
    killed = support.python(support.SCRIPTS / "killed_while_saving.py", folder, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [p.name for p in folder.iterdir() if "tmp" in p.name], "the kill did not land during the save"
    store = ShardedCheckpoints(folder)
    assert [p.name for p in store.list()] == ["epoch-0001-step-00000"]  # the half-written one is never listed
    import keras

    model = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048)])
    model.compile("adam", "mse")
    path, state = store.restore_latest(model)
    assert state.epoch == 1
    store.save(model, State(epoch=2))  # the next run's first save clears what the killed one left
    store.close()
    assert sorted(p.name for p in folder.iterdir()) == ["epoch-0001-step-00000", "epoch-0002-step-00000"]



def _damage(folder: Path) -> None:
    for data_file in (folder / "pytree").rglob("d/*"):  # tensorstore's chunks, truncated as by a full disk
        data_file.write_bytes(data_file.read_bytes()[:10])


def test_resuming_where_every_checkpoint_is_damaged_stops_leaving_them_as_they_are(runtime, tmp_path):
    from acceltrain.errors import UsageError

    store = ShardedCheckpoints(tmp_path / "checkpoints", keep=2)
    model = _trained(_sharded_model(None, 1))
    for epoch in (1, 2):
        store.save(model, State(epoch=epoch))
    store.close()
    for folder in store.list():
        _damage(folder)
    with pytest.raises(UsageError, match=r"Every checkpoint in .*checkpoints is damaged \(epoch-0002-step-00000: .*"
                                         r"epoch-0001-step-00000: .*To start over instead, remove"):
        ShardedCheckpoints(tmp_path / "checkpoints").restore_latest(_sharded_model(None, 1))
    assert [p.name for p in store.list()] == ["epoch-0001-step-00000", "epoch-0002-step-00000"]


def test_resuming_with_another_model_names_what_differs_and_stops(runtime, tmp_path):
    import keras

    from acceltrain.errors import UsageError

    store = ShardedCheckpoints(tmp_path / "checkpoints")
    store.save(_trained(_sharded_model(None, 1)), State(epoch=1))
    store.close()
    wider = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.Dropout(0.2), keras.layers.Dense(8)])
    wider.compile("adam", "mse")
    with pytest.raises(UsageError, match=r"written by a different model: trainable variable sequential_\d+/dense_\d+/"
                                         r"kernel is \(16, 32\) float32 here; the checkpoint's sequential_\d+/dense_\d+/"
                                         r"kernel is \(16, 64\) float32"):
        ShardedCheckpoints(tmp_path / "checkpoints").restore_latest(wider)
    assert [p.name for p in store.list()] == ["epoch-0001-step-00000"]


def test_a_run_resumed_past_a_damaged_checkpoint_never_prunes_its_own_new_ones(runtime, tmp_path, capsys):
    store = ShardedCheckpoints(tmp_path / "checkpoints", keep=2)
    model = _trained(_sharded_model(None, 1))
    for epoch in (1, 2):
        store.save(model, State(epoch=epoch))
    store.close()
    _damage(store.list()[-1])
    resumed = ShardedCheckpoints(tmp_path / "checkpoints", keep=1)
    path, state = resumed.restore_latest(model)
    assert state.epoch == 1 and "skipping damaged checkpoint epoch-0002-step-00000" in capsys.readouterr().err
    resumed.save(model, State(epoch=1, step=3))  # the resumed run's own: the stale epoch 2 goes, not this one
    resumed.close()
    assert [p.name for p in resumed.list()] == ["epoch-0001-step-00003"]


# --- A sharded run, stopped by SIGTERM and resumed on the same mesh and on another --------------------

def _sharded_fit(out: Path, *args, timeout=300):
    return subprocess.run([sys.executable, str(support.SCRIPTS / "sharded_checkpoint_fit.py"), str(out), *map(str, args)],
                          env=support.env(), capture_output=True, text=True, timeout=timeout)


def _final_weights(out: Path) -> list:
    with np.load(out / "final.npz") as weights:
        return [weights[name] for name in sorted(weights.files, key=lambda n: int(n.split("_")[1]))]


def test_a_sharded_run_stopped_by_sigterm_resumes_exactly_on_its_mesh_and_closely_on_another(tmp_path):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    reference = _sharded_fit(whole)
    assert reference.returncode == 0, reference.stderr
    assert "kernel placement: P(None, 'model')" in reference.stderr
    first = _sharded_fit(stopped, "--sigterm-at-step", 11)
    assert first.returncode == 42, first.stderr  # preemption.EXIT_RESTART: a notice, its checkpoint saved
    assert "Stopped by SIGTERM" in first.stderr
    elsewhere = tmp_path / "on_4_devices"
    shutil.copytree(stopped, elsewhere)

    same_mesh = _sharded_fit(stopped, "--resume")
    assert same_mesh.returncode == 0, same_mesh.stderr
    assert "resuming from epoch-0001-step-00004" in same_mesh.stderr
    for got, expected in zip(_final_weights(stopped), _final_weights(whole), strict=True):
        np.testing.assert_array_equal(got, expected)

    other_mesh = _sharded_fit(elsewhere, "--resume", "--devices", 4, "--model-axis", 4)
    assert other_mesh.returncode == 0, other_mesh.stderr
    for got, expected in zip(_final_weights(elsewhere), _final_weights(whole), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=OTHER_MESH_ATOL)


@pytest.mark.slow  # about a minute each: two processes start JAX and train on 2 × 2 simulated devices
@pytest.mark.parametrize("sent", ["SIGTERM", "SIGINT"])  # SIGINT is passed on as SIGTERM
def test_a_signal_to_one_process_of_a_job_stops_all_at_the_same_step_each_writing_its_shards(tmp_path, cli, sent):
    out = tmp_path / "job"
    out.mkdir()
    result = cli("launch", "--processes", 2, "--simulate-devices", 2, support.SCRIPTS / "sharded_checkpoint_fit.py", out,
                 "--model-axis", 2, "--sigterm-at-step", 11, "--signal", sent, timeout=400)
    stopped = {}  # process → the checkpoint its stop line names; "[all]": a line every process said alike, written once
    for line in result.stderr.splitlines():
        if "Stopped by SIGTERM" in line:
            for process in ("[0]", "[1]") if line.startswith("[all] ") else (line[:3],):
                stopped[process] = line.split("saved in ")[1].split(".")[0]
    assert set(stopped) == {"[0]", "[1]"}, result.stderr  # process 0 got no signal, and stopped too
    assert stopped["[0]"] == stopped["[1]"]  # at the same step
    assert "was preempted (exit 42: its checkpoint saved)" in result.stderr
    saved = Path(stopped["[0]"]) / "pytree"
    for process in (0, 1):  # each process wrote the shards its devices hold
        assert list((saved / f"ocdbt.process_{process}" / "d").iterdir()), process


def test_every_process_of_a_job_takes_process_0s_value(tmp_path, cli):
    """'auto' cadence: each process measures its own checkpoint and epoch; all must checkpoint at the same epochs
    (a save is collective), so process 0's choice is taken everywhere. Each process here asks with another value."""
    out = tmp_path / "job"
    out.mkdir()
    result = cli("launch", "--processes", 2, support.SCRIPTS / "agree_across_processes.py", out, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [(out / f"agreed-{index}.txt").read_text() for index in (0, 1)] == ["5", "5"]
