"""backends/jax/resident.py: in-memory arrays kept on the devices, each batch gathered there in Keras's own order,
and many steps an execution where no callback needs each batch. Every fit here runs twice, with the device data
(ACCELTRAIN_DEVICE_DATA unset) and without (=0, Keras's own path), and must train the same: same losses, metrics and
weights, on the 8 simulated devices of the test process."""

import contextlib

import numpy as np
import pytest

from acceltrain.backends.jax import resident


def _keras_scans() -> bool:
    """Keras 3.16 or later, read from its version file without importing it (keras comes after connect())."""
    import importlib.util
    import re
    from pathlib import Path

    text = (Path(importlib.util.find_spec("keras").origin).parent / "src" / "version.py").read_text()
    major, minor = re.search(r'__version__ = "(\d+)\.(\d+)', text).groups()
    return (int(major), int(minor)) >= (3, 16)


# On keras-nightly 3.16, which scans steps_per_execution itself, device data steps aside (choose_device_data's
# keras_scans, table-tested): these tests are Keras 3.15's.
pytestmark = pytest.mark.skipif(_keras_scans(), reason="Keras 3.16 scans steps_per_execution: device data steps aside")

rng = np.random.default_rng(0)
X = rng.normal(size=(200, 6)).astype("float32")  # 200 = 6 batches of 32 and a partial one of 8
Y = (X[:, 0] + X[:, 1] > 0).astype("int32")
WEIGHTS = rng.uniform(0.5, 2.0, size=200).astype("float32")


def _model(keras, optimizer="adam"):
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _both(runtime, monkeypatch, train, build=None, one_device=False):
    """train(model) with the device data and without: (weights, what train returned) each; `one_device`: the model
    built outside the runtime's scope, so that it trains on one CPU device (no distribution)."""
    import contextlib

    import keras

    from acceltrain.backends.jax import steps

    out = []
    for off in (False, True):
        monkeypatch.setattr(steps, "_told", set())
        if off:
            monkeypatch.setenv(resident.ENV_OFF, "0")
        else:
            monkeypatch.delenv(resident.ENV_OFF, raising=False)
        with contextlib.nullcontext() if one_device else runtime.scope():
            model = (build or _model)(keras)
        np.random.seed(11)  # Keras draws its shuffle from NumPy's global generator
        result = train(model)
        out.append((model.get_weights(), result))
    monkeypatch.delenv(resident.ENV_OFF, raising=False)
    return out


