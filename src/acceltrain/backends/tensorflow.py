"""Distribution on TensorFlow: `tf.distribute` strategies over the devices TensorFlow sees.

Same function names as `backends/jax/`. Only this module imports tensorflow. Keras's own
distribution API on TensorFlow is a prototype (its file says "DO NOT USE"), so the model is built and
compiled inside a strategy's scope instead: TPUStrategy on a TPU, MirroredStrategy over several GPUs
(or simulated CPUs), TensorFlow's default strategy on one device.
"""

import contextlib
import json
import os
import time
import weakref

import tensorflow as tf

from acceltrain import log
from acceltrain.errors import AcceltrainError, UsageError

NAME = "tensorflow"

# tf.distribute splits a batch that does not divide over the replicas unevenly (the last, partial
# batch of a dataset), so evaluation datasets need no padding here. JAX cannot (see backends/jax/).
SPLITS_UNEVEN_BATCHES = True

# Keras's distribution API is a prototype on TensorFlow: the strategies replicate every variable, and nothing of
# backends.SHARDING is here (no weights cut over devices, no autopilot, no --verify).
SHARDS = False

# What this module has beyond backends.INTERFACE: reaching a TPU by name, through a seam tests fake.
OWN = ("tpu_ways", "find_tpu", "own_train_step", "own_step_scales_its_loss", "own_step_note")

# How long connect() keeps retrying a TPU that answers but is not ready (a legacy TPU node booting,
# a TPU VM's runtime starting), and the longest pause between tries.
TPU_TIMEOUT_S = 300.0
TPU_MAX_BACKOFF_S = 30.0

# The TPU connect() started, if any. TensorFlow's TPU system is process-wide, and initializing it a
# second time wipes the TPU's memory, so it is started once and remembered here.
_tpu_resolver = None


# --- Start-up ---------------------------------------------------------------------------------

def prepare(simulate_devices: int | None, platform: str = "auto", tpu: str | None = None) -> None:
    """Start TensorFlow on the hardware asked for: simulated CPUs, else a TPU if one answers.

    Raises AcceltrainError when a TPU was asked for (platform="tpu" or a TPU name) and none answered.
    """
    global _tpu_resolver
    _refuse_multi_worker()
    # 1. Simulated devices: logical CPUs must be configured before TensorFlow starts its runtime.
    if simulate_devices is not None:
        _split_cpu(simulate_devices)
        return
    # 2. A TPU, tried first unless another platform was asked for (the seed's resolver steps).
    if platform not in ("auto", "tpu") or _tpu_resolver is not None:
        return
    resolver, tried = find_tpu(tpu_ways(tpu))
    if resolver is not None:
        _tpu_resolver = resolver
    elif platform == "tpu":  # connect() sets it for a TPU name too
        raise AcceltrainError(
            f"A TPU was asked for ({'tpu=' + repr(tpu) if tpu else 'platform=tpu'}), but none answered. "
            f"Tried: {'; '.join(tried)}. On Colab or Kaggle, pick a TPU runtime (Runtime → Change runtime "
            "type); on Google Cloud, pass the TPU's name (tpu='my-tpu' or --tpu my-tpu) from a VM in its zone."
        )
    else:
        log.info(f"no TPU ({'; '.join(tried)}): using the best of GPU and CPU")


def _refuse_multi_worker() -> None:
    """Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): say so up front."""
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    except (ValueError, AttributeError):
        return  # not ours to validate: TensorFlow reports a malformed TF_CONFIG itself
    workers = sum(len(cluster.get(job, [])) for job in ("chief", "worker"))
    if workers > 1:
        raise UsageError(
            f"TF_CONFIG describes {workers} workers, but Keras 3's fit does not train under TensorFlow's "
            "MultiWorkerMirroredStrategy (keras-team/keras#20585, tensorflow/tensorflow#72388). Train on "
            "several hosts with --backend jax, or unset TF_CONFIG to train on this host alone."
        )


