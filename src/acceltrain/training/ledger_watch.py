"""The time ledger's eyes inside Keras (acceltrain/ledger.py says what each part is and how instants are booked):
LedgerWatch, the callback every fit of a runtime carries, and `layer`, its slot "ledger" of the interception, one a
runtime (Runtime.ledger_layer): the one place a LedgerWatch is made. Imports keras: import only after
connect().

What the callback records into the runtime's timeline:
- a step: from its batch in hand (JAX: the end of the iterator's first `next()` in that call of the train
  function; TensorFlow: the batch-begin callback) to its metrics on the host (the batch-end callback, which Keras
  calls once they are there);
- each `next()` of the iterator (JAX): input, and the batch's rows (samples); while a step runs, the ledger books that
  time to the step;
- an epoch, as host_syncs, where acceltrain makes Keras wait for each step: what steps, input and compiles leave
  of it is the device idle between steps;
- an epoch's start and end as input, where no step runs: from its begin callback to its first step's, Keras making
  the epoch's iterator; from its last step's end to its validation's begin callback or, without one, to its end
  callback, Keras making the next epoch's iterator (epoch_iterator.py: at the end of each epoch whose batches it
  counted) and the validation's (and reading the epoch's metrics, milliseconds). Under a tf.distribute strategy
  each is one multi-device iterator a dataset, its prefetch started: 0.1-0.5 s each on 2 simulated CPU devices
  (issue 45), which had been booked to rest;
- the validation inside an epoch, from its begin callback to the epoch's end callback, as evaluation: Keras letting
  its iterator go after it included;
- evaluation and prediction, from their begin to their end callbacks, and the rows of their batches (JAX);
- the FLOPs of one step, at the first epoch's end (JAX: its matmuls and convolutions, as traced).
"""

import keras

from acceltrain.backends import keras_internals


class LedgerWatch(keras.callbacks.Callback):
    """Records a call's steps, input, evaluations and FLOPs into `timeline`. `syncs`: acceltrain makes Keras wait
    for every step of this call (backends' step_callbacks).

    `async_safe`: its batch ends only read the clock, so Keras may call them from its callback thread, once the
    step's metrics are on the host; it must not make Keras wait for each step itself.
    """

    async_safe = True
    steps_aware = True  # books each execution, however many steps (backends/jax/resident.py)

    def __init__(self, timeline, framework, *, syncs: bool = False):
        super().__init__()
        self.timeline, self.framework, self.syncs = timeline, framework, syncs
        self._dispatched = {}  # first step of an execution -> when its batch was in hand
        self._executing = None  # the execution whose batches the iterator is pulling
        self._epoch = None  # the epoch's host_syncs token
        self._evaluating = None
        self._compiles_first = set()  # TensorFlow: the executions whose step is the function's first (it compiles)
        self._arguments = None  # (state, batch) shapes of the first execution: what the FLOPs are counted for
        self._flops_read = False
        self._steps_per_execution = 1
        self._batches = None
        self._unwatch = None  # an evaluation's batches counted: how to stop
        self._epoch_began = None  # the epoch's begin callback, until its first step's batch-begin
        self._last_step_end = None  # the latest batch-end callback of the epoch (Keras's callback threads too)
        self._in_epoch = False
        self._validation = None  # (begin, end) callbacks of the validation inside this epoch

    # --- Epochs and steps ---------------------------------------------------------------------------

    def on_epoch_begin(self, epoch, logs=None):
        self.timeline.book()  # nothing in flight between epochs: book what came before, keep memory small
        self._steps_per_execution = getattr(self.model, "steps_per_execution", 1) or 1
        self._batches = self.params.get("steps") if self.params else None
        keras_internals.watch_train_steps(self.model, self._timed_iterator)
        if self.syncs:
            self._epoch = self.timeline.begin("host_syncs")
        self._epoch_began, self._last_step_end, self._in_epoch = self.timeline.clock(), None, True

    def on_epoch_end(self, epoch, logs=None):
        # Keras has run every batch-end callback of the epoch by now (CallbackList flushes its threads first), and this
        # callback comes first among the call's (Call.with_callback): the script's epoch-end work is still to come.
        now = self.timeline.clock()
        began, ended = self._validation or (None, None)
        if self._last_step_end is not None:
            self.timeline.add("input_wait", self._last_step_end, began if began is not None else now)
        if ended is not None:
            self.timeline.add("evaluation", ended, now)
        self._in_epoch, self._validation = False, None
        self.timeline.end(self._epoch)
        self._epoch = None
        # At the first epoch's end, which pays the compiles already: reading the FLOPs traces the step again, a fixed
        # cost (0.2 s for the seed's MLP here, benchmarks/default_job.py) that the steady epochs then do not carry.
        self._note_flops()

    def on_train_batch_begin(self, batch, logs=None):
        now = self.timeline.clock()
        if self._epoch_began is not None:  # the epoch's iterator made: its input, no step ran
            self.timeline.add("input_wait", self._epoch_began, now)
            self._epoch_began = None
        self._executing = batch
        self._dispatched[batch] = now  # the batch is pulled next (JAX): _timed_iterator moves it
        if not self.timeline.compile_events and self.timeline.first_seen(keras_internals.keras_train_function(self.model)):
            self._compiles_first.add(batch)

    def on_train_batch_end(self, batch, logs=None):
        done = self.timeline.clock()
        first = batch - self._steps_per_execution + 1
        dispatched = self._dispatched.pop(first, None)
        if dispatched is not None:
            compiled = first in self._compiles_first
            self._compiles_first.discard(first)
            # TensorFlow: the whole step (its input inside the graph), from the batch-begin callback to the batch-end
            # one, which Keras calls once the step's logs are on the host (pythonify_logs, on its callback thread
            # where every callback is async_safe): each step's own measured time, not the epoch's less the rest.
            self.timeline.add("compilation" if compiled else "device_steps", dispatched, done)
        self._last_step_end = done if self._last_step_end is None else max(self._last_step_end, done)
        last = min(batch, self._batches - 1) if self._batches else batch
        self.timeline.count("steps", last - first + 1)

    def on_train_end(self, logs=None):
        keras_internals.unwatch_train_steps(self.model)
        self._note_flops()  # a fit that stopped within its first epoch

    def _note_flops(self):
        """The FLOPs of one step (JAX: its matmuls and convolutions, as traced), once a watch and once a window."""
        if self._flops_read or self._arguments is None or "flops_per_step" in self.timeline.notes:
            return
        self._flops_read = True
        step = keras_internals.jitted_train_step(self.model)
        flops = self.framework.step_flops(step, self._arguments) if step is not None else None
        if flops:
            self.timeline.note("flops_per_step", flops)

    def _timed_iterator(self, state, iterator):
        if self._arguments is None:
            self._arguments = (self.framework.shapes_of(state), None)  # the batch's, at its first next()
        return _TimedIterator(self, iterator, self._executing)

    # --- Evaluation and prediction ------------------------------------------------------------------

    def on_test_begin(self, logs=None, kind="test"):
        if self._in_epoch and kind == "test":  # fit's validation
            self._validation = (self.timeline.clock(), None)
        self._evaluating = self.timeline.begin("evaluation")
        # the samples each batch holds (JAX): what the ledger divides evaluation by, beside the steps' samples
        self._unwatch = keras_internals.watch_evaluation_batches(self.model, kind, self._count("evaluation_samples"))

    def on_test_end(self, logs=None):
        self.timeline.end(self._evaluating)
        if self._in_epoch and self._validation is not None:  # fit's validation
            self._validation = (self._validation[0], self.timeline.clock())
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def on_predict_begin(self, logs=None):
        self.on_test_begin(logs, kind="predict")

    on_predict_end = on_test_end

    def _count(self, fact: str):
        def counted(batch):
            leaves = batch if isinstance(batch, (tuple, list)) else (batch,)
            shapes = [getattr(leaf, "shape", None) for leaf in leaves]
            rows = next((shape[0] for shape in shapes if shape), None)  # a batch's rows, or its indices'
            if rows is not None:
                self.timeline.count(fact, int(rows))
        return counted


