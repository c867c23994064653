"""Distribution on JAX: `keras.distribution` over the devices JAX sees.

Same function names as `backends/tensorflow.py`. Only this module imports jax.
"""

import contextlib
import functools

import jax

NAME = "jax"

# A batch must divide over the devices of the mesh: JAX cannot shard the last, partial batch of a
# dataset unevenly, so evaluation datasets are padded instead (see Runtime.evaluate).
SPLITS_UNEVEN_BATCHES = False


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


def compilation_cache_dir() -> str:
    """Where compiled programs are kept between runs: JAX_COMPILATION_CACHE_DIR if set, else the user's
    cache folder (XDG_CACHE_HOME or ~/.cache) under acceltrain/jax."""
    import os

    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "acceltrain", "jax")


def enable_compilation_cache() -> None:
    """Keep compiled programs on disk, so the second run of the same job skips compilation.

    Must run before JAX's first compile: JAX decides once, at its first compile, whether it caches.
    A folder the user set (jax.config or JAX_COMPILATION_CACHE_DIR) is kept. Every program is cached,
    not only those over JAX's default 1 s: on a CPU most of a run's compiles are shorter, and together
    they are seconds of start-up (measured here: time to the end of the first epoch 14.1 s cold, 8.7 s
    warm). ACCELTRAIN_COMPILATION_CACHE=0 turns it off.
    """
    import os

    if os.environ.get("ACCELTRAIN_COMPILATION_CACHE", "1") == "0":
        return
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", compilation_cache_dir())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


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
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    global_state.set_global_attribute(GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)


def versions() -> dict[str, str]:
    import jaxlib
    import keras

    return {"keras": keras.__version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__}


# --- Distribution -----------------------------------------------------------------------------

# The distributions connect() made, by the JAX mesh their variables live on: how a model built under
# scope() finds its distribution again when plain `model.fit` is called outside the scope.
_distributions_by_mesh = {}


def make_distribution(kind: str, device_names: tuple[str, ...]):
    """A Keras distribution for `kind` ("data" | "none") over the named devices; None for "none"."""
    if kind == "none":
        return None
    import keras

    distribution = keras.distribution.DataParallel(devices=list(device_names))
    _distributions_by_mesh[distribution.device_mesh.backend_mesh] = distribution
    _follow_model_placement()
    if _steps_must_not_overlap(distribution):
        from acceltrain import log

        log.info(f"{len(device_names)} CPU devices: Keras runs one step at a time (it waits for each step's metrics), "
                 "as XLA's CPU collectives can deadlock when steps overlap")
    return distribution


def _steps_must_not_overlap(distribution) -> bool:
    """True for a distribution over several CPU devices (simulated, or CPUs of several processes).

    Why: with no callback that needs each step's metrics (e.g. `fit(..., verbose=2)` or
    `evaluate(..., verbose=0)` with no callbacks, or only `async_safe` ones), Keras 3.15 dispatches steps
    without waiting and fetches their metrics in a thread pool, so several steps run at once. XLA's CPU
    runtime runs each device's share of a step on a shared, small thread pool (sized by the cores, 2
    here); the all-reduce of one step then waits for devices whose threads are taken by the next step,
    and XLA aborts after 40 s ("Expected 8 threads to join the rendezvous, but only 7 of them arrived on
    time", exit 134), or, across processes (gloo), waits for ever. Measured here with a small convnet
    over 4 simulated devices: aborted in 4 of 4 runs as Keras dispatches it, also with
    JAX_CPU_ENABLE_ASYNC_DISPATCH=false and --xla_cpu_multi_thread_eigen=false; trained in every run with
    one step at a time (4 and 8 devices). Accelerators run collectives on the device: no such limit.
    """
    devices = distribution.device_mesh.devices.flatten()
    return len(devices) > 1 and all(str(name).startswith("cpu") for name in devices)


def distribution_name(distribution) -> str:
    return "none" if distribution is None else type(distribution).__name__


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


def set_jit_compile(model, platform: str, distribution) -> str | None:
    """Nothing to change: Keras on JAX compiles every step with XLA already."""
    return None


def distribution_of(model):
    """The distribution connect() made that `model`'s variables are placed by, if any."""
    for variable in model.variables:
        mesh = getattr(getattr(variable.value, "sharding", None), "mesh", None)
        return _distributions_by_mesh.get(mesh)
    return None


def _follow_model_placement() -> None:
    """Make plain `model.fit/evaluate/predict` run under the distribution the model was built in.

    Keras on JAX reads the distribution from global state at fit time, not from the model, so a model
    built under `Runtime.scope()` but fit outside it would get unsharded batches. TensorFlow keeps the
    strategy on the model; this gives JAX the same behaviour. Installed once; a no-op for models built
    outside any acceltrain distribution.
    """
    from keras.src.backend.jax.trainer import JAXTrainer
    from keras.src.distribution import distribution_lib

    for name in ("fit", "evaluate", "predict"):
        method = getattr(JAXTrainer, name)
        if getattr(method, "_acceltrain_follows_placement", False):
            continue

        def follow(method):
            @functools.wraps(method)
            def wrapper(model, *args, **kwargs):
                distribution = None
                if distribution_lib.distribution() is None:
                    distribution = distribution_of(model)
                in_force = distribution or distribution_lib.distribution()
                if in_force is not None and _steps_must_not_overlap(in_force):
                    from acceltrain.backends import with_callback
                    from acceltrain.training.callbacks import OneStepAtATime

                    kwargs = with_callback(method, args, kwargs, OneStepAtATime())
                with scope(distribution):
                    return method(model, *args, **kwargs)

            wrapper._acceltrain_follows_placement = True
            return wrapper

        setattr(JAXTrainer, name, follow(method))


def placement(array) -> str:
    """How an array or variable is laid out over devices, for tests and `doctor`."""
    return str(getattr(array, "value", array).sharding)


# --- Many processes, and unmodified scripts (`acceltrain run`, `acceltrain launch`) --------------

# Seconds without a heartbeat after which jax.distributed declares a process dead and ends the others
# (JAX's default is 100): a crashed host ends the job within a minute instead of hanging it.
HEARTBEAT_TIMEOUT_SECONDS = 30


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


def fit_hook(hook):
    """Inside, each `fit` and `evaluate` of any model first calls `hook(name, model, args, kwargs)`, which
    returns the (args, kwargs) to call Keras with: how `acceltrain run` checks and shards the inputs of a
    script it does not change. The previous methods are restored on exit.
    """
    from keras.src.backend.jax.trainer import JAXTrainer

    from acceltrain.backends import hooked_fit

    return hooked_fit(JAXTrainer, hook)
