"""Distribution on JAX: `keras.distribution` over the devices JAX sees.

Same function names as `backends/tensorflow.py`. Only this module imports jax.
"""

import contextlib
import functools
import math
import statistics
import threading
import time

import jax
import numpy as np

from acceltrain.watchdog import FLOOR_SECONDS

NAME = "jax"

# A batch must divide over the devices of the mesh: JAX cannot shard the last, partial batch of a
# dataset unevenly, so an evaluation dataset is read into memory and repeated whole instead
# (inputs._eval_dataset).
SPLITS_UNEVEN_BATCHES = False

# What this module has beyond backends.INTERFACE: the compilation cache, and the model → distribution lookup.
OWN = ("enable_compilation_cache", "distribution_of", "on_one_device", "op_by_op_in_processes",
       # sharding (fsdp, model): JAX only; placement.py checks for them by name
       "make_sharded_distribution", "sharding_parts", "is_layout_map", "indivisible_weights", "variable_layouts",
       "first_device_bytes", "device_memory", "abstract_state",
       # the first fit weighed (training/autopilot.py) and verified (training/verify.py)
       "candidate_distribution", "weighed", "layouts_of", "relayout", "verify_steps",
       "steps_on_one_device",
       # saving in a job of several processes (acceltrain run): only JAX runs one
       "split_over_processes")


# --- Start-up ---------------------------------------------------------------------------------

def prepare(simulate_devices: int | None, platform: str = "auto", tpu: str | None = None) -> None:
    """Split the CPU into `simulate_devices` devices, before JAX starts its backends.

    JAX fixes the device count when its first operation runs; asked for later with another count,
    this is an error rather than a silent single device. JAX finds a TPU VM's chips by itself, so
    `platform` needs nothing here; a TPU name is for TensorFlow's resolver.
    """
    if tpu is not None:
        from acceltrain.errors import UsageError

        raise UsageError(
            f"Received tpu={tpu!r} with the JAX backend. A TPU name is how TensorFlow reaches a remote TPU; "
            "JAX uses the TPU of the VM it runs on. Pass platform='tpu' (--platform tpu), or "
            "backend='tensorflow' to connect to a named TPU."
        )
    enable_compilation_cache()
    if simulate_devices is None:
        _skip_absent_tpu()
        return
    try:
        jax.config.update("jax_platforms", "cpu")  # simulated devices are CPU devices, even beside a GPU
        jax.config.update("jax_num_cpu_devices", simulate_devices)
    except RuntimeError:
        # JAX has started: fine only if it started with the same devices.
        started_with = len(jax.devices("cpu"))
        if jax.default_backend() != "cpu" or started_with != simulate_devices:
            from acceltrain.errors import UsageError

            raise UsageError(
                f"simulate_devices={simulate_devices} was asked for after JAX had started with "
                f"{started_with} CPU device(s) (default backend: {jax.default_backend()}). "
                "JAX fixes its devices when it first runs: call connect(simulate_devices=...) before "
                "anything uses JAX, or start Python with "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={simulate_devices}."
            ) from None


def _skip_absent_tpu() -> None:
    """libtpu installed (jax[tpu], or `acceltrain plan`'s compiler) on a machine with no TPU and no GPU:
    use the CPU without trying the TPU first.

    Left to itself, JAX opens libtpu before the CPU; here that prints libtpu's start-up errors
    (TPU_WORKER_HOSTNAMES ...) on every run and holds /tmp/libtpu_lockfile while the process lives.
    A platform list the user set (JAX_PLATFORMS, jax.config) stands, as does any machine with an
    accelerator's device files.
    """
    import importlib.util
    import os

    from acceltrain.hardware import gpu, tpu

    if os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms or importlib.util.find_spec("libtpu") is None:
        return
    if tpu.device_files() or gpu.device_files():
        return
    try:
        jax.config.update("jax_platforms", "cpu")
    except RuntimeError:
        pass  # JAX had started already (the caller used it before connect()): its platforms stand


def enable_compilation_cache() -> None:
    """Keep compiled programs on disk, so the second run of the same job skips compilation.

    Must run before JAX's first compile: JAX decides once, at its first compile, whether it caches.
    The folder is `backends.jax_compilation_cache_dir()`, unless the user set one in jax.config.
    Every program is cached, not only those over JAX's default 1 s (on a CPU most of a run's compiles
    are shorter; BENCHMARKS.md, epoch-speed, measures the cut), unless the user set their own minimum
    (JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS or jax.config), which is kept.
    ACCELTRAIN_COMPILATION_CACHE=0 turns it off.
    """
    import os

    from acceltrain.backends import jax_compilation_cache_dir

    folder = jax_compilation_cache_dir()
    if folder is None:
        return
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", folder)
    if _user_min_compile_time(os.environ, jax.config.jax_persistent_cache_min_compile_time_secs) is None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


# JAX's own default for jax_persistent_cache_min_compile_time_secs: a different value was set by someone.
JAX_DEFAULT_MIN_COMPILE_TIME_SECS = 1.0


def _user_min_compile_time(env, configured: float) -> float | None:
    """The user's own minimum compile time for caching, if they set one (env or jax.config); else None."""
    if env.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS") is not None or configured != JAX_DEFAULT_MIN_COMPILE_TIME_SECS:
        return configured
    return None


