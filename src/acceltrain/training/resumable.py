"""Runtime.fit with checkpoints: an epoch loop around Keras's fit that can stop and resume exactly.

Each epoch is one `model.fit(initial_epoch=e, epochs=e + 1, shuffle=False)` over the samples in
`checkpoint.epoch_order(seed, e)` (the arrays' own order with shuffle=False), less the few at its end that
would not divide over the replicas; a run resumed at step s of epoch e starts that epoch at sample
s × batch_size of the same order. SIGTERM (the preemption notice on TPU VMs) and SIGINT finish the
current step, write a checkpoint and raise Interrupted. Imports keras: import only after connect().
"""

import contextlib
import os
import signal
import threading
import time

import keras
import numpy as np

from acceltrain import data, log
from acceltrain.backends import keras_internals
from acceltrain.training.checkpoint import Checkpoints, Every, State, epoch_order
from acceltrain.training.dataset_position import DatasetFeed, end_of_pass_expected
from acceltrain.errors import AcceltrainError, UsageError


class Interrupted(AcceltrainError):
    """Training stopped on SIGTERM or SIGINT after writing a checkpoint."""

    def __init__(self, signum: int, checkpoint, resume: str = "resume=True (CLI: the same command with --resume)"):
        self.signum = signum
        self.checkpoint = checkpoint
        self.exit_code = 128 + signum  # what a shell reports for a process ended by that signal
        super().__init__(f"Stopped by {signal.Signals(signum).name}; a checkpoint is saved in {checkpoint}. "
                         f"Resume with {resume}.")


def fit(model, prepared, *, epochs: int, checkpoints: Checkpoints, every: Every, resume: bool, seed: int,
        callbacks=(), verbose="auto", **fit_kwargs):
    """Train `prepared` (an inputs.Fit, kept whole: trim=False) from the newest checkpoint (if resume) to `epochs`,
    checkpointing as `every` says. Arrays: each epoch in the order epoch_order(seed, epoch), less its last few
    (Fit.epoch); a tf.data.Dataset: one pass an epoch (see dataset_position)."""
    feed = DatasetFeed(prepared.x, checkpoints.folder / "data", prepared.steps_per_epoch) if prepared.is_dataset else None
    shuffle = fit_kwargs.pop("shuffle", True) is not False  # False: every epoch in the arrays' own order
    state = _starting_state(model, checkpoints, resume, seed, prepared.num_replicas)
    steps_per_epoch = feed.steps_per_epoch if feed else prepared.steps_per_epoch
    if prepared.left_out:
        log.info(f"left out {prepared.left_out} training sample(s) of each epoch, the last of its "
                 f"{'shuffled ' if shuffle else ''}order{', so they differ from epoch to epoch,' if shuffle else ''} "
                 f"so the final batch divides over {prepared.num_replicas} replicas")
    history = keras.callbacks.History()
    history.history = {name: list(values) for name, values in state.history.items()}
    progress = _WholeRunProgress(epochs)
    # In a multi-process JAX job, jax.distributed catches SIGTERM itself, so that every process learns
    # of it and stops at the same step (checkpoints.preempted_at); Python must not take it over.
    sigterm_here = prepared.num_processes == 1 or keras.backend.backend() != "jax"
    last_logs = lambda: {name: values[-1] for name, values in state.history.items() if values}  # noqa: E731
    timed = []  # the epochs this process ran, and their steps: a resumed epoch only in part (throughput's basis)
    with _deferred_signals(sigterm_here) as received, contextlib.closing(checkpoints), end_of_pass_expected(), \
            _one_training_run(callbacks, last_logs):
        saver = _StepSaver(checkpoints, every, state, steps_per_epoch, received)
        for epoch in range(state.epoch, epochs):
            first_step = state.step if epoch == state.epoch else 0
            saver.start_epoch(epoch, first_step)
            started = time.perf_counter()
            if feed:  # a dataset: the next batches of the one iterator the run reads
                inputs = {"x": feed.epoch(epoch, first_step, _oldest_epoch(checkpoints))}
            else:  # arrays: this epoch's order, from the step reached on
                n = data.num_samples(prepared.x)
                inputs = prepared.epoch(epoch_order(state.seed, epoch, n) if shuffle else np.arange(n), first_step)
            epoch_history = keras_internals.keras_method(model, "fit")(
                **inputs, initial_epoch=epoch, epochs=epoch + 1, shuffle=False, validation_data=prepared.validation_data,
                validation_batch_size=prepared.validation_batch_size, verbose=verbose,
                callbacks=[progress, saver, *callbacks], **fit_kwargs,
            )
            if saver.stopped_mid_epoch:
                raise Interrupted(received[0], saver.last_saved)
            state.epoch, state.step = epoch + 1, 0
            state.epoch_seconds.append(time.perf_counter() - started)
            timed.append({"epoch": epoch + 1, "seconds": state.epoch_seconds[-1], "steps": steps_per_epoch - first_step})
            for name, values in epoch_history.history.items():
                state.history.setdefault(name, []).extend(float(v) for v in values)
            if model.stop_training:  # a callback (e.g. the divergence check) ended the run
                break
            if not received and checkpoints.preempted_at((epoch + 1) * steps_per_epoch):
                received.append(signal.SIGTERM)
            due = every.unit == "epochs" and (epoch + 1) % every.count == 0
            if due or received or epoch + 1 == epochs:
                saver.last_saved = checkpoints.save(model, state)
            if received:
                raise Interrupted(received[0], saver.last_saved)
    history.history = {name: list(values) for name, values in state.history.items()}
    history.epoch = list(range(len(state.epoch_seconds)))
    history.epoch_seconds = list(state.epoch_seconds)
    history.timed_epochs = timed
    history.set_model(model)
    return history


