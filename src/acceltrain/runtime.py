"""connect() and Runtime: the one public entry.

    runtime = acceltrain.connect()            # find the hardware, choose the distribution
    with runtime.scope():                     # build and compile the model: variables placed for it
        model = build_model()
    runtime.fit(model, x, y, batch_size=1024, epochs=10)

This module never imports a framework: it calls the backend module connect() chose.
"""

import contextlib
import dataclasses
import os
import weakref
import platform as _platform

from acceltrain import arguments, backends, decisions, hardware, inputs, ledger, log, opened, watchdog
from acceltrain import cluster as clusters
from acceltrain.cluster import Cluster
from acceltrain.errors import AcceltrainError, UsageError, option, positive_int, shown
from acceltrain.layout import placement
from acceltrain.options import Checkpoints
from acceltrain.version import __version__

def connect(backend: str | None = None, *, simulate_devices: int | None = None, distribution: str = "auto",
            platform: str = "auto", verbose: bool = True, cluster: Cluster | None = None,
            stall_timeout: float | None = None, device_memory: str | int | None = None,
            mesh_shape: tuple[int, int] | None = None, precision: str = "auto") -> "Runtime":
    """Find the hardware, start the backend on it, and choose the distribution.

    Called again in the same process and job with the same arguments while the runtime it opened is open (a notebook
    cell run again), it gives that runtime back and says so; with other arguments it opens a second one and names
    the arguments that differ. close() closes a runtime however many calls gave it; a `with` block's end, only where
    no other call holds it.

    Args:
        backend: "jax" or "tensorflow". Default: the backend Keras already loaded, else KERAS_BACKEND,
            else the one set in Keras's ~/.keras/keras.json, else jax if installed, else tensorflow. Keras
            chooses once, as it is first imported: importing acceltrain before keras makes that choice this
            default where nobody set one (`import acceltrain, keras` trains on jax).
        simulate_devices: split the CPU into this many devices, to try multi-device code with no
            accelerator. Must be set before JAX starts.
        distribution: "auto" (data parallel when the model fits one device, else fsdp: see Runtime.build),
            "data", "fsdp" (each weight cut along one axis over all devices, the batch too), "model" (a
            batch x model mesh, weights cut over the model axis), "none"; or a keras.distribution.LayoutMap
            (its mesh and keys; weights it does not name follow the fsdp rule). fsdp/model: JAX only.
        platform: "auto" (TPU, else GPU, else CPU), or "tpu", "gpu", "cpu": an error if there is none.
        verbose: print the one-line banner with the decisions and their reasons (to stderr).
        cluster: an `acceltrain.Cluster`: join a multi-process job (its coordinator, num_processes and
            process_id), or connect to a TPU by name (its tpu, TensorFlow backend). Default: the job the
            environment describes (acceltrain launch, Cloud TPU, SLURM, Open MPI), else one process.
        stall_timeout: seconds without a finished step inside fit/evaluate/predict after which the process
            prints its stacks and ends (see watchdog.py); default watchdog.DEFAULT_STALL_TIMEOUT, 0: off. The
            upper bound: after a phase's first steps, a shorter one follows the measured step time
            (watchdog.stall_bound: max(60 s, 20 × the slowest step, or dispatch of several
            steps), counting only time the process sits idle).
        device_memory: bytes of one device ("16GiB", "128MiB"), overriding what the hardware reports; what
            'auto' weighs a model against (a CPU reports none, so simulated devices need it to shard).
        mesh_shape: (batch, model) devices of distribution="model"; default: the model axis that fits.
        precision: Keras's dtype policy for the models built in scope(): "auto" (your own global policy if you
            set one, else "mixed_bfloat16" on TPUs and on GPUs of compute capability 8.0+, else "float32"),
            "float32" or "mixed_bfloat16". The banner says when it is not Keras's float32.

    A fit's in-memory arrays are kept on the devices where they fit: Runtime.keep_data_on_devices("off") turns that
    off (--device-data off).
    """
    # 1. Check the arguments, before any framework starts.
    joined = arguments.cluster_of(cluster)
    tpu = joined.tpu
    arguments.check_simulate_devices(simulate_devices)
    stall_timeout = watchdog.check_timeout(stall_timeout)
    sharding_request = placement.check_request(distribution, device_memory, mesh_shape)  # sharding's own inputs
    decisions.check_distribution(sharding_request.kind)
    platform = arguments.check_platform(platform, tpu, simulate_devices)
    arguments.check_precision(precision)

    # 2. Choose the backend and start it.
    set_before_keras = backends.set_before_keras() is not None  # importing acceltrain set KERAS_BACKEND, not the user
    users_env = None if set_before_keras or backends.set_by_load() else os.environ.get("KERAS_BACKEND")  # not ours
    backend_name, backend_reason = decisions.choose_backend(
        backend, backends.loaded_keras_backend(), users_env,
        backends.jax_importable(), backends.keras_config_backend(), set_before_keras,
    )
    decisions.check_distribution(sharding_request.kind, backend_name)  # fsdp/model: JAX only
    processes, processes_reason = clusters.detect(backend_name, joined.coordinator, joined.num_processes,
                                                  joined.process_id, started=backends.started_processes())
    # A runtime connect() opened with these options in this job and still open (a notebook cell run again): that one.
    options = {"backend": backend_name, "simulate_devices": simulate_devices, "distribution": distribution,
               "platform": platform, "cluster": joined, "stall_timeout": stall_timeout,
               "device_memory": device_memory, "mesh_shape": mesh_shape, "precision": precision,
               "job": f"{processes_reason} ({processes})",
               # ACCELTRAIN_LEDGER=0 set since: a runtime recording its ledger is not the one asked for
               "ledger": os.environ.get("ACCELTRAIN_LEDGER", "1") != "0"}
    again, others = opened.opened_with(options, _open_runtimes)
    if again is not None:
        opened.HOLDS[again] += 1
        if verbose:
            log.info(f"{again} (given back: connect() opened this runtime earlier in this process with the same "
                     "options; its devices, distribution, seed and the models built in its scope are as they were. "
                     "runtime.close(), then connect(), for a new one)")
        return again
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
    sharding_request = placement.check_against_hardware(sharding_request, kind, framework, found)
    distribution = placement.make_distribution(sharding_request, framework, found)
    distribution_reason += placement.born_note(sharding_request, framework, found)
    if found.num_processes > 1:
        framework.shard_inputs_per_process(distribution)  # each process feeds its own share

    # 5. Choose the precision: bfloat16 compute where the hardware runs it natively.
    from acceltrain import precision as policies

    keras_policy = policies.current_policy()
    compute, precision_reason = decisions.choose_precision(platform, framework.compute_capability(platform),
                                                           keras_policy, precision)

    # 6. The runtime, whole: it intercepts Keras's fit/evaluate/predict while it is open.
    platform_reason = "simulated with simulate_devices" if found.simulated else platform_reason
    said = {"backend": (backend_name, backend_reason), "platform": (platform, platform_reason),
            "distribution": (framework.distribution_name(distribution), distribution_reason),
            "processes": (found.num_processes, processes_reason), "precision": (compute, precision_reason)}
    runtime = Runtime(framework, found, distribution, sharding_request=sharding_request, precision=compute,
                      precision_asked=precision != "auto",
                      watchdog=watchdog.Watchdog(stall_timeout, found.process_index, heartbeats=_heartbeats(found)),
                      decisions={name: f"{choice} ({reason})" for name, (choice, reason) in said.items()})
    opened.OPTIONS[runtime], opened.HOLDS[runtime] = options, 1
    if verbose:
        origin = f"; processes: {processes_reason}" if processes.source != "single" else ""
        changed = policies.override_note(runtime.precision, precision_reason, keras_policy) if precision == "auto" else None
        # The banner also says what models built in scope compute in, and in how many processes (one too).
        told = f"; dtype policy {runtime.precision}; {runtime.num_processes} process{'es' * (runtime.num_processes > 1)}"
        beside = f"; {opened.beside(others)}" if others else ""
        log.info(f"{runtime} (backend: {backend_reason}; {distribution_reason}{origin}){told}"
                 f"{'; ' + changed if changed else ''}{beside}")
    return runtime