# --- What is there ----------------------------------------------------------------------------

def device_counts() -> dict[str, int]:
    """How many devices each platform has (0 where its runtime is absent or broken)."""
    counts = {}
    for platform in ("tpu", "gpu", "cpu"):
        try:
            counts[platform] = len(jax.devices(platform))
        except RuntimeError:  # "Unknown backend tpu", "no visible GPU", libtpu busy ...
            counts[platform] = 0
    return counts


def devices(platform: str) -> tuple[str, ...]:
    """All devices of the platform across processes, named as Keras names them ("cpu:0")."""
    return tuple(f"{d.platform}:{d.id}" for d in jax.devices(platform))


def device_kind(platform: str) -> str:
    return jax.devices(platform)[0].device_kind


def compute_capability(platform: str) -> str | None:
    """A GPU's CUDA compute capability ("9.0"); None for other platforms and GPUs that report none."""
    if platform != "gpu":
        return None
    return getattr(jax.devices(platform)[0], "compute_capability", None)


def process_count() -> int:
    return jax.process_count()


def process_index() -> int:
    return jax.process_index()


def set_seed(seed: int) -> None:
    """Seed Python, numpy and Keras's generators: weights, dropout and the data order of fit.

    keras.utils.set_random_seed would also import TensorFlow when it is installed, only to seed it:
    four seconds of start-up here, for a generator nothing on JAX draws from.
    """
    import random

    import numpy as np

    from acceltrain.backends import keras_internals

    keras_internals.set_keras_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def versions() -> dict[str, str]:
    import jaxlib
    import keras

    return {"keras": keras.__version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__}


# --- Distribution -----------------------------------------------------------------------------

# The distributions of the open runtimes, by the JAX mesh their variables live on, each with how many
# open runtimes use it: how a model built under scope() finds its distribution again when plain
# `model.fit` is called outside the scope. Meshes over the same devices are equal, so connect() again
# over the same devices adds nothing; Runtime.close() (release) takes its count back.
_distributions_by_mesh: dict = {}


def make_distribution(kind: str, device_names: tuple[str, ...], *, model_axis: int | None = None, layout_map=None,
                      born_within: int | None = None):
    """A Keras distribution for `kind` over the named devices; None for "none".

    "data": DataParallel; with `born_within` (bytes of training state a device may hold), one whose variables are
    born whole up to that budget and cut by the fsdp rule past it, until the first fit weighs the model (the rule:
    sharding.born_cut). "fsdp" and "model": weights cut over devices (see make_sharded_distribution);
    `model_axis` and `layout_map` are theirs.
    """
    if kind == "none":
        return None
    if kind == "data" and born_within is not None:
        distribution = _born_within_budget()(_one_axis_mesh(device_names), born_within)
    else:
        distribution = candidate_distribution(kind, device_names, model_axis=model_axis, layout_map=layout_map)
    mesh = distribution.device_mesh.backend_mesh
    _, opened = _distributions_by_mesh.get(mesh, (None, 0))
    _distributions_by_mesh[mesh] = (distribution, opened + 1)
    return distribution


def candidate_distribution(kind: str, device_names: tuple[str, ...], *, model_axis: int | None = None,
                           layout_map=None):
    """The distribution make_distribution makes for `kind` ("data", "fsdp", "model"), not yet any runtime's: what
    the autopilot weighs a model under before it chooses (training/autopilot.py)."""
    import keras

    if kind == "data":
        return keras.distribution.DataParallel(devices=list(device_names))
    return make_sharded_distribution(kind, device_names, model_axis, layout_map)


def _one_axis_mesh(device_names):
    import keras

    return keras.distribution.DeviceMesh((len(device_names),), [BATCH_AXIS], list(device_names))


@functools.cache
def _born_within_budget():
    """The class, made on first use: Keras is imported only after connect()."""
    import keras

    from acceltrain import sharding

    class BornWithinBudget(keras.distribution.ModelParallel):
        """Data parallel (a 1-D mesh, every device a slice of each batch) for the models of a script under 'auto'
        with a device memory, whose size nobody knows until their first fit: each variable is born whole while the
        training state a device holds stays within `budget`, and cut by the fsdp rule past it (sharding.born_cut),
        so building never needs more than the budget of whole variables on a device. The first fit weighs the
        model and moves each variable to its chosen layout (relayout), then `weighed()` starts the count again."""

        acceltrain_name = "DataParallel"

        def __init__(self, mesh, budget: int):
            super().__init__(layout_map=keras.distribution.LayoutMap(mesh), batch_dim_name=BATCH_AXIS)
            self.budget = budget
            self.held = 0  # training state bytes a device holds of the variables born since the last first fit
            self.born_cut = 0  # how many of them were born cut

        def get_variable_layout(self, variable):
            shape = tuple(variable.shape)
            size = self.device_mesh.shape[0]
            cut, self.held = sharding.born_cut(shape, str(variable.dtype), variable.trainable, self.held, self.budget,
                                               size)
            self.born_cut += cut
            spec = sharding.fsdp_spec(shape, size, BATCH_AXIS) if cut else (None,) * len(shape)
            return keras.distribution.TensorLayout(spec, self.device_mesh)

    return BornWithinBudget


