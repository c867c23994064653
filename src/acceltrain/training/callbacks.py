"""Keras callbacks acceltrain adds to fit. Imports keras: import this only after connect()."""

import math
import time

import keras

from acceltrain.errors import TrainingDiverged


class DivergenceCheck(keras.callbacks.Callback):
    """Stops a run that has stopped learning, so a 10% accuracy is never reported as a result.

    Diverged means: a NaN or infinite loss; or, for a classifier of C classes, a loss at or above
    ln(C) (the loss of predicting every class equally) that has stopped falling, two epochs in a row.
    A model that learns slowly from chance keeps falling, so it is left alone.
    """

    CHANCE_TOLERANCE = 0.02  # within 2% of ln(C), or above it, counts as "at chance"
    PATIENCE = 2  # epochs in a row

    def __init__(self, num_classes: int | None = None):
        super().__init__()
        self.chance_loss = math.log(num_classes) if num_classes and num_classes > 1 else None
        self.message = None
        self._best_loss = math.inf
        self._epochs_stuck = 0

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        if not math.isfinite(loss):
            self._stop(epoch, f"the loss became {loss}")
            return
        at_chance = self.chance_loss is not None and loss >= (1 - self.CHANCE_TOLERANCE) * self.chance_loss
        stuck = at_chance and loss >= self._best_loss
        self._best_loss = min(self._best_loss, loss)
        self._epochs_stuck = self._epochs_stuck + 1 if stuck else 0
        if self._epochs_stuck >= self.PATIENCE:
            classes = round(math.exp(self.chance_loss))
            self._stop(
                epoch,
                f"the loss is {loss:.4f} and no longer falling, at or above ln({classes}) = "
                f"{self.chance_loss:.4f}, the loss of predicting every class equally",
            )

    def _stop(self, epoch, what):
        learning_rate = _learning_rate(self.model)
        self.message = (
            f"Training diverged at epoch {epoch + 1}: {what}. The model has stopped learning, so its "
            "accuracy would be chance, not a result. Likely cause: a learning rate too high for this "
            f"model and batch{f' ({learning_rate:g})' if learning_rate else ''}. Lower it (e.g. "
            "--learning-rate 1e-3), or use a schedule that decays it (the default for the built-in recipes)."
        )
        self.model.stop_training = True

    def raise_if_diverged(self):
        if self.message:
            raise TrainingDiverged(self.message)


def _learning_rate(model) -> float | None:
    try:
        rate = model.optimizer.learning_rate
        return float(keras.ops.convert_to_numpy(rate))
    except (AttributeError, TypeError, ValueError):
        return None


class EpochTimer(keras.callbacks.Callback):
    """When fit started and each epoch ended, as time.time() (comparable across processes: `acceltrain bench`
    counts from its parent's start). Keras syncs the metrics at each epoch's end, so the times are real.

    Beside each wall time, the process's CPU time (user + system, every thread's: time.process_time) and its
    number of threads at each epoch's end: a neighbour's load stretches the wall time, hardly the CPU time."""

    def __init__(self):
        super().__init__()
        self.fit_start = None
        self.epoch_ends = []
        self._cpu_start = None
        self.cpu_ends = []
        self.threads = []  # the process's threads (the OS's count) at each epoch's end

    def on_train_begin(self, logs=None):
        if self.fit_start is None:  # with checkpoints, Runtime.fit calls Keras's fit once an epoch
            self.fit_start = time.time()
            self._cpu_start = time.process_time()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ends.append(time.time())
        self.cpu_ends.append(time.process_time())
        self.threads.append(_thread_count())

    @property
    def epoch_seconds(self) -> list[float]:
        """Each epoch's wall time, from the end of the one before (the first's from fit's start: its compile)."""
        ends = [self.fit_start, *self.epoch_ends]
        return [end - start for start, end in zip(ends, ends[1:])]

    @property
    def epoch_cpu_seconds(self) -> list[float]:
        """Each epoch's CPU time of the whole process (user + system, all its threads), counted as epoch_seconds."""
        ends = [self._cpu_start, *self.cpu_ends]
        return [end - start for start, end in zip(ends, ends[1:])]