@dataclasses.dataclass(frozen=True)
class Settings:
    """connect()'s keywords as one value: what `acceltrain run` and `launch` read from their flags and pass on."""

    backend: str | None = None
    simulate_devices: int | None = None
    distribution: str = "auto"
    platform: str = "auto"
    cluster: Cluster | None = None
    stall_timeout: float | None = None
    device_memory: str | None = None
    precision: str = "auto"
    device_data: str = "auto"

    @classmethod
    def read(cls, given, **job) -> "Settings":
        """connect()'s keywords read by name from `given` (a verb's parsed flags, a TrainConfig): the one place
        they are spelled out, where each verb once spelled them; a name `given` lacks, or holds as None, keeps its
        default. `job`: the Cluster's coordinator, num_processes and process_id (`acceltrain run`'s flags)."""
        names = {field.name for field in dataclasses.fields(cls)} - {"cluster"}
        found = {name: getattr(given, name) for name in names if getattr(given, name, None) is not None}
        return cls(**found, cluster=Cluster(tpu=getattr(given, "tpu", None), **job))

    def connect(self, verbose: bool = True) -> "Runtime":
        return connect(self.backend, simulate_devices=self.simulate_devices, distribution=self.distribution,
                       platform=self.platform, verbose=verbose, cluster=self.cluster,
                       stall_timeout=self.stall_timeout, device_memory=self.device_memory,
                       precision=self.precision).keep_data_on_devices(self.device_data)

    @property
    def tpu(self) -> str | None:
        return self.cluster.tpu if self.cluster is not None else None

    def check(self, backend: str | None = None, processes: int = 1) -> "Settings":
        """These settings checked before anything starts or is written, named as the user set them (the flags under
        the CLI: errors.option): what `launch` checks before its processes start and `launch --emit` before it writes
        an artifact, so that an engine is never handed a command `acceltrain run` refuses. `backend`: the job's,
        where known (launch resolves it); `processes`: the job's count. Returns them with stall_timeout in seconds."""
        backend = backend if backend is not None else self.backend
        if backend is not None and backend not in decisions.BACKENDS:
            raise UsageError(f"Received {shown(option('backend'), backend)}. Valid: {', '.join(decisions.BACKENDS)}.")
        if backend == "tensorflow" and processes > 1:
            raise UsageError(f"Received {shown(option('backend'), backend)} for a job of {processes} processes. A job "
                             "of several processes trains on JAX only: Keras 3's fit fails under TensorFlow's "
                             f"MultiWorkerMirroredStrategy (keras-team/keras#20585). Pass {shown(option('backend'), 'jax')}.")
        if self.simulate_devices is not None:
            positive_int(self.simulate_devices, option("simulate_devices"), " (e.g. 8 to try an 8-device run on a CPU)")
        decisions.check_distribution(self.distribution, backend)
        stall_timeout = watchdog.check_timeout(self.stall_timeout, option("stall_timeout"))
        arguments.check_device_data(self.device_data, option("device_data"))
        if self.device_memory is not None:
            from acceltrain import sharding

            sharding.parse_bytes(self.device_memory, option("device_memory"))
        return dataclasses.replace(self, stall_timeout=stall_timeout)

    def as_args(self) -> list[str]:
        """These settings as `acceltrain run`'s flags, the defaults left out: what `launch` passes to each of its
        processes and an emitted job runs (the job itself, coordinator and indices, each engine tells its processes)."""
        given = (("--backend", self.backend, None), ("--simulate-devices", self.simulate_devices, None),
                 ("--distribution", self.distribution, "auto"), ("--platform", self.platform, "auto"),
                 ("--tpu", self.tpu, None), ("--precision", self.precision, "auto"),
                 ("--stall-timeout", self.stall_timeout, None), ("--device-memory", self.device_memory, None),
                 ("--device-data", self.device_data, "auto"))
        return [part for flag, value, default in given if value is not None and value != default
                for part in (flag, f"{value:g}" if isinstance(value, float) else str(value))]


