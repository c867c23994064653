"""backends/jax.py: on several CPU devices Keras runs one step at a time (XLA's CPU collectives deadlock
when steps overlap; see _steps_must_not_overlap)."""

import threading

import numpy as np
import pytest


def _model(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model


def _threads_of_batch_ends(keras, model, call, runtime=None):
    """The threads Keras called on_*_batch_end from, for a callback as free to run async as Keras allows."""
    threads = set()

    class Where(keras.callbacks.Callback):
        async_safe = True

        def on_train_batch_end(self, batch, logs=None):
            threads.add(threading.current_thread())

        on_test_batch_end = on_predict_batch_end = on_train_batch_end

    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int32")
    if runtime is not None:  # Runtime's own call: Keras's own method, which passes no layer
        getattr(runtime, call)(model, x, y, batch_size=64, verbose=0, callbacks=[Where()])
    elif call == "fit":
        model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[Where()])
    else:
        model.evaluate(x, y, batch_size=64, verbose=0, callbacks=[Where()])
    return threads


@pytest.mark.parametrize("call", ["fit", "evaluate"])
@pytest.mark.parametrize("by", ["model", "runtime"])
def test_on_several_cpu_devices_each_step_ends_before_the_next_starts(runtime, call, by):
    import keras

    with runtime.scope():
        distributed = _model(keras)
    through = runtime if by == "runtime" else None
    assert _threads_of_batch_ends(keras, distributed, call, through) == {threading.main_thread()}
    # The control: the same model outside any acceltrain distribution, as Keras dispatches it by itself.
    assert threading.main_thread() not in _threads_of_batch_ends(keras, _model(keras), call)


def test_the_rule_is_several_cpu_devices(runtime):
    from acceltrain.backends import jax as backend

    assert backend._steps_must_not_overlap(runtime.distribution)  # 8 simulated CPU devices
    one = backend.make_distribution("data", runtime.hardware.devices[:1])
    assert not backend._steps_must_not_overlap(one)