def _split_cpu(count: int) -> None:
    """Show the CPU as `count` logical devices, and hide any GPU: simulated devices are CPUs."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_visible_devices([cpu], "CPU")
        tf.config.set_visible_devices([], "GPU")
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        # TensorFlow has started: fine only if it started with the same devices.
        started_with = len(tf.config.list_logical_devices("CPU"))
        if started_with != count or tf.config.list_logical_devices("GPU"):
            raise UsageError(
                f"simulate_devices={count} was asked for after TensorFlow had started with {started_with} "
                "CPU device(s). TensorFlow fixes its devices when it first runs: call "
                "connect(simulate_devices=...) before anything uses TensorFlow."
            ) from None


# --- The TPU: the seed's steps, through one seam ------------------------------------------------

class TPUSystem:
    """Every call into TensorFlow's TPU functions. Tests replace `tpu_system` with a fake: no TPU here."""

    # Errors of a TPU that is there but not ready yet: worth another try. Any other error means no TPU
    # by this way (ValueError "Please provide a TPU Name", NotFoundError "TPUs not found").
    transient_errors = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)

    def resolve(self, name):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver
        return resolver() if name is None else resolver(tpu=name)

    def connect(self, resolver) -> None:
        tf.config.experimental_connect_to_cluster(resolver)  # a no-op for 'local'

    def initialize(self, resolver) -> None:
        tf.tpu.experimental.initialize_tpu_system(resolver)

    def strategy(self, resolver):
        return tf.distribute.TPUStrategy(resolver)


tpu_system = TPUSystem()


def tpu_ways(tpu: str | None) -> list:
    """The ways to reach a TPU, in order. A name given is the only way. Else TPU_NAME if set, then
    'local' (TPU VMs: Colab, Kaggle, Cloud, where the bare resolver fails with "Please provide a TPU
    Name"), then the bare resolver (None: legacy TPU nodes, found through COLAB_TPU_ADDR)."""
    if tpu:
        return [tpu]
    from_env = os.environ.get("TPU_NAME")
    return ([from_env] if from_env and from_env != "local" else []) + ["local", None]


def find_tpu(ways: list, *, system=None, timeout_s: float = TPU_TIMEOUT_S, sleep=time.sleep,
             clock=time.monotonic):
    """Resolve, connect and initialize a TPU: the seed's steps, each way in turn until one works.
    Returns (the resolver or None, what was tried and why it failed).

    A way whose TPU is not ready is retried with doubling pauses until `timeout_s` has passed since
    the first try; every way is tried at least once.
    """
    system = system or tpu_system
    deadline = clock() + timeout_s
    tried = []
    for way in ways:
        label = "the bare resolver" if way is None else repr(way)
        pause, attempt = 1.0, 0
        while True:
            attempt += 1
            try:
                resolver = system.resolve(way)
                system.connect(resolver)
                system.initialize(resolver)
                return resolver, tried
            except Exception as error:  # noqa: BLE001 -- each way fails in its own way; all are reported
                reason = f"{type(error).__name__}: {_first_line(error)}"
                left = deadline - clock()
                if not isinstance(error, system.transient_errors) or left <= 0:
                    tries = f" after {attempt} tries" if attempt > 1 else ""
                    tried.append(f"{label}{tries} ({reason})")
                    break
                pause = min(pause, left)
                log.info(f"waiting for the TPU {label}: try {attempt} failed ({reason}); next in {pause:.0f} s, "
                         f"giving up in {left:.0f} s")
                sleep(pause)
                pause = min(pause * 2, TPU_MAX_BACKOFF_S)
    return None, tried


def _first_line(error: Exception) -> str:
    """The first sentence of an error: TensorFlow's go on for lines of kernel names."""
    text = str(error).strip().splitlines()
    sentence = text[0].split(". ")[0] if text else "no message"
    return sentence if len(sentence) <= 100 else sentence[:99] + "…"


# --- What is there ----------------------------------------------------------------------------

def device_counts() -> dict[str, int]:
    """How many devices each platform has. TPUs appear only once connect() has initialized one."""
    return {platform: len(tf.config.list_logical_devices(platform.upper())) for platform in ("tpu", "gpu", "cpu")}


def devices(platform: str) -> tuple[str, ...]:
    """The platform's devices, named as on JAX ("cpu:0"), so describe() reads the same on both."""
    return tuple(f"{platform}:{device.name.rsplit(':', 1)[1]}"
                 for device in tf.config.list_logical_devices(platform.upper()))


def device_kind(platform: str) -> str:
    if platform == "gpu":
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        return details.get("device_name", "GPU")
    if platform == "tpu":
        accelerator = os.environ.get("TPU_ACCELERATOR_TYPE")  # set on TPU VMs, e.g. "v2-8"
        return f"TPU {accelerator}" if accelerator else "TPU"
    return "cpu"


