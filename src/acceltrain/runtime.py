"""connect() and Runtime: the one public entry.

    runtime = acceltrain.connect()            # find the hardware, choose the distribution
    with runtime.scope():                     # build and compile the model: variables placed for it
        model = build_model()
    runtime.fit(model, x, y, batch_size=1024, epochs=10)

This module never imports a framework: it calls the backend module connect() chose.
"""

import contextlib
import contextvars
import math
import os
import platform as _platform
from pathlib import Path

from acceltrain import backends, cluster, data, decisions, hardware, log, watchdog
from acceltrain.errors import UsageError


def connect(backend: str | None = None, *, simulate_devices: int | None = None, distribution: str = "auto",
            platform: str = "auto", tpu: str | None = None, verbose: bool = True, coordinator: str | None = None,
            num_processes: int | None = None, process_id: int | None = None,
            stall_timeout: float | None = None) -> "Runtime":
    """Find the hardware, start the backend on it, and choose the distribution.

    Args:
        backend: "jax" or "tensorflow". Default: the backend Keras already loaded, else KERAS_BACKEND,
            else jax if installed, else tensorflow.
        simulate_devices: split the CPU into this many devices, to try multi-device code with no
            accelerator. Must be set before JAX starts.
        distribution: "auto" (data parallel over all devices when there are several), "data" or "none".
        platform: "auto" (TPU, else GPU, else CPU), or "tpu", "gpu", "cpu": an error if there is none.
        tpu: the name or address of a TPU to connect to (TensorFlow backend); implies platform="tpu".
        verbose: print the one-line banner with the decisions and their reasons (to stderr).
        coordinator, num_processes, process_id: join a multi-process job ("host:port" of process 0).
            Default: read from the environment (acceltrain launch, Cloud TPU, SLURM, Open MPI), else one process.
        stall_timeout: seconds without a finished step inside fit/evaluate/predict after which the process
            prints its stacks and ends (see watchdog.py); default watchdog.DEFAULT_STALL_TIMEOUT, 0: off.
    """
    # 1. Check the arguments, before any framework starts.
    _check_simulate_devices(simulate_devices)
    stall_timeout = watchdog.check_timeout(stall_timeout)
    decisions.check_distribution(distribution)
    platform = _check_platform(platform, tpu, simulate_devices)

    # 2. Choose the backend and start it.
    backend_name, backend_reason = decisions.choose_backend(
        backend, backends.loaded_keras_backend(), os.environ.get("KERAS_BACKEND"), backends.jax_importable()
    )
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
    kind, distribution_reason = decisions.choose_distribution(distribution, found.num_devices)
    runtime = Runtime(framework, found, framework.make_distribution(kind, found.devices))
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
        log.info(f"{runtime} ({distribution_reason}{origin})")
    return runtime


