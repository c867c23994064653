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


def test_watch_compiles_books_jaxs_own_compile_events_and_the_caches(runtime):
    """The event names of JAX 0.10.2 (backends/jax.py COMPILE_SPANS, CACHE_EVENTS) still fire: a function never
    compiled before is traced, lowered and compiled (compilation), the persistent cache asked and missed; the same
    program again, in a new function, is found in it."""
    import uuid

    import jax

    from acceltrain import ledger
    from acceltrain.backends import jax as backend

    assert jax.config.jax_compilation_cache_dir  # connect() turned the persistent cache on
    constant = float(uuid.uuid4().int % 10**9)  # a program no earlier run compiled
    timeline = ledger.Timeline(backend.watch_compiles)
    with timeline.window() as cold:
        jax.jit(lambda x: x * constant + 1)(np.ones(3, np.float32)).block_until_ready()
    with timeline.window() as warm:
        jax.jit(lambda x: x * constant + 1)(np.ones(3, np.float32)).block_until_ready()
    assert cold.ledger.parts["compilation"] > 0 and cold.ledger.facts["compiles"] >= 1
    assert cold.ledger.facts["cache_requests"] >= 1 and cold.ledger.facts["compile_seconds_missed"] > 0
    assert warm.ledger.facts.get("cache_hits", 0) >= 1 and not warm.ledger.facts.get("compile_seconds_missed")
    with timeline.window() as stopped:  # the listeners went with the windows: one watch at a time, not one a window
        pass
    assert stopped.ledger.facts == {}