def _thread_count() -> int | None:
    """The process's threads as the OS counts them (Python's, XLA's and TensorFlow's pools alike); None off Linux."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        return None


class StallWatch(keras.callbacks.Callback):
    """Beats the stall watchdog (acceltrain/watchdog.py) at each finished step and each change of phase.
    The caller arms it (`with watchdog.watching(...)`) around the whole Keras call: Keras builds state
    before any callback runs.

    Phases whose wait steps do not predict are entered `unmeasured` (watchdog.stall_bound): a fit's first
    step and the first validation, evaluate and predict steps (each compiles its own function), and an
    epoch's end (the script's epoch-end callbacks, a checkpoint written between epochs). Put it first among
    the callbacks, so its on_epoch_end comes before the script's.

    `async_safe`: Keras may call the batch ends from its callback thread, once the step's metrics are on
    the host (so the step has finished); nothing here needs them sooner, and it must not make Keras wait.
    """

    async_safe = True
    steps_aware = True  # beats each execution, and between the dispatches of one (backends/jax/resident.py)

    def __init__(self, watchdog):
        super().__init__()
        self.watchdog = watchdog
        self._fitting = False
        self._trained = self._validated = False  # a step done: later ones do not compile
        self._epoch = self._done = self._begin = 0
        self._tested = 0  # this evaluate's, validation's or predict's steps the watchdog has heard of

    def on_train_begin(self, logs=None):
        self._fitting = True
        self.watchdog.enter("fit (compiling and running the first step)", unmeasured=True)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch + 1
        self._done = 0  # this epoch's steps the watchdog has heard of (Keras's batch ends, the runner's dispatches)
        self.watchdog.enter(f"fit, epoch {self._epoch}", unmeasured=not self._trained)

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = batch  # the execution's first step in the epoch
        self.watchdog.begin_step()

    def on_train_batch_end(self, batch, logs=None):
        self._beat(batch + 1)  # Keras's batch end: after its execution's last step (steps_per_execution)

    def between_dispatches(self, steps):
        """acceltrain's runner, after each dispatch of an execution: `steps` of the execution's done so far."""
        self._beat(self._begin + steps, ends_execution=False)

    def _beat(self, done: int, ends_execution: bool = True) -> None:
        """A beat for the steps done this epoch: the runner's dispatches and Keras's batch end both say how far the
        epoch is; each step is counted once, so a step's own CPU is a step's and the watchdog counts steps. Keras's
        batch end names its execution's planned last step (steps_per_execution on), also for an epoch's last
        execution, which runs only what is left: capped at the epoch's steps where Keras knows them."""
        self._trained = True
        done = min(done, (self.params or {}).get("steps") or done)
        new, self._done = max(done - self._done, 0), max(done, self._done)
        self.watchdog.beat(f"fit, epoch {self._epoch}, after step {done}", steps=new, ends_execution=ends_execution)

    def _beat_read(self, phase: str, done: int) -> None:
        """Evaluate's, validation's or predict's batch end: `done` steps of the pass so far (Keras's batch index is
        its execution's planned last step: steps_per_execution steps a beat). Capped at an evaluate's or predict's
        steps, as _beat; a fit's validation pass has the fit's params, not its own length, so under
        steps_per_execution K its last execution may count up to K - 1 steps it did not run (every process alike)."""
        if not self._fitting:
            done = min(done, (self.params or {}).get("steps") or done)
        new, self._tested = max(done - self._tested, 0), max(done, self._tested)
        self.watchdog.beat(f"{phase}, after step {done}", steps=new)

    def on_epoch_end(self, epoch, logs=None):
        self.watchdog.enter(f"fit, end of epoch {self._epoch} (callbacks, checkpoint)", unmeasured=True)

    def on_train_end(self, logs=None):
        self._fitting = False
        self.watchdog.enter("fit, finishing")

    def on_test_begin(self, logs=None):
        self._tested = 0
        if self._fitting:
            self.watchdog.enter("validation", unmeasured=not self._validated)
            self._validated = True
        else:
            self.watchdog.enter("evaluate (compiling and running the first step)", unmeasured=True)

    def on_test_batch_begin(self, batch, logs=None):
        self.watchdog.begin_step()

    def on_test_batch_end(self, batch, logs=None):
        self._beat_read("validation" if self._fitting else "evaluate", batch + 1)

    def on_test_end(self, logs=None):
        self.watchdog.enter(f"fit, epoch {self._epoch}, after validation" if self._fitting else "evaluate, finishing")

    def on_predict_begin(self, logs=None):
        self._tested = 0
        self.watchdog.enter("predict (compiling and running the first step)", unmeasured=True)

    def on_predict_batch_begin(self, batch, logs=None):
        self.watchdog.begin_step()

    def on_predict_batch_end(self, batch, logs=None):
        self._beat_read("predict", batch + 1)

    def on_predict_end(self, logs=None):
        self.watchdog.enter("predict, finishing")
