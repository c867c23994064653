"""The layers acceltrain itself puts in the one assembly of a call (interception.LAYERS), for every call alike.

    Runtime.fit                 ledger → autopilot → inputs → trained → placement (each epoch's Keras fit)
    Runtime.evaluate/predict    ledger → autopilot → inputs → trained (passes them on) → placement
    a script's call under run   ledger → script_calls → autopilot → script_inputs → inputs → [trained →] placement
    a library's plain fit       autopilot → placement

`FirstFits` (slot "autopilot") is the layout, the one accumulation cut of the batch and --verify: before a model's
first fit it is weighed and laid out (Runtime.first_fit), each fit's batch is cut for the steps it accumulates,
and each call runs under the distribution the model was laid out for. `Inputs` (slot "inputs") prepares what Keras
is called with (inputs/), fit, evaluate and predict alike, whoever calls: a script's call reaches it through run's
door (commands/script_layers.py::FitGuard), translated once. `Trained` (slot "trained") is the runtime's own loop:
Runtime.fit's, and a script's fit under `run --checkpoint-dir`: over the prepared inputs, the checkpoints, steps
per call, the divergence check; each Keras fit it makes (one, or one an epoch with checkpoints) passes the layers
below it. What a call is asked to be is its `FitPlan`, its checkpoints the one public value (options.Checkpoints). Beside
runtime.py, over training/ and layout/: imported by Runtime and `run` after connect().
"""

import contextlib
import dataclasses
import weakref

from acceltrain import checks, decisions, inputs, log
from acceltrain.errors import option
from acceltrain.options import Checkpoints
from acceltrain.backends import keras_internals
from acceltrain.layout import autopilot as autopilots


@dataclasses.dataclass(frozen=True)
class FitPlan:
    """What a call is asked to be, beside Keras's own arguments: Runtime.fit's extra arguments, or run's flags.
    `per_fit`: each fit keeps its checkpoints in its own folder/fit-N (a script's fits, resumed in the order it makes
    them); `resume_hint`: how the user resumes, said when a signal stops the fit."""

    checkpoints: Checkpoints | None = None
    per_fit: bool = False
    resume_hint: str | None = None
    watchdog: object = None  # the stall watchdog its calls beat (Runtime.fit's stall_timeout=); None: the runtime's
    steps_per_execution: int | None = None  # the user's; None: the platform's (decisions.choose_steps_per_execution)
    keep_steps_per_execution: bool = False  # the model's own, as a plain fit keeps it (a script's)
    script: bool = False  # a script's calls (acceltrain run), checked at its door (commands/script_layers.py)

    def checks_inputs(self, name: str) -> bool:
        """Whether a call's inputs are checked here as Runtime's are (inputs.py's `checked`: a wrong one is an error,
        each note said), not at run's door (the script's own calls: warned once each, as a plain run would go on). A
        script's fit the runtime's own loop trains (with checkpoints) is checked as Runtime.fit's."""
        return not self.script or (name == "fit" and self.checkpoints is not None)


def accumulated(model) -> int:
    """The steps the model's optimizer accumulates per weight update (the autopilot's choice, or the user's own)."""
    return getattr(getattr(model, "optimizer", None), "gradient_accumulation_steps", None) or 1


def cut_for_accumulation(arguments: dict, accumulation: int) -> dict:
    """A fit's arguments (by Keras's names) with each step's batch cut for `accumulation` steps per weight update,
    so each update still sees the global batch (autopilot.per_step), and as many updates an epoch."""
    if accumulation == 1:
        return arguments
    arguments = dict(arguments)
    arguments["x"], arguments["batch_size"] = autopilots.per_step(arguments.get("x"), arguments.get("batch_size"),
                                                                  accumulation)
    if arguments.get("steps_per_epoch"):
        arguments["steps_per_epoch"] *= accumulation
    return arguments