def _heartbeats(found):
    """Each process's beats shared through the job's coordinator (a job of several processes on JAX), for the
    stall watchdog to name the process that stopped (watchdog.py)."""
    from acceltrain import backends

    return backends.JobHeartbeats(found.num_processes) if found.num_processes > 1 else None


class Runtime:
    """The hardware connect() found and how it distributes training over it."""

    def __init__(self, framework, found: hardware.Hardware, distribution, *, sharding_request: placement.Request,
                 precision: str, watchdog: watchdog.Watchdog, decisions: dict[str, str],
                 precision_asked: bool = False):
        from acceltrain.backends import interception, keras_internals
        from acceltrain import assembly
        from acceltrain.training import ledger_watch

        self._framework = framework
        self.hardware = found
        self.distribution = distribution  # a keras.distribution.Distribution (JAX), a tf.distribute.Strategy, or None
        self.sharding_request = sharding_request  # what connect() was asked about sharding; Runtime.build weighs it
        self.precision = precision  # Keras's dtype policy for models built under scope()
        self.precision_asked = precision_asked  # the user's own (precision=, --precision): no lever changes it
        self.device_data = "auto"  # "auto" or "off": a fit's in-memory arrays kept on the devices (keep_data_on_devices)
        self.watchdog = watchdog  # the stall watchdog of fit/evaluate/predict
        self.decisions = decisions  # each decision with its reason, as the banner and metrics.json say them
        # Where the time goes (acceltrain/ledger.py): every call of this runtime records into it while a window is
        # open; Runtime.fit opens one (history.ledger), and so do the commands, over the whole run.
        self.timeline = ledger.Timeline.from_environment(framework.watch_compiles)
        self.seeded = 0  # seed()'s: the data order of a checkpointed fit's epochs
        # Slot "ledger" of every call this runtime runs (a script's under `run`, its own): the time ledger's watch,
        # reading the distribution as each call arrives (training/ledger_watch.py); None where the ledger is off.
        self.ledger_layer = ledger_watch.layer(self) if self.timeline.enabled else None
        # Slot "autopilot" for a library's plain model.fit on a model built in this runtime's scope (_plain_first_fits)
        self.plain_first_fits = assembly.FirstFits(self)
        # Open: Keras's fit/evaluate/predict pass the layers (interception.LAYERS) until the last runtime closes.
        # While one is open, too: int()/float() of a mirrored Keras variable read as of a plain one (TensorFlow's)
        self._stop_intercepting = interception.intercept(keras_internals.trainer_class(framework.NAME),
                                                         framework.follow_placement, autopilot=_plain_first_fits,
                                                         also=(keras_internals.numbers_read_from_mirrored,))
        _open_runtimes.add(self)

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
    def split(self) -> inputs.Split:
        """What the input path reads of this runtime (inputs.Split): its replicas under the distribution in force, the
        job's processes, the platform, and the backend's two facts about batches."""
        return inputs.Split(self.num_replicas, self.num_processes, self.process_index, self.platform,
                            self.backend_module.SPLITS_UNEVEN_BATCHES, self.backend_module.join_shares,
                            static_shapes=hardware.kind(self.platform).STATIC_SHAPES)

    @property
    def distribution_name(self) -> str:
        return self._framework.distribution_name(self.distribution)

    def own_distribution(self, model=None):
        """The distribution a call of `model` made now runs under that no open runtime made: the caller's own, which
        its calls keep, as they do plainly (on JAX a script's keras.distribution.set_distribution, or its scope; on
        TensorFlow the strategy `model` was made under, a script's own `with strategy.scope():`); None where there is
        none."""
        return self._framework.own_distribution(model)

    def as_called(self, model=None):
        """This runtime as a call of `model` made now sees it: under the caller's own distribution (own_distribution),
        that distribution, its name and its replicas (its mesh's batch axis, a strategy's replicas); otherwise the
        runtime itself."""
        own = self.own_distribution(model)
        return self if own is None else _UnderOwn(self, own)

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
            "versions": {"python": _platform.python_version(), "acceltrain": __version__, **self._framework.versions()},
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
        self.seeded = arguments.check_seed(seed)
        self._framework.set_seed(seed)

    @contextlib.contextmanager
    def scope(self, *, keras_only: bool = False):
        """Build (and compile) models inside: their variables are placed by the distribution.

        Whatever global state this sets is restored on exit, also when the body raises. `keras_only`: only Keras's
        own objects (its models, layers, optimizers and metrics, and their variables) are made under the
        distribution; the rest of the code inside runs as without it (on TensorFlow: a tf.Variable of its own, a
        tf.data pipeline, tf.distribute.get_strategy() outside the strategy's scope), as `acceltrain run` runs a
        script. On JAX the distribution places Keras's objects alone either way.
        """
        from acceltrain import precision

        with self._framework.scope(self.distribution, keras_only), precision.scope(self.precision):
            yield

    def build(self, build_model, *, layout_map=None, job: dict | None = None, batch_size: int | None = None,
              autopilot: bool = True):
        """`build_model()` run with its weights born placed for this hardware: the model it returns.

        Under 'auto' with a device memory known (device_memory=, or the hardware's), the training state
        (weights, gradients, optimizer slots) is first measured without allocating it, and fsdp is
        chosen when it does not fit one device with headroom; a model that fits nowhere stops here with
        the numbers. `layout_map`: a function of a DeviceMesh giving a keras.distribution.LayoutMap
        (keras_hub's `Backbone.get_layout_map`), used under 'model'. Then it reports what share of the
        weight bytes is sharded and warns about big weights left whole. `job`: how `acceltrain plan` names this
        job ({"recipe": NAME} or {"model": "FILE.py:FUNCTION"}, and "batch_size"), for the line a model that does
        not fit ends with; default: build_model's own FILE.py:NAME where it is a function at a module's top.

        `batch_size`: the global batch fit will take. With it (and 'auto' with a device memory), the training step
        is compiled here from shapes for each sharding, and where none fits, with `autopilot`, for bfloat16
        compute, rematerialisation of the repeated layers and gradient accumulation in turn (what `acceltrain plan`
        recommends, from the same code); the model is built under the first setting that fits, and each lever is
        said with its figure.
        """
        from acceltrain.layout import autopilot as autopilots

        if not callable(build_model):
            raise UsageError(f"Received build_model={build_model!r}. Expected a function that builds and returns a "
                             "keras.Model, e.g. runtime.build(make_model), not runtime.build(make_model()).")
        found = None
        if batch_size is not None and self.sharding_request.kind == "auto" and self.sharding_request.device_memory \
                and self.sharding_request.layout_map is None and self._framework.SHARDS:
            found = autopilots.for_build(self, build_model, positive_int(batch_size, "batch_size"), enabled=autopilot,
                                         job=job)
        if found is not None:
            setting, remat = found
            if self.num_devices > 1:  # the chosen layout for every variable, none born past a budget
                model_axis = self.sharding_request.mesh_shape[1] if self.sharding_request.mesh_shape else None
                self._use_distribution(setting.distribution, self._framework.make_distribution(
                    setting.distribution, self.hardware.devices, model_axis=model_axis,
                    layout_map=layout_map if setting.distribution == "model" else None),
                    f"the training step compiled here needs {setting.describe()}")
        else:
            setting, remat = None, ()
            choice = placement.choose_for_model(self, build_model, layout_map, job)
            if choice is not None:
                self._use_distribution(*choice)
        from acceltrain.backends import keras_internals

        # the weights' initial values from one program (on JAX), not one compiled op per initializer and shape (13 for
        # the seed's MLP): the same arrays, from the same seeds, as `acceltrain train`'s build
        with self.scope(), autopilots.building(setting, remat) if setting else contextlib.nullcontext(), \
                keras_internals.variables_initialized_at_once():
            model = build_model()
        arguments.check_model(model, f"build_model, which returned {model!r:.60}")
        if setting is not None:
            autopilots.built(model, setting)
        # What was sharded, told here and not left to the first fit's report (assembly.Inputs, the other of its two
        # callers): Runtime.build is no call of fit/evaluate/predict, so no layer sees it, and here a LayoutMap key that
        # matches no weight fails before anything trains, and a model only evaluated or predicted is told too.
        placement.report(self, model)
        return model

    def _use_distribution(self, kind: str, distribution, reason: str) -> None:
        """Runtime.build's choice, made once the model is measured and before it is built, in place of the
        distribution connect() made: the one change a runtime takes after connect()."""
        self._framework.release(self.distribution)
        self.distribution = distribution
        self.sharding_request = dataclasses.replace(self.sharding_request, chosen=kind)
        self.decisions = {**self.decisions, "distribution": f"{self.distribution_name} {kind} ({reason})"}
        if self.num_processes > 1:
            self._framework.shard_inputs_per_process(distribution)

    def first_fit(self, model, x, y=None, *, batch_size: int | None = None, autopilot: bool = True):
        """What Runtime.fit does before a model's first step, for a fit it does not run itself (`acceltrain run`'s
        script calls): with a device memory known, the model weighed by its training step compiled here, laid out
        (the runtime takes the sharding chosen) and, with `autopilot`, the levers applied (layout/autopilot.py).
        Returns the decision: its `batch_size` is the batch of each step (the global batch / its `accumulation`).
        Its messages name the CLI's flags while a CLI verb runs (errors.under_cli). Once per model; later calls pass."""
        from acceltrain.layout import autopilot as autopilots

        with self.scope():  # what is built first is built under the distribution in force, as fit would build it
            decision = autopilots.first_fit(self, model, x, y, batch_size, enabled=autopilot)
        if decision.distribution is not None:
            self._use_distribution(decision.kind, decision.distribution, decision.reason)
        return decision

    def fit(self, model, x, y=None, *, batch_size: int | None = None, epochs: int = 1, validation_data=None,
            callbacks=(), verbose="auto", checkpoints: Checkpoints | None = None, checkpoint_dir=None,
            resume: bool = False, checkpoint_every: str = "auto", keep_checkpoints: int = 2,
            stall_timeout: float | None = None, autopilot: bool = True, verify: int | None = None, **fit_kwargs):
        """Keras's `model.fit` with this hardware's settings. Returns Keras's History, whose
        `epoch_seconds` holds the wall time of each epoch and `ledger` where the fit's time went: an
        `acceltrain.ledger.Ledger`, whose `parts` (seconds of start-up, compilation, input wait, device steps,
        host syncs, evaluation, checkpoint, preemption and the rest) sum to its `wall_seconds`; `line()` says it in
        one line, `as_json()` as metrics.json carries it.

        `batch_size` is the global batch, cut into equal slices over the replicas (none given: Keras's default, 32,
        as model.fit takes it). numpy inputs are
        checked (lengths, NaN/inf, class labels) and float64 is cast to float32 once. A batched
        tf.data.Dataset brings its own batch, checked the same way; so do a keras.utils.PyDataset (its first batch)
        and a Grain DataLoader (its grain.Batch). In a job of several processes each reads only its share
        (inputs/streams.py). Raises TrainingDiverged if the loss becomes NaN or sticks at chance level.

        With `checkpoints` (an `acceltrain.Checkpoints(dir, every=..., keep=..., resume=...)`, or the same as
        `checkpoint_dir`, `checkpoint_every`, `keep_checkpoints` and `resume`), training keeps checkpoints in its
        folder (`checkpoint_every`: "auto", every epoch unless
        the first checkpoint's write takes over 2 % of an epoch, then every few epochs, at most 5 minutes of
        training apart, and within epochs longer than that (decisions.choose_checkpoint_epochs and
        choose_checkpoint_steps); or "N epochs" or "N steps"; the newest `keep_checkpoints` kept), and `resume=True` continues from the newest good one exactly: the data order of each epoch depends only on (seed, epoch)
        (arrays, a PyDataset's batches), or is restored from where the iterator stood (a tf.data dataset, a Grain
        DataLoader: inputs/tf_data.py, inputs/grain_loaders.py). SIGTERM and
        SIGINT then write a checkpoint and raise `resumable.Interrupted`.

        `stall_timeout` replaces connect()'s for this fit (seconds, the upper bound; 0 turns the stall watchdog
        off).

        Before a model's first step, with a device memory known (connect's device_memory=, or the hardware's), its
        training step is compiled here for each layout in turn and the model laid out in the first that fits
        (data, fsdp, a batch x model mesh); where none does, `autopilot` (on by default) tries a smaller batch per
        step with the optimizer's gradient accumulation, keeping `batch_size` as the samples of each weight update.
        Each change is one line; a model that fits no way stops with the figures (see Runtime.first_fit).

        `verify=N`: before training, N steps on this layout and on one device alone from the same weights and
        batches; the differences are printed, and over the tolerance training does not start
        (layout/verify.py raises VerificationFailed).
        """
        from acceltrain.backends import interception, keras_internals
        from acceltrain import assembly
        from acceltrain.layout import verify as verification

        self._check_call(model, x, compiled=True)
        arguments.check_fit_arguments(epochs, fit_kwargs.get("validation_split") or 0.0)
        verify = verification.check_steps(verify)
        checkpoints = arguments.checkpoints_of(checkpoints, checkpoint_dir, resume, checkpoint_every, keep_checkpoints)
        plan = assembly.FitPlan(checkpoints=checkpoints, watchdog=self.watchdog_for(stall_timeout),
                                steps_per_execution=fit_kwargs.pop("steps_per_execution", None))
        call = interception.Call("fit", model, (x, y), {
            "batch_size": batch_size, "epochs": epochs, "validation_data": validation_data,
            "callbacks": arguments.callbacks_of(callbacks), "verbose": verbose, **fit_kwargs},
            keras_internals.keras_own("fit"))
        window = None
        try:
            with self.timeline.window() as window:
                history = self._assemble(call, plan, autopilot=autopilot, verify=verify)
        except AcceltrainError as stopped:  # resumable.Interrupted: where the time went, the notice's save booked
            stopped.ledger = window.ledger if window is not None else None
            raise
        history.ledger = window.ledger
        return history

    def evaluate(self, model, x, y=None, *, batch_size: int | None = None, verbose="auto", return_dict: bool = True,
                 **evaluate_kwargs) -> dict | list | float:
        """Keras's `model.evaluate` over every sample (none dropped), as a dict of metric values (`return_dict=False`:
        as Keras's default returns them, a list, or the loss alone). `batch_size`: the global batch, Keras's default
        where none is given."""
        self._check_call(model, x, compiled=True)
        with self.watchdog.watching("evaluate (compiling and running the first step)"), self.scope():
            return self._assemble(self._call("evaluate", model, (x, y), batch_size=batch_size, verbose=verbose,
                                             return_dict=return_dict, **evaluate_kwargs))

    def peak_flops(self, model) -> float | None:
        """The published peak FLOP/s of all this runtime's devices in the model's compute dtype (the ledger's MFU);
        None where none is published (CPUs) or the devices are slices of one CPU."""
        if self.hardware.simulated:
            return None
        peak = hardware.kind(self.platform).peak_flops_per_second(self.device_kind, model.dtype_policy.compute_dtype)
        return peak * self.num_devices if peak else None

    def _check_call(self, model, x, *, compiled: bool = False) -> None:
        arguments.check_call(model, x, compiled=compiled, replicas=self.num_replicas, over=self.distribution_name)

    def _call(self, name: str, model, args: tuple, **kwargs):
        """Runtime's evaluate or predict as a Call of the assembly, its callbacks a list (acceltrain's are put first
        by the layers that make them)."""
        from acceltrain.backends import interception, keras_internals

        kwargs["callbacks"] = arguments.callbacks_of(kwargs.get("callbacks"))
        return interception.Call(name, model, args, kwargs, keras_internals.keras_own(name))

    def _assemble(self, call, plan=None, *, autopilot: bool = True, verify: int | None = None):
        """`call` through the one assembly (interception.LAYERS) with this runtime's layers in its slots, as a
        script's calls pass them under `acceltrain run` less the script's own: the ledger's watch, the layout
        (FirstFits), the inputs prepared (Inputs), the runtime's own loop (Trained: a fit's), the placement."""
        from acceltrain.backends import interception
        from acceltrain import assembly

        plan = plan or assembly.FitPlan()
        return interception.assemble(call, ledger=self.ledger_layer,
                                     autopilot=assembly.FirstFits(self, autopilot=autopilot, verify=verify),
                                     inputs=assembly.Inputs(self, plan), trained=assembly.Trained(self, plan),
                                     placement=self._framework.follow_placement)

    def watchdog_for(self, stall_timeout) -> "watchdog.Watchdog":
        """connect()'s watchdog, or one with `stall_timeout` in its place."""
        if stall_timeout is None:
            return self.watchdog
        return watchdog.Watchdog(watchdog.check_timeout(stall_timeout), self.process_index,
                                 heartbeats=self.watchdog.heartbeats)

    def predict(self, model, x, *, batch_size: int | None = None, verbose="auto", **predict_kwargs):
        """Keras's `model.predict`: the outputs of exactly the samples of `x`, in their order, whatever
        the number of replicas (the last batch padded, then cut back) and of processes (outputs joined)."""
        self._check_call(model, x)
        with self.watchdog.watching("predict (compiling and running the first step)"), self.scope():
            return self._assemble(self._call("predict", model, (x,), batch_size=batch_size, verbose=verbose,
                                             **predict_kwargs))

    # --- Closing --------------------------------------------------------------------------------

    def keep_data_on_devices(self, setting: str = "auto") -> "Runtime":
        """Whether the fits after this keep their in-memory arrays on the devices (JAX): "auto" (where they fit a
        share of the devices' memory, each step sending only its batch's indices; said in one line with its
        numbers) or "off" (Keras's own input path: each batch sliced on the host and sent), until this runtime
        closes. The CLI's --device-data; ACCELTRAIN_DEVICE_DATA=0 turns it off too. Returns the runtime."""
        self.device_data = arguments.check_device_data(setting, "setting")
        self._framework.keep_data_on_devices(setting)
        return self

    def close(self) -> None:
        """Undo what connect() changed in Keras for this runtime: the last runtime closed gives Keras its own
        fit/evaluate/predict back. The devices and the backend stay started: JAX and TensorFlow cannot stop them.
        Closes it however many connect() calls gave it back; a later connect() opens a new one. Under `acceltrain run`,
        a script's close() of run's own runtime (its connect() with run's options gave it back) gives back that
        call's hold only: run closes it when the script ends."""
        if opened.kept_open(self):
            log.info("runtime.close(): this runtime is acceltrain run's, given back to the script's connect(); "
                     "run holds it until the script ends, and closes it then")
            return
        opened.HOLDS.pop(self, None)
        if self._stop_intercepting():  # False: closed already
            self._framework.release(self.distribution)
            if self.device_data != "auto":
                self._framework.keep_data_on_devices("auto")
            _open_runtimes.discard(self)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc_info) -> None:
        """The end of `with connect(...) as runtime:` gives back what that connect() took: the runtime closes
        unless another connect() call gave it back too and holds it still (close() closes it outright)."""
        if opened.HOLDS.get(self, 1) > 1:
            opened.HOLDS[self] -= 1
        else:
            self.close()