def open_checkpoints(folder, keep: int, backend: str, process_index: int = 0):
    """The checkpoints of a run: Orbax's sharded, asynchronous ones on JAX; .weights.h5 on TensorFlow.

    The .weights.h5 format gathers the whole model on process 0 and writes while training waits; JAX
    runs can be sharded over many hosts, which Orbax was made for.
    """
    if backend == "jax":
        from acceltrain.training.sharded_checkpoint import ShardedCheckpoints

        return ShardedCheckpoints(folder, keep)
    return Checkpoints(folder, keep, writer=process_index == 0)


@contextlib.contextmanager
def _one_training_run(callbacks, last_logs):
    """Inside, the callbacks see one training run, as from one Keras fit, though Keras's fit is called once
    an epoch here: each one's on_train_begin runs at the first epoch's fit only, its on_train_end once, when
    the run ends or is interrupted (a checkpoint written), with `last_logs()`. So EarlyStopping keeps its
    patience and a TensorBoard writer stays open across epochs. Set on the instances (their class, and so
    Keras's isinstance and async checks, unchanged), and taken off after."""
    own = {id(callback): (callback, callback.on_train_begin, callback.on_train_end) for callback in callbacks}
    for callback, begin, _ in own.values():
        callback.on_train_begin = _first_call_only(begin)
        callback.on_train_end = lambda logs=None: None
    ended = False
    try:
        yield
        ended = True
    except Interrupted:
        ended = True
        raise
    finally:
        for callback, _, _ in own.values():
            del callback.on_train_begin, callback.on_train_end
        if ended:
            logs = last_logs()
            for _, _, end in own.values():
                end(logs)


def _first_call_only(method):
    called = []

    def first(logs=None):
        if not called:
            called.append(True)
            method(logs)

    return first


def _oldest_epoch(checkpoints) -> int:
    """The epoch of the oldest checkpoint kept: where the dataset stood before it is no longer needed."""
    kept = checkpoints.list()
    return int(kept[0].name.split("-")[1]) if kept else 0