def _same(on, off):
    (weights_on, result_on), (weights_off, result_off) = on, off
    for a, b in zip(weights_on, weights_off):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    if isinstance(result_on, dict):
        assert result_on.keys() == result_off.keys()
        for name in result_on:
            np.testing.assert_allclose(result_on[name], result_off[name], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("shuffle", [True, "batch", False])
def test_a_fit_on_device_data_trains_as_keras_own_path_in_keras_order(runtime, monkeypatch, capsys, shuffle):
    """Adam + accuracy, the partial last batch, validation data, each shuffle mode: the same weights and history."""
    def train(model):
        return model.fit(X, Y, batch_size=32, epochs=3, shuffle=shuffle, validation_data=(X[:64], Y[:64]),
                         verbose=0).history

    on, off = _both(runtime, monkeypatch, train)
    err = capsys.readouterr().err
    assert "in-memory data on the devices: yes" in err and "in-memory data on the devices: no (turned off" in err
    assert "steps an execution: 7 (no callback needs each batch" in err  # 6 full batches and the partial one
    _same(on, off)


@pytest.mark.parametrize("shuffle", [True, "batch"])
def test_on_one_cpu_device_an_epochs_steps_run_in_one_compiled_loop_and_train_as_keras_does(runtime, monkeypatch,
                                                                                           capsys, shuffle):
    """decisions.choose_step_loop: one CPU device runs the steps of a dispatch in one compiled loop (8 run one program
    a step): Adam + accuracy, sample weights, the partial last batch, validation data, evaluate after, the same."""
    def train(model):
        history = model.fit(X, Y, sample_weight=WEIGHTS, batch_size=32, epochs=3, shuffle=shuffle,
                            validation_data=(X[:64], Y[:64]), verbose=0).history
        return {**history, **model.evaluate(X, Y, batch_size=48, verbose=0, return_dict=True)}

    on, off = _both(runtime, monkeypatch, train, one_device=True)
    err = capsys.readouterr().err
    assert "in-memory data on the devices: yes" in err
    assert "steps an execution: 7 (no callback needs each batch" in err
    assert "1 cpu device(s): the steps in one compiled loop a dispatch" in err
    _same(on, off)


def test_sample_and_class_weights_and_runtime_fit_train_as_keras_does(runtime, monkeypatch):
    on, off = _both(runtime, monkeypatch, lambda model: model.fit(
        X, Y, sample_weight=WEIGHTS, batch_size=32, epochs=2, verbose=0).history)
    _same(on, off)
    on, off = _both(runtime, monkeypatch, lambda model: model.fit(
        X, Y, class_weight={0: 1.0, 1: 3.0}, batch_size=40, epochs=2, verbose=0).history)
    _same(on, off)
    on, off = _both(runtime, monkeypatch, lambda model: runtime.fit(
        model, X, Y, batch_size=32, epochs=2, validation_data=(X[:64], Y[:64]), verbose=0).history)
    _same(on, off)


def test_evaluate_predict_and_save_after_a_fit_on_device_data(runtime, monkeypatch, tmp_path):
    def train(model):
        model.fit(X, Y, batch_size=32, epochs=2, verbose=0)
        evaluated = model.evaluate(X, Y, batch_size=16, verbose=0, return_dict=True)
        predicted = model.predict(X[:24], batch_size=8, verbose=0)
        model.save(tmp_path / "model.keras")
        return {**evaluated, "predicted": predicted}

    on, off = _both(runtime, monkeypatch, train)
    _same(on, off)
    assert (tmp_path / "model.keras").exists()


def test_a_callback_with_a_batch_hook_is_called_every_steps_per_execution_and_can_stop(runtime, monkeypatch,
                                                                                       capsys):
    import keras

    class Counting(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = []

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append(batch)
            if len(self.batches) == 9:
                self.model.stop_training = True

    def train(model):
        counting = Counting()
        history = model.fit(X, Y, batch_size=32, epochs=3, verbose=0, callbacks=[counting]).history
        return {"batches": np.array(counting.batches), "loss": np.array(history["loss"])}

    on, off = _both(runtime, monkeypatch, train)
    assert "steps an execution: 1 (Counting has a batch hook" in capsys.readouterr().err
    assert list(on[1]["batches"]) == [0, 1, 2, 3, 4, 5, 6, 0, 1]  # each batch, and it stopped the fit in epoch 2
    _same(on, off)


def test_epoch_hooks_and_early_stopping_see_the_epochs_of_one_execution_each(runtime, monkeypatch):
    import keras

    def train(model):
        stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)  # stops after epoch 2
        history = model.fit(X, Y, batch_size=32, epochs=5, verbose=0, callbacks=[stop]).history
        return {"loss": np.array(history["loss"]), "accuracy": np.array(history["accuracy"])}

    on, off = _both(runtime, monkeypatch, train)
    assert len(on[1]["loss"]) == 2
    _same(on, off)


def test_a_model_with_its_own_train_step_keeps_keras_loop_on_device_data(runtime, monkeypatch, capsys):
    import keras

    class Own(keras.Sequential):
        def train_step(self, state, data):
            return super().train_step(state, data)

    def train(model):
        return model.fit(X, Y, batch_size=32, epochs=2, verbose=0).history

    def own_model(keras):
        keras.utils.set_random_seed(4)
        model = Own([keras.Input((6,)), keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        return model

    on, off = _both(runtime, monkeypatch, train, own_model)
    assert "steps an execution: 1 (the model has its own train_step" in capsys.readouterr().err
    _same(on, off)


def test_inputs_that_are_not_arrays_of_numbers_keep_keras_path(runtime, monkeypatch, capsys):
    import keras

    from acceltrain.backends.jax import steps

    monkeypatch.setattr(steps, "_told", set())
    with runtime.scope():
        model = _model(keras)
    model.fit(X, Y, batch_size=32, epochs=1, validation_split=0.2, verbose=0)
    assert "in-memory data on the devices: no (the inputs are not in-memory arrays" in capsys.readouterr().err


def test_batch_hooked_names_callbacks_with_batch_methods_but_not_keras_progress_or_steps_aware_ones():
    import keras

    class Batch(keras.callbacks.Callback):
        def on_batch_end(self, batch, logs=None):
            pass

    class Epoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            pass

    class Aware(Batch):
        steps_aware = True

    batch = Batch()
    assert resident.batch_hooked([batch, Epoch(), Aware(), keras.callbacks.ProgbarLogger(),
                                  keras.callbacks.History()]) == [batch]
    assert resident.batch_hooked([keras.callbacks.TensorBoard()])  # Keras's own with batch methods count
    # A hook set on the instance, as keras.callbacks.LambdaCallback sets its own (it once ran a whole epoch in one
    # execution, called once: tests/layout/test_placement.py's Gemma losses, recorded each batch, never moved).
    lambda_batch = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None)
    assert resident.batch_hooked([lambda_batch, keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: None)]) \
        == [lambda_batch]


def test_kerass_checkpoint_callbacks_saving_each_epoch_need_no_batch_but_saving_every_n_steps_do(tmp_path):
    """ModelCheckpoint and BackupAndRestore override on_train_batch_end, which does nothing at save_freq='epoch' (their
    default): such a fit may run its epoch in a few dispatches. Saving every N steps, or a subclass (its own methods
    may use the batch), each batch."""
    import keras

    class Own(keras.callbacks.ModelCheckpoint):
        pass

    epochwise = [keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"), save_best_only=True),
                 keras.callbacks.ModelCheckpoint(str(tmp_path / "w.weights.h5"), save_weights_only=True),
                 keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))]
    stepwise = [keras.callbacks.ModelCheckpoint(str(tmp_path / "s.keras"), save_freq=5),
                keras.callbacks.BackupAndRestore(str(tmp_path / "b2"), save_freq=3), Own(str(tmp_path / "o.keras"))]
    assert resident.batch_hooked(epochwise) == []
    assert resident.batch_hooked(stepwise) == stepwise


