"""Steps on several CPU devices, and steps acceltrain runs itself: one step at a time where XLA's CPU collectives
would deadlock (_steps_must_not_overlap), a fit's step timed again on one device, and --verify's steps on the layout
and on one device from the same weights (Keras's own train_step, jitted)."""

import functools
import statistics
import time

import jax
import numpy as np

from acceltrain.backends.jax.distribution import scope


def _steps_must_not_overlap(distribution) -> bool:
    """True for a distribution over several CPU devices (simulated, or CPUs of several processes).

    Why: with no callback that needs each step's metrics (e.g. `fit(..., verbose=2)` or
    `evaluate(..., verbose=0)` with no callbacks, or only `async_safe` ones), Keras 3.15 dispatches steps
    without waiting and fetches their metrics in a thread pool, so several steps run at once. XLA's CPU
    runtime runs each device's share of a step on a shared, small thread pool (sized by the cores, 2
    here); the all-reduce of one step then waits for devices whose threads are taken by the next step,
    and XLA aborts after 40 s ("Expected 8 threads to join the rendezvous, but only 7 of them arrived on
    time", exit 134), or, across processes (gloo), waits for ever. Measured here with a small convnet
    under plain Keras DataParallel over 4 simulated devices: stuck in the first all-reduce in 2 of 2 runs
    as Keras dispatches it (gdb: three devices' threads in the rendezvous, the fourth device's launch
    waiting for a thread), and 1 of 1 each with JAX_CPU_ENABLE_ASYNC_DISPATCH=false,
    --xla_cpu_multi_thread_eigen=false, and both; trained with one step at a time on 4 and 8 devices
    (benchmarks/stress_simulated.py counts it). Related, open upstream: jax-ml/jax#25861 (CPU hangs
    with async dispatch). Accelerators run collectives on the device: Keras's async dispatch is kept.
    """
    devices = distribution.device_mesh.devices.flatten()
    return len(devices) > 1 and all(str(name).startswith("cpu") for name in devices)


@functools.cache
def _one_step_at_a_time():
    """The callback class that makes Keras wait for each step's metrics before the next (made on first use)."""
    import keras

    class OneStepAtATime(keras.callbacks.Callback):
        """Keras dispatches batch ends to a thread pool unless a callback overrides them without being
        `async_safe`: overriding them is the whole point."""

        steps_aware = True  # a wait each execution, however many steps it runs (resident.batch_hooked)

        def on_train_batch_end(self, batch, logs=None):
            pass

        on_test_batch_end = on_predict_batch_end = on_train_batch_end

    return OneStepAtATime


_told = set()  # what this process has said once


def steps_one_at_a_time(distribution) -> bool:
    """Whether Keras is made to wait for each step under `distribution` (step_callbacks' one step at a time): what the
    ledger's watch books as host syncs, asked without making the callbacks."""
    return distribution is not None and _steps_must_not_overlap(distribution)


def step_callbacks(distribution) -> list:
    """The callbacks every fit, evaluate and predict under `distribution` needs: one step at a time over several
    CPU devices (_steps_must_not_overlap), said once; and, once a process, the step timed again on one device
    (_timed_on_one_device)."""
    if distribution is None or not _steps_must_not_overlap(distribution):
        return []
    if "one step" not in _told:
        _told.add("one step")
        from acceltrain import log

        log.info(f"{distribution.device_mesh.devices.size} CPU devices: Keras runs one step at a time here (it waits "
                 "for each step's metrics), as XLA's CPU collectives can deadlock when steps overlap")
    timed = [] if "timed on one device" in _told else [_timed_on_one_device()()]
    return [_one_step_at_a_time()(), *timed]


# When a fit on several CPU devices is timed against one device (_timed_on_one_device): after this many training
# steps (the first ones compile), over this many steps of the copy. Steps of any length (issue 33: a batch-32 MLP,
# 1 ms a step plainly, took 13 ms on 8 devices and 38 ms under launch, unsaid below the old 10 ms threshold): the
# copy's compile is paid once a process, a second or two for such a step.
COMPARE_AFTER_STEPS = 50
COMPARE_FROM_STEP_SECONDS = 0.0
COMPARE_STEPS = 5


