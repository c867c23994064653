"""The time ledger of a real Runtime.fit (history.ledger), and its advice in the situations it names, each produced
here: a slow input pipeline, a cold and a warm compilation cache, a checkpoint every step, steps run again after a
resume. In this process, on tiny models: the commands' whole-run ledgers are tested in tests/commands."""

import json
import shutil
import time
import uuid

import pytest

import acceltrain
from acceltrain import ledger
from tests.test_runtime import _mlp, _toy_data


@pytest.fixture
def one_device():
    """A runtime of one device: no sync between steps, so the parts are the run's own."""
    with acceltrain.connect(distribution="none", verbose=False) as runtime:
        yield runtime


def _parts_sum_to_the_wall(run):
    assert run.wall_seconds > 0 and sum(run.parts.values()) == pytest.approx(run.wall_seconds, rel=1e-9)
    assert all(seconds >= 0 for seconds in run.parts.values()) and set(run.parts) == set(ledger.PARTS)


def test_a_fit_books_its_time_into_parts_that_sum_to_it_with_the_steps_and_their_flops(runtime):
    """On 8 simulated CPU devices acceltrain makes Keras wait for each step: the idle time between steps is host
    syncs. The first step compiles: its compile is compilation, JAX's events say how many programs."""
    with runtime.scope():
        model = _mlp(units=24)
    x, y = _toy_data(256)
    history = runtime.fit(model, x, y, batch_size=64, epochs=2, verbose=0, validation_data=(x[:64], y[:64]))
    run = history.ledger
    _parts_sum_to_the_wall(run)
    assert run.started <= run.ended <= time.time() and run.wall_seconds == pytest.approx(run.ended - run.started)
    for part in ("compilation", "device_steps", "host_syncs", "evaluation"):
        assert run.parts[part] > 0, (part, run.parts)
    assert run.parts["checkpoint"] == run.parts["preemption"] == run.parts["start_up"] == 0
    assert run.facts["steps"] == 2 * 4 and run.facts["compiles"] >= 1
    assert run.facts["samples"] == 2 * 256 and run.facts["evaluation_samples"] == 2 * 64  # validated each epoch
    # The step's FLOPs are its matmuls as traced: 2·in·out a Dense forward, twice that backward (the first layer's
    # input needs no gradient).
    matmuls = 64 * 2 * (8 * 24 * 2 + 24 * 4 * 3)
    assert run.flops_per_step == matmuls
    assert run.mfu is None  # no published peak for a CPU
    assert json.loads(json.dumps(run.as_json()))["parts"] == run.parts


def test_a_slow_generator_in_a_scripts_fit_is_input_wait_and_the_line_says_what_shrinks_it(one_device):
    """A script's own model.fit (acceltrain run's path: the interception's "ledger" slot) on a slow PyDataset."""
    import keras

    from acceltrain.backends import interception

    class Batches(keras.utils.PyDataset):
        def __init__(self, delay):
            super().__init__()
            self.x, self.y = _toy_data(64)
            self.delay = delay

        def __len__(self):
            return 8

        def __getitem__(self, index):
            time.sleep(self.delay)  # a generator reading from a slow disk
            return self.x.astype("float32"), self.y

    with one_device.scope():
        model = _mlp()
    # Compiled here, on the same kind of input: a fit on arrays traces another step than one on a PyDataset, and
    # on a loaded machine that second compile outweighed the waits this test is about.
    model.fit(Batches(delay=0), epochs=1, verbose=0)
    with one_device.timeline.window() as window, interception.layers(ledger=one_device.ledger_layer):
        model.fit(Batches(delay=0.1), epochs=1, verbose=0)
    run = window.ledger
    _parts_sum_to_the_wall(run)
    assert run.largest()[0] == "input_wait" and run.parts["input_wait"] >= 8 * 0.1 * 0.9, run.parts
    assert "the input pipeline kept the device waiting" in run.line() and run.facts["steps"] == 8 and not run.facts.get("compiles"), run.facts