def weighed(distribution) -> int:
    """A model's first fit has weighed it: the variables born under `distribution` since are counted afresh.
    Returns how many had been born cut."""
    cut = getattr(distribution, "born_cut", 0)
    if hasattr(distribution, "held"):
        distribution.held = distribution.born_cut = 0
    return cut


class _AsIfNew:
    """A variable as a distribution sees it while it is created: its path, shape, dtype and trainable, and no layout
    yet (Keras's DataParallel and ModelParallel return a variable's own layout when it has one)."""

    def __init__(self, variable):
        self.path, self.name, self.shape = variable.path, variable.name, tuple(variable.shape)
        self.dtype, self.trainable, self._layout = variable.dtype, variable.trainable, None


def _layout_for(distribution, variable, references):
    """The layout `distribution` gives `variable` were it created now; an optimizer slot takes its weight's."""
    return distribution.get_variable_layout(_AsIfNew(references.get(id(variable), variable)))


def layouts_of(distribution, variables, references=None) -> list[tuple]:
    """The spec each variable would take under `distribution` (as Keras asks it when a variable is created), as
    tuples of mesh axis names; an optimizer slot takes its weight's (`references`: id(slot) -> weight)."""
    return [tuple(_layout_for(distribution, variable, references or {}).axes) for variable in variables]


def relayout(variables, distribution, references=None) -> int:
    """Move each variable to the layout `distribution` gives it (an optimizer slot: its weight's, `references`),
    one variable at a time, so a device holds at most one variable's old and new parts at once. The variable keeps
    the new layout for what is made from it later (an optimizer slot takes its weight's layout). Returns the bytes
    of the variables moved.

    An array spanning several processes moves through jit with out_shardings (device_put takes only arrays this
    process holds whole)."""
    from acceltrain.backends import keras_internals

    moved = 0
    for variable in variables:
        layout = _layout_for(distribution, variable, references or {})
        target = layout.backend_layout
        current = variable.value.sharding
        if current == target or (hasattr(current, "is_equivalent_to")
                                 and current.is_equivalent_to(target, len(variable.shape))):
            keras_internals.set_layout(variable, layout)
            continue
        array = variable.value
        value = jax.device_put(array, target) if array.is_fully_addressable else _moved(array, target)
        keras_internals.set_layout(variable, layout, value)
        moved += value.nbytes
    return moved


def verify_steps(model, batches, distribution) -> tuple[list, list, list, list]:
    """Train `model` for one step per batch of `batches` ((x, y) structures of numpy arrays) twice from its current
    state, writing nothing back: laid out as its variables are, under `distribution` (its batches cut as Keras cuts
    them), and on one device with no distribution. Returns (losses, losses on one device, trainable weights after,
    the same on one device): each step's losses as {name: value} of the logs whose name holds "loss" (a GAN's
    d_loss and g_loss), the weights as numpy arrays in model.trainable_variables's order.

    Keras's own train_step, jitted as Keras's JAX trainer jits it, on (trainable, non-trainable, optimizer, metrics)
    values: the model's variables, its optimizer's step count and its metrics stay as they were."""
    import keras

    def laid_out(batch):
        return keras.tree.map_structure(
            lambda array: None if array is None else jax.device_put(
                array, distribution.get_data_layout(array.shape).backend_layout), batch)

    with scope(distribution):
        losses, weights = _trained(model, _training_values(model), batches, laid_out)
    alone, alone_weights = steps_on_one_device(model, batches)
    return losses, alone, weights, alone_weights


def steps_on_one_device(model, batches) -> tuple[list, list]:
    """verify_steps's one-device half: (each step's losses, trainable weights after), nothing written back."""
    from acceltrain.backends import keras_internals

    device = jax.local_devices()[0]
    with keras_internals.no_distribution():
        return _trained(model, jax.device_put(_training_values(model), device), batches,
                        lambda batch: jax.device_put(batch, device))


def _training_values(model) -> tuple:
    optimizer = model.optimizer.variables if model.optimizer is not None else []  # a GAN keeps its own
    return tuple([v.value for v in variables] for variables in (
        model.trainable_variables, model.non_trainable_variables, optimizer, model.metrics_variables))


def _trained(model, state, batches, place) -> tuple[list, list]:
    import numpy as np

    step = jax.jit(model.train_step)
    losses = []
    for batch in batches:
        logs, state = step(state, place(batch))
        losses.append({name: float(value) for name, value in logs.items() if "loss" in name})
    return losses, [np.asarray(value) for value in state[0]]


def _moved(array, sharding):
    return jax.jit(_identity, out_shardings=sharding)(array)


def _identity(array):
    return array


def _steps_must_not_overlap(distribution) -> bool:
    """True for a distribution over several CPU devices (simulated, or CPUs of several processes).

    Why: with no callback that needs each step's metrics (e.g. `fit(..., verbose=2)` or
    `evaluate(..., verbose=0)` with no callbacks, or only `async_safe` ones), Keras 3.15 dispatches steps
    without waiting and fetches their metrics in a thread pool, so several steps run at once. XLA's CPU
    runtime runs each device's share of a step on a shared, small thread pool (sized by the cores, 2
    here); the all-reduce of one step then waits for devices whose threads are taken by the next step,
    and XLA aborts after 40 s ("Expected 8 threads to join the rendezvous, but only 7 of them arrived on
    time", exit 134), or, across processes (gloo), waits for ever. Measured here with a small convnet
    under plain Keras DataParallel over 4 simulated devices: stuck in the first all-reduce in 2 of 2 runs
    as Keras dispatches it (gdb: three devices' threads in the rendezvous, the fourth device's launch
    waiting for a thread), and 1 of 1 each with JAX_CPU_ENABLE_ASYNC_DISPATCH=false,
    --xla_cpu_multi_thread_eigen=false, and both; trained with one step at a time on 4 and 8 devices
    (benchmarks/stress_simulated.py counts it). Related, open upstream: jax-ml/jax#25861 (CPU hangs
    with async dispatch). Accelerators run collectives on the device: Keras's async dispatch is kept.
    """
    devices = distribution.device_mesh.devices.flatten()
    return len(devices) > 1 and all(str(name).startswith("cpu") for name in devices)