@functools.cache
def _timed_on_one_device():
    """The callback class that, once a process, times a fit's training step on one device against the same step on
    the several CPU devices it runs on, and says so when those are many times slower
    (decisions.slower_on_several_devices). The copy: Keras's own train_step, jitted with no distribution, on a copy
    of the fit's state and its last batch on the first device. One compile of the step (seconds) and a few steps:
    paid once a process, only where steps take COMPARE_FROM_STEP_SECONDS or more. In a job of several processes,
    where no process holds the whole batch, each times the step on one of its devices on a batch of the global
    shape made of its own rows (the same arithmetic), all at the same step, so none waits in a collective."""
    import keras

    from acceltrain.backends import keras_internals

    class TimedOnOneDevice(keras.callbacks.Callback):
        steps_aware = True  # times each execution, per step (resident.batch_hooked)

        def on_train_begin(self, logs=None):
            self.seconds, self.steps, self.kept = [], 0, keras_internals.keep_last_batch(self.model)

        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):  # not async_safe: on the main thread, each step finished
            steps = self.model.steps_per_execution  # a batch end comes after as many steps (or the epoch's last)
            self.seconds.append((time.perf_counter() - self.started) / steps)
            self.steps += steps
            if self.steps < COMPARE_AFTER_STEPS or len(self.seconds) < 2 or "timed on one device" in _told:
                return
            _told.add("timed on one device")
            self.kept["stop"]()
            several = statistics.median(self.seconds[max(1, len(self.seconds) // 5):])  # the first ones compiled
            if several >= COMPARE_FROM_STEP_SECONDS and "batch" in self.kept:
                batch = self.kept.pop("batch")  # a batch's indices where its steps ran many a dispatch: gathered
                _compare(self.model, batch.gathered() if hasattr(batch, "gathered") else batch, several)

        def on_train_end(self, logs=None):
            self.kept["stop"]()

    return TimedOnOneDevice


def _compare(model, batch, several: float) -> None:
    from acceltrain import decisions, log
    from acceltrain.backends import keras_internals

    try:
        with keras_internals.no_distribution():  # Keras's own step, traced undistributed
            here = jax.tree.map(_here_whole, (keras_internals.training_state(model), batch))
            state, batch = jax.device_put(here, jax.local_devices()[0])
            step = jax.jit(model.train_step)
            started = time.perf_counter()
            state = jax.block_until_ready(step(state, batch)[1])
            compiled = time.perf_counter() - started
            seconds = []
            for _ in range(COMPARE_STEPS):
                started = time.perf_counter()
                state = jax.block_until_ready(step(state, batch)[1])
                seconds.append(time.perf_counter() - started)
    except Exception as error:  # noqa: BLE001  (a measurement that cannot be made says nothing)
        log.debug(f"the step was not timed on one device: {type(error).__name__}: {error}")
        return
    devices = len(jax.devices())
    line = decisions.slower_on_several_devices(devices, several, statistics.median(seconds), compiled, COMPARE_STEPS,
                                               processes=jax.process_count())
    if line:
        log.info(line)


def _here_whole(value):
    """A value of the fit's state or batch as one array in this process: itself where this process holds all of it;
    else its rows here, repeated to the global shape (a batch split over processes: the same shapes, the same
    arithmetic); a weight split over the processes raises (nothing timed)."""
    if not isinstance(value, jax.Array) or value.is_fully_addressable:
        return value
    if value.is_fully_replicated:
        return value.addressable_data(0)
    rows = np.concatenate([np.asarray(shard.data) for shard in sorted(
        value.addressable_shards, key=lambda shard: shard.index[0].start or 0)])
    if rows.shape[1:] != value.shape[1:]:
        raise ValueError(f"split along another axis than the batch's: {value.shape}")
    return np.resize(rows, value.shape)


def _tell_once(line: str) -> None:
    if line not in _told:
        _told.add(line)
        from acceltrain import log

        log.info(line)


def verify_steps(model, batches, distribution) -> tuple[list, list, list, list]:
    """Train `model` for one step per batch of `batches` ((x, y) structures of numpy arrays) twice from its current
    state, writing nothing back: laid out as its variables are, under `distribution` (its batches cut as Keras cuts
    them), and on one device with no distribution. Returns (losses, losses on one device, trainable weights after,
    the same on one device): each step's losses as {name: value} of the logs whose name holds "loss" (a GAN's
    d_loss and g_loss), the weights as numpy arrays in model.trainable_variables's order.

    Keras's own train_step, jitted as Keras's JAX trainer jits it, on (trainable, non-trainable, optimizer, metrics)
    values: the model's variables, its optimizer's step count and its metrics stay as they were."""
    import keras

    def laid_out(batch):
        return keras.tree.map_structure(
            lambda array: None if array is None else jax.device_put(
                array, distribution.get_data_layout(array.shape).backend_layout), batch)

    with scope(distribution):
        losses, weights = _trained(model, _training_values(model), batches, laid_out)
    alone, alone_weights = steps_on_one_device(model, batches)
    return losses, alone, weights, alone_weights


def steps_on_one_device(model, batches) -> tuple[list, list]:
    """verify_steps's one-device half: (each step's losses, trainable weights after), nothing written back."""
    from acceltrain.backends import keras_internals

    device = jax.local_devices()[0]
    with keras_internals.no_distribution():
        return _trained(model, jax.device_put(_training_values(model), device), batches,
                        lambda batch: jax.device_put(batch, device))


def _training_values(model) -> tuple:
    optimizer = model.optimizer.variables if model.optimizer is not None else []  # a GAN keeps its own
    return tuple([v.value for v in variables] for variables in (
        model.trainable_variables, model.non_trainable_variables, optimizer, model.metrics_variables))


def _trained(model, state, batches, place) -> tuple[list, list]:
    import numpy as np

    step = jax.jit(model.train_step)
    losses = []
    for batch in batches:
        logs, state = step(state, place(batch))
        losses.append({name: float(value) for name, value in logs.items() if "loss" in name})
    return losses, [np.asarray(value) for value in state[0]]
