"""connect() and Runtime: the one public entry.

    runtime = acceltrain.connect()            # find the hardware, choose the distribution
    with runtime.scope():                     # build and compile the model: variables placed for it
        model = build_model()
    runtime.fit(model, x, y, batch_size=1024, epochs=10)

This module never imports a framework: it calls the backend module connect() chose.
"""

import contextlib
import contextvars
import os
import platform as _platform
from pathlib import Path

from acceltrain import backends, cluster, decisions, hardware, inputs, log, placement, watchdog
from acceltrain.errors import UsageError, positive_int


def connect(backend: str | None = None, *, simulate_devices: int | None = None, distribution: str = "auto",
            platform: str = "auto", tpu: str | None = None, verbose: bool = True, coordinator: str | None = None,
            num_processes: int | None = None, process_id: int | None = None, stall_timeout: float | None = None,
            device_memory: str | int | None = None, mesh_shape: tuple[int, int] | None = None) -> "Runtime":
    """Find the hardware, start the backend on it, and choose the distribution.

    Args:
        backend: "jax" or "tensorflow". Default: the backend Keras already loaded, else KERAS_BACKEND,
            else the one set in Keras's ~/.keras/keras.json, else jax if installed, else tensorflow.
        simulate_devices: split the CPU into this many devices, to try multi-device code with no
            accelerator. Must be set before JAX starts.
        distribution: "auto" (data parallel when the model fits one device, else fsdp: see Runtime.build),
            "data", "fsdp" (each weight cut along one axis over all devices, the batch too), "model" (a
            batch x model mesh, weights cut over the model axis), "none"; or a keras.distribution.LayoutMap
            (its mesh and keys; weights it does not name follow the fsdp rule). fsdp/model: JAX only.
        platform: "auto" (TPU, else GPU, else CPU), or "tpu", "gpu", "cpu": an error if there is none.
        tpu: the name or address of a TPU to connect to (TensorFlow backend); implies platform="tpu".
        verbose: print the one-line banner with the decisions and their reasons (to stderr).
        coordinator: join a multi-process job: "host:port" of process 0. Default (this and the next two): read
            from the environment (acceltrain launch, Cloud TPU, SLURM, Open MPI), else one process.
        num_processes: the processes in the job (one per host).
        process_id: this process's index, 0 to num_processes - 1.
        stall_timeout: seconds without a finished step inside fit/evaluate/predict after which the process
            prints its stacks and ends (see watchdog.py); default watchdog.DEFAULT_STALL_TIMEOUT, 0: off.
        device_memory: bytes of one device ("16GiB", "128MiB"), overriding what the hardware reports; what
            'auto' weighs a model against (a CPU reports none, so simulated devices need it to shard).
        mesh_shape: (batch, model) devices of distribution="model"; default: the model axis that fits.
    """
    # 1. Check the arguments, before any framework starts.
    _check_simulate_devices(simulate_devices)
    stall_timeout = watchdog.check_timeout(stall_timeout)
    sharding_request = placement.check_request(distribution, device_memory, mesh_shape)  # sharding's own inputs
    decisions.check_distribution(sharding_request.kind)
    platform = _check_platform(platform, tpu, simulate_devices)

    # 2. Choose the backend and start it.
    backend_name, backend_reason = decisions.choose_backend(
        backend, backends.loaded_keras_backend(), os.environ.get("KERAS_BACKEND"), backends.jax_importable(),
        backends.keras_config_backend(),
    )
    decisions.check_distribution(sharding_request.kind, backend_name)  # fsdp/model: JAX only
    processes, processes_reason = cluster.detect(backend_name, coordinator, num_processes, process_id)
    framework = backends.load(backend_name)
    framework.prepare(simulate_devices, platform, tpu)
    if processes.distributed:
        framework.start_processes(processes)  # before the devices are listed: they span all processes

    # 3. Find the hardware.
    platform, platform_reason = hardware.choose_platform(framework.device_counts(), platform)
    found = hardware.Hardware(
        platform=platform,
        device_kind=framework.device_kind(platform),
        devices=framework.devices(platform),
        simulated=simulate_devices is not None,
        num_processes=framework.process_count(),
        process_index=framework.process_index(),
    )

    # 4. Choose the distribution.
    kind, distribution_reason = decisions.choose_distribution(sharding_request.kind, found.num_devices)
    placement.check_against_hardware(sharding_request, framework, found)
    runtime = Runtime(framework, found, placement.make_distribution(sharding_request, kind, framework, found))
    runtime.sharding_request = sharding_request  # Runtime.build weighs the model against it
    runtime.watchdog = watchdog.Watchdog(stall_timeout, found.process_index)
    if found.num_processes > 1:
        framework.shard_inputs_per_process(runtime.distribution)  # each process feeds its own share
    runtime.decisions = {
        "backend": f"{backend_name} ({backend_reason})",
        "platform": f"{platform} ({'simulated with simulate_devices' if found.simulated else platform_reason})",
        "distribution": f"{runtime.distribution_name} ({distribution_reason})",
        "processes": f"{found.num_processes} ({processes_reason})",
    }

    # 5. Choose the precision: bfloat16 compute where the hardware runs it natively.
    from acceltrain import precision

    runtime.precision, precision_reason = decisions.choose_precision(
        platform, framework.compute_capability(platform), precision.current_policy()
    )
    runtime.decisions["precision"] = f"{runtime.precision} ({precision_reason})"
    if verbose:
        origin = f"; processes: {processes_reason}" if processes.distributed else ""
        log.info(f"{runtime} (backend: {backend_reason}; {distribution_reason}{origin})")
    return runtime


