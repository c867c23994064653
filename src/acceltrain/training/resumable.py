"""Runtime.fit with checkpoints: an epoch loop around Keras's fit that can stop and resume exactly.

Each epoch is one `model.fit(initial_epoch=e, epochs=e + 1, shuffle=False)` over the samples in
`checkpoint.epoch_order(seed, e)` (the arrays' own order with shuffle=False), less the few at its end that
would not divide over the replicas; a run resumed at step s of epoch e starts that epoch at sample
s × batch_size of the same order (a PyDataset: its batches by index, their groups in an order drawn from (seed, e);
a tf.data dataset or a Grain DataLoader: where its iterator stood, inputs/tf_data.py, inputs/grain_loaders.py). A notice (SIGTERM: GKE's and a TPU VM's; SIGUSR1: Slurm's --signal) and
SIGINT finish the current step, write a checkpoint and raise Interrupted (exit 42 for a notice: preemption.py);
in a job of several processes every process stops at one agreed step (sharded_checkpoint.preempted_at). Imports keras: import only after connect().
"""

import contextlib
import json
import math
import os
import signal
import threading
import time

import keras
import numpy as np

from acceltrain import decisions, ledger, log, preemption
from acceltrain.inputs import arrays, py_dataset
from acceltrain.backends import keras_internals
from acceltrain.training.checkpoint import Checkpoints, Every, State, epoch_order
from acceltrain.inputs.grain_loaders import GrainFeed
from acceltrain.inputs.kinds import GRAIN, PY_DATASET, kind_of
from acceltrain.inputs.tf_data import DatasetFeed, end_of_pass_expected
from acceltrain.errors import AcceltrainError, UsageError


class Interrupted(AcceltrainError):
    """Training stopped on a notice (SIGTERM, SIGUSR1) or SIGINT after writing a checkpoint. exit_code: 42 for a
    notice ("preempted, checkpoint saved, restart me": preemption.EXIT_RESTART), 130 for Ctrl-C."""

    def __init__(self, signum: int, checkpoint, resume: str = "resume=True (CLI: the same command with --resume)"):
        self.signum = signum
        self.checkpoint = checkpoint
        self.exit_code = preemption.exit_code(signum)
        restart = f" Exit {self.exit_code}: {preemption.RESTART_MEANING}." if preemption.is_notice(signum) else ""
        super().__init__(f"Stopped by {signal.Signals(signum).name}; a checkpoint is saved in {checkpoint}. "
                         f"Resume with {resume}.{restart}")