def compute_capability(platform: str) -> str | None:
    """A GPU's CUDA compute capability ("9.0"); None for other platforms and GPUs that report none."""
    if platform != "gpu":
        return None
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    capability = details.get("compute_capability")  # a tuple, e.g. (8, 0)
    return ".".join(str(part) for part in capability) if capability else None


def process_count() -> int:
    return 1  # multi-worker training is refused in prepare(): see _refuse_multi_worker


def process_index() -> int:
    return 0


def set_seed(seed: int) -> None:
    """Seed Python, numpy, TensorFlow and Keras: weights, dropout and the data order of fit."""
    import keras

    keras.utils.set_random_seed(seed)


def versions() -> dict[str, str]:
    import keras

    return {"keras": keras.__version__, "tensorflow": tf.__version__}


# --- Distribution -----------------------------------------------------------------------------

def make_distribution(kind: str, device_names: tuple[str, ...]):
    """A tf.distribute strategy for `kind` ("data" | "none") over the named devices; None for "none".

    None means TensorFlow's default strategy: one device, nothing to split. A TPU runs only under
    TPUStrategy (under the default strategy, Keras would train on the TPU host's CPU), so a TPU gets
    one whatever `kind`.
    """
    if device_names[0].startswith("tpu:"):
        return _made(tpu_system.strategy(_tpu_resolver))
    if kind == "none":
        return None
    strategy = _made(tf.distribute.MirroredStrategy(devices=[f"/{name}" for name in device_names]))
    _UNTUNED_FOR.append(strategy)
    _device_datasets_untuned(True)
    return strategy


_MADE: list = []  # the strategies a runtime made (make_distribution): any other a model keeps is its maker's own
# The MirroredStrategies made and not yet released, each a holder of _device_datasets_untuned: TensorFlow's own
# function comes back when the last is released, not the first (two runtimes may be open: another connect()'s
# options, a notebook's, Runtime.build's new distribution made before the old one is released)
_UNTUNED_FOR: list = []


def _made(strategy):
    _MADE.append(strategy)
    return strategy


def own_distribution(model=None):
    """The strategy `model` was made under where no runtime made it: a script's own (its `with strategy.scope():`
    around the model), under which its fit, evaluate and predict run wherever they are called (Keras keeps the
    strategy on the model); None for a runtime's, TensorFlow's default strategy, or no model."""
    strategy = getattr(model, "distribute_strategy", None) if model is not None else None
    if strategy is None or any(strategy is made for made in _MADE):
        return None
    return None if type(strategy).__name__.strip("_") == "DefaultDistributionStrategy" else strategy


def mesh_words(distribution) -> str:
    """'devices CPU:0, CPU:1': a strategy's devices, a replica each (it replicates every variable: no mesh of axes)."""
    return "devices " + ", ".join(device.rpartition("device:")[2] for device in distribution.extended.worker_devices)


def _device_datasets_untuned(untuned: bool) -> None:
    """A MirroredStrategy's per-device datasets made without tf.data's autotuning while `untuned` (from
    make_distribution until release), TensorFlow's own function given back after.

    A distributed dataset is read through a MultiDeviceIterator, which makes one small dataset a replica (TensorFlow's
    `multi_device_iterator_ops._create_device_dataset`: the replica's share of each batch, prefetched one element
    ahead, a fixed buffer), each iterated with TensorFlow's default options, so each starts tf.data's autotuning
    thread, which has nothing of it to tune. Dropping such an iterator (Keras makes a new one every epoch of a dataset
    of known length, and every evaluate) waits for those threads to end, and in TensorFlow 2.21 each is seen to end
    only when its next optimization comes due, not when the iterator is cancelled: its period doubles up to 60 s, so a
    drop on 8 logical CPUs stood still 74 and 134 s (main thread holding the GIL, in ~LogicalThreadWrapper under
    ~RootDataset::Iterator), where it took 0.01-0.05 s with their autotuning off, the user's own pipeline still
    autotuned (tests/scripts/distributed_dataset_dropped.py, no acceltrain). The batches are the same: nothing on
    the device side was tuned (tests/backends/test_tensorflow.py)."""
    from tensorflow.python.data.ops import multi_device_iterator_ops as device_datasets

    made = device_datasets._create_device_dataset
    if untuned and not hasattr(made, "tensorflows"):
        def create_device_dataset(*args, **kwargs):
            options = tf.data.Options()
            options.autotune.enabled = False
            return made(*args, **kwargs).with_options(options)

        create_device_dataset.tensorflows = made
        device_datasets._create_device_dataset = create_device_dataset
    elif not untuned and hasattr(made, "tensorflows"):
        device_datasets._create_device_dataset = made.tensorflows