def test_a_checkpoint_every_step_is_checkpoint_time_and_the_line_says_checkpoint_less_often(one_device, tmp_path):
    with one_device.scope():
        model = _mlp()
    x, y = _toy_data(256)
    # Compiled here, on the path the fit below takes: checkpoints every step, so one step an execution (on device
    # data, executions start where a checkpoint is due: another cadence would compile other programs)
    one_device.fit(model, x, y, batch_size=32, epochs=1, verbose=0, checkpoint_dir=tmp_path / "warm",
                   checkpoint_every="1 steps")
    run = one_device.fit(model, x, y, batch_size=32, epochs=1, verbose=0, checkpoint_dir=tmp_path / "ckpt",
                         checkpoint_every="1 steps").ledger
    _parts_sum_to_the_wall(run)
    assert run.largest()[0] == "checkpoint" and run.facts["checkpoints"] == 8, run.parts  # 7 in the epoch, 1 at its end
    assert "checkpoint less often" in run.line() and "8 checkpoints" in run.line()


def test_a_cold_compilation_cache_is_said_and_a_warm_one_is_not(one_device):
    """Shapes no earlier run compiled: the cache cannot hold the programs. The same shapes again: it does."""
    draw = uuid.uuid4().int  # shapes (one of a million) whose programs were never compiled on this machine
    features, units = 9 + draw % 1000, 16 + draw // 1000 % 1000
    x, y = _toy_data(64, features=features)
    lines = []
    for _ in range(2):
        with one_device.scope():
            model = _mlp(units=units, features=features)
        run = one_device.fit(model, x, y, batch_size=32, epochs=1, verbose=0).ledger
        _parts_sum_to_the_wall(run)
        lines.append((run.largest()[0], run.facts, run.line()))
    (cold_part, cold, cold_line), (_, warm, warm_line) = lines
    assert cold_part == "compilation" and "the compilation cache was cold" in cold_line, cold_line
    assert cold["cache_requests"] > cold.get("cache_hits", 0) and cold["compile_seconds_missed"] > 0
    # Every program the warm run asked the cache for was there (a count of hits against the cold run's would depend
    # on which shape-free programs earlier tests left in the cache: the cold run can hit those too).
    assert warm["cache_requests"] and warm.get("cache_hits", 0) == warm["cache_requests"], warm
    assert "cold" not in warm_line, warm_line


def test_steps_run_again_after_a_resume_are_preemption(one_device, tmp_path):
    """A run that got to the end of its epoch but whose last checkpoints are lost (killed before they were written):
    its resume runs steps 6 to 8 again, and books them as preemption."""
    with one_device.scope():
        model = _mlp()
    x, y = _toy_data(256)  # 8 steps of 32
    folder = tmp_path / "ckpt"
    one_device.fit(model, x, y, batch_size=32, epochs=1, verbose=0, checkpoint_dir=folder, checkpoint_every="3 steps",
                   keep_checkpoints=5)
    assert json.loads((folder / "reached.json").read_text()) == {"global_step": 8}
    for name in ("epoch-0001-step-00000",):
        shutil.rmtree(folder / name)  # the newest left is step 6
    run = one_device.fit(model, x, y, batch_size=32, epochs=2, verbose=0, checkpoint_dir=folder, resume=True,
                         checkpoint_every="3 steps", keep_checkpoints=5).ledger
    _parts_sum_to_the_wall(run)
    assert run.facts["steps_redone"] == 2 and run.parts["preemption"] > 0, run.parts
    assert run.facts["steps"] == 2 + 8


def test_the_ledger_off_gives_no_ledger_and_adds_no_callback(monkeypatch):
    monkeypatch.setenv("ACCELTRAIN_LEDGER", "0")
    with acceltrain.connect(distribution="none", verbose=False) as runtime:
        assert runtime.ledger_layer is None  # the one maker of a LedgerWatch (training/ledger_watch.py::layer)
        with runtime.scope():
            model = _mlp()
        x, y = _toy_data(64)
        assert runtime.fit(model, x, y, batch_size=32, epochs=1, verbose=0).ledger is None
    from acceltrain.backends import keras_internals

    assert keras_internals.train_function_wrappers(model) == 0