@functools.cache
def _one_step_at_a_time():
    """The callback class that makes Keras wait for each step's metrics before the next (made on first use)."""
    import keras

    class OneStepAtATime(keras.callbacks.Callback):
        """Keras dispatches batch ends to a thread pool unless a callback overrides them without being
        `async_safe`: overriding them is the whole point."""

        def on_train_batch_end(self, batch, logs=None):
            pass

        on_test_batch_end = on_predict_batch_end = on_train_batch_end

    return OneStepAtATime


def release(distribution) -> None:
    """The runtime of `distribution` is closed (or has swapped it for another): forget it."""
    if distribution is None:
        return
    mesh = distribution.device_mesh.backend_mesh
    current, opened = _distributions_by_mesh.get(mesh, (None, 0))
    if opened > 1:
        _distributions_by_mesh[mesh] = (current, opened - 1)
    else:
        _distributions_by_mesh.pop(mesh, None)


def distribution_name(distribution) -> str:
    if distribution is None:
        return "none"
    return getattr(distribution, "acceltrain_name", type(distribution).__name__)


def num_replicas(distribution) -> int:
    """How many slices each global batch is cut into: the size of the mesh's batch axis."""
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    return mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)]


@contextlib.contextmanager
def scope(distribution):
    """Models built inside have their variables placed by `distribution`; the previous one is restored."""
    if distribution is None:
        yield
        return
    with distribution.scope():  # Keras restores the previous distribution in a finally
        yield


def distribution_of(model):
    """The distribution of an open runtime that `model`'s variables are placed by, if any."""
    for variable in model.variables:
        mesh = getattr(getattr(variable.value, "sharding", None), "mesh", None)
        return _distributions_by_mesh.get(mesh, (None, 0))[0]
    return None


def follow_placement(call, proceed):
    """Layer "placement" of the interception (keras_internals.LAYERS): plain `model.fit` runs under the
    distribution the model was built in (Keras on JAX reads it from global state at fit time, not from the
    model, as TensorFlow does), one step at a time where steps must not overlap, and a step Keras would run op
    by op made safe (op_by_op_made_safe). A model built outside any acceltrain distribution runs as Keras runs it."""
    import keras

    distribution = distribution_of(call.model) if keras.distribution.distribution() is None else None
    in_force = distribution or keras.distribution.distribution()
    with scope(distribution), op_by_op_made_safe(call.model, in_force) as undistributed:
        if undistributed:
            call.undistributed.append(undistributed)
        for callback in [] if undistributed else step_callbacks(in_force):
            call = call.with_callback(callback)
        return proceed(call)


# --- The time ledger's view of JAX (acceltrain/ledger.py) ------------------------------------------

# JAX's monitoring events (jax/_src/dispatch.py, pjit.py, interpreters/pxla.py, compiler.py, JAX 0.10.2). Each
# compile event is a time span; a persistent-cache hit is inside the backend compile's span (its read).
COMPILE_SPANS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                 "/jax/core/compile/backend_compile_duration")
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_EVENTS = {"/jax/compilation_cache/compile_requests_use_cache": "cache_requests",
                "/jax/compilation_cache/cache_hits": "cache_hits"}


def watch_compiles(timeline):
    """Book each compile of this thread (the one running the training loop) into `timeline` as compilation, from
    JAX's own monitoring events, and count the programs, the persistent cache's requests and hits, and the seconds
    of backend compiles whose program was not in the cache (`compile_seconds_missed`: what a second run saves).
    Nested spans (a function traced inside another's trace) overlap, and the ledger books an instant once. Returns
    the function that stops it. Compiles of other threads (a checkpoint writer's) overlap the steps: left out."""
    thread = threading.get_ident()
    program = {"requested": False, "hit": False}  # the backend compile in progress: JAX asks the cache, then ends it

    def span(event, start, end, **_):
        if event not in COMPILE_SPANS or threading.get_ident() != thread:
            return
        timeline.add("compilation", start, end)
        if event == BACKEND_COMPILE:
            timeline.count("compiles")
            if program["requested"] and not program["hit"]:
                timeline.count("compile_seconds_missed", end - start)
            program.update(requested=False, hit=False)

    def counted(event, **_):
        if event in CACHE_EVENTS and threading.get_ident() == thread:
            timeline.count(CACHE_EVENTS[event])
            program["hit" if event.endswith("cache_hits") else "requested"] = True

    jax.monitoring.register_event_time_span_listener(span)
    jax.monitoring.register_event_listener(counted)
    off_by = _cache_off_by()
    if off_by is not None:
        timeline.note("cache_off_by", off_by)

    def stop():
        jax.monitoring.unregister_event_time_span_listener(span)
        jax.monitoring.unregister_event_listener(counted)

    return stop