class FirstFits:
    """Layer "autopilot": before each model's first fit, the model weighed, laid out and the levers applied
    (Runtime.first_fit), then with `verify` (N steps) compared with one device (layout/verify.py); every later call
    of the model runs under the distribution it was laid out for, and each fit's batch is cut as its first was
    (gradient accumulation keeps the global batch: the one accumulation cut)."""

    def __init__(self, runtime, *, autopilot: bool = True, verify: int | None = None):
        self.runtime, self.autopilot, self.verify = runtime, autopilot, verify
        self.placed = weakref.WeakKeyDictionary()  # model -> the distribution it was laid out for
        self.told_own: list = []  # the callers' own distributions said (_tell_own)

    def __call__(self, call, proceed):
        framework = self.runtime.backend_module
        called = self.runtime.as_called(call.model)
        if called is not self.runtime:  # the caller's own distribution: kept, as plainly; nothing laid out again
            if framework.SHARDS:  # TensorFlow's scope said so as the script made its model (backends' scope)
                self._tell_own(called)
            return proceed(call)
        if call.name == "fit" and call.model not in self.placed:
            self._first(call)
        accumulation = autopilots.accumulation_of(call.model) if call.name == "fit" else 1
        if accumulation > 1:
            call = call.replace(args=(), kwargs=cut_for_accumulation(call.arguments(), accumulation))
        with framework.scope(self.placed.get(call.model)):
            return proceed(call)

    def _tell_own(self, called) -> None:
        """Once per distribution: the caller set its own, which its calls keep (acceltrain's is not applied)."""
        if called.distribution in self.told_own:
            return
        self.told_own.append(called.distribution)
        unverified = f"; {option('verify')} compares acceltrain's layouts only: not run" \
            if self.verify else ""
        log.info(f"distribution: {called.words} is kept: its calls run under it as they do plainly "
                 f"({called.num_replicas} replica(s): its mesh's batch axis), its layout as it set it; acceltrain's "
                 f"{self.runtime.distribution_name} over {self.runtime.num_replicas} replica(s) is not applied to "
                 f"them{unverified}")

    def _first(self, call) -> None:
        from acceltrain.layout import verify

        arguments = call.arguments()
        x, y, batch_size = arguments.get("x"), arguments.get("y"), arguments.get("batch_size")
        decision = self.runtime.first_fit(call.model, x, y, batch_size=batch_size, autopilot=self.autopilot)
        # TensorFlow (SHARDS False): the strategy's scope places everything; nothing to lay out
        self.placed[call.model] = self.runtime.distribution if self.runtime.backend_module.SHARDS else None
        if self.verify:
            x, batch_size = autopilots.per_step(x, batch_size, decision.accumulation)
            with self.runtime.backend_module.scope(self.runtime.distribution):
                verify.verify(self.runtime, call.model, x, y, batch_size, self.verify,
                              accumulation=decision.accumulation)