def test_the_mfu_is_the_steps_flops_over_their_time_as_a_share_of_the_devices_published_peak(one_device, monkeypatch):
    """A CPU has no published peak: the devices' peak reaches the ledger through Runtime.peak_flops (a seam here;
    the tables are hardware/gpu.py's and tpu.py's), and an H200's is read from its table, for every device."""
    from types import SimpleNamespace

    from acceltrain.runtime import Runtime

    monkeypatch.setattr(one_device, "peak_flops", lambda model: 1e12)
    with one_device.scope():
        model = _mlp()
    x, y = _toy_data(128)
    run = one_device.fit(model, x, y, batch_size=32, epochs=1, verbose=0).ledger
    assert run.facts["peak_flops_per_second"] == 1e12 and run.flops_per_step > 0
    assert run.mfu == pytest.approx(run.flops_per_step * 4 / run.parts["device_steps"] / 1e12)
    assert run.as_json()["mfu"] == run.mfu

    # A script's own fit (acceltrain run without --checkpoint-dir: the ledger layer alone) has its MFU too: on the
    # H200, the LoRA fine-tune's ledger had the step's FLOPs and no peak, so no MFU.
    from acceltrain.backends import interception

    with one_device.timeline.window() as window, interception.layers(ledger=one_device.ledger_layer):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    script_run = window.ledger
    assert script_run.facts["peak_flops_per_second"] == 1e12 and script_run.mfu == pytest.approx(
        script_run.flops_per_step * 4 / script_run.parts["device_steps"] / 1e12)

    h200s = SimpleNamespace(hardware=SimpleNamespace(simulated=False), platform="gpu", device_kind="NVIDIA H200",
                            num_devices=2)
    bf16 = SimpleNamespace(dtype_policy=SimpleNamespace(compute_dtype="bfloat16"))
    assert Runtime.peak_flops(h200s, bf16) == 2 * 989e12
    assert Runtime.peak_flops(SimpleNamespace(**{**vars(h200s), "hardware": SimpleNamespace(simulated=True)}),
                               bf16) is None  # simulated devices share one CPU