def _check_simulate_devices(simulate_devices) -> None:
    if simulate_devices is not None:
        positive_int(simulate_devices, "simulate_devices", " (e.g. 8 to try an 8-device run on this CPU)")


def _check_platform(platform, tpu, simulate_devices) -> str:
    """The platform asked for, checked against the other arguments; a TPU name asks for a TPU."""
    if platform not in ("auto", *hardware.PLATFORMS):
        raise UsageError(f"Received platform={platform!r}. Valid: auto, {', '.join(hardware.PLATFORMS)}.")
    if tpu is not None and platform not in ("auto", "tpu"):
        raise UsageError(f"Received tpu={tpu!r} with platform={platform!r}. A TPU name asks for a TPU: "
                         "pass one or the other.")
    platform = "tpu" if tpu is not None else platform
    if simulate_devices is not None and platform not in ("auto", "cpu"):
        raise UsageError(f"Received simulate_devices={simulate_devices} with platform={platform!r}. Simulated "
                         "devices are slices of the CPU: leave platform out, or drop simulate_devices.")
    return platform


# True while Runtime.fit/evaluate call Keras with inputs they have already prepared (checked, trimmed,
# shared out per process), so `acceltrain run`'s hook on Keras's fit leaves them alone.
_inputs_prepared = contextvars.ContextVar("acceltrain_inputs_prepared", default=False)


def inputs_prepared() -> bool:
    return _inputs_prepared.get()


@contextlib.contextmanager
def _preparing_inputs():
    token = _inputs_prepared.set(True)
    try:
        yield
    finally:
        _inputs_prepared.reset(token)