class Trained:
    """Layer "trained": the fit trained by the runtime's own loop (Runtime.fit's; a script's fit under `run
    --checkpoint-dir`) over the inputs the layer above prepared (`call.prepared`): the checkpoints opened, steps per
    call chosen, then one Keras fit (or, with checkpoints, one an epoch: training/resumable.py), each
    passing the layers below this one. Raises TrainingDiverged when the loss is NaN or stuck at chance.
    Evaluate and predict pass on."""

    def __init__(self, runtime, plan: FitPlan):
        self.runtime, self.plan = runtime, plan
        self.fits = 0  # with per-fit checkpoints: the Nth fit keeps them in folder/fit-N

    def __call__(self, call, proceed):
        if call.name != "fit":
            return proceed(call)
        from acceltrain.training.resumable import Interrupted

        self.fits += 1
        try:
            return self._fit(call, proceed)
        except Interrupted as stopped:
            hint = self.plan.resume_hint
            if hint is None:
                raise
            raise Interrupted(stopped.signum, stopped.checkpoint, hint) from None

    def _fit(self, call, proceed):
        from acceltrain.training.callbacks import DivergenceCheck

        runtime, plan = self.runtime.as_called(call.model), self.plan  # under the caller's own distribution: its own
        prepared = call.prepared  # the inputs, prepared by the layer above (Inputs)
        arguments = call.arguments()
        dog = plan.watchdog or runtime.watchdog  # the one the stall watch of the call beats (Inputs)
        model = call.model
        for name in _PREPARED:  # what the prepared inputs give Keras (prepared.local(), prepared.epoch())
            arguments.pop(name, None)
        epochs = arguments.pop("epochs", 1)
        callbacks, verbose = arguments.pop("callbacks", None), arguments.pop("verbose", "auto")  # list or CallbackList
        if prepared.is_dataset:
            arguments.setdefault("shuffle", False)  # a dataset shuffles itself; Keras warns at its default True
        # 2. Checkpoints, where asked for.
        checkpointing = self._checkpoints(prepared)
        # 3. Steps per compiled call.
        self._tune(model, prepared)
        # 4. Train, watching for divergence; in a multi-process job, each process batches its share.
        divergence = DivergenceCheck(inputs.classes_of(model).num_classes)
        # acceltrain's own first: the stall watch (Inputs), the ledger's watch; a CallbackList the caller built gets
        # the check too, in a new list over its callbacks (a subclass of it goes as it came: nothing joins it)
        watched = keras_internals.callbacks_added(callbacks, model, last=[divergence]) or callbacks

        def keras_fit(**kwargs):  # each Keras fit of the loop, through the layers below this one
            return proceed(call.replace(args=(), kwargs=kwargs))

        # A script's fit (run --checkpoint-dir) runs in run's own scope, which makes only Keras's objects under the
        # distribution (Runtime.scope(keras_only=True)), and the model's distribution (FirstFits): its callbacks and
        # the rest of its code run as the script wrote them, as its fits without checkpoints do
        scoped = contextlib.nullcontext() if plan.script else runtime.scope()
        with dog.watching("fit (compiling and running the first step)"), scoped:
            if checkpointing is None:
                history = _fit_once(keras_fit, prepared, epochs, watched, verbose, arguments)
            else:
                from acceltrain.training import resumable

                history = resumable.fit(model, prepared, epochs=epochs, checkpoints=checkpointing[0],
                                        every=checkpointing[1], resume=plan.checkpoints.resume,
                                        seed=runtime.seeded, verbose=verbose, callbacks=watched,
                                        timeline=runtime.timeline, keras_fit=keras_fit, **arguments)
        divergence.raise_if_diverged()
        return history

    def _checkpoints(self, prepared):
        """(checkpoints, Every) of the plan, or None without: Orbax's on JAX, .weights.h5 on TensorFlow
        (resumable.open_checkpoints); the cadence as options.Checkpoints parsed it when it was made."""
        asked = self.plan.checkpoints
        if asked is None:
            return None
        from acceltrain.training.resumable import open_checkpoints

        folder = asked.folder / f"fit-{self.fits}" if self.plan.per_fit else asked.folder
        runtime = self.runtime
        return open_checkpoints(folder, asked.keep, runtime.backend, runtime.process_index), asked.cadence

    def _tune(self, model, prepared) -> None:
        """Steps per compiled call: the platform's, within an epoch, unless the user set theirs (said when it
        replaces the model's), or the model's own (a script's). XLA (jit_compile) stays as the model was compiled:
        Keras's own choice or yours."""
        runtime = self.runtime.as_called(model)
        steps, steps_reason = decisions.choose_steps_per_execution(
            runtime.platform, prepared.steps_per_epoch or 1_000_000, model.steps_per_execution,
            self.plan.steps_per_execution, (_batch_bytes(prepared) or 0) // runtime.num_replicas or None,
            runtime.sharding_request.device_memory, keep_compiled=self.plan.keep_steps_per_execution)
        if (overridden := decisions.steps_per_execution_override(model.steps_per_execution, steps, runtime.platform)):
            log.warn(overridden)
        set_steps_per_execution(model, steps)
        own = getattr(runtime, "words", "")  # under the caller's own distribution (Runtime.as_called)
        log.info(f"{inputs.global_batch(prepared.batch_size, runtime.num_replicas, accumulated(model), own)}; steps_per_execution "
                 f"{steps} ({steps_reason})")


# A fit's arguments the prepared inputs stand for: the runtime's own loop gives Keras prepared.local() or each epoch's
_PREPARED = ("x", "y", "sample_weight", "batch_size", "validation_data", "validation_split", "validation_batch_size")


def _length_lost(given, prepared) -> bool:
    """A tf.data dataset of a known length whose batches acceltrain cut to the replicas without it (a batch left with
    no rows skipped): Keras, which then learns an epoch's end by reaching it, warns "Your input ran out of data" at
    the first epoch's end, where a plain run says nothing."""
    from acceltrain.inputs import kinds, tf_data

    return kinds.kind_of(given) == kinds.TF_DATA and prepared is not given and tf_data.num_batches(given) is not None \
        and tf_data.num_batches(prepared) is None


