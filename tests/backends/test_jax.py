"""backends/jax.py: on several CPU devices Keras runs one step at a time (XLA's CPU collectives deadlock
when steps overlap; see _steps_must_not_overlap)."""

import threading

import numpy as np
import pytest

from acceltrain.backends import with_callback


def _model(keras):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    return model


def _threads_of_batch_ends(keras, model, call):
    """The threads Keras called on_*_batch_end from, for a callback as free to run async as Keras allows."""
    threads = set()

    class Where(keras.callbacks.Callback):
        async_safe = True

        def on_train_batch_end(self, batch, logs=None):
            threads.add(threading.current_thread())

        on_test_batch_end = on_predict_batch_end = on_train_batch_end

    x = np.random.default_rng(0).random((256, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int32")
    if call == "fit":
        model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[Where()])
    else:
        model.evaluate(x, y, batch_size=64, verbose=0, callbacks=[Where()])
    return threads


@pytest.mark.parametrize("call", ["fit", "evaluate"])
def test_on_several_cpu_devices_each_step_ends_before_the_next_starts(runtime, call):
    import keras

    with runtime.scope():
        distributed = _model(keras)
    assert _threads_of_batch_ends(keras, distributed, call) == {threading.main_thread()}
    # The control: the same model outside any acceltrain distribution, as Keras dispatches it by itself.
    assert threading.main_thread() not in _threads_of_batch_ends(keras, _model(keras), call)


def test_the_rule_is_several_cpu_devices(runtime):
    from acceltrain.backends import jax as backend

    assert backend._steps_must_not_overlap(runtime.distribution)  # 8 simulated CPU devices
    one = backend.make_distribution("data", runtime.hardware.devices[:1])
    assert not backend._steps_must_not_overlap(one)


class Marker:
    pass


def _fit(model, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None):
    pass


@pytest.mark.parametrize("args, kwargs, expected", [
    ((), {}, ["Marker"]),
    ((), {"callbacks": None}, ["Marker"]),
    ((), {"callbacks": ["mine"]}, ["Marker", "mine"]),  # first: it sees each epoch end before the script's
    ((), {"callbacks": [Marker()]}, ["Marker"]),  # one is enough
    ((1, 2, 3, 4, 5, ["mine"]), {}, None),  # callbacks given by position: left alone
    ((), {"callbacks": "a CallbackList"}, "a CallbackList"),
])
def test_with_callback_adds_once_where_it_can(args, kwargs, expected):
    got = with_callback(_fit, args, kwargs, Marker()).get("callbacks")
    if isinstance(got, list):
        got = [c if isinstance(c, str) else type(c).__name__ for c in got]
    assert got == expected