def distribution_name(distribution) -> str:
    if distribution is None:
        return "none"
    return type(distribution).__name__.removesuffix("V2")  # tf.distribute.TPUStrategy is TPUStrategyV2


def num_replicas(distribution) -> int:
    """How many slices each global batch is cut into: the strategy's own count."""
    return 1 if distribution is None else distribution.num_replicas_in_sync


@contextlib.contextmanager
def scope(distribution, keras_only: bool = False):
    """Models built inside have their variables placed by the strategy; the previous one is restored.

    `keras_only` (`acceltrain run`'s scope around a script): only what Keras needs made in the strategy's scope is
    made there (its variables, a model's and an optimizer's strategy: keras_internals.keras_objects_made_in); the rest
    of the code inside runs as without the strategy, as the script wrote it.

    keras.backend.clear_session() called inside (keras.io's TensorFlow NumPy example calls it between its models)
    resets TensorFlow's default graph, and the strategy's scope with it: the models built after it were no longer
    the strategy's, and leaving the scope then popped an empty stack (IndexError: pop from empty list, issue 45). So
    the scope is left for Keras's reset and entered again after it (keras_internals.clear_session_replaced)."""
    if distribution is None:
        yield
        return
    from acceltrain.backends import keras_internals

    if keras_only:
        log.info(f"run: Keras's models, layers, optimizers and metrics are made in {distribution_name(distribution)}'s "
                 f"scope, their variables mirrored over {num_replicas(distribution)} replicas (what fit, evaluate and "
                 "predict need; a keras.Variable of the script's own too, and a hand-written loop over a model updates "
                 "every copy); the rest runs outside it, as written: the script's tf.Variables, tf.data, and "
                 "tf.distribute.get_strategy() (TensorFlow's default strategy there)")
        told = set()

        def own_scope(name):
            if name not in told:
                told.add(name)
                log.info(f"run: the script makes Keras objects in its own {name}'s scope: they are that strategy's, as "
                         f"plainly, not {distribution_name(distribution)}'s; their fit, evaluate and predict run under "
                         "it. To have them split over the replicas, make them outside that scope")

        with keras_internals.keras_objects_made_in(distribution, own_scope):
            yield
        return
    with contextlib.ExitStack() as inside:
        def enter():
            inside.enter_context(distribution.scope())
            inside.enter_context(tf.variable_creator_scope(_plain_in_dataset_functions))

        def outside_the_scope(keras_own):
            def clear_session(*args, **kwargs):
                inside.close()  # TensorFlow leaves both scopes in a finally
                try:
                    return keras_own(*args, **kwargs)
                finally:
                    enter()
            return clear_session

        enter()
        with keras_internals.clear_session_replaced(outside_the_scope):
            yield


def _plain_in_dataset_functions(next_creator, **kwargs):
    """A variable created while a tf.data function is traced (`dataset.map(f)`) is created as a plain run creates it,
    not by the strategy: the function runs on the input pipeline's host, outside any replica, and a mirrored
    variable born there cannot be lifted out of it (TensorFlow's UnliftableError). Keras's global random state is
    the one such variable: `keras.random.normal(...)` without a seed inside a map creates it on first use. tf.data
    names the graph it traces a function in "Dataset_<transformation>_<function>" (measured: tensorflow 2.21)."""
    if getattr(tf.compat.v1.get_default_graph(), "name", "").startswith("Dataset_"):
        from tensorflow.python.ops import resource_variable_ops

        return resource_variable_ops.default_variable_creator_v2(None, **kwargs)  # the creator of a plain run
    return next_creator(**kwargs)


def release(distribution) -> None:
    """TensorFlow keeps the strategy on the model; once no strategy make_distribution made is held, per-device datasets
    are autotuned again (TensorFlow's own function). A strategy released twice, or not made here, changes nothing."""
    if not any(distribution is held for held in _UNTUNED_FOR):
        return
    _UNTUNED_FOR[:] = [held for held in _UNTUNED_FOR if held is not distribution]
    if not _UNTUNED_FOR:
        _device_datasets_untuned(False)