def fit(model, prepared, *, epochs: int, checkpoints: Checkpoints, every: Every, resume: bool, seed: int,
        callbacks=(), verbose="auto", timeline=None, keras_fit=None, **fit_kwargs):
    """Train `prepared` (an inputs.Fit, kept whole: trim=False) from the newest checkpoint (if resume) to `epochs`,
    checkpointing as `every` says. Arrays: each epoch in the order epoch_order(seed, epoch), less its last few
    (Fit.epoch); a tf.data.Dataset: one pass an epoch (see inputs/tf_data.py). `timeline`: the runtime's time
    ledger, where the loop books its checkpoints, its epochs' input and the steps run again after a resume.
    `keras_fit(**kwargs)`: each epoch's fit (default: Keras's own, passing no layer)."""
    timeline = timeline or ledger.Timeline()  # none: nothing is booked
    # Each epoch's Keras fit: through the layers below the assembly's "trained" (assembly.py), else Keras's own
    keras_fit = keras_fit or keras_internals.keras_method(model, "fit")
    # each process's own iterator (its share of the batches), saved in its own folder
    positions = checkpoints.folder / ("data" if prepared.num_processes == 1 else f"data-{prepared.process_index}")
    says = prepared.process_index == 0
    as_dataset = keras.backend.backend() == "tensorflow"  # each epoch a tf.data.Dataset (DatasetFeed._rest_of)
    feed = (DatasetFeed(prepared.x, positions, prepared.steps_per_epoch, says=says, as_dataset=as_dataset)
            if prepared.is_dataset
            else GrainFeed(prepared.x, positions, says=says, as_dataset=as_dataset) if kind_of(prepared.x) == GRAIN
            else None)
    if isinstance(feed, DatasetFeed) and feed.as_dataset and feed.counted is None and prepared.num_replicas > 1 and says:
        log.warn(feed.UNCOUNTED_STEPS + ".")
    shuffle = fit_kwargs.pop("shuffle", True) is not False  # False: every epoch in the arrays' own order
    with timeline.timed("checkpoint"):
        state = _starting_state(model, checkpoints, resume, seed, prepared.num_replicas)
        checkpoints.open()
    steps_per_epoch = feed.steps_per_epoch if feed else prepared.steps_per_epoch
    if kind_of(prepared.x) == PY_DATASET:
        for _ in range(state.epoch):  # its own epoch ends, as the run stopped had called them
            prepared.x.on_epoch_end()
    reached = _Reached(checkpoints.folder, writer=prepared.process_index == 0)
    redo = _Redo(timeline, reached.read() if resume else None, state.epoch * steps_per_epoch + state.step)
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
    last_epoch = state.epoch if state.stopped_early else epochs
    stopped_here = False
    if state.stopped_early:
        log.info(f"the run had ended at epoch {state.epoch}, stopped by a callback of its own (EarlyStopping): "
                 "training no further")
    with _deferred_signals(sigterm_here) as received, _closed(checkpoints, timeline), end_of_pass_expected(), \
            _one_training_run(callbacks, last_logs), _loop_noted(checkpoints):
        saver = _StepSaver(checkpoints, every, state, steps_per_epoch, received, timeline, reached, redo,
                           says=prepared.process_index == 0, notices=_engine_notices(prepared.process_index == 0),
                           positions=feed)
        progress.stopped = lambda: saver.stopped_after  # a stopped epoch's line says where it stopped
        cadence = _EpochCadence(every, checkpoints, timeline, last_epoch, says=prepared.process_index == 0)
        started = time.perf_counter()  # an epoch's time runs from the previous one's end: its checkpoint counts in it
        for epoch in range(state.epoch, last_epoch):
            first_step = state.step if epoch == state.epoch else 0
            saver.start_epoch(epoch, first_step)
            with timeline.timed("input_wait"):  # the device waits while the epoch's samples are put in order
                if feed:  # a dataset or a Grain loader: the next batches of the pass's iterator, from its saved start
                    inputs = {"x": feed.epoch(epoch, first_step, _oldest(checkpoints))}
                elif kind_of(prepared.x) == PY_DATASET:  # its batches by index, in groups of the processes' (inputs/py_dataset.py)
                    inputs = {"x": _py_dataset_epoch(prepared, state.seed, epoch, first_step, shuffle)}
                else:  # arrays: this epoch's order, from the step reached on
                    n = arrays.num_samples(prepared.x)
                    inputs = _epoch_inputs(prepared, epoch_order(state.seed, epoch, n) if shuffle else np.arange(n),
                                           first_step)
            try:
                logs = keras_fit(
                    **inputs, initial_epoch=epoch, epochs=epoch + 1, shuffle=False,
                    validation_data=prepared.validation_data, validation_batch_size=prepared.validation_batch_size,
                    verbose=verbose, callbacks=[progress, saver, *callbacks], **fit_kwargs,
                ).history
            except ValidationSkipped as skipped:  # a notice: the epoch's training logs, no validation
                logs = {name: [value] for name, value in skipped.logs.items()}
                progress.finish(skipped.logs)
                if prepared.process_index == 0:
                    log.info(f"epoch {epoch + 1}: validation skipped after the notice")
            if saver.stopped_mid_epoch:
                _handled(received)
                raise Interrupted(received[0], saver.last_saved)
            state.epoch, state.step = epoch + 1, 0
            now = time.perf_counter()
            state.epoch_seconds.append(now - started)
            started = now
            timed.append({"epoch": epoch + 1, "seconds": state.epoch_seconds[-1], "steps": steps_per_epoch - first_step})
            for name, values in logs.items():
                state.history.setdefault(name, []).extend(float(v) for v in values)
            if model.stop_training:  # a callback ended the run: the user's (EarlyStopping), or the divergence check
                state.stopped_early = stopped_here = not _diverged(callbacks)
                break
            notice_agreed(checkpoints, received, (epoch + 1) * steps_per_epoch)
            redo.passed((epoch + 1) * steps_per_epoch)
            reached.note((epoch + 1) * steps_per_epoch, now=True)
            if cadence.due(epoch + 1, state.epoch_seconds[-1], within_epochs=saver.within_epochs) or received \
                    or epoch + 1 == epochs:
                saver.last_saved = saver.save(model, state, notice=bool(received))
                cadence.saved(epoch + 1)
            if received:
                _handled(received)
                raise Interrupted(received[0], saver.last_saved)
    if stopped_here:  # its end, as the callbacks' on_train_end left it
        _save_the_end(saver, model, state, checkpoints)
    history.history = {name: list(values) for name, values in state.history.items()}
    history.epoch = list(range(len(state.epoch_seconds)))
    history.epoch_seconds = list(state.epoch_seconds)
    history.timed_epochs = timed
    history.set_model(model)
    return history


