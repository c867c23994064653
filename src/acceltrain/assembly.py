"""The layers acceltrain itself puts in the one assembly of a fit (interception.LAYERS), for every fit alike.

    Runtime.fit                 ledger → autopilot → trained → placement (each epoch's Keras fit)
    a script's fit under run    ledger → script_calls → autopilot → script_inputs → [trained →] placement
    a library's plain fit       autopilot → placement

`FirstFits` (slot "autopilot") is the layout, the one accumulation cut of the batch and --verify: before a model's
first fit it is weighed and laid out (Runtime.first_fit), each fit's batch is cut for the steps it accumulates,
and each call runs under the distribution the model was laid out for. `Trained` (slot "trained") is the runtime's
own loop: Runtime.fit's, and a script's fit under `run --checkpoint-dir`: the inputs prepared (inputs/), the
checkpoints, steps per call, the callbacks, the divergence check; each Keras fit it makes (one, or one an epoch
with checkpoints) passes the layers below it. What a fit is asked to be is its `FitPlan`, its checkpoints the one
public value (options.Checkpoints). Beside runtime.py, over training/ and layout/: imported by Runtime and `run` after
connect().
"""

import dataclasses
import weakref

from acceltrain import checks, decisions, inputs, log
from acceltrain.errors import option
from acceltrain.options import Checkpoints
from acceltrain.backends import keras_internals
from acceltrain.layout import autopilot as autopilots


@dataclasses.dataclass(frozen=True)
class FitPlan:
    """What a fit is asked to be, beside Keras's own arguments: Runtime.fit's extra arguments, or run's flags.
    `per_fit`: each fit keeps its checkpoints in its own folder/fit-N (a script's fits, resumed in the order it makes
    them); `resume_hint`: how the user resumes, said when a signal stops the fit."""

    checkpoints: Checkpoints | None = None
    per_fit: bool = False
    resume_hint: str | None = None
    stall_timeout: float | None = None  # None: connect()'s watchdog
    steps_per_execution: int | None = None  # the user's; None: the platform's (decisions.choose_steps_per_execution)
    keep_steps_per_execution: bool = False  # the model's own, as a plain fit keeps it (a script's)


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
        called = self.runtime.as_called()
        if called is not self.runtime:  # the caller's own distribution: kept, as plainly; nothing laid out again
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
    --checkpoint-dir`): the inputs checked and prepared (inputs/), the checkpoints opened, steps per call chosen,
    the callbacks put first, then one Keras fit (or, with checkpoints, one an epoch: training/resumable.py), each
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
        from acceltrain.layout import placement
        from acceltrain.training.callbacks import DivergenceCheck

        runtime, plan = self.runtime.as_called(), self.plan  # under the caller's own distribution: its replicas
        arguments = call.arguments()
        if plan.checkpoints is not None:
            arguments = checks.resumable_arguments(arguments)
        dog = runtime.watchdog_for(plan.stall_timeout)
        model = call.model
        x, y = arguments.pop("x", None), arguments.pop("y", None)
        batch_size, epochs = arguments.pop("batch_size", None), arguments.pop("epochs", 1)
        callbacks, verbose = list(arguments.pop("callbacks", None) or ()), arguments.pop("verbose", "auto")
        validation_data = arguments.pop("validation_data", None)
        placement.report(runtime, model)  # once per model: what was sharded
        # 1. Inputs: checked, cast once, cut so every batch divides over the replicas (inputs/).
        # With checkpoints, each epoch leaves out its own few samples, after its shuffle (inputs.Fit.epoch).
        classes = inputs.classes_of(model)
        prepared = inputs.prepare_fit(runtime.split, x, y, batch_size=batch_size, classes=classes,
                                      sample_weight=arguments.pop("sample_weight", None),
                                      validation_data=validation_data,
                                      validation_split=arguments.pop("validation_split", 0.0) or 0.0,
                                      validation_batch_size=arguments.pop("validation_batch_size", None),
                                      trim=plan.checkpoints is None,
                                      shuffle=plan.checkpoints is None and arguments.get("shuffle", True) is not False)
        for _, message in prepared.notes:
            log.info(message)
        if prepared.shuffles_itself:
            arguments["shuffle"] = False  # a PyDataset read by share shuffles its groups itself (inputs/py_dataset.py)
        if prepared.is_dataset:
            arguments.setdefault("shuffle", False)  # a dataset shuffles itself; Keras warns at its default True
        # 2. Checkpoints, where asked for.
        checkpointing = self._checkpoints(prepared)
        # 3. Steps per compiled call.
        self._tune(model, prepared)
        # 4. Train, watching for divergence; in a multi-process job, each process batches its share.
        divergence = DivergenceCheck(classes.num_classes)
        watched = [*runtime.watched_callbacks(dog, callbacks), *callbacks, divergence]  # the stall watch first

        def keras_fit(**kwargs):  # each Keras fit of the loop, through the layers below this one
            return proceed(call.replace(args=(), kwargs=kwargs))

        with dog.watching("fit (compiling and running the first step)"), runtime.scope():
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
        runtime = self.runtime.as_called()
        asked = model.steps_per_execution if self.plan.keep_steps_per_execution else self.plan.steps_per_execution
        steps, steps_reason = decisions.choose_steps_per_execution(
            runtime.platform, prepared.steps_per_epoch or 1_000_000, model.steps_per_execution, asked,
            (_batch_bytes(prepared) or 0) // runtime.num_replicas or None, runtime.sharding_request.device_memory)
        if (overridden := decisions.steps_per_execution_override(model.steps_per_execution, steps, runtime.platform)):
            log.warn(overridden)
        set_steps_per_execution(model, steps)
        own = getattr(runtime, "words", "")  # under the caller's own distribution (Runtime.as_called)
        log.info(f"{inputs.global_batch(prepared.batch_size, runtime.num_replicas, accumulated(model), own)}; steps_per_execution "
                 f"{steps} ({steps_reason})")


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
    history = keras_fit(x=x, y=y, sample_weight=sample_weight, batch_size=prepared.local_batch_size, epochs=epochs,
                        validation_data=prepared.validation_data,
                        validation_batch_size=prepared.validation_batch_size, callbacks=[*callbacks, timer],
                        verbose=verbose, **fit_kwargs)
    history.epoch_seconds = timer.epoch_seconds
    return history


def set_steps_per_execution(model, steps: int) -> None:
    """Change steps per call on a compiled model: its compiled functions are rebuilt on the next fit."""
    if model.steps_per_execution != steps:
        model.steps_per_execution = steps
        keras_internals.forget_compiled_functions(model)