class Inputs:
    """Layer "inputs": what Keras is called with, prepared once by inputs.py for fit, evaluate and predict alike,
    whoever calls (Runtime's calls, a script's under `acceltrain run`, after its door): the last few samples trimmed
    (fit), the set repeated (evaluate) or padded and cut back (predict) so every batch divides over the replicas the
    call runs on (Runtime.as_called), and in a job of several processes each process given its own share, so
    `batch_size` stays the global batch. Checked as `plan.checks_inputs` says: strictly (Runtime's calls), or as run's
    door checked them (its notes said once each). A call an outer layer runs on one device (`call.undistributed`:
    run's door) passes as the script made it. A fit goes on with its prepared inputs in `call.prepared` (the
    runtime's own loop, slot "trained", trains from them) and this process's share in its arguments."""

    def __init__(self, runtime, plan: FitPlan = FitPlan()):
        self.runtime, self.plan = runtime, plan
        self.told: set[str] = set()  # the notes said, by key (a script's: once a run)

    def __call__(self, call, proceed):
        call = self._watched(call)
        if call.undistributed:
            return proceed(call)
        from acceltrain.inputs import streams
        from acceltrain.layout import placement

        as_called = getattr(self.runtime, "as_called", None)  # None: a stand-in runtime (tests of run's layers)
        runtime = as_called(call.model) if as_called is not None else self.runtime
        checked = self.plan.checks_inputs(call.name)
        arguments = call.arguments()
        if not checked and streams.is_stream(arguments.get("x")) and not splits(runtime):
            return proceed(call)  # nothing to split, or TensorFlow splits an uneven batch itself
        classes = inputs.classes_of(call.model)
        if call.name == "fit":
            if runtime is self.runtime:  # a model built in scope() by hand, not by Runtime.build (which told its own
                placement.report(runtime, call.model)  # at once): what was sharded, once per model (request.reported)
            return self._fit(call, arguments, runtime, classes, checked, proceed)
        if call.name == "evaluate":
            prepared = inputs.prepare_evaluate(runtime.split, arguments.pop("x", None), arguments.pop("y", None),
                                               batch_size=arguments.pop("batch_size", None), classes=classes,
                                               sample_weight=arguments.pop("sample_weight", None), checked=checked,
                                               name="x" if checked else "evaluate's x")
            self._tell([(f"evaluate {key}", message) for key, message in prepared.notes], checked)
            x, y, weights = prepared.local()
            return proceed(call.replace(args=(), kwargs={**arguments, "x": x, "y": y, "sample_weight": weights,
                                                         "batch_size": prepared.local_batch_size}))
        prepared = inputs.prepare_predict(runtime.split, arguments.pop("x", None),
                                          batch_size=arguments.pop("batch_size", None), checked=checked)
        self._tell(prepared.notes, checked)
        if prepared.num_samples is None:  # not arrays: Keras takes them as they are
            return proceed(call.replace(args=(), kwargs={**arguments, "x": prepared.x,
                                                         "batch_size": prepared.batch_size}))
        x, _, _ = prepared.local()
        gathered = runtime.num_processes > 1  # every process holds the whole result, as a plain predict does
        with runtime.backend_module.gathering_predictions(call.model) if gathered else contextlib.nullcontext():
            outputs = proceed(call.replace(args=(), kwargs={**arguments, "x": x,
                                                            "batch_size": prepared.local_batch_size}))
        return prepared.finish(outputs, gathered=gathered)

    def _fit(self, call, arguments, runtime, classes, checked, proceed):
        from acceltrain.inputs import streams

        if self.plan.checkpoints is not None:  # what exact resume cannot honour, refused before anything is cut
            arguments = checks.resumable_arguments(arguments)
        x, validation_data = arguments.get("x"), arguments.get("validation_data")
        fit = inputs.prepare_fit(runtime.split, x, arguments.get("y"), batch_size=arguments.get("batch_size"),
                                 classes=classes, sample_weight=arguments.get("sample_weight"),
                                 validation_data=validation_data,
                                 validation_split=arguments.pop("validation_split", 0.0) or 0.0,
                                 validation_batch_size=arguments.get("validation_batch_size"),
                                 validation_steps=arguments.get("validation_steps"), checked=checked,
                                 trim=self.plan.checkpoints is None,
                                 shuffle=self.plan.checkpoints is None and arguments.get("shuffle", True) is not False)
        self._tell(fit.notes, checked)  # said in every process, as in a one-process run
        if fit.shuffles_itself:
            arguments["shuffle"] = False  # a PyDataset read by share shuffles its groups itself (inputs/py_dataset.py)
        if streams.is_stream(x):  # its batches: Keras's; this process's rows of each (share_stream)
            if fit.validation_data is not validation_data:
                arguments.pop("validation_steps", None)  # read into memory: its steps are its batches
                arguments["validation_batch_size"] = fit.validation_batch_size
            arguments.update(x=fit.x, validation_data=fit.validation_data)
            if _length_lost(x, fit.x) and not arguments.get("steps_per_epoch"):
                from acceltrain.inputs.tf_data import end_of_pass_expected

                with end_of_pass_expected():  # Keras's "ran out of data" at its end: acceltrain's doing, not theirs
                    return proceed(call.replace(args=(), kwargs=arguments, prepared=fit))
        else:
            arguments["x"], arguments["y"], arguments["sample_weight"] = fit.local()
            arguments.update(validation_data=fit.validation_data, batch_size=fit.local_batch_size)
            if fit.validation_batch_size is not None:
                arguments["validation_batch_size"] = fit.validation_batch_size
        return proceed(call.replace(args=(), kwargs=arguments, prepared=fit))

    def _watched(self, call):
        """The call with the stall watch first among its callbacks (training/callbacks.py::StallWatch), beating the
        plan's watchdog, where it is on: the one place it is made. (The ledger's watch is the ledger layer's, the
        steps one at a time the placement layer's: each of acceltrain's callbacks is made in one place.)"""
        dog = self.plan.watchdog or self.runtime.watchdog
        if not dog.enabled:
            return call
        from acceltrain.training.callbacks import StallWatch

        return call.with_callback(StallWatch(dog))

    def _tell(self, notes, every: bool) -> None:
        """Each note said: every one (Runtime's calls), or once a key (a script's: each call would repeat it)."""
        for key, message in notes:
            if every or key not in self.told:
                self.told.add(key)
                log.info(message)