class Runtime:
    """The hardware connect() found and how it distributes training over it."""

    def __init__(self, framework, found: hardware.Hardware, distribution):
        self._framework = framework
        self.hardware = found
        self.distribution = distribution  # a keras.distribution.Distribution (JAX), a tf.distribute.Strategy, or None
        self.decisions: dict[str, str] = {}
        self._seed = 0
        self.precision = "float32"  # Keras's dtype policy for models built under scope()
        self.watchdog = watchdog.Watchdog(0)  # connect() sets the one it was asked for
        self.sharding_request = placement.Request()  # what connect() was asked about sharding

    # --- What is there ------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        return self._framework.NAME

    @property
    def backend_module(self):
        """The backend module connect() chose (acceltrain.backends.jax or .tensorflow): the functions of
        backends.INTERFACE, for code that works through whichever backend runs."""
        return self._framework

    @property
    def platform(self) -> str:
        return self.hardware.platform

    @property
    def device_kind(self) -> str:
        return self.hardware.device_kind

    @property
    def num_devices(self) -> int:
        return self.hardware.num_devices

    @property
    def num_replicas(self) -> int:
        """How many slices each global batch is cut into."""
        return self._framework.num_replicas(self.distribution)

    @property
    def num_processes(self) -> int:
        return self.hardware.num_processes

    @property
    def process_index(self) -> int:
        return self.hardware.process_index

    @property
    def distribution_name(self) -> str:
        return self._framework.distribution_name(self.distribution)

    def describe(self) -> dict:
        """Everything about this runtime as JSON-able data (written into metrics.json)."""
        return {
            "backend": self.backend,
            "platform": self.platform,
            "device_kind": self.device_kind,
            "num_devices": self.num_devices,
            "num_replicas": self.num_replicas,
            "num_processes": self.num_processes,
            "process_index": self.process_index,
            "distribution": self.distribution_name,
            "simulated_devices": self.hardware.simulated,
            "devices": list(self.hardware.devices),
            "decisions": dict(self.decisions),
            "versions": {"python": _platform.python_version(), "acceltrain": _version(), **self._framework.versions()},
        }

    def __str__(self) -> str:
        devices = f"{self.num_devices} × {self.device_kind}" + (" (simulated)" if self.hardware.simulated else "")
        processes = f", {self.num_processes} processes" if self.num_processes > 1 else ""
        spread = (
            f"{self.distribution_name} over {self.num_replicas} replicas"
            if self.distribution is not None
            else "no distribution"
        )
        return f"{self.backend} on {self.platform}: {devices}{processes} → {spread}"

    def __repr__(self) -> str:
        return f"<Runtime {self}>"

    # --- Building and training ----------------------------------------------------------------

    def seed(self, seed: int) -> None:
        """Seed weights, dropout and the data order, so a run repeats exactly on the same hardware."""
        self._seed = seed
        self._framework.set_seed(seed)

    @contextlib.contextmanager
    def scope(self):
        """Build (and compile) models inside: their variables are placed by the distribution.

        Whatever global state this sets is restored on exit, also when the body raises.
        """
        from acceltrain import precision

        with self._framework.scope(self.distribution), precision.scope(self.precision):
            yield

    def build(self, build_model, *, layout_map=None):
        """`build_model()` run with its weights born placed for this hardware: the model it returns.

        Under 'auto' with a device memory known (device_memory=, or the hardware's), the training state
        (weights, gradients, optimizer slots) is first measured without allocating it, and fsdp is
        chosen when it does not fit one device with headroom; a model that fits nowhere stops here with
        the numbers. `layout_map`: a function of a DeviceMesh giving a keras.distribution.LayoutMap
        (keras_hub's `Backbone.get_layout_map`), used under 'model'. Then it reports what share of the
        weight bytes is sharded and warns about big weights left whole.
        """
        placement.choose_for_model(self, build_model, layout_map)
        with self.scope():
            model = build_model()
        placement.report(self, model)
        return model

    def fit(self, model, x, y=None, *, batch_size: int | None = None, epochs: int = 1, validation_data=None,
            callbacks=(), verbose="auto", checkpoint_dir=None, resume: bool = False,
            checkpoint_every: str = "1 epoch", keep_checkpoints: int = 2, stall_timeout: float | None = None,
            **fit_kwargs):
        """Keras's `model.fit` with this hardware's settings. Returns Keras's History, whose
        `epoch_seconds` holds the wall time of each epoch.

        `batch_size` is the global batch, cut into equal slices over the replicas. numpy inputs are
        checked (lengths, NaN/inf, class labels) and float64 is cast to float32 once. A batched
        tf.data.Dataset brings its own batch, checked the same way. Raises TrainingDiverged if the loss
        becomes NaN or sticks at chance level.

        With `checkpoint_dir`, training keeps checkpoints there (`checkpoint_every`: "N epochs" or
        "N steps"; the newest `keep_checkpoints` kept), and `resume=True` continues from the newest
        good one exactly: the data order of each epoch depends only on (seed, epoch). SIGTERM and
        SIGINT then write a checkpoint and raise `resumable.Interrupted`.

        `stall_timeout` replaces connect()'s for this fit (seconds; 0 turns the stall watchdog off).
        """
        from acceltrain.training.callbacks import DivergenceCheck, StallWatch

        stall = StallWatch(self._watchdog_for(stall_timeout))

        _check_compiled(model)
        placement.report(self, model)  # once per model: a model built in scope() rather than build()
        # 1. Inputs: checked, cast once, cut so every batch divides over the replicas (inputs.py).
        classes = inputs.classes_of(model)
        weights = fit_kwargs.pop("sample_weight", None) if checkpoint_dir is None else None  # trimmed and shared too
        # With checkpoints, each epoch leaves out its own few samples (after its shuffle): resumable.fit.
        prepared = inputs.prepare_fit(self, x, y, batch_size=batch_size, classes=classes, sample_weight=weights,
                                      validation_data=validation_data, trim=checkpoint_dir is None,
                                      validation_batch_size=fit_kwargs.pop("validation_batch_size", None))
        _tell(prepared.notes)
        if prepared.is_dataset:
            fit_kwargs.setdefault("shuffle", False)  # a dataset shuffles itself; Keras warns at its default True
        # 2. Checkpoints, where asked for.
        checkpointing = self._checkpointing(checkpoint_dir, checkpoint_every, keep_checkpoints, prepared)
        # 3. Steps per compiled call.
        self._tune(model, prepared, fit_kwargs.pop("steps_per_execution", None))
        # 4. Train, watching for divergence; in a multi-process job, each process batches its share.
        divergence = DivergenceCheck(classes.num_classes)
        with self.scope(), _preparing_inputs():
            if checkpointing is None:
                history = self._fit_once(model, prepared, epochs, [*callbacks, divergence, stall], verbose, fit_kwargs)
            else:
                from acceltrain.training import resumable

                history = resumable.fit(
                    model, prepared.x, prepared.y, batch_size=prepared.batch_size, epochs=epochs,
                    checkpoints=checkpointing[0], every=checkpointing[1], resume=resume, seed=self._seed,
                    num_replicas=self.num_replicas, verbose=verbose, validation_data=prepared.validation_data,
                    validation_batch_size=prepared.validation_batch_size, callbacks=[*callbacks, divergence, stall],
                    process_share=prepared.share, num_processes=self.num_processes,
                    dataset_batches=prepared.steps_per_epoch if prepared.is_dataset else None, **fit_kwargs)
        divergence.raise_if_diverged()
        return history

    def _checkpointing(self, checkpoint_dir, checkpoint_every, keep_checkpoints, prepared):
        """(checkpoints, Every) for checkpoint_dir, or None without one: Orbax's on JAX, .weights.h5 on
        TensorFlow (checkpoint.open_checkpoints)."""
        if checkpoint_dir is None:
            return None
        from acceltrain.training.checkpoint import Every, open_checkpoints

        checkpoints = open_checkpoints(Path(checkpoint_dir), keep_checkpoints, self.backend, self.process_index)
        return checkpoints, Every.parse(checkpoint_every, name="checkpoint_every")

    def _tune(self, model, prepared, steps_per_execution=None) -> None:
        """Steps per compiled call: the platform's, within an epoch, unless the user set theirs (said when
        it replaces the model's). XLA (jit_compile) stays as the model was compiled: Keras's own choice or yours."""
        steps, steps_reason = decisions.choose_steps_per_execution(
            self.platform, prepared.steps_per_epoch or 1_000_000, model.steps_per_execution, steps_per_execution)
        if (overridden := decisions.steps_per_execution_override(model.steps_per_execution, steps, self.platform)):
            log.warn(overridden)
        _set_steps_per_execution(model, steps)
        log.info(
            f"global batch {prepared.batch_size} = {prepared.batch_size // self.num_replicas} × {self.num_replicas} "
            f"replicas; steps_per_execution {steps} ({steps_reason})"
        )

    @staticmethod
    def _fit_once(model, prepared, epochs, callbacks, verbose, fit_kwargs):
        """One plain Keras fit over the prepared inputs, timing each epoch."""
        from acceltrain.training.callbacks import EpochTimer

        timer = EpochTimer()
        x, y, sample_weight = prepared.local()
        if sample_weight is not None:
            fit_kwargs = {**fit_kwargs, "sample_weight": sample_weight}
        if prepared.validation_batch_size is not None:
            fit_kwargs = {**fit_kwargs, "validation_batch_size": prepared.validation_batch_size}
        history = model.fit(x, y, batch_size=prepared.local_batch_size, epochs=epochs,
                            validation_data=prepared.validation_data, callbacks=[*callbacks, timer],
                            verbose=verbose, **fit_kwargs)
        history.epoch_seconds = timer.epoch_seconds
        return history

    def evaluate(self, model, x, y=None, *, batch_size: int | None = None, verbose="auto",
                 **evaluate_kwargs) -> dict:
        """Keras's `model.evaluate` over every sample (none dropped), as a dict of metric values."""
        _check_compiled(model)
        prepared = inputs.prepare_evaluate(self, x, y, batch_size=batch_size, classes=inputs.classes_of(model),
                                           sample_weight=evaluate_kwargs.pop("sample_weight", None))
        _tell(prepared.notes)
        x, y, sample_weight = prepared.local()
        if sample_weight is not None:
            evaluate_kwargs["sample_weight"] = sample_weight
        from acceltrain.training.callbacks import StallWatch

        callbacks = [*(evaluate_kwargs.pop("callbacks", None) or ()), StallWatch(self.watchdog)]
        with self.scope(), _preparing_inputs():
            return model.evaluate(x, y, batch_size=prepared.local_batch_size, verbose=verbose, return_dict=True,
                                  callbacks=callbacks, **evaluate_kwargs)

    def _watchdog_for(self, stall_timeout) -> "watchdog.Watchdog":
        if stall_timeout is None:
            return self.watchdog
        return watchdog.Watchdog(watchdog.check_timeout(stall_timeout), self.process_index)

    def predict(self, model, x, *, batch_size: int | None = None, verbose="auto", **predict_kwargs):
        """Keras's `model.predict`: the outputs of exactly the samples of `x`, in their order, whatever
        the number of replicas (the last batch padded, then cut back) and of processes (outputs joined)."""
        prepared = inputs.prepare_predict(self, x, batch_size=batch_size)
        with self.scope(), _preparing_inputs():
            return predict_prepared(self, model, type(model).predict, prepared, verbose=verbose, **predict_kwargs)

    # --- Closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Undo what connect() changed in Keras for this runtime (plain fit following a model's placement).
        The devices and the backend stay started: JAX and TensorFlow cannot stop them."""
        self._framework.release(self.distribution)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def predict_prepared(runtime, model, predict, prepared, **predict_kwargs):
    """Call Keras's `predict(model, ...)` on prepared inputs and give back exactly the set's outputs.

    In a job of several processes each process's outputs are joined from all of them (every process holds
    the whole result, as a plain predict does).
    """
    if prepared.num_samples is None:  # not arrays: Keras takes them as they are
        return predict(model, prepared.x, batch_size=prepared.batch_size, **predict_kwargs)
    x, _, _ = prepared.local()
    gathered = runtime.num_processes > 1
    with runtime.backend_module.gathering_predictions(model) if gathered else contextlib.nullcontext():
        outputs = predict(model, x, batch_size=prepared.local_batch_size, **predict_kwargs)
    return prepared.finish(outputs, gathered=gathered)


def _tell(notes) -> None:
    for _, message in notes:
        log.info(message)


def _check_compiled(model) -> None:
    if not getattr(model, "compiled", False):
        raise UsageError(
            f"Received a model that is not compiled: {getattr(model, 'name', model)!r}. Call "
            "model.compile(optimizer=..., loss=...) inside runtime.scope() before fit or evaluate."
        )


def _set_steps_per_execution(model, steps: int) -> None:
    """Change steps per call on a compiled model: its compiled functions are rebuilt on the next fit."""
    if model.steps_per_execution != steps:
        from acceltrain.backends import keras_internals

        model.steps_per_execution = steps
        keras_internals.forget_compiled_functions(model)


def _version() -> str:
    from acceltrain import __version__

    return __version__