def keep_data_on_devices(setting: str) -> None:
    """connect()'s device_data: nothing to turn off here, Keras's own input path feeds every fit (tf.data)."""


def follow_placement(call, proceed):
    """Layer "placement" (interception.LAYERS): nothing to follow, TensorFlow keeps the strategy on the model.
    Under a strategy, a model with no call() of its own whose layers are all built (a VAE of an encoder and a
    decoder, its own train_step) is marked built: Keras builds a model under a strategy by calling it on a symbolic
    batch (`_maybe_symbolic_build`), which such a model cannot answer, and a plain run never calls it. Keras still
    builds its optimizer and metrics, in the strategy's scope. And that symbolic batch is the first replica's slice
    of the first batch, not its mean over the replicas, which a batch of strings does not have
    (keras_internals.built_from_one_replica); and a loss a layer adds, computed by a keras.losses.Loss, is divided by
    the replicas once, not twice (keras_internals.added_losses_scaled_once); and each replica's random draws (dropout,
    augmentation, a VAE's sampling) are its own, not the first replica's again (keras_internals.draws_apart_per_replica)."""
    from acceltrain.backends import keras_internals

    strategy = call.model.distribute_strategy  # the one it was made under, else the one in force (Keras's own rule)
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        return proceed(call)  # TensorFlow's default strategy: one device
    replicas = strategy.num_replicas_in_sync
    if call.name == "fit" and replicas > 1 and own_train_step(call.model) and type(call.model) not in _told_own_step:
        _told_own_step.add(type(call.model))
        if not own_step_scales_its_loss(call.model):
            log.info(own_step_note(type(call.model).__name__, replicas))
    if keras_internals.built_but_not_marked(call.model):
        call.model.built = True
    with keras_internals.built_from_one_replica(call.model), keras_internals.added_losses_scaled_once(call.model), \
            keras_internals.draws_apart_per_replica(), _steps_mirrored_can_run(call.model, strategy):
        return proceed(call)


@contextlib.contextmanager
def _steps_mirrored_can_run(model, strategy):
    """Within: the model runs as many steps an execution as MirroredStrategy over CPU devices can
    (decisions.choose_steps_per_execution_mirrored: one), its own steps_per_execution given back after; its functions,
    made once for one step, kept for its later calls. Said once a model."""
    from acceltrain import decisions
    from acceltrain.backends import keras_internals
    from acceltrain.errors import option

    own = model.steps_per_execution
    on_cpus = isinstance(strategy, tf.distribute.MirroredStrategy) and all(
        "CPU" in device.upper() for device in strategy.extended.worker_devices)
    keep = f"run on one device ({option('simulate_devices')} 1) or on JAX ({option('backend')} jax)"
    steps, why = decisions.choose_steps_per_execution_mirrored(
        strategy.num_replicas_in_sync if on_cpus else 1, own, keep)
    if steps == own:
        yield
        return
    if model not in _made_for_one_step:  # functions Keras made for its own count are made again for one step
        _made_for_one_step.add(model)
        keras_internals.forget_compiled_functions(model)
        log.warn(why)
    model.steps_per_execution = steps
    try:
        yield
    finally:
        model.steps_per_execution = own


def steps_one_at_a_time(distribution) -> bool:
    """Never: no step callbacks (step_callbacks)."""
    return False


_told_own_step: set = set()  # the model classes whose own train_step was noted in this process, each once
_made_for_one_step = weakref.WeakSet()  # the models _steps_mirrored_can_run made Keras's functions again for


def own_train_step(model) -> bool:
    """Whether `model`'s class (or a class between it and keras.Model) defines its own train_step."""
    import keras

    return any("train_step" in vars(cls) for cls in type(model).__mro__
               if issubclass(cls, keras.Model) and cls is not keras.Model)


# What a train_step's own source calls that divides its loss by the replicas under a strategy (Keras's compute_loss,
# over keras.losses objects, does: keras.losses.loss.scale_loss_for_distribution), or reads to do it itself: a step
# that says one of them steps as on one device (tests/scripts/own_train_step_under_mirrored.py measures 1.0 at 2 replicas
# for compute_loss and compute_average_loss). Read from the source only; a step whose source says none (its loss a
# plain mean, or a keras.losses object made elsewhere: the source cannot tell) gets the note, which says what to check.
SCALES_ITS_LOSS = ("compute_average_loss(", "num_replicas_in_sync", "self.compute_loss(")