def splits(runtime) -> bool:
    """Whether a batch is split here by acceltrain: several processes, or several replicas on a backend that cannot
    split an uneven batch itself (TensorFlow can)."""
    return runtime.num_processes > 1 or (runtime.num_replicas > 1
                                         and not runtime.backend_module.SPLITS_UNEVEN_BATCHES)


def _batch_bytes(prepared) -> int | None:
    """A global batch's bytes (x, y and sample weights), where the inputs are arrays; None for a stream (its batches'
    bytes are not known before Keras reads them: the platform's steps_per_execution stays uncapped)."""
    import keras
    import numpy as np

    arrays = [part for part in keras.tree.flatten((prepared.x, prepared.y, prepared.sample_weight))
              if isinstance(part, np.ndarray)]
    if not arrays or not prepared.batch_size or any(len(part) == 0 for part in arrays):
        return None
    return sum(part.nbytes // len(part) for part in arrays) * prepared.batch_size


def _fit_once(keras_fit, prepared, epochs, callbacks, verbose, fit_kwargs):
    """One Keras fit over the prepared inputs, timing each epoch."""
    from acceltrain.training.callbacks import EpochTimer

    timer = EpochTimer()
    x, y, sample_weight = prepared.local()
    timed = keras_internals.callbacks_added(callbacks, None, last=[timer]) or callbacks  # a subclass: as it came
    history = keras_fit(x=x, y=y, sample_weight=sample_weight, batch_size=prepared.local_batch_size, epochs=epochs,
                        validation_data=prepared.validation_data,
                        validation_batch_size=prepared.validation_batch_size, callbacks=timed,
                        verbose=verbose, **fit_kwargs)
    history.epoch_seconds = timer.epoch_seconds
    return history


def set_steps_per_execution(model, steps: int) -> None:
    """Change steps per call on a compiled model: its compiled functions are rebuilt on the next fit."""
    if model.steps_per_execution != steps:
        model.steps_per_execution = steps
        keras_internals.forget_compiled_functions(model)