@contextlib.contextmanager
def _loop_noted(checkpoints):
    """Inside, preemption.LOOP says a training loop runs, from this process's poll count (NoticeWatch's decision)."""
    preemption.LOOP.started_at, preemption.LOOP.handled = checkpoints.polls_made(), False
    try:
        yield
    finally:
        preemption.LOOP.started_at = None


def notice_agreed(checkpoints, received, step: int) -> bool:
    """The one check of a notice in the training loop, at a step, a validation batch or an epoch's end: True once a
    notice is noted (`received`, this process's signal) or agreed by the job (jax.distributed's sync point, polled
    here: every process must call this at the same places), SIGTERM then added to `received`. A notice the job
    agreed before this loop's first poll is one NoticeWatch ends every process on (nothing in flight to save): here
    too, the same way, so that no process saves what another does not."""
    if received:
        return True
    if not checkpoints.preempted_at(step):
        return False
    if preemption.LOOP.watched and checkpoints.polls_made() == (preemption.LOOP.started_at or 0) + 1:
        preemption.leave_with_nothing_to_save("before the training loop's first step")
    received.append(signal.SIGTERM)
    return True


def _handled(received) -> None:
    """The loop saved on a notice and raises Interrupted: NoticeWatch has nothing left to do (a SIGINT is not one)."""
    preemption.LOOP.handled = preemption.LOOP.handled or preemption.is_notice(received[0])


class ValidationSkipped(Exception):
    """Raised by _StepSaver at a validation pass after a notice, out of Keras's fit (whose `finally` puts the model's
    state back): the pass is skipped, not run inside the grace period. `logs`: the epoch's training metrics."""

    def __init__(self, logs: dict):
        super().__init__("validation skipped after a notice")
        self.logs = logs


def _engine_notices(says: bool):
    """The engine notices that are not signals, where this host has them (preemption.choose_notice_sources): a Cloud
    TPU VM's maintenance event, a Ray Train worker's get_preemption_info(). Untested against those engines."""
    import sys

    from acceltrain import cluster

    ray_train = sys.modules.get("ray.train")  # a Ray Train worker: the script runs inside Ray's train function
    ray_query = getattr(ray_train, "get_preemption_info", None)
    names, why = preemption.choose_notice_sources(cluster.on_cloud_tpu_vm(), ray_query is not None)
    if names and says:
        log.info(f"preemption notices: {why}")
    sources = {"tpu-maintenance": lambda: preemption.tpu_maintenance_pending(preemption.read_gce_metadata),
               "ray": lambda: preemption.ray_preemption_pending(ray_query)}
    return preemption.EngineNotices({name: sources[name] for name in names},
                                    say=lambda line: print(line, file=sys.stderr, flush=True))


def _diverged(callbacks) -> bool:
    from acceltrain.training.callbacks import DivergenceCheck

    return any(isinstance(c, DivergenceCheck) and c.message for c in callbacks)


def _save_the_end(saver, model, state, checkpoints) -> None:
    """A run a callback of the user's stopped: its final state checkpointed, marked so that a resume trains no
    further. Written once the callbacks' on_train_end has run (EarlyStopping's restore_best_weights sets the weights
    it keeps there), after the loop's own checkpoints closed."""
    try:
        saver.last_saved = saver.save(model, state)
    finally:
        with saver.timeline.timed("checkpoint"):
            checkpoints.close()