def test_a_fit_with_an_epochwise_model_checkpoint_runs_its_epoch_in_one_execution_and_saves_each_epoch(
        runtime, monkeypatch, capsys, tmp_path):
    """The most common script's callbacks (ModelCheckpoint with save_best_only, EarlyStopping, CSVLogger): the epoch in
    one execution, the same weights and history as Keras's own path, and the checkpoint Keras's own path writes."""
    import keras

    def train(model):
        saved = tmp_path / f"best-{len(list(tmp_path.iterdir()))}.keras"
        callbacks = [keras.callbacks.ModelCheckpoint(str(saved), monitor="val_loss", save_best_only=True),
                     keras.callbacks.EarlyStopping(patience=5), keras.callbacks.CSVLogger(str(saved) + ".csv")]
        history = model.fit(X, Y, batch_size=32, epochs=3, validation_data=(X[:64], Y[:64]), verbose=0,
                            callbacks=callbacks).history
        best = keras.saving.load_model(saved)
        return {**history, "best": best.evaluate(X, Y, batch_size=64, verbose=0, return_dict=True)["loss"]}

    on, off = _both(runtime, monkeypatch, train)
    err = capsys.readouterr().err
    assert "steps an execution: 7 (no callback needs each batch" in err and "has a batch hook" not in err
    _same(on, off)