def test_a_notices_save_is_booked_as_preemption_and_the_stop_exits_42(one_device, tmp_path):
    """Issue 35: SIGTERM as step 3 begins: the step in flight finishes, one checkpoint is written there (its time booked
    as preemption), and Runtime.fit raises Interrupted with exit_code 42 and the fit's ledger."""
    import os
    import signal

    import keras

    from acceltrain.training.resumable import Interrupted

    class NoticeAt3(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 3:
                os.kill(os.getpid(), signal.SIGTERM)

    with one_device.scope():
        model = _mlp()
    x, y = _toy_data(256)  # 8 steps of 32
    with pytest.raises(Interrupted) as stopped:
        one_device.fit(model, x, y, batch_size=32, epochs=2, verbose=0, checkpoint_dir=tmp_path / "ckpt",
                       checkpoint_every="100 steps", callbacks=[NoticeAt3()])
    assert stopped.value.exit_code == 42 and "Exit 42: preempted, checkpoint saved, restart me." in str(stopped.value)
    assert stopped.value.checkpoint.name == "epoch-0000-step-00004"  # the step in flight finished, then one save
    run = stopped.value.ledger
    _parts_sum_to_the_wall(run)
    assert run.parts["preemption"] > 0 and run.facts["checkpoints"] == 1, run.parts


def test_evaluated_samples_count_validation_evaluate_and_predict_so_the_line_compares_them_with_training(one_device):
    """The ledger says a trained and an evaluated sample's time and their ratio (issue 43: validation at most 2x a
    training step's cost per sample), counting the rows of fit's validation (its partial batch too), evaluate and
    predict, on the device data's path and on Keras's."""
    with one_device.scope():
        model = _mlp()
    x, y = _toy_data(256)
    with one_device.timeline.window() as window:
        one_device.fit(model, x, y, batch_size=64, epochs=2, verbose=0, validation_data=(x[:100], y[:100]))
        one_device.evaluate(model, x, y, batch_size=64, verbose=0)
        one_device.predict(model, x[:70], batch_size=64, verbose=0)
    run = window.ledger
    assert run.facts["samples"] == 2 * 256 and run.facts["evaluation_samples"] == 2 * 100 + 256 + 70
    trained, evaluated = run.per_sample()
    assert trained == pytest.approx(run.parts["device_steps"] / 512)
    assert evaluated == pytest.approx(run.parts["evaluation"] / 526)
    assert f"{evaluated * 1e6:,.1f} µs a sample: {evaluated / trained:.2f}× a training step's" in run.line()


# Of a small TensorFlow fit's time after its start-up, at most this share is rest: what is left there is the fit's
# set-up before its first epoch (Keras distributing the datasets, building the model from a first batch) and the
# script's own lines, 11-15 % measured on 2 simulated devices (load 4-5 on 2 cores); before each epoch's iterators were
# booked as input and the validation's set-up as evaluation, rest was 39-56 % of it in these two shapes (issue 45).
TF_REST_SHARE = 0.25


@pytest.mark.tensorflow
@pytest.mark.parametrize("shape, steps", [("arrays", 3 * 64), ("dataset", 3 * 56)])
def test_a_small_tensorflow_fit_books_its_steps_and_its_epochs_iterators_not_rest(tmp_path, shape, steps):
    """Under `run --backend tensorflow --simulate-devices 2` (MirroredStrategy), a 3-epoch fit of numpy arrays with
    Adam and accuracy, and one of a tf.data pipeline with a tf.data validation set (tests/scripts/tf_ledger_shapes.py):
    each step is booked (the first, which traces the train function, as compilation; the others as device steps), the
    epoch's iterators Keras makes before its first step and after its last as input, the validation as evaluation,
    and rest stays under TF_REST_SHARE of the time after start-up."""
    from tests import support

    started = time.time()
    run = support.run_cli("run", "--backend", "tensorflow", "--simulate-devices", "2", "--ledger",
                          tmp_path / "ledger.json", support.SCRIPTS / "tf_ledger_shapes.py", shape, timeout=300)

    assert run.returncode == 0, run.stderr[-3000:]
    saved = json.loads((tmp_path / "ledger.json").read_text())
    support.check_ledger(saved, started)
    parts = saved["parts"]
    assert saved["steps"] == steps, saved
    assert parts["compilation"] > 0 and parts["device_steps"] > 0, parts
    assert (parts["evaluation"] > 0) == (shape == "dataset"), parts
    after_start_up = saved["wall_seconds"] - parts["start_up"]
    assert parts["rest"] < TF_REST_SHARE * after_start_up, (parts["rest"] / after_start_up, parts)
    assert parts["input_wait"] > 0, parts


def test_a_runtime_recording_its_ledger_is_not_given_back_to_a_connect_with_the_ledger_off(monkeypatch):
    """connect() gives an open runtime back to a call with the same options (a notebook cell run again); one that
    records its ledger is not what a call with ACCELTRAIN_LEDGER=0 asks for (under xdist, a runtime an earlier test
    held open was given to the ledger-off test above)."""
    with acceltrain.connect(distribution="none", verbose=False) as recording:
        monkeypatch.setenv("ACCELTRAIN_LEDGER", "0")
        with acceltrain.connect(distribution="none", verbose=False) as quiet:
            assert quiet is not recording and quiet.ledger_layer is None and recording.ledger_layer is not None
        monkeypatch.setenv("ACCELTRAIN_LEDGER", "1")
        with acceltrain.connect(distribution="none", verbose=False) as again:
            assert again is recording  # the same options: given back, as before