def _epoch_inputs(prepared, order, first_step: int) -> dict:
    """Keras's fit arguments for an epoch of arrays in `order`. On JAX, batch by batch (a PyDataset gathering each
    batch as Keras asks for it, as Keras's own shuffle does): the host gathers a batch while the step before runs,
    instead of copying the whole epoch into its order while the device waits (the ledger booked that copy as
    input wait; BENCHMARKS.md, default-job, times the job side by side). On TensorFlow, arrays: tf.data gathers
    them in its own threads, where a PyDataset would run Python for every batch."""
    if keras.backend.backend() != "jax":
        return prepared.epoch(order, first_step)
    return {"x": _Batches(prepared.epoch_batches(order, first_step))}


def _py_dataset_epoch(prepared, seed: int, epoch: int, first_step: int, shuffle: bool):
    """One epoch of a keras.utils.PyDataset from `first_step` on: its groups of batches (one batch each in one process;
    py_dataset.group_steps) in the order epoch_order(seed, epoch) draws, the same after a resume."""
    length = len(prepared.x)
    groups = py_dataset.num_groups(length, prepared.num_processes)
    order = epoch_order(seed, epoch, groups) if shuffle else None
    return py_dataset.steps_from(prepared.x, py_dataset.group_steps(length, prepared.num_processes, order)[first_step:])