def _cache_off_by() -> str | None:
    """The setting that turned JAX's persistent compilation cache off, where one did (the ledger's advice names it
    and nothing else): jax.config's switch, or ACCELTRAIN_COMPILATION_CACHE=0 (enable_compilation_cache then sets
    no folder)."""
    import os

    if not jax.config.jax_enable_compilation_cache:
        return "jax_enable_compilation_cache=False"
    if jax.config.jax_compilation_cache_dir is None and os.environ.get("ACCELTRAIN_COMPILATION_CACHE") == "0":
        return "ACCELTRAIN_COMPILATION_CACHE=0"
    return None


def step_flops(jitted_step, arguments) -> float | None:
    """FLOPs of one call of `jitted_step` (the whole step, every device's share together) with arguments shaped as
    `arguments` (arrays or their jax.ShapeDtypeStruct), from XLA's cost analysis of the lowered step: lowering a
    function already called with such arguments is a cache hit. None where the backend gives no count."""
    try:
        cost = jitted_step.lower(*arguments).cost_analysis()
    except Exception:  # noqa: BLE001  (no count is an answer: the ledger then reports none)
        return None
    flops = (cost or {}).get("flops") if isinstance(cost, dict) else None
    return float(flops) if flops and flops > 0 else None


def shapes_of(tree):
    """The jax.ShapeDtypeStruct of each array of a nest (shape, dtype, sharding): what `step_flops` lowers with,
    kept before the step's arguments are donated."""
    def shape(leaf):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        sharding = getattr(leaf, "sharding", None) if isinstance(leaf, jax.Array) else None
        weak = bool(getattr(getattr(leaf, "aval", None), "weak_type", False))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding, weak_type=weak)

    return jax.tree.map(shape, tree)


@contextlib.contextmanager
def op_by_op_made_safe(model, distribution):
    """Every fit/evaluate/predict under `distribution`, the script's (follow_placement) and Runtime's own: where
    Keras would run the model's step op by op on several CPU devices (decisions.choose_op_by_op_step), compile it
    when JAX can, else run the call on one device (yields why), else (several processes: `launch`'s FitGuard runs
    a script's such calls over arrays on one device before this, op_by_op_in_processes) refuse; said in one line.
    Yields None where the call stays distributed."""
    if distribution is None or not _steps_must_not_overlap(distribution):
        yield None
        return
    import keras

    from acceltrain.backends import keras_internals
    from acceltrain.errors import UsageError

    not_jitted = keras_internals.layers_not_jitted(model)
    treatment, reason = _op_by_op_step(model, distribution, not_jitted, jax.process_count())
    if treatment == "refuse":
        raise UsageError(f"{reason}. Run this script in one process (acceltrain run), where such a call runs on one "
                         "device, or keep the layer out of the model (in the tf.data pipeline).")
    if treatment == "compile":
        for layer in not_jitted:
            if type(layer) is keras.layers.RandomCrop:
                keras_internals.jittable_random_crop(layer)
            layer.supports_jit = True
        model.jit_compile = True
        keras_internals.forget_compiled_functions(model)
        _tell_once(f"compiling the model's step (jit_compile=True): {reason}. To keep Keras's op-by-op step, run "
                   "on one device")
    if treatment != "one device":
        yield None
        return
    _tell_once(f"running on one device, on the whole global batch: {reason}")
    with on_one_device(model, distribution):
        yield reason


def _op_by_op_step(model, distribution, not_jitted, processes: int) -> tuple[str, str]:
    """decisions.choose_op_by_op_step for `model` under `distribution` (over several CPU devices)."""
    from acceltrain import decisions

    return decisions.choose_op_by_op_step(
        distribution.device_mesh.devices.size, processes, tuple(_keras_class_name(layer) for layer in not_jitted),
        bool(model.jit_compile), bool(model.run_eagerly))


def op_by_op_in_processes(model) -> str | None:
    """In a job of several processes over CPU devices: why a call of `model` must run on one device (Keras would run
    its step op by op, and JAX cannot compile it), else None. `acceltrain launch`'s FitGuard asks before it splits
    the inputs between the processes, so that each process runs the same call on the same, whole inputs (placement
    could only refuse it: op_by_op_made_safe). Decided as in one process (decisions.choose_op_by_op_step)."""
    import keras

    from acceltrain.backends import keras_internals

    distribution = distribution_of(model) or keras.distribution.distribution()
    if jax.process_count() <= 1 or distribution is None or not _steps_must_not_overlap(distribution):
        return None
    treatment, reason = _op_by_op_step(model, distribution, keras_internals.layers_not_jitted(model), 1)
    return reason if treatment == "one device" else None


