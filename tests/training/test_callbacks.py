import math

import pytest

from acceltrain.training.callbacks import DivergenceCheck


class _Model:
    stop_training = False
    optimizer = None


def _run(losses, num_classes=10):
    check = DivergenceCheck(num_classes)
    check.set_model(_Model())
    for epoch, loss in enumerate(losses):
        check.on_epoch_end(epoch, {"loss": loss})
        if check.model.stop_training:
            return check, epoch
    return check, None


LN10 = math.log(10)


@pytest.mark.parametrize(
    "losses, stops_at",
    [
        ([0.8, 0.3, 0.2, 0.15], None),  # healthy
        ([0.8, float("nan")], 1),
        ([0.8, float("inf")], 1),
        ([0.5, LN10, LN10 + 0.001, LN10], 2),  # the seed's diverged run: stuck at ln(10)
        ([0.5, 8.0, 9.0, 9.5], 2),  # worse than chance and rising
        ([2.35, 2.33, 2.31, 2.29, 2.2], None),  # learning slowly from chance: still falling
        ([LN10, 0.5, LN10, 0.4, LN10], None),  # not two epochs in a row
    ],
)
def test_divergence_check(losses, stops_at):
    check, stopped = _run(losses)
    assert stopped == stops_at
    assert (check.message is not None) == (stops_at is not None)


def test_a_regression_loss_is_only_checked_for_nan():
    check, stopped = _run([5.0, 5.0, 5.0, 5.0], num_classes=None)
    assert stopped is None


def test_the_message_names_the_likely_cause():
    check, _ = _run([0.5, LN10, LN10])
    with pytest.raises(Exception, match=r"diverged at epoch 3.*ln\(10\) = 2.3026.*learning rate too high"):
        check.raise_if_diverged()


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Stalled(Exception):
    pass


def _watched_calls(runtime, waits: dict) -> list:
    """A fit (2 epochs, validation), then evaluate and predict, each under the StallWatch of a watchdog whose
    clock the test moves: each step takes 1 s, and at the moments in `waits` the clock jumps by that many
    seconds while the process is idle, then the watchdog checks. The (moment, fired) seen, until it fired."""
    import io

    import keras
    import numpy as np

    from acceltrain.training.callbacks import StallWatch
    from acceltrain.watchdog import Watchdog

    clock, seen = _Clock(), []

    def fire(code):
        raise _Stalled(code)  # as the process would end

    dog = Watchdog(1800, clock=clock, cpu_clock=_Clock(), exit=fire, stream=io.StringIO())
    dog._thread = object()  # the test checks by hand: no thread

    def at(moment):
        if moment in waits:
            clock.now += waits[moment]
            seen.append((moment, True))
            dog.check()
            seen[-1] = (moment, False)

    class Moments(keras.callbacks.Callback):  # after StallWatch, as the script's callbacks are
        epoch, validations, fitting = 0, 0, False

        def on_train_begin(self, logs=None):
            self.fitting = True

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch + 1

        def on_train_batch_begin(self, batch, logs=None):
            at(f"fit, epoch {self.epoch}, step {batch + 1}")
            clock.now += 1

        def on_test_begin(self, logs=None):
            self.validations += 1
            at(f"validation {self.validations}" if self.fitting else "evaluate's first step")

        def on_test_batch_begin(self, batch, logs=None):
            clock.now += 1

        def on_epoch_end(self, epoch, logs=None):
            at(f"the script's callbacks at epoch {epoch + 1}'s end")

        def on_predict_begin(self, logs=None):
            at("predict's first step")

    x = np.random.default_rng(0).random((256, 4), dtype=np.float32)
    y = (x.sum(axis=1) > 2).astype("int32")
    with runtime.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    try:
        with dog.watching("fit (compiling and running the first step)"):
            model.fit(x, y, batch_size=64, epochs=2, validation_data=(x[:128], y[:128]), verbose=0,
                      callbacks=[StallWatch(dog), Moments()])
        with dog.watching("evaluate (compiling and running the first step)"):
            model.evaluate(x, y, batch_size=64, verbose=0, callbacks=[StallWatch(dog), Moments()])
        with dog.watching("predict (compiling and running the first step)"):
            model.predict(x, batch_size=64, verbose=0, callbacks=[StallWatch(dog), Moments()])
    except _Stalled:
        pass
    return seen