class _TimedIterator:
    """The iterator of one execution of the train function, each `next()` booked as input; the end of the first
    is when the execution's batch is in hand (its dispatch)."""

    def __init__(self, watch, iterator, execution):
        self._watch, self._iterator, self._execution = watch, iterator, execution
        self._first = True

    def __iter__(self):
        return self

    def __next__(self):
        timeline = self._watch.timeline
        start = timeline.clock()
        batch = next(self._iterator)
        end = timeline.clock()
        timeline.add("input_wait", start, end)
        self._watch._count("samples")(batch)
        if self._first:
            self._first = False
            self._watch._dispatched[self._execution] = end
            state, known = self._watch._arguments
            if known is None:
                self._watch._arguments = (state, self._watch.framework.shapes_of(batch))
        return batch


def layer(runtime):
    """Slot "ledger" of the interception (interception.LAYERS) for every call `runtime` runs (built once, by its
    constructor: Runtime.ledger_layer), reading the runtime when each call arrives: its distribution then (the one its
    first fit laid the model out for, or the caller's own: Runtime.as_called). A fit carries a LedgerWatch (told whether
    acceltrain makes it wait for each step) and notes the devices' published peak for its model's compute dtype
    (Runtime.peak_flops: the MFU's denominator); an evaluate or predict is booked whole as evaluation."""

    def ledger(call, proceed):
        timeline, framework = runtime.timeline, runtime.backend_module
        fit = call.name == "fit"
        syncs = fit and framework.steps_one_at_a_time(runtime.as_called().distribution)
        watched = call.with_callback(LedgerWatch(timeline, framework, syncs=syncs))
        if fit:
            timeline.note("peak_flops_per_second", runtime.peak_flops(call.model))
            return proceed(watched)
        with timeline.timed("evaluation"):  # booked whole; its batches counted
            return proceed(watched)

    return ledger