def _starting_state(model, checkpoints: Checkpoints, resume: bool, seed: int, num_replicas: int) -> State:
    if not resume:
        if checkpoints.list():
            raise UsageError(f"{checkpoints.folder} already holds checkpoints. Pass resume=True (CLI: --resume) "
                             "to continue from them, or start in an empty folder (CLI: --overwrite).")
        return State(seed=seed, num_replicas=num_replicas)
    found = checkpoints.restore_latest(model)
    if found is None:
        log.info(f"no checkpoint in {checkpoints.folder}: starting from the beginning")
        return State(seed=seed, num_replicas=num_replicas)
    path, state = found
    if state.seed != seed:
        log.warn(f"the checkpoint was made with seed {state.seed}, not {seed}: keeping {state.seed} so the data "
                 "order stays the same")
    if state.num_replicas != num_replicas:
        log.info(f"the checkpoint was written by {state.num_replicas} replicas; continuing on {num_replicas} "
                 "(same global batch, same data order)")
    state.num_replicas = num_replicas
    log.info(f"resuming from {path.name}: {state.epoch} epochs and {state.step} steps done")
    return state


class _StepSaver(keras.callbacks.Callback):
    """Checkpoints every N steps, and at the first step end after SIGTERM/SIGINT (then stops)."""

    def __init__(self, checkpoints, every, state, steps_per_epoch, received):
        super().__init__()
        self.checkpoints, self.every, self.state = checkpoints, every, state
        self.steps_per_epoch, self.received = steps_per_epoch, received
        self.last_saved = None
        self.stopped_mid_epoch = False
        self._epoch = self._first_step = 0
        self._last_global_step = None

    def start_epoch(self, epoch, first_step):
        self._epoch, self._first_step = epoch, first_step
        if self._last_global_step is None:
            self._last_global_step = epoch * self.steps_per_epoch + first_step

    def on_train_batch_begin(self, batch, logs=None):
        # At the start of batch `batch`, as many steps of this epoch are done. Hooked here rather than at
        # a batch's end: any on_train_batch_end makes Keras wait for each step's metrics on the host.
        step = self._first_step + batch  # batches of this epoch done
        if batch == 0 or step >= self.steps_per_epoch:
            return  # nothing new since the last check; the epoch's end is checkpointed by the loop
        global_step = self._epoch * self.steps_per_epoch + step
        if not self.received and self.checkpoints.preempted_at(global_step):
            self.received.append(signal.SIGTERM)  # another process of the job got it: all stop here
        due = self.every.unit == "steps" and global_step - self._last_global_step >= self.every.count
        if due or self.received:
            self.state.epoch, self.state.step = self._epoch, step
            self.last_saved = self.checkpoints.save(self.model, self.state)  # self.model syncs JAX state
            self._last_global_step = global_step
            if self.received:
                self.stopped_mid_epoch = True
                self.model.stop_training = True


# As safe as Keras's own progress bar, which Keras runs from its callback thread: passed in
# `callbacks` without this, it would make Keras wait for every step's metrics on the host.
@keras_internals.async_safe
class _WholeRunProgress(keras.callbacks.ProgbarLogger):
    """Keras's progress, numbered over the whole run ("Epoch 3/20"), though each epoch is its own fit."""

    def __init__(self, total_epochs: int):
        super().__init__()
        self._total_epochs = total_epochs

    def set_params(self, params):
        super().set_params({**params, "epochs": self._total_epochs})


@contextlib.contextmanager
def _deferred_signals(sigterm: bool = True):
    """SIGTERM and SIGINT are noted, not fatal, so the step in flight finishes and a checkpoint is
    written. A second SIGINT stops at once (KeyboardInterrupt). The previous handlers are restored.

    With `sigterm` False (a multi-process JAX job), SIGTERM is left to jax.distributed, which makes
    every process stop at the same step, and SIGINT is passed on to it as SIGTERM: a process that
    stopped on its own would wait for the others in its checkpoint's save for ever."""
    received: list[int] = []
    forwarded: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum, frame):
        if (received or forwarded) and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not sigterm:
            log.info("SIGINT received: stopping every process of the job at the same step (as on SIGTERM)")
            forwarded.append(signum)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if not received:
            log.info(f"{signal.Signals(signum).name} received: finishing this step and writing a checkpoint")
        received.append(signum)

    taken = (signal.SIGTERM, signal.SIGINT) if sigterm else (signal.SIGINT,)
    previous = {sig: signal.signal(sig, note) for sig in taken}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