class _Batches(keras.utils.PyDataset):
    """inputs.EpochBatches as Keras takes it: read in order, in the training loop's thread (one worker).
    `arrays_in_order`: the same epoch as arrays and the order of their rows, for a backend that keeps the arrays on
    the devices once a fit and gathers each batch there instead (backends/jax/resident.py)."""

    def __init__(self, batches):
        super().__init__()
        self.batches = self.arrays_in_order = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


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
    Keras's isinstance and async checks, unchanged), and taken off after. A run that trains no epoch (resumed
    where it had ended) calls neither."""
    own = {id(callback): (callback, callback.on_train_begin, callback.on_train_end) for callback in callbacks}
    begun = []
    for callback, begin, _ in own.values():
        callback.on_train_begin = _first_call_only(begin, begun)
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
        if ended and begun:
            logs = last_logs()
            for _, _, end in own.values():
                end(logs)


def _first_call_only(method, begun: list):
    called = []

    def first(logs=None):
        if not called:
            called.append(True)
            begun.append(True)
            method(logs)

    return first


def _oldest(checkpoints) -> tuple:
    """The (epoch, step) of the oldest checkpoint kept: where the data stood before it is no longer needed."""
    kept = checkpoints.list()
    return tuple(int(part) for part in kept[0].name.split("-")[1::2]) if kept else (0, 0)


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
    """Checkpoints every N steps, and at the first step end after SIGTERM/SIGINT (then stops); notes how far
    training has reached, and where the steps run again after a resume end. With 'auto', times steps in the run's
    first epoch and, where an epoch takes over decisions.MOST_SECONDS_BETWEEN_CHECKPOINTS, checkpoints within each
    (_StepTimer)."""

    # Called at each execution's first batch, however many steps it runs (backends/jax/resident.py), and heard from
    # about every second there: a notice stops the run within about a second, a checkpoint within steps lands at the
    # first execution's start at or past its step (the state saved is that step's: the resume stays exact).
    steps_aware = True
    hears_each_second = "the checkpoint loop"  # its name in the steps-an-execution line (not this class's)

    def __init__(self, checkpoints, every, state, steps_per_epoch, received, timeline, reached, redo, says=True,
                 notices=None, positions=None):
        super().__init__()
        self.positions = positions  # a DatasetFeed/GrainFeed: told of each checkpoint within an epoch
        self.notices = notices or preemption.EngineNotices({})
        self.checkpoints, self.every, self.state = checkpoints, every, state
        self.steps_per_epoch, self.received = steps_per_epoch, received
        self.timeline, self.reached, self.redo = timeline, reached, redo
        self.last_saved = None
        self.stopped_mid_epoch = False
        self.stopped_after = None  # a notice stopped the epoch: the batches of this epoch's fit done by then
        self._train_metrics, self._kept_logs = [], {}
        self._epoch = self._first_step = 0
        self._last_global_step = None
        self._step_count = every.count if every.unit == "steps" else None  # checkpoint every this many steps
        self._timer = _StepTimer(self, says) if every.auto else None

    def start_epoch(self, epoch, first_step):
        self._epoch, self._first_step = epoch, first_step
        if self._last_global_step is None:
            self._last_global_step = epoch * self.steps_per_epoch + first_step

    def on_train_batch_begin(self, batch, logs=None):
        # At the start of batch `batch`, as many steps of this epoch are done. Hooked here rather than at
        # a batch's end: any on_train_batch_end makes Keras wait for each step's metrics on the host.
        if self._timer is not None:
            chosen = self._timer.at_batch(batch)
            if chosen is not None:
                self._step_count, self._timer = chosen or None, None
        step = self._first_step + batch  # batches of this epoch done
        if self.positions is not None:
            self.positions.trained(step)  # the batches before it are no longer kept for a checkpoint
        if batch == 0 or step >= self.steps_per_epoch:
            return  # nothing new since the last check; the epoch's end is checkpointed by the loop
        global_step = self._epoch * self.steps_per_epoch + step
        self.redo.passed(global_step)
        self.reached.note(global_step)
        self.notices.at_step(global_step)  # an engine's notice that is not a signal: sent as SIGTERM
        notice_agreed(self.checkpoints, self.received, global_step)  # any process's notice: all stop here
        due = self._step_count is not None and global_step - self._last_global_step >= self._step_count
        if due or self.received:
            self.state.epoch, self.state.step = self._epoch, step
            self.last_saved = self.save(self.model, self.state, notice=bool(self.received))  # self.model syncs JAX state
            self._last_global_step = global_step
            if self.received:
                self.stopped_mid_epoch = True
                self.stopped_after = batch
                self.model.stop_training = True

    def on_test_begin(self, logs=None):
        # Fit's validation (the only evaluate this callback sees). Keras's metrics still hold the epoch's training
        # values here (evaluate resets them after this hook): their state kept, for a pass a notice skips. Kept, not
        # computed: the results each pass would cost a host sync and, on JAX, three programs of their own.
        if keras.backend.backend() == "jax":  # JAX's arrays are never changed in place: a reset makes new ones
            self._train_metrics, self._kept_logs = [(v, v.value) for v in self.model.metrics_variables], None
        else:  # a TensorFlow variable changes in place (and a mirrored one has no value of its own): results now
            self._kept_logs = self._metric_logs()
        if self.received:  # a notice stopped the epoch: no validation inside the grace period
            raise ValidationSkipped(self._training_logs())

    def on_test_batch_begin(self, batch, logs=None):
        # Polled at every validation batch, as at every step, so that a notice during validation stops it at once
        # (each process polls the same batches: jax.distributed agrees on one).
        notice_agreed(self.checkpoints, self.received, (self._epoch + 1) * self.steps_per_epoch)
        if self.received:
            raise ValidationSkipped(self._training_logs())

    def _training_logs(self) -> dict:
        """The epoch's training metrics, from their state as the pass began (put back: the fit ends here)."""
        if self._kept_logs is not None:
            return self._kept_logs
        for variable, value in self._train_metrics:
            variable.assign(value)
        return self._metric_logs()

    def _metric_logs(self) -> dict:
        return {name: float(np.asarray(value)) for name, value in self.model.get_metrics_result().items()
                if np.ndim(value) == 0}

    @property
    def steps_apart(self) -> int:
        """Executions of many steps start at multiples of this (0: anywhere; backends/jax/resident.py): checkpoints
        every N steps, as asked, are due at the steps they name; the 'auto' timer times from batch FROM to FROM +
        STEPS."""
        if self._timer is not None:
            return math.gcd(_StepTimer.FROM, _StepTimer.STEPS)
        if self.every.unit != "steps" or self.every.auto or not self._step_count:
            return 0
        return math.gcd(self._step_count, self.steps_per_epoch, self._first_step)

    @property
    def most_steps(self) -> int:
        """Executions run at most this many steps (0: any): checkpoints 'auto' chose within epochs."""
        return self._step_count if self.every.auto and self._step_count else 0

    @property
    def within_epochs(self) -> bool:
        """Whether checkpoints are written within epochs (as the user set it in steps, or as 'auto' chose)."""
        return self._step_count is not None

    def save(self, model, state, notice: bool = False):
        """A checkpoint, its time booked in the ledger: as checkpoint, or, the save a notice asked for (then waited
        for whole: the process exits next), as preemption."""
        with self.timeline.timed("preemption" if notice else "checkpoint"):
            saved = self.checkpoints.save(model, state)
            if self.positions is not None:  # where the data stands, within an epoch; those no checkpoint needs go
                self.positions.saved_at(state.epoch, state.step, _oldest(self.checkpoints))
            if notice:
                self.checkpoints.close()
        self.timeline.count("checkpoints")
        return saved