_open_runtimes = weakref.WeakSet()  # for a plain model.fit to find the runtime its model was built under
def _plain_first_fits(call, proceed):
    """Layer "autopilot" of the interception for a library's plain `model.fit` on a model built in an open runtime's
    scope(): that runtime's FirstFits (assembly.py), as Runtime.fit's. `acceltrain run` fills the slot with
    its own."""
    runtime = _runtime_of(call.model) if call.name == "fit" else None
    if runtime is None:
        return proceed(call)
    return runtime.plain_first_fits(call, proceed)


def _runtime_of(model):
    """The open runtime whose distribution is in force (its scope()) or lays out `model`'s variables, if any."""
    import keras

    in_force = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    for runtime in list(_open_runtimes):
        distribution = runtime.distribution
        if distribution is not None and (distribution is in_force
                                         or runtime.backend_module.SHARDS
                                         and runtime.backend_module.distribution_of(model) is distribution):
            return runtime
    return None


class _UnderOwn:
    """A runtime as a call under the caller's own distribution sees it (Runtime.as_called): that distribution, its
    name, its replicas (the size of its mesh's batch axis) and its scope; everything else the runtime's. `words`:
    the distribution and its mesh, as the lines that report a call name it."""

    def __init__(self, runtime, distribution):
        framework = runtime.backend_module
        self._runtime, self.distribution = runtime, distribution
        self.distribution_name = framework.distribution_name(distribution)
        self.num_replicas = framework.num_replicas(distribution)
        self.words = f"the script's own {self.distribution_name} ({framework.mesh_words(distribution)})"

    def scope(self, *, keras_only: bool = False):
        return self._runtime.backend_module.scope(self.distribution, keras_only)

    @property
    def split(self) -> inputs.Split:
        """The runtime's, over this distribution's replicas: every batch divided, cut and said by them."""
        return dataclasses.replace(self._runtime.split, num_replicas=self.num_replicas)

    def __getattr__(self, name):
        return getattr(self._runtime, name)
