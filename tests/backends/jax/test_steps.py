"""backends/jax/steps.py: on several CPU devices Keras runs one step at a time (XLA's CPU collectives deadlock
when steps overlap; see _steps_must_not_overlap), and a fit's step is timed once against one device."""

import threading

import numpy as np
import pytest

from acceltrain import decisions
from tests.backends.jax import IMAGES, LABELS, _model


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
    from acceltrain.backends.jax import distribution, steps

    assert steps._steps_must_not_overlap(runtime.distribution)  # 8 simulated CPU devices
    one = distribution.make_distribution("data", runtime.hardware.devices[:1])
    assert not steps._steps_must_not_overlap(one)


def test_a_fit_on_several_cpu_devices_is_timed_once_against_one_device_and_said(runtime, capsys, monkeypatch):
    """Issue 22 item 5. The thresholds are lowered so a tiny model is measured and said whatever its ratio (the
    ratio's rule is decisions.slower_on_several_devices's table); it is measured once a process."""
    import keras

    from acceltrain.backends.jax import steps

    monkeypatch.setattr(steps, "_told", set())
    monkeypatch.setattr(steps, "COMPARE_AFTER_STEPS", 5)
    monkeypatch.setattr(steps, "COMPARE_FROM_STEP_SECONDS", 0.0)
    monkeypatch.setattr(decisions, "SLOWER_WORTH_SAYING", 0.0)
    with runtime.scope():
        model = _model(keras)
    x, y = IMAGES.reshape(64, -1)[:, :8], LABELS
    for _ in range(2):  # 2 epochs: on device data an epoch is one execution, and the first compiles
        model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    said = [line for line in capsys.readouterr().err.splitlines() if "the same step took on one device" in line]
    assert len(said) == 1 and said[0].startswith("acceltrain: 8 CPU devices: a training step takes "), said
    assert "(measured once: 5 steps of a copy of the state on one device, after " in said[0]
    from acceltrain.backends import keras_internals

    assert keras_internals.train_function_wrappers(model) == 0  # Keras's own train function given back


def test_a_fit_that_is_not_many_times_slower_says_nothing(runtime, capsys, monkeypatch):
    import keras

    from acceltrain.backends.jax import steps

    monkeypatch.setattr(steps, "_told", set())
    monkeypatch.setattr(steps, "COMPARE_AFTER_STEPS", 5)
    monkeypatch.setattr(steps, "COMPARE_FROM_STEP_SECONDS", 0.0)
    monkeypatch.setattr(decisions, "SLOWER_WORTH_SAYING", 1e9)
    measured = []
    monkeypatch.setattr(decisions, "slower_on_several_devices",
                        lambda *args, **kwargs: measured.append(args) or None)
    with runtime.scope():
        model = _model(keras)
    model.fit(IMAGES.reshape(64, -1)[:, :8], LABELS, batch_size=8, epochs=2, verbose=0)  # an epoch an execution
    assert len(measured) == 1 and measured[0][0] == 8 and measured[0][4] == steps.COMPARE_STEPS
    assert "the same step took on one device" not in capsys.readouterr().err


def test_the_one_device_copy_takes_what_this_process_holds_whole(runtime):
    """_here_whole: an array this process holds (all of it, or replicated) as it is; the multi-process path (rows
    here, repeated to the global shape) is run under launch by the slow test of tests/commands/test_launch.py."""
    import jax

    from acceltrain.backends.jax import steps

    local = jax.numpy.arange(6.0).reshape(3, 2)
    assert steps._here_whole(local) is local
    assert steps._here_whole(np.ones(3)).shape == (3,)