class _StepTimer:
    """'auto' within an epoch: in the run's first epoch, the steps from batch FROM to FROM + STEPS are timed (Keras
    made to wait for the steps before each end, once: it may run ahead of the device otherwise), and
    decisions.choose_checkpoint_steps says whether, and every how many steps, to checkpoint within epochs (process
    0's choice taken everywhere: each process calls this at the same batches). Epochs too short to time keep
    their checkpoints at their ends; the rest of an epoch a run resumed in is left for the next."""

    FROM, STEPS = 2, 8  # from the third batch: the first compiles

    def __init__(self, saver, says: bool):
        self.saver, self.says = saver, says
        self._started = None  # when batch FROM began, its steps before it done

    def at_batch(self, batch: int) -> int | None:
        """None while timing (or on an epoch too short to time); then the steps between checkpoints, 0 for none."""
        if self.saver.steps_per_epoch - self.saver._first_step <= self.FROM + self.STEPS:
            return None if self.saver._first_step else 0  # the rest of a resumed epoch: time the next one
        if self._started is None and batch >= self.FROM:
            self._started = (batch, self._after_steps_done())
        elif self._started is not None and batch >= self._started[0] + self.STEPS:
            first, started = self._started
            seconds = (self._after_steps_done() - started) / (batch - first)
            steps, why = decisions.choose_checkpoint_steps(seconds, self.saver.steps_per_epoch)
            agreed = self.saver.checkpoints.agree(steps or 0)
            if self.says and steps:
                _say_auto(why)
            return agreed
        return None

    def _after_steps_done(self) -> float:
        """The clock once every step dispatched so far has run (Callback.model syncs Keras's JAX state into the
        variables; reading one waits for the step that wrote it)."""
        iterations = getattr(getattr(self.saver.model, "optimizer", None), "iterations", None)
        if iterations is not None:  # a model trained with no optimizer (its own train_step) is timed as dispatched
            keras.ops.convert_to_numpy(iterations)
        return time.perf_counter()


class _EpochCadence:
    """Which epoch ends write a checkpoint: every `count` epochs as the user set it; with 'auto', the first epoch this
    run ends, then, from the second on, every decisions.choose_checkpoint_epochs epochs, from that epoch's time and
    the first checkpoint's write (process 0's, so every process of a job checkpoints at the same epochs), said in
    one line, against the run's length (`last_epoch`): a run of one epoch says it checkpoints at its end only. The
    loop adds the last epoch and a stop on SIGTERM/SIGINT."""

    def __init__(self, every, checkpoints, timeline, last_epoch: int, says: bool = True):
        self.every, self.checkpoints, self.timeline, self.says = every, checkpoints, timeline, says
        self.last_epoch = last_epoch
        self.epochs = None  # 'auto': decided at the run's second epoch end
        self._saved_at = None  # epochs done at this run's last checkpoint

    def due(self, epochs_done: int, epoch_seconds: float, within_epochs: bool = False) -> bool:
        """`within_epochs`: the step timer chose checkpoints within epochs too (and said so)."""
        if self.every.unit != "epochs":
            return False
        if not self.every.auto:
            return epochs_done % self.every.count == 0
        if self._saved_at is None:
            if epochs_done == self.last_epoch and self.says and not within_epochs:
                _say_auto("this run trains one epoch → a checkpoint at its end only")
            return True  # the run's first checkpoint: its write is what 'auto' measures
        if self.epochs is None:
            self.epochs = self._decide(epoch_seconds)
        return epochs_done - self._saved_at >= self.epochs

    def saved(self, epochs_done: int) -> None:
        self._saved_at = epochs_done

    def _decide(self, epoch_seconds: float) -> int:
        with self.timeline.timed("checkpoint"):  # waits only if the first write is still going
            written = self.checkpoints.first_write_seconds()
        epochs, why = decisions.choose_checkpoint_epochs(epoch_seconds, written, epochs_left=self.last_epoch - self._saved_at) \
            if written else (1, "")
        agreed = self.checkpoints.agree(epochs)
        if self.says and why:
            _say_auto(why)
        return agreed