@contextlib.contextmanager
def on_one_device(model, distribution=None):
    """Inside, `model` trains, evaluates and predicts undistributed, on this process's first device: its variables
    (and its optimizer's and metrics') moved there whole, no global distribution; on exit they are laid out by
    their distribution again. In a job of several processes each process runs the same call on its own device
    with the same, whole inputs (no collective: every process computes the same values). `distribution`: the
    model's (default: the one its variables are placed by, else the global one)."""
    import keras

    from acceltrain.backends import keras_internals

    distribution = distribution or distribution_of(model) or keras.distribution.distribution()
    if distribution is None:
        yield
        return
    split = split_over_processes(keras_internals.state_variables(model))
    if split:
        from acceltrain.errors import UsageError

        raise UsageError(f"A call that must run on one device (no batch of it divides over the replicas) met weights "
                         f"split over {jax.process_count()} processes ({distribution_name(distribution)}; e.g. "
                         f"{split[0]}): no process holds them whole. Pass --distribution data, or a batch that "
                         "divides over the replicas.")
    previous = keras.distribution.distribution()
    with keras_internals.variables_on_one_device(model, jax.local_devices()[0], distribution.get_variable_layout):
        keras.distribution.set_distribution(None)
        try:
            yield
        finally:
            keras.distribution.set_distribution(previous)


def _keras_class_name(layer) -> str:
    """"RandomCrop" for Keras's own layer; a subclass or a namesake goes by its full name."""
    import keras

    name = type(layer).__name__
    return name if type(layer) is getattr(keras.layers, name, None) else f"{type(layer).__module__}.{name}"


_told = set()  # what this process has said once


def step_callbacks(distribution) -> list:
    """The callbacks every fit, evaluate and predict under `distribution` needs: one step at a time over several
    CPU devices (_steps_must_not_overlap), said once; and, once a process, the step timed again on one device
    (_timed_on_one_device)."""
    if distribution is None or not _steps_must_not_overlap(distribution):
        return []
    if "one step" not in _told:
        _told.add("one step")
        from acceltrain import log

        log.info(f"{distribution.device_mesh.devices.size} CPU devices: Keras runs one step at a time here (it waits "
                 "for each step's metrics), as XLA's CPU collectives can deadlock when steps overlap")
    timed = [] if "timed on one device" in _told else [_timed_on_one_device()()]
    return [_one_step_at_a_time()(), *timed]


# When a fit on several CPU devices is timed against one device (_timed_on_one_device): after this many training
# steps (the first ones compile), over this many steps of the copy. Steps of any length (issue 33: a batch-32 MLP,
# 1 ms a step plainly, took 13 ms on 8 devices and 38 ms under launch, unsaid below the old 10 ms threshold): the
# copy's compile is paid once a process, a second or two for such a step.
COMPARE_AFTER_STEPS = 50
COMPARE_FROM_STEP_SECONDS = 0.0
COMPARE_STEPS = 5