def _check_simulate_devices(simulate_devices) -> None:
    if simulate_devices is None:
        return
    if isinstance(simulate_devices, bool) or not isinstance(simulate_devices, int) or simulate_devices < 1:
        raise UsageError(
            f"Received simulate_devices={simulate_devices!r}. Expected a whole number of at least 1 "
            "(e.g. 8 to try an 8-device run on this CPU)."
        )


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

    # --- What is there ------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        return self._framework.NAME

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
        from acceltrain.training.callbacks import DivergenceCheck, EpochTimer, StallWatch

        stall = StallWatch(self._watchdog_for(stall_timeout))

        _check_compiled(model)
        # 1. The global batch splits evenly over the replicas (a dataset brings its own).
        dataset = data.is_dataset(x)
        self._check_multi_process_inputs(x, validation_data)
        if dataset:
            x, batch_size, steps_per_epoch = self._prepare_training_dataset(x, batch_size)
            fit_kwargs.setdefault("shuffle", False)  # a dataset shuffles itself; Keras warns at its default True
        else:
            data.check_batch_size(batch_size, self.num_replicas)
            steps_per_epoch = None
        # 2. Inputs checked and cast once, not every step.
        num_classes = _num_classes(model)
        if data.is_arrays(x):
            x, y = self._prepare_training_arrays(x, y, batch_size, num_classes)
        if data.is_dataset(validation_data):  # its own batch, which may differ from training's
            validation_data, validation_batch = self._prepare_eval_dataset(validation_data, None, num_classes,
                                                                           "validation_data")
            if not data.is_dataset(validation_data):
                fit_kwargs.setdefault("validation_batch_size", validation_batch)
        elif validation_data is not None:
            validation_data = self._prepare_eval_arrays(validation_data, batch_size, num_classes, "validation_data")
            validation_data = self._own_share(validation_data)
        if checkpoint_dir is not None:
            from acceltrain.training.checkpoint import Checkpoints, Every

            checkpoints = Checkpoints(Path(checkpoint_dir), keep_checkpoints, writer=self.process_index == 0)
            every = Every.parse(checkpoint_every)
            if not data.is_arrays(x):
                raise UsageError("Received checkpoint_dir with a dataset input: exact resume needs numpy arrays "
                                 "(the order of each epoch is drawn from the seed). Pass arrays, or no checkpoint_dir.")
        # 3. Steps per compiled call, and XLA where the backend gains from it.
        if data.is_arrays(x):
            steps_per_epoch = math.ceil(data.num_samples(x) / batch_size)
        steps, steps_reason = decisions.choose_steps_per_execution(self.platform, steps_per_epoch or 1_000_000,
                                                                   model.steps_per_execution)
        _set_steps_per_execution(model, steps)
        log.info(
            f"global batch {batch_size} = {batch_size // self.num_replicas} × {self.num_replicas} replicas; "
            f"steps_per_execution {steps} ({steps_reason})"
        )
        jit_reason = self._framework.set_jit_compile(model, self.platform, self.distribution)
        if jit_reason:
            log.info(jit_reason)
        # 4. Train, watching for divergence; in a multi-process job, each process batches its share.
        if validation_data is not None and not data.is_dataset(validation_data):
            fit_kwargs.setdefault("validation_batch_size", batch_size)
        fit_kwargs = self._local_batches(fit_kwargs, "validation_batch_size")
        divergence = DivergenceCheck(num_classes)
        with self.scope(), _preparing_inputs():
            if checkpoint_dir is None:
                timer = EpochTimer()
                x, y = self._own_share((x, y))
                history = model.fit(x, y, batch_size=None if dataset else batch_size // self.num_processes,
                                    epochs=epochs, validation_data=validation_data,
                                    callbacks=[*callbacks, timer, divergence, stall], verbose=verbose,
                                    **fit_kwargs)
                history.epoch_seconds = timer.epoch_seconds
            else:
                from acceltrain.training import resumable

                history = resumable.fit(
                    model, x, y, batch_size=batch_size, epochs=epochs, checkpoints=checkpoints, every=every,
                    resume=resume, seed=self._seed, num_replicas=self.num_replicas, verbose=verbose,
                    validation_data=validation_data, callbacks=[*callbacks, divergence, stall],
                    process_share=self._own_share, num_processes=self.num_processes, **fit_kwargs)
        divergence.raise_if_diverged()
        return history

    def evaluate(self, model, x, y=None, *, batch_size: int | None = None, verbose="auto",
                 **evaluate_kwargs) -> dict:
        """Keras's `model.evaluate` over every sample (none dropped), as a dict of metric values."""
        _check_compiled(model)
        if data.is_dataset(x):
            x, batch_size = self._prepare_eval_dataset(x, batch_size, _num_classes(model), "x")
            if isinstance(x, tuple):
                x, y = x
        else:
            data.check_batch_size(batch_size, self.num_replicas)
            if data.is_arrays(x):
                self._check_multi_process_inputs(x)
                x, y = self._own_share(self._prepare_eval_arrays((x, y), batch_size, _num_classes(model), "x"))
        # Keras takes a dataset's own batch; with arrays, each process batches its share.
        batch_size = None if data.is_dataset(x) else batch_size // self.num_processes
        from acceltrain.training.callbacks import StallWatch

        callbacks = [*(evaluate_kwargs.pop("callbacks", None) or ()), StallWatch(self.watchdog)]
        with self.scope(), _preparing_inputs():
            return model.evaluate(x, y, batch_size=batch_size, verbose=verbose, return_dict=True,
                                  callbacks=callbacks, **evaluate_kwargs)

    def _watchdog_for(self, stall_timeout) -> "watchdog.Watchdog":
        if stall_timeout is None:
            return self.watchdog
        return watchdog.Watchdog(watchdog.check_timeout(stall_timeout), self.process_index)

    # --- Many processes: each feeds its own share, Keras joins them into global batches ----------

    def _check_multi_process_inputs(self, *inputs) -> None:
        if self.num_processes > 1 and any(data.is_dataset(i) for i in inputs):
            raise UsageError(
                f"Received a tf.data.Dataset in a job of {self.num_processes} processes. Pass numpy arrays "
                "(each process then feeds its own share of them), or shard the dataset per process yourself "
                "and call keras's model.fit directly."
            )

    def _own_share(self, arrays):
        """This process's share of each array in a tuple (the whole tuple when there is one process)."""
        if self.num_processes == 1 or not isinstance(arrays, tuple):
            return arrays
        return tuple(data.process_share(a, self.process_index, self.num_processes) for a in arrays)

    def _local_batches(self, kwargs: dict, *names) -> dict:
        """Keras batches each process's share: a global batch B is B / num_processes from each."""
        return {**kwargs, **{name: kwargs[name] // self.num_processes for name in names if kwargs.get(name)}}

    def _prepare_training_arrays(self, x, y, batch_size, num_classes):
        data.check_arrays(x, y)
        data.check_class_labels(y, num_classes)
        x, y, dropped = data.trim_to_replicas(data.as_float32(x), data.as_float32(y) if y is not None else None,
                                              batch_size, self.num_replicas)
        if dropped:
            log.info(f"left out the last {dropped} training samples so the final batch divides over "
                     f"{self.num_replicas} replicas")
        return x, y

    def _prepare_training_dataset(self, dataset, batch_size):
        """Check the dataset's batch; make every batch full where shapes must be static or split evenly."""
        batch_size = data.check_dataset(dataset, batch_size, self.num_replicas)
        steps_per_epoch = data.num_batches(dataset)
        if self.num_replicas > 1 or hardware.kind(self.platform).STATIC_SHAPES:
            dataset, changed = data.drop_remainder(dataset, batch_size)
            if changed:
                log.info(f"training batches all full ({batch_size}): at most {batch_size - 1} samples at the end "
                         f"of each pass are left out, so every batch divides over {self.num_replicas} replicas"
                         f"{' and has the static shape XLA compiles for' if self.platform == 'tpu' else ''}")
        return dataset, batch_size, steps_per_epoch

    def _prepare_eval_dataset(self, dataset, batch_size, num_classes, name):
        """Evaluation reads every sample. Returns (the dataset, or (x, y) arrays), and its batch."""
        batch_size = data.check_dataset(dataset, batch_size, self.num_replicas, name=name)
        if data.has_static_batch(dataset):
            log.info(f"{name} has full batches only (drop_remainder=True?): samples it drops at its end are "
                     "not evaluated. Batch evaluation data without drop_remainder to count every sample.")
        if self.num_replicas == 1 or self._framework.SPLITS_UNEVEN_BATCHES:
            return dataset, batch_size
        # This backend cannot split the last, partial batch over the replicas: evaluate from memory,
        # where every sample is counted equally (see _prepare_eval_arrays).
        x, y = data.dataset_to_arrays(dataset, name=name)
        log.info(f"{name}: read into memory ({data.num_samples(x)} samples) so its last, partial batch "
                 f"divides over {self.num_replicas} replicas")
        return self._prepare_eval_arrays((x, y), batch_size, num_classes, name), batch_size

    def _prepare_eval_arrays(self, pair, batch_size, num_classes, name):
        if not (isinstance(pair, tuple) and len(pair) == 2 and data.is_arrays(pair[0])):
            return pair  # a dataset, or sample weights: Keras takes it as it is
        x, y = pair
        data.check_arrays(x, y, name=name)
        data.check_class_labels(y, num_classes, name=f"labels of {name}")
        x, y = data.as_float32(x), (data.as_float32(y) if y is not None else None)
        x, y, repeats = data.repeat_to_replicas(x, y, batch_size, self.num_replicas)
        if repeats > 1:
            log.info(f"{name}: each sample counted {repeats} times so every batch divides over "
                     f"{self.num_replicas} replicas (metrics unchanged, none dropped)")
        return x, y


def _check_compiled(model) -> None:
    if not getattr(model, "compiled", False):
        raise UsageError(
            f"Received a model that is not compiled: {getattr(model, 'name', model)!r}. Call "
            "model.compile(optimizer=..., loss=...) inside runtime.scope() before fit or evaluate."
        )


def _num_classes(model) -> int | None:
    """The number of classes of a single-output model trained with a cross-entropy over classes."""
    loss = getattr(model, "loss", None)
    loss_name = getattr(loss, "name", None) or getattr(loss, "__name__", None) or str(loss)
    if "categorical_crossentropy" not in loss_name:
        return None
    try:
        shape = model.output_shape
    except (AttributeError, ValueError, RuntimeError):
        return None
    if isinstance(shape, tuple) and shape and isinstance(shape[-1], int) and shape[-1] > 1:
        return shape[-1]
    return None


def _set_steps_per_execution(model, steps: int) -> None:
    """Change steps per call on a compiled model: its compiled functions are rebuilt on the next fit."""
    if model.steps_per_execution != steps:
        model.steps_per_execution = steps
        model.train_function = model.test_function = model.predict_function = None


def _version() -> str:
    from acceltrain import __version__

    return __version__