def _say_auto(why: str) -> None:
    log.info(f"checkpoints (--checkpoint-every auto, checkpoint_every='auto'): {why}; pass another to choose")


class _Reached:
    """How far training has got, noted in the checkpoint folder (`reached.json`: the global step), so a run that
    resumes after a hard stop knows how many steps past its checkpoint it runs again. Written by one process, at
    each epoch's end and every NOTE_SECONDS within an epoch (one small file: no measurable cost)."""

    NOTE_SECONDS = 5.0
    FILE = "reached.json"

    def __init__(self, folder, writer: bool = True):
        self.path = folder / self.FILE
        self.writer = writer
        self._noted = time.monotonic()

    def note(self, global_step: int, now: bool = False) -> None:
        if not self.writer or not (now or time.monotonic() - self._noted >= self.NOTE_SECONDS):
            return
        self._noted = time.monotonic()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(".partial")
            partial.write_text(json.dumps({"global_step": global_step}))
            partial.replace(self.path)
        except OSError:
            pass  # the note is for the ledger only: a full disk is the checkpoint's to report

    def read(self) -> int | None:
        try:
            return int(json.loads(self.path.read_text())["global_step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


class _Redo:
    """After a resume: the steps from the checkpoint up to where the stopped run had reached run again. Books
    them, from the resumed loop's start until that step begins, as preemption in the ledger."""

    def __init__(self, timeline, reached: int | None, restored: int):
        self.timeline = timeline
        self.until = reached if reached is not None and reached > restored else None
        self._token = timeline.begin("preemption") if self.until is not None else None
        if self.until is not None:
            timeline.count("steps_redone", reached - restored)

    def passed(self, global_step: int) -> None:
        if self._token is not None and global_step >= self.until:
            self.timeline.end(self._token)
            self._token = None


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

    stopped = staticmethod(lambda: None)  # the loop's: the batches done when a notice stopped this epoch, or None

    def on_epoch_end(self, epoch, logs=None):
        if self.stopped() is None:
            super().on_epoch_end(epoch, logs)
        else:
            self.finish(logs)

    def finish(self, logs) -> None:
        """The epoch's line where it stopped ("432/540", not "540/540"), with the logs it has (no validation)."""
        if self.progbar is not None:
            done = self.stopped()
            self.progbar.update(self.seen if done is None else done, list((logs or {}).items()), finalize=True)


@contextlib.contextmanager
def _closed(checkpoints, timeline):
    """The checkpoints closed at the end (the write in flight finished), its wait booked as checkpoint time."""
    try:
        yield
    finally:
        with timeline.timed("checkpoint"):
            checkpoints.close()


@contextlib.contextmanager
def _deferred_signals(sigterm: bool = True):
    """The notices (SIGTERM, SIGUSR1: preemption.NOTICES) and SIGINT are noted, not fatal, so the step in flight
    finishes and a checkpoint is written. A second SIGINT stops at once (KeyboardInterrupt); a second notice
    changes nothing. The previous handlers are restored.

    With `sigterm` False (a multi-process JAX job), SIGTERM is left to jax.distributed, which makes
    every process stop at the same step, and SIGINT and SIGUSR1 are passed on to it as SIGTERM: a process that
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
            log.info(f"{signal.Signals(signum).name} received: stopping every process of the job at the same step "
                     "(as on SIGTERM)")
            forwarded.append(signum)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if not received:
            log.info(f"{signal.Signals(signum).name} received: finishing this step and writing a checkpoint")
        received.append(signum)

    taken = (*preemption.NOTICES, signal.SIGINT) if sigterm else (signal.SIGUSR1, signal.SIGINT)
    previous = {sig: signal.signal(sig, note) for sig in taken}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