@functools.cache
def _timed_on_one_device():
    """The callback class that, once a process, times a fit's training step on one device against the same step on
    the several CPU devices it runs on, and says so when those are many times slower
    (decisions.slower_on_several_devices). The copy: Keras's own train_step, jitted with no distribution, on a copy
    of the fit's state and its last batch on the first device. One compile of the step (seconds) and a few steps:
    paid once a process, only where steps take COMPARE_FROM_STEP_SECONDS or more. In a job of several processes,
    where no process holds the whole batch, each times the step on one of its devices on a batch of the global
    shape made of its own rows (the same arithmetic), all at the same step, so none waits in a collective."""
    import keras

    from acceltrain.backends import keras_internals

    class TimedOnOneDevice(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds, self.kept = [], keras_internals.keep_last_batch(self.model)

        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):  # not async_safe: on the main thread, each step finished
            self.seconds.append(time.perf_counter() - self.started)
            if len(self.seconds) < COMPARE_AFTER_STEPS or "timed on one device" in _told:
                return
            _told.add("timed on one device")
            self.kept["stop"]()
            # The first ones compiled; a batch end comes after steps_per_execution steps.
            several = statistics.median(self.seconds[COMPARE_AFTER_STEPS // 5:]) / self.model.steps_per_execution
            if several >= COMPARE_FROM_STEP_SECONDS and "batch" in self.kept:
                _compare(self.model, self.kept.pop("batch"), several)

        def on_train_end(self, logs=None):
            self.kept["stop"]()

    return TimedOnOneDevice


def _compare(model, batch, several: float) -> None:
    import keras

    from acceltrain import decisions, log
    from acceltrain.backends import keras_internals

    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(None)  # Keras's own step, traced undistributed
    try:
        here = jax.tree.map(_here_whole, (keras_internals.training_state(model), batch))
        state, batch = jax.device_put(here, jax.local_devices()[0])
        step = jax.jit(model.train_step)
        started = time.perf_counter()
        state = jax.block_until_ready(step(state, batch)[1])
        compiled = time.perf_counter() - started
        seconds = []
        for _ in range(COMPARE_STEPS):
            started = time.perf_counter()
            state = jax.block_until_ready(step(state, batch)[1])
            seconds.append(time.perf_counter() - started)
    except Exception as error:  # noqa: BLE001  (a measurement that cannot be made says nothing)
        log.debug(f"the step was not timed on one device: {type(error).__name__}: {error}")
        return
    finally:
        keras.distribution.set_distribution(previous)
    devices = len(jax.devices())
    line = decisions.slower_on_several_devices(devices, several, statistics.median(seconds), compiled, COMPARE_STEPS,
                                               processes=jax.process_count())
    if line:
        log.info(line)


def _here_whole(value):
    """A value of the fit's state or batch as one array in this process: itself where this process holds all of it;
    else its rows here, repeated to the global shape (a batch split over processes: the same shapes, the same
    arithmetic); a weight split over the processes raises (nothing timed)."""
    if not isinstance(value, jax.Array) or value.is_fully_addressable:
        return value
    if value.is_fully_replicated:
        return value.addressable_data(0)
    rows = np.concatenate([np.asarray(shard.data) for shard in sorted(
        value.addressable_shards, key=lambda shard: shard.index[0].start or 0)])
    if rows.shape[1:] != value.shape[1:]:
        raise ValueError(f"split along another axis than the batch's: {value.shape}")
    return np.resize(rows, value.shape)


def _tell_once(line: str) -> None:
    if line not in _told:
        _told.add(line)
        from acceltrain import log

        log.info(line)


# --- Sharding: weights cut over devices (fsdp, model) ---------------------------------------------

# The mesh axes. fsdp has one, over which both the batch and the weights are cut; model has two.
BATCH_AXIS, MODEL_AXIS = "batch", "model"


def make_sharded_distribution(kind: str, device_names: tuple[str, ...], model_axis: int | None = None,
                              layout_map=None):
    """A keras.distribution.ModelParallel whose weights are laid out when each is created (born sharded).

    "fsdp": a 1-D mesh; every weight of two or more dims is cut along one axis by the fsdp rule
    (acceltrain.sharding), and each device takes its slice of every batch.
    "model": a 2-D (batch x model) mesh of `model_axis` columns; the same rule on the model axis, the
    batch split over the batch axis.
    `layout_map`: a keras.distribution.LayoutMap (its own mesh, used as is), or a function of a
    DeviceMesh returning one (keras_hub's `Backbone.get_layout_map`); its keys win over the rule.
    """
    import keras

    from acceltrain import sharding

    mesh = getattr(layout_map, "device_mesh", None)
    if mesh is None:
        devices = list(device_names)
        if kind == "fsdp":
            mesh = keras.distribution.DeviceMesh((len(devices),), [BATCH_AXIS], devices)
        else:
            columns = model_axis or sharding.model_axis_size(len(devices))
            mesh = keras.distribution.DeviceMesh((len(devices) // columns, columns), [BATCH_AXIS, MODEL_AXIS],
                                                 devices)
    if callable(layout_map) and not isinstance(layout_map, keras.distribution.LayoutMap):
        layout_map = layout_map(mesh)
    layout_map = layout_map if layout_map is not None else keras.distribution.LayoutMap(mesh)
    batch_axis = BATCH_AXIS if BATCH_AXIS in mesh.axis_names else mesh.axis_names[0]
    shard_over = MODEL_AXIS if MODEL_AXIS in mesh.axis_names else batch_axis
    distribution = _shape_rule_parallel()(layout_map=layout_map, batch_dim_name=batch_axis, shard_axis_name=shard_over)
    distribution.acceltrain_name = "FSDP" if kind == "fsdp" else f"ModelParallel {' × '.join(map(str, mesh.shape))}"
    return distribution


@functools.cache
def _shape_rule_parallel():
    """The class, made on first use: Keras is imported only after connect()."""
    import keras

    from acceltrain import sharding

    class ShapeRuleParallel(keras.distribution.ModelParallel):
        """ModelParallel where a weight its LayoutMap does not name is laid out by the fsdp rule on
        `shard_axis_name`, and a layout that does not divide its weight replicates it instead of failing.

        Keras asks `get_variable_layout` as each variable is created, so weights are never whole on
        one device first; optimizer slots take their variable's layout (Keras's add_variable_from_reference).
        """

        def __init__(self, *, layout_map, batch_dim_name, shard_axis_name):
            super().__init__(layout_map=layout_map, batch_dim_name=batch_dim_name)
            self.shard_axis_name = shard_axis_name
            self.indivisible = {}  # path -> (shape, spec wanted): weights left whole, to warn about

        def get_variable_layout(self, variable):
            shape = tuple(variable.shape)
            mesh_shape = dict(zip(self.device_mesh.axis_names, self.device_mesh.shape))
            layout = self.get_tensor_layout(variable.path)
            if layout is not None:
                if _divides(shape, layout.axes, mesh_shape):
                    return layout
                self.indivisible[variable.path] = (shape, tuple(layout.axes))
            else:
                size = mesh_shape[self.shard_axis_name]
                if not sharding.indivisible(shape, size):
                    return keras.distribution.TensorLayout(sharding.fsdp_spec(shape, size, self.shard_axis_name),
                                                           self.device_mesh)
                self.indivisible[variable.path] = (shape, (self.shard_axis_name,))
            return keras.distribution.TensorLayout([None] * len(shape), self.device_mesh)

    return ShapeRuleParallel


def _divides(shape, axes, mesh_shape) -> bool:
    if len(axes) != len(shape):
        return False
    return all(size % sharding_parts((axis,), mesh_shape) == 0 for size, axis in zip(shape, axes))


def sharding_parts(spec, mesh_shape) -> int:
    from acceltrain import sharding

    return sharding.spec_divisor(tuple(spec), mesh_shape)


def is_layout_map(value) -> bool:
    import keras

    return isinstance(value, keras.distribution.LayoutMap)


def indivisible_weights(distribution) -> dict:
    """Weights a sharded distribution had to leave whole: path -> (shape, the spec that did not divide)."""
    return dict(getattr(distribution, "indivisible", {}))


def variable_layouts(variables) -> list[tuple[str, tuple[int, ...], str, int]]:
    """(path, shape, dtype, parts) of each variable: into how many pieces its placement cuts it."""
    rows = []
    for variable in variables:
        placed = getattr(getattr(variable, "value", None), "sharding", None)
        parts = 1
        if placed is not None and hasattr(placed, "spec"):
            parts = sharding_parts(placed.spec, dict(placed.mesh.shape))
        rows.append((variable.path, tuple(variable.shape), str(variable.dtype), parts))
    return rows


def first_device_bytes(variables) -> int:
    """Bytes the first device holds of these variables, read from their arrays' addressable shards."""
    total = 0
    for variable in variables:
        array = getattr(variable, "value", variable)
        first = min(array.sharding.device_set, key=lambda device: device.id)
        total += sum(shard.data.nbytes for shard in array.addressable_shards if shard.device == first)
    return total


def device_memory(platform: str) -> int | None:
    """Bytes of memory of one device, as the runtime reports it; None where it reports none (CPUs)."""
    try:
        stats = jax.devices(platform)[0].memory_stats() or {}
    except (RuntimeError, AttributeError):
        return None
    return stats.get("bytes_limit")


def abstract_state(build_model):
    """The weights `build_model()` would create and its optimizer's slot bytes, with nothing allocated.

    The build runs under jax.eval_shape: initializers give shapes, not arrays, so a model too big for
    any device is measured on a laptop. Returns ([(path, shape, dtype, trainable)], slot_bytes).
    """
    found = []
    slot_bytes = []

    def probe():
        model = build_model()
        found.extend((v.path, tuple(v.shape), str(v.dtype), v.trainable) for v in model.weights)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:
            optimizer.build(model.trainable_variables)
            slot_bytes.append(sum(math.prod(v.shape) * jax.numpy.dtype(v.dtype).itemsize
                                  for v in optimizer.variables if len(v.shape) > 0))
        return jax.numpy.zeros(())

    from acceltrain.backends import keras_internals

    with keras_internals.keras_state_kept():
        jax.eval_shape(probe)
    return found, (slot_bytes[0] if slot_bytes else None)


# --- Many processes, and unmodified scripts (`acceltrain run`, `acceltrain launch`) --------------

# Seconds without a heartbeat after which jax.distributed declares a process dead and ends the others, aborting
# them (JAX's default is 100). A process that exits is noticed at once (its connection closes: 10 s measured); this
# bound catches a frozen one (SIGSTOP, a host that stops answering). It is over twice the stall watchdog's floor, so
# inside a fit the watchdog speaks first: it names the process that stopped and ends the job with the restartable
# exit 42 (watchdog.py), where JAX's abort would end it with SIGABRT, which no engine restarts on. At 30 s (before
# issue 35) JAX aborted process 0 of a job whose process 1 was SIGSTOPped before a 60 s watchdog bound came.
HEARTBEAT_TIMEOUT_SECONDS = int(2 * FLOOR_SECONDS + 10)


def start_processes(processes) -> None:
    """Join this process to its jax.distributed job (a cluster.Processes), before JAX starts its devices.

    Fields left None are read by JAX's own cluster detection (Cloud TPU, SLURM, Open MPI).
    """
    if jax.distributed.is_initialized():
        return  # the script or the user called jax.distributed.initialize() already: theirs stands
    # CPU devices of different processes reduce through gloo (JAX ≥ 0.5 defaults to it; older, to none).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    arguments = {"heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_SECONDS}
    if processes.coordinator is not None:
        # Given in full: keep JAX from filling gaps (local device ids) from a SLURM or MPI environment.
        arguments.update(coordinator_address=processes.coordinator, num_processes=processes.num_processes,
                         process_id=processes.process_id, cluster_detection_method="deactivate")
    jax.distributed.initialize(**arguments)


def shard_inputs_per_process(distribution) -> None:
    """Each process will feed its own slice of the data: Keras must not slice it again.

    With auto-sharding on, Keras accepts only a tf.data.Dataset in a multi-process job.
    """
    if distribution is not None:
        distribution.auto_shard_dataset = False


def devices_spanned(variable) -> int:
    """How many devices (of all processes) hold a part or a copy of a Keras variable."""
    sharding = getattr(getattr(variable, "value", variable), "sharding", None)
    return len(sharding.device_set) if sharding is not None else 1


def split_over_processes(variables) -> list[str]:
    """The paths of the variables no process holds whole: parts of them are on other processes' devices
    (fsdp or model parallel over hosts), so reading one on the host fails ("spans non-addressable devices")."""
    split = []
    for variable in variables:
        array = getattr(variable, "value", variable)
        if isinstance(array, jax.Array) and not (array.is_fully_addressable or array.is_fully_replicated):
            split.append(getattr(variable, "path", str(variable)))
    return split


def gathering_predictions(model):
    """Inside, `model.predict` returns host arrays of the whole global batch, joined from every process
    (Keras's own predict would fail fetching an array that spans other processes' devices)."""
    from jax.experimental import multihost_utils

    from acceltrain.backends import keras_internals

    def gather(outputs):
        return jax.tree.map(lambda array: multihost_utils.process_allgather(array, tiled=True), outputs)

    return keras_internals.gathering_predictions(model, gather)