class _Measured(dict):
    """resident._SECONDS_A_STEP as a loaded or a quiet machine would leave it: every model's step measured at
    `seconds`, whatever the fit measures meanwhile."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def get(self, model, default=None):
        return self.seconds

    def __setitem__(self, model, seconds):
        pass


@pytest.mark.parametrize("optimizer, one_device", [("adam", False), ("sgd", False), ("adam", True)])
def test_a_step_measured_slow_or_fast_trains_the_same_weights_bit_for_bit(runtime, monkeypatch, capsys, optimizer,
                                                                          one_device):
    """The steps an execution runs with a callback that hears from each second (the checkpoint loop's) are sized by a
    measured step time (choose_steps_per_dispatch's seconds_a_step): a loaded machine's slow step gives 1 step an
    execution, a quiet one's the epoch. Which one the clock picks must not change what is computed: the same
    weights and history to the bit, the partial last batch and validation data included; on 8 CPU devices (one program
    a step) and on one (the steps in one compiled loop)."""
    import contextlib

    import keras

    class Live(keras.callbacks.Callback):
        steps_aware, hears_each_second = True, "the live callback"  # its name in the line

    def train(model):
        np.random.seed(11)
        return model.fit(X, Y, batch_size=32, epochs=3, validation_data=(X[:64], Y[:64]), verbose=0,
                         callbacks=[Live()]).history

    from acceltrain.backends.jax import steps

    trained = []
    for seconds, told in ((10.0, "steps an execution: 1 "), (1e-6, "steps an execution: 7 ")):
        monkeypatch.setattr(steps, "_told", set())
        monkeypatch.setattr(resident, "_SECONDS_A_STEP", _Measured(seconds))
        with contextlib.nullcontext() if one_device else runtime.scope():
            model = _model(keras, optimizer)
        history = train(model)
        assert told in capsys.readouterr().err
        trained.append((model.get_weights(), history))
    (slow, slow_history), (fast, fast_history) = trained
    for a, b in zip(slow, fast):
        np.testing.assert_array_equal(a, b)
    assert slow_history == fast_history


@contextlib.contextmanager
def _programs_compiled():
    """The names of the programs JAX compiles inside (its backend-compile events), in order."""
    import jax

    from acceltrain.backends.jax import compiles

    names = []

    def span(event, start, end, fun_name=None, **_):
        if event == compiles.BACKEND_COMPILE:
            names.append(fun_name)

    jax.monitoring.register_event_time_span_listener(span)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_time_span_listener(span)


def test_one_loop_program_serves_every_count_of_steps_the_clock_sizes(runtime, monkeypatch, capsys):
    """The loop's count of steps is a traced argument and its buffer of indices as large as an execution of the
    epoch may be: fits whose steps an execution the clock sized 7, 3 and 1 (a quiet machine, a loaded one, a slower
    one) run one loop program. Its buffer once took the count's rows: `acceltrain train` on a loaded machine compiled
    the loop again for each count it measured (12 programs, issue 43)."""
    import keras

    from acceltrain.backends.jax import steps

    class Live(keras.callbacks.Callback):
        steps_aware, hears_each_second = True, "the live callback"  # its name in the line

    model = _model(keras)  # outside the runtime's scope: one CPU device, the steps in one compiled loop
    compiled = []
    for seconds, told in ((1e-6, "steps an execution: 7 "), (0.3, "steps an execution: 3 "),
                          (10.0, "steps an execution: 1 ")):
        monkeypatch.setattr(steps, "_told", set())
        monkeypatch.setattr(resident, "_SECONDS_A_STEP", _Measured(seconds))
        with _programs_compiled() as names:
            model.fit(X, Y, batch_size=32, epochs=2, validation_data=(X[:64], Y[:64]), verbose=0, callbacks=[Live()])
        assert told in capsys.readouterr().err
        compiled.append(names)
    assert compiled[0].count("jit(loop)") == 1 and compiled[1:] == [[], []], compiled