def own_step_scales_its_loss(model) -> bool:
    """Whether `model`'s own train_step visibly divides its loss by the replicas: its source calls Keras's
    self.compute_loss (and the model does not define its own compute_loss), tf.nn.compute_average_loss, or reads
    num_replicas_in_sync (SCALES_ITS_LOSS). False where the source cannot be read (the note then says what to check)."""
    import inspect

    import keras

    below = [cls for cls in type(model).__mro__ if issubclass(cls, keras.Model) and cls is not keras.Model]
    step = next((vars(cls)["train_step"] for cls in below if "train_step" in vars(cls)), None)
    try:
        source = inspect.getsource(step)
    except (OSError, TypeError):
        return False
    own_compute_loss = any("compute_loss" in vars(cls) for cls in below)
    return any(name in source for name in SCALES_ITS_LOSS if not (own_compute_loss and name == "self.compute_loss("))


def own_step_note(model_class: str, replicas: int) -> str:
    """What an own train_step under a strategy of several replicas gets, where its source does not show that it
    scales its loss (own_step_scales_its_loss): TensorFlow sums its gradients over the replicas (Keras's optimizer
    under tf.distribute), so a loss that is a plain mean over the replica's slice of the batch steps `replicas`
    times as far as on one device (tests/scripts/own_train_step_under_mirrored.py measures 2.0 at 2 replicas with
    SGD, no acceltrain); a loss from a keras.losses object, self.compute_loss or tf.nn.compute_average_loss is
    divided by the replicas already (1.0 there), as Keras's own train_step's is. Which one a step has, its source
    may not show (a loss object made in __init__): the note says what to check."""
    return (f"{model_class}'s own train_step under {replicas} replicas: TensorFlow sums its gradients over them. If "
            f"the loss its tape differentiates is a plain mean over the replica's batch (keras.ops.mean, "
            f"tf.reduce_mean), each step goes {replicas}× as far as on one device (Adam and RMSprop scale it away, SGD "
            f"does not): divide it by tf.distribute.get_strategy().num_replicas_in_sync, or train on one device. A "
            f"loss from a keras.losses object, self.compute_loss or tf.nn.compute_average_loss(..., "
            f"global_batch_size=...) is divided by the replicas already: nothing to change")


def step_callbacks(distribution) -> list:
    """None needed: tf.distribute runs the steps of several CPU devices as one program."""
    return []


# --- The time ledger's view of TensorFlow (acceltrain/ledger.py) ------------------------------------

def watch_compiles(timeline):
    """None: TensorFlow reports no compile events (the ledger then books each new train function's first step as
    its compilation)."""
    return None


def step_flops(jitted_step, arguments) -> float | None:
    """None: no cost analysis of Keras's tf.function step is read here."""
    return None


def shapes_of(tree):
    return tree


@contextlib.contextmanager
def op_by_op_made_safe(model, distribution):
    """Nothing to do here: what backends/jax/op_by_op.py::op_by_op_made_safe avoids is JAX dispatching an uncompiled
    step's ops one by one, each an XLA program with its own collectives. Yields None: the call stays distributed."""
    yield None


# --- Many processes, and unmodified scripts (`acceltrain run`) ------------------------------------

def start_processes(processes) -> None:
    """Refused: Keras 3 does not train under TensorFlow's multi-worker strategy (see _refuse_multi_worker)."""
    raise UsageError(_ONE_PROCESS)


def shard_inputs_per_process(distribution) -> None:
    raise UsageError(_ONE_PROCESS)


def gathering_predictions(model):
    raise UsageError(_ONE_PROCESS)


def join_shares(arrays, keys):
    raise UsageError(_ONE_PROCESS)


_ONE_PROCESS = ("A job of several processes on the TensorFlow backend: Keras 3's fit does not train under "
                "TensorFlow's MultiWorkerMirroredStrategy (keras-team/keras#20585). Pass backend='jax' "
                "(--backend jax) to train with several processes.")


def devices_spanned(variable) -> int:
    """How many devices hold a copy of a Keras variable: one per replica under MirroredStrategy."""
    value = getattr(variable, "value", variable)
    copies = getattr(value, "values", None)
    return len(copies) if copies is not None else 1