def test_what_compiles_or_runs_between_epochs_may_take_the_users_timeout(runtime):
    slow = ["fit, epoch 1, step 1", "validation 1", "the script's callbacks at epoch 1's end",
            "the script's callbacks at epoch 2's end", "evaluate's first step", "predict's first step"]
    assert _watched_calls(runtime, dict.fromkeys(slow, 900)) == [(moment, False) for moment in slow]


@pytest.mark.parametrize("moment", ["fit, epoch 2, step 3", "validation 2"])
def test_a_stall_in_a_phase_already_timed_is_named_within_the_step_bound(runtime, moment):
    assert _watched_calls(runtime, {moment: 100}) == [(moment, True)]  # steps of 1 s: the bound is 60 s


def test_the_epoch_timer_counts_the_process_s_cpu_time_beside_the_wall_time():
    import time

    from acceltrain.training.callbacks import EpochTimer

    timer = EpochTimer()
    timer.on_train_begin()
    busy_until = time.process_time() + 0.3
    while time.process_time() < busy_until:  # an epoch that computes: its CPU time counted
        pass
    timer.on_epoch_end(0)
    time.sleep(0.3)  # an epoch that waits: wall time, next to no CPU time
    timer.on_epoch_end(1)
    assert timer.epoch_cpu_seconds[0] >= 0.3 and timer.epoch_seconds[0] >= 0.3
    assert timer.epoch_seconds[1] >= 0.3 and timer.epoch_cpu_seconds[1] < 0.1
    assert len(timer.threads) == 2 and all(count >= 1 for count in timer.threads)  # the OS's count (Linux)


def _hooked():
    """A callback with a batch hook: Keras's own loop, one beat a step (made on use: keras after connect())."""
    import keras

    return type("Hooked", (keras.callbacks.Callback,), {"on_train_batch_end": lambda self, batch, logs=None: None})()


@pytest.mark.parametrize("shape", ["arrays", "tf.data", "a batch hook", "odd-sized arrays"])
def test_the_watchdog_counts_the_steps_a_fit_evaluate_and_predict_ran_whatever_a_beat_covered(runtime, shape):
    """The stall line's "after N step(s)" and the heartbeats' steps: on arrays acceltrain's runner trains an epoch in
    a few dispatches of many steps (a beat each), on tf.data and with a batch hook Keras's loop beats each step. Either
    way the watchdog counts the steps run: 2 epochs of their batches, then evaluate's and predict's."""
    import keras
    import numpy as np
    import tensorflow as tf

    samples = 250 if shape == "odd-sized arrays" else 256
    x = np.random.default_rng(0).random((samples, 4), dtype=np.float32)
    y = (x.sum(axis=1) > 2).astype("int32")
    with runtime.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    data = {"x": tf.data.Dataset.from_tensor_slices((x, y)).batch(32)} if shape == "tf.data" else {"x": x, "y": y}
    before = runtime.watchdog.beat_now()["steps"]
    runtime.fit(model, **data, batch_size=None if shape == "tf.data" else 32, epochs=2, verbose=0,
                callbacks=[_hooked()] if shape == "a batch hook" else None)
    trained = runtime.watchdog.beat_now()["steps"] - before
    runtime.evaluate(model, x[:128], y[:128], batch_size=32, verbose=0)
    runtime.predict(model, x[:64], batch_size=32, verbose=0)
    batches = math.ceil((samples - samples % 8) / 32)  # 250: 2 left out over 8 replicas, then 7 batches and one of 24
    assert (trained, runtime.watchdog.beat_now()["steps"] - before) == (2 * batches, 2 * batches + 4 + 2)
