"""What training shows while it runs, beyond Keras's own progress. Imports keras: import after connect()."""

import keras

from acceltrain import log
from acceltrain.backends import keras_internals


# Only marks the first step's end: Keras may call it from its callback thread, so the training loop
# need not wait on the host for every step's metrics (it does for any callback not async-safe).
@keras_internals.async_safe
class FirstStepStatus(keras.callbacks.Callback):
    """Shows the first training step, which compiles the model (seconds on CPU, can be minutes on TPU).

    Keras prints nothing until that step ends, so without this a first compile looks like a hang.
    """

    steps_aware = True  # the first execution's end, however many steps it runs (backends/jax/resident.py)

    def __init__(self):
        super().__init__()
        self.phase = None
        self.seconds = None

    def on_train_batch_begin(self, batch, logs=None):
        if self.phase is None:
            # Named for what it times: the first step, its compile included (the ledger's compilation is every
            # compile of the run, this one among them).
            self.phase = log.phase("the first training step, its compile included").start()

    def on_train_batch_end(self, batch, logs=None):
        self._end("done")

    def on_train_end(self, logs=None):
        self._end("stopped")

    def __enter__(self) -> "FirstStepStatus":
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        # Keras skips on_train_end when fit raises: end the status line here, so it never outlives fit.
        self._end("failed" if error_type else "stopped")

    def _end(self, outcome):
        if self.phase is not None and self.seconds is None:
            self.seconds = self.phase.stop(outcome)
