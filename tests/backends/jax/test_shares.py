"""backends/jax/shares.py: in a job of several processes, each places its own share of a fit's in-memory arrays on its
devices and each device gathers its rows of the global batch there (subprocess tests under `acceltrain launch`)."""

import pytest

from tests import support
from tests.backends.jax.test_resident import _keras_scans

pytestmark = [pytest.mark.multi_device, pytest.mark.skipif(
    _keras_scans(), reason="Keras 3.16 scans steps_per_execution: device data steps aside")]


def _results(stdout: str, process: int) -> dict:
    """{"device data": [...], "keras's path": [...]}: the fields of each fit's line device_data_fit.py printed."""
    found = {}
    for line in support.per_process(stdout).splitlines():
        for label in ("device data", "keras's path"):
            if line.startswith(f"[{process}] {label}: "):
                found[label] = line.removeprefix(f"[{process}] {label}: ").split()
    return found


@pytest.mark.parametrize("shape", ["", *(pytest.param(shape, marks=pytest.mark.slow) for shape in (
    "callbacks", "callback-list", "one-loop"))])
def test_under_launch_each_process_gathers_its_share_on_its_devices_and_trains_as_keras_own_path(shape):
    """2 processes × 2 devices, Adam + accuracy, 1001 samples (the last one left out), shuffled, 3 epochs with
    validation, then evaluate: each process says it keeps its own 500 samples on its devices, and the fit ends with the
    loss, metrics, validation loss, evaluate's accuracy and weights of the same fit on Keras's input path (measured
    bit-identical here: the same global batches, each process's share gathered where Keras would have joined it). With
    a callback hooked on each batch ("callbacks": one step an execution), that callback hears every batch, and so in a
    keras.callbacks.CallbackList the script built ("callback-list": Runtime.fit raised a TypeError on it, and a fit
    given one kept Keras's host input path while the line said yes, issue 45); with the steps of an execution in one
    compiled loop, as on an accelerator ("one-loop"), the same."""
    job = support.run_cli("launch", "--processes", "2", "--simulate-devices", "2",
                          support.SCRIPTS / "device_data_fit.py", *([shape] if shape else []), timeout=400)
    assert job.returncode == 0, job.stderr[-3000:]
    said = support.per_process(job.stderr)
    for process in (0, 1):
        assert (f"[{process}] acceltrain: in-memory data on the devices: yes (each of 2 processes its own share on its "
                "devices, here 500 samples: ") in said
        assert f"[{process}] acceltrain: in-memory data on the devices: no (turned off: --device-data off" in said
        fits = _results(job.stdout, process)
        device, keras_path = fits["device data"], fits["keras's path"]
        assert device[:2] == keras_path[:2] == ["processes", "2"]
        heard = "48" if shape in ("callbacks", "callback-list") else "0"  # batches heard: 16 an epoch
        assert device[-1] == keras_path[-1] == heard
        if shape == "one-loop":
            assert f"[{process}] acceltrain: steps an execution: 16 (no callback needs each batch" in said
            assert "one-loop: the steps in one compiled loop a dispatch" in said
        numbers = [float(value) for value in device[3:-3:2]]
        assert numbers == pytest.approx([float(value) for value in keras_path[3:-3:2]], rel=1e-6, abs=0)
    assert _results(job.stdout, 0) == _results(job.stdout, 1)  # the global numbers, the same in each process


def test_what_keeps_a_job_on_keras_input_path_is_named(runtime):
    """A job's batches are gathered by acceltrain's runner of steps alone (resident._in_job_not): a mesh whose devices
    share rows of a batch (a model axis), a model's own train_step, an uncompiled step and callbacks in a subclass of
    CallbackList (which the runner cannot join) keep Keras's input path, each named; a compiled Keras step over a
    data-parallel mesh takes the device data, with its callbacks in Keras's own CallbackList too."""
    import keras

    from acceltrain.backends import interception, keras_internals
    from acceltrain.backends.jax import resident, shares

    devices = keras.distribution.list_devices()
    data_parallel = keras.distribution.DataParallel(devices=devices)
    mesh = keras.distribution.DeviceMesh((4, 2), ("batch", "model"), devices)
    with_model_axis = keras.distribution.ModelParallel(layout_map=keras.distribution.LayoutMap(mesh),
                                                       batch_dim_name="batch")
    assert shares.splits_over_every_device(data_parallel)
    assert not shares.splits_over_every_device(with_model_axis)

    class OwnStep(keras.Sequential):
        def train_step(self, *args, **kwargs):
            return super().train_step(*args, **kwargs)

    def compiled(model_class=keras.Sequential, callbacks=None, **options):
        model = model_class([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile("adam", "mse", **options)
        return interception.Call("fit", model, (), {"callbacks": callbacks}, keras_internals.keras_own("fit"))

    class OwnList(keras.callbacks.CallbackList):
        pass

    assert resident._in_job_not(compiled(), data_parallel) == ""
    assert resident._in_job_not(compiled(), with_model_axis) == \
        "a mesh whose devices share rows of a batch (a model axis)"
    assert resident._in_job_not(compiled(OwnStep), data_parallel) == "the model's own train_step"
    assert resident._in_job_not(compiled(run_eagerly=True), data_parallel).startswith("an uncompiled step")
    assert resident._in_job_not(compiled(), None) == "no distribution to place each share by"
    assert resident._in_job_not(compiled(callbacks=keras.callbacks.CallbackList([])), data_parallel) == ""
    assert resident._in_job_not(compiled(callbacks=OwnList([])), data_parallel) == (
        "callbacks acceltrain's runner of steps cannot join (given by position, or a subclass of CallbackList)")
