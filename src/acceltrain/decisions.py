"""The 'auto' decisions. Each is one short ordered function of plain values that returns its choice
and the reason, so a table-driven test covers it and the CLI can print it in one line.
"""

import math

from acceltrain import hardware
from acceltrain.inputs.arrays import keras_batch
from acceltrain.errors import UsageError

BACKENDS = ("jax", "tensorflow")
DISTRIBUTIONS = ("auto", "data", "fsdp", "model", "none")
SHARDED = ("fsdp", "model")  # weights cut over devices: keras.distribution on JAX only


def choose_backend(requested: str | None, loaded: str | None, env: str | None, jax_importable: bool,
                   config_file: tuple[str | None, str] = (None, ""), set_before_keras: bool = False) -> tuple[str, str]:
    """Keras's backend: the one already loaded, else the one asked for, else KERAS_BACKEND, else the one in
    Keras's config file (`config_file`: (backend, path), from backends.keras_config_backend), else jax.

    After the loaded Keras and the argument, the order is Keras's own: KERAS_BACKEND over keras.json.
    `set_before_keras`: the loaded Keras got its backend from importing acceltrain (backends.choose_before_keras),
    not from the user; `env` is then None (it was not theirs).
    """
    in_file, path = config_file
    for value, source in ((requested, "backend"), (env, "KERAS_BACKEND"), (loaded, "the loaded Keras"),
                          (in_file, path)):
        if value is not None and value not in BACKENDS:
            raise UsageError(
                f"Unsupported backend from {source}: {value!r}. Valid: {', '.join(BACKENDS)}. "
                "Pass backend='jax' (the default) or backend='tensorflow' (CLI: --backend)."
            )
    if loaded is not None:
        if requested is not None and requested != loaded:
            raise UsageError(
                f"Received backend={requested!r}, but Keras is already loaded with the {loaded!r} backend in this "
                "process and cannot switch: Keras reads its backend once, as it is first imported. Call "
                f"acceltrain.connect(backend={requested!r}) before `import keras` (or set KERAS_BACKEND={requested} "
                f"before Python starts), or pass backend={loaded!r}."
            )
        if set_before_keras:
            return loaded, "the default, set as Keras was imported after acceltrain"
        for value, source in ((env, "KERAS_BACKEND"), (in_file, path)):
            if value == loaded:
                return loaded, f"Keras was already loaded with it, from {source}"
        if env is None and in_file is None and loaded != "jax":
            return loaded, ("Keras was imported before acceltrain, with Keras's own default; import acceltrain "
                            "first (or set KERAS_BACKEND=jax) for jax")
        return loaded, "Keras was already loaded with it"
    if requested is not None:
        return requested, "asked for"
    if env is not None:
        return env, "KERAS_BACKEND is set"
    if in_file is not None:
        return in_file, f"set in {path}"
    if jax_importable:
        return "jax", "the default"
    return "tensorflow", "JAX is not installed"


def check_distribution(requested, backend: str | None = None) -> None:
    if requested not in DISTRIBUTIONS:
        raise UsageError(f"Received distribution={requested!r}. Valid: {', '.join(DISTRIBUTIONS)} (or, in Python, "
                         "a keras.distribution.LayoutMap).")
    if requested in SHARDED and backend == "tensorflow":
        raise UsageError(
            f"Received distribution={requested!r} with the tensorflow backend. Sharding weights over devices "
            "needs keras.distribution, which Keras supports on JAX only (tf.distribute has no Keras 3 "
            "equivalent). Pass --backend jax, or --distribution data."
        )


def choose_distribution(requested: str, num_devices: int) -> tuple[str, str]:
    """'data' (every device takes a slice of each batch) when there is more than one device.

    Whether 'auto' shards weights depends on the model's size: Runtime.build decides that (see
    sharding.choose_sharding), once the model can be measured.
    """
    check_distribution(requested)
    if requested != "auto":
        if requested in SHARDED and num_devices == 1:
            return "none", f"{requested} asked for, but one device: nothing to cut"
        return requested, "asked for"
    if num_devices > 1:
        return "data", f"{num_devices} devices: each takes a slice of every batch"
    return "none", "one device"


STACKED_BATCHES_SHARE = 0.05  # of a device's memory: the most the platform's steps_per_execution may stack


def choose_steps_per_execution(platform: str, steps_per_epoch: int, compiled_with: int = 1,
                               requested: int | None = None, batch_bytes: int | None = None,
                               device_bytes: int | None = None, keep_compiled: bool = False) -> tuple[int, str]:
    """Training steps per compiled call: fit's argument, else the model's own setting (always, for a script's
    model: `keep_compiled`, as a plain fit keeps it), else the platform's,
    within an epoch, and, where a batch's and a device's bytes are known, within STACKED_BATCHES_SHARE of the
    device's memory (Keras 3.16 stacks that many batches on the device at once, whatever the input). Keras's default
    of 1 cannot be told from a 1 set in compile(): see steps_per_execution_override for the warning when the
    platform's replaces it."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise UsageError(f"Received steps_per_execution={requested!r}. Expected a whole number of at least 1.")
        return requested, "asked for in fit"
    if keep_compiled:  # a script's model: what its compile() said, 1 where it said nothing (Keras's default)
        return compiled_with, f"the model's own, as a plain fit keeps it: its compile()'s, {compiled_with} unless set"
    if compiled_with != 1:
        return compiled_with, "set by the model's compile()"
    per_platform = hardware.kind(platform).STEPS_PER_EXECUTION
    if batch_bytes and device_bytes and per_platform * batch_bytes > STACKED_BATCHES_SHARE * device_bytes:
        fits = max(1, int(STACKED_BATCHES_SHARE * device_bytes // batch_bytes))
        if fits < min(per_platform, steps_per_epoch):
            return fits, (f"{platform}: {per_platform}, capped at {fits}: {fits} batches of "
                          f"{batch_bytes / 2**20:,.1f} MiB within {STACKED_BATCHES_SHARE:.0%} of a device's "
                          f"{device_bytes / 2**30:,.1f} GiB")
    if steps_per_epoch < per_platform:
        return max(steps_per_epoch, 1), f"{platform}: {per_platform}, capped at the {steps_per_epoch} steps of an epoch"
    return per_platform, f"{platform}'s setting"


def choose_steps_per_execution_mirrored(cpu_replicas: int, compiled_with: int, keep: str) -> tuple[int, str | None]:
    """Steps an execution of a call under TensorFlow's MirroredStrategy over `cpu_replicas` CPU devices, and the
    warning when it is not the model's `compiled_with`. Keras 3.15.1's function of several steps fails there
    (measured with plain Keras and TensorFlow 2.21, no acceltrain: MirroredStrategy over 2 logical CPUs, compile(...,
    steps_per_execution=4), fit on 500 and on 512 samples: "You must feed a value for placeholder tensor
    'while/body/.../while/cond/Placeholder'" in multi_step_on_iterator; steps_per_execution=1 trains), so each step is
    its own execution there. On GPUs (MirroredStrategy too) not measured: left as the model says. `keep`: how to keep
    the model's (one device, or JAX)."""
    if cpu_replicas <= 1 or compiled_with <= 1:
        return compiled_with, None
    return 1, (f"steps_per_execution 1 under MirroredStrategy over {cpu_replicas} CPU replicas, not the model's "
               f"{compiled_with}: Keras's steps of several an execution fail there (its multi-step function: 'You must "
               f"feed a value for placeholder tensor'), so each step runs alone and callbacks' batch hooks are called "
               f"every step, not every {compiled_with} steps. To keep {compiled_with}: {keep}")


def steps_per_execution_override(compiled_with: int, chosen: int, platform: str) -> str | None:
    """The warning when acceltrain runs more steps per call than the model was compiled with, or None."""
    if chosen == compiled_with:
        return None
    return (f"steps_per_execution {chosen} on {platform}, not the model's {compiled_with} (Keras's default, or "
            f"set in compile()): {chosen} steps run per compiled call, so callbacks see every {chosen}th step. "
            f"To keep {compiled_with}, pass steps_per_execution={compiled_with} to runtime.fit.")


def choose_loss(y, output_units: int | None) -> tuple[str, str]:
    """The loss for an uncompiled model, from its labels and its number of outputs."""
    import numpy as np

    integer_labels = np.issubdtype(y.dtype, np.integer) and (y.ndim == 1 or y.shape[-1] == 1)
    if integer_labels and output_units and output_units > 1:
        return "SparseCategoricalCrossentropy", f"integer labels, {output_units} outputs"
    if integer_labels and output_units == 1 and set(np.unique(y)) <= {0, 1}:
        return "BinaryCrossentropy", "labels 0 and 1, one output"
    one_hot = y.ndim == 2 and y.shape[-1] == output_units and output_units > 1 and np.allclose(y.sum(axis=-1), 1)
    if one_hot:
        return "CategoricalCrossentropy", f"one-hot labels over {output_units} classes"
    return "MeanSquaredError", "labels are not classes"


PRECISIONS = ("auto", "float32", "mixed_bfloat16")  # connect(precision=...), CLI --precision


def choose_precision(platform: str, compute_capability: str | None, current_policy: str = "float32",
                     asked: str = "auto") -> tuple[str, str]:
    """Keras's dtype policy: the one asked for (precision=), else the user's own global policy, else bfloat16
    compute where the hardware is native.

    "mixed_bfloat16" computes in bfloat16 and keeps the weights, the optimizer and the loss in float32.
    """
    if asked != "auto":
        return asked, "asked for with precision"
    if current_policy != "float32":
        return current_policy, "set with keras.config.set_dtype_policy"
    if hardware.kind(platform).NATIVE_BFLOAT16:
        return "mixed_bfloat16", f"{platform.upper()}s compute in bfloat16 natively"
    if platform == "gpu":
        if compute_capability and _capability(compute_capability) >= hardware.gpu.BFLOAT16_FROM_COMPUTE_CAPABILITY:
            return "mixed_bfloat16", f"compute capability {compute_capability} runs bfloat16 on its tensor cores"
        return "float32", (f"compute capability {compute_capability or 'unknown'} has no native bfloat16 "
                           "(float16 would need loss scaling)")
    # XLA's 2048³ matmul ran no faster in bfloat16 than in float32 on the CPU of BENCHMARKS.md's matmul-dtypes
    # section (its record: benchmarks/results/matmul-dtypes.json): accuracy lost for nothing.
    return "float32", (f"{platform}: bfloat16 matmuls ran no faster than float32 on the CPU of BENCHMARKS.md's "
                       "matmul-dtypes section (a cited result, not measured in this run)")


def _capability(text: str) -> tuple[int, ...]:
    """"8.6" → (8, 6); anything unreadable counts as (0,): no native bfloat16 assumed."""
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return (0,)


# Layers whose `supports_jit = False` makes Keras run the whole step op by op, but which JAX compiles with the same
# results: their random transforms are jnp code (each one jitted on JAX gives its eager output:
# tests/backends/jax/test_op_by_op.py), RandomCrop once its random offset is cut with a dynamic slice
# (backends/keras_internals/::jittable_random_crop). Lookups, Hashing and TextVectorization call TensorFlow (and
# inside a model on JAX they fail plainly too: an IntegerLookup model's fit raised in Keras 3.15.1).
COMPILABLE_ON_JAX = ("RandomCrop", "RandomZoom", "RandomTranslation", "RandomRotation", "RandomShear",
                     "RandomPerspective")


def choose_op_by_op_step(cpu_devices: int, processes: int, not_jitted: tuple[str, ...], jit_compile: bool,
                         run_eagerly: bool) -> tuple[str, str]:
    """How a fit/evaluate/predict on JAX runs a model whose step Keras would run op by op, uncompiled:
    "as is", "compile", "one device" or "refuse", and why.

    `cpu_devices`: the CPU devices the call's distribution spans (0 when they are accelerators); `not_jitted`:
    the class names of the model's layers with `supports_jit = False`; `jit_compile`, `run_eagerly`: the
    model's settings after compile().

    Why: op by op, every op is a program of its own on every device, and those holding an all-reduce are
    dispatched without waiting for the one before. XLA's CPU collectives then deadlock: plain Keras with a
    RandomCrop model on 2 simulated devices aborted (rendezvous timeout), and under `acceltrain launch` (2
    processes x 2 devices), with one step at a time, one of two runs sat idle in eager dispatch until killed
    (issue 22). Distributed op by op also ran slower than the same call on one device, and compiled faster:
    the benchmark section simulated-devices (its op_by_op table) measures both. On one device there is no
    collective; accelerators run theirs on the device.
    """
    if jit_compile and not run_eagerly:
        return "as is", "the step is compiled"
    if cpu_devices <= 1:
        return "as is", "one device: no collective to overlap"
    names = ", ".join(sorted(set(not_jitted)))
    danger = f"op by op on {cpu_devices} CPU devices, XLA's collectives can deadlock"
    if not run_eagerly and not_jitted and all(name in COMPILABLE_ON_JAX for name in not_jitted):
        them = "them" if len(set(not_jitted)) > 1 else "it"
        return "compile", (f"Keras marks {names} as not compilable, but JAX compiles {them} with the same results; "
                           f"{danger}")
    uncompilable = ", ".join(sorted(set(not_jitted) - set(COMPILABLE_ON_JAX)))
    cause = ("run_eagerly=True" if run_eagerly else f"{uncompilable} cannot be compiled" if uncompilable
             else "jit_compile=False")
    if processes > 1:
        return "refuse", (f"{cause}, so Keras runs the step op by op; {danger}, and in a job of {processes} processes "
                          "the inputs are already split between them")
    return "one device", f"{cause}, so Keras runs the step op by op; {danger}"


def choose_batch_split(call: str, num_samples: int, batch_size: int | None, num_replicas: int,
                       splits_unevenly: bool) -> tuple[str, str]:
    """How a script's fit/evaluate/predict over arrays uses the replicas: "split" (each global batch cut into
    equal slices) or "one device" (the call as the script made it, undistributed), and why.

    A batch that does not divide over the replicas cannot be split on JAX, and another batch size is another
    algorithm (batch_size=1 in multiple-instance learning is one bag a step; evaluate and predict, which train nothing,
    keep the script's batch too, said as such); fit on fewer samples than replicas
    has no batch that divides (leaving samples out would leave them all out). Padding with zero-weight samples
    is not the same math either: Keras's "sum_over_batch_size" divides a batch's loss by all its samples,
    weighted 0 or not (tests/test_decisions.py: two samples padded to four halve the loss). So such a call runs on
    one device, whole, as it runs plainly. TensorFlow splits uneven batches itself.
    """
    batch = keras_batch(batch_size)
    if num_replicas <= 1 or splits_unevenly:
        return "split", "one replica" if num_replicas <= 1 else "the backend splits uneven batches"
    if batch % num_replicas:
        below = batch // num_replicas * num_replicas
        nearest = f" ({below} or {below + num_replicas})" if below else ""
        named = f"batch_size={batch}" + ("" if batch_size else " (Keras's default)")
        kept = "another batch would train another way" if call == "fit" else "acceltrain keeps the script's batch"
        return "one device", (f"{named} does not divide over {num_replicas} replicas, and {kept}. To split it over the "
                              f"replicas, pass a multiple of {num_replicas}{nearest}")
    if call == "fit" and num_samples < num_replicas:
        return "one device", (f"{num_samples} training sample{'s' * (num_samples != 1)}, fewer than the "
                              f"{num_replicas} replicas: no batch of them divides over them")
    return "split", f"batch_size={batch} divides over {num_replicas} replicas"


# Several CPU devices can be many times slower per step than one (issue 22: a batch-32 MLP 11 ms plain, 160 ms on 4
# simulated devices), which looks like a hang. Said from this ratio of the measured step times on.
SLOWER_WORTH_SAYING = 3.0


def slower_on_several_devices(devices: int, several_seconds: float, one_seconds: float, compile_seconds: float,
                              steps: int, processes: int = 1) -> str | None:
    """The line that says a training step on `devices` CPU devices (over `processes` processes) takes many times what
    the same step took on one device, with both measured times and what the measuring cost; None below
    SLOWER_WORTH_SAYING times."""
    ratio = several_seconds / one_seconds
    if ratio < SLOWER_WORTH_SAYING:
        return None
    where = f"{devices} CPU devices" + (f" over {processes} processes" if processes > 1 else "")
    return (f"{where}: a training step takes {several_seconds * 1e3:.0f} ms here, {ratio:.1f}x the "
            f"{one_seconds * 1e3:.1f} ms the same step took on one device (measured once: {steps} steps of a copy of the "
            f"state on one device, after {compile_seconds:.1f} s compiling it). Simulated devices share this machine's "
            "cores, and their all-reduce and one step at a time cost more here than splitting the batch saves: for "
            "speed on this machine, train on one device")


PLAIN_RECHECK_MOST_SECONDS = 600.0  # a failed run longer than this is not run again plainly to judge it
PLAIN_RECHECK_LEAST_BOUND = 120.0  # the plain rerun's time limit: the failed run's time twice, at least this


def choose_plain_recheck(num_processes: int, platform: str, seconds_until_failure: float) -> tuple[float | None, str]:
    """Whether a call that failed under `acceltrain run` is judged by the same script run plainly in a fresh process
    (stopped once that call returns), and for how long at most: (seconds, reason), or (None, why not). Never in the
    half-failed process itself: its state (variables, Keras's caches, a distribution) is what failed."""
    if num_processes > 1:
        return None, "a job of several processes: one plain process would not be the same job"
    if platform != "cpu":
        return None, f"the {platform} is held by this process until it ends: a second process may not reach it"
    if seconds_until_failure > PLAIN_RECHECK_MOST_SECONDS:
        return None, (f"the run failed after {seconds_until_failure:.0f} s; a plain rerun would take as long "
                      f"(rechecked up to {PLAIN_RECHECK_MOST_SECONDS:.0f} s)")
    bound = max(PLAIN_RECHECK_LEAST_BOUND, 2 * seconds_until_failure)
    return bound, f"the run failed after {seconds_until_failure:.0f} s: the plain rerun gets {bound:.0f} s at most"


# --checkpoint-every auto (the default): checkpoints take at most this share of the training time, and no more than
# this much training passes between two of them (what a session dropped without notice runs again; on SIGTERM or
# SIGINT a checkpoint is written at once).
CHECKPOINT_SHARE = 0.02
MOST_SECONDS_BETWEEN_CHECKPOINTS = 300.0


def choose_checkpoint_epochs(epoch_seconds: float, checkpoint_seconds: float, share: float = CHECKPOINT_SHARE,
                             most_seconds: float = MOST_SECONDS_BETWEEN_CHECKPOINTS,
                             epochs_left: int | None = None) -> tuple[int, str]:
    """Every how many epochs an 'auto' run checkpoints, from an epoch's measured time and the first checkpoint's
    (its whole write, an upper bound of what it costs training): every epoch while a checkpoint costs at most
    `share` of one; else the fewest epochs over which it does, but never more than `most_seconds` of them.
    `epochs_left`: the run's epochs after its first checkpoint; a count that reaches past them is said as what
    happens, a checkpoint at the run's end only (the loop always writes the last epoch's)."""
    epochs, why = _checkpoint_epochs(epoch_seconds, checkpoint_seconds, share, most_seconds)
    if epochs_left is not None and epochs > 1 and epochs >= epochs_left:
        why += f": past this run's last epoch ({epochs_left} after the first), so at its end only"
    return epochs, why


def _checkpoint_epochs(epoch_seconds, checkpoint_seconds, share, most_seconds) -> tuple[int, str]:
    cost = checkpoint_seconds / epoch_seconds
    took = f"{checkpoint_seconds * 1e3:.0f} ms" if checkpoint_seconds < 1 else f"{checkpoint_seconds:.1f} s"
    measured = f"a checkpoint took {took} to write, {cost:.1%} of a {epoch_seconds:.2f} s epoch"
    if cost <= share:
        return 1, f"{measured} (≤ {share:.0%}) → every epoch"
    wanted = math.ceil(cost / share)
    most = math.floor(most_seconds / epoch_seconds)
    if most <= 1:
        return 1, f"{measured} > {share:.0%}, but two epochs are over {most_seconds:.0f} s of training → every epoch"
    if wanted > most:
        return most, (f"{measured} > {share:.0%}; every {wanted} epochs would leave over {most_seconds:.0f} s of "
                      f"training between checkpoints → every {most} epochs ({cost / most:.1%})")
    return wanted, f"{measured} > {share:.0%} → every {wanted} epochs ({cost / wanted:.1%})"


def choose_checkpoint_steps(step_seconds: float, steps_per_epoch: int,
                            most_seconds: float | None = None) -> tuple[int | None, str]:
    """Within an epoch, every how many steps an 'auto' run checkpoints, from a step's measured time: none while an
    epoch takes at most `most_seconds` (MOST_SECONDS_BETWEEN_CHECKPOINTS): its end is checkpointed; else as many
    steps as take `most_seconds`."""
    most_seconds = MOST_SECONDS_BETWEEN_CHECKPOINTS if most_seconds is None else most_seconds
    epoch_seconds = step_seconds * steps_per_epoch
    measured = f"a step took {step_seconds:.3g} s, so an epoch of {steps_per_epoch} steps takes {epoch_seconds:.0f} s"
    if epoch_seconds <= most_seconds:
        return None, f"{measured} (≤ {most_seconds:.0f} s) → at epochs' ends"
    steps = max(1, math.floor(most_seconds / step_seconds))
    every = "every step" if steps == 1 else f"every {steps} steps"
    return steps, f"{measured} > {most_seconds:.0f} s → {every} ({steps * step_seconds:.0f} s) within each epoch, and at its end"


DEVICE_DATA_SHARE = 0.25  # the share of a device's memory in-memory arrays may take there (their copies on CPU)


def choose_device_data(backend: str, arrays: bool, nbytes: int, device_bytes: int | None, processes: int,
                       turned_off: str, keras_scans: bool = False,
                       share: float = DEVICE_DATA_SHARE, weights_elsewhere: str = "", share_rows: int = 0,
                       in_job_not: str = "", whole_set: bool = False) -> tuple[bool, str]:
    """Whether a fit's in-memory arrays (its validation data too) are placed on the devices once and each batch
    gathered there (backends/jax/resident.py), instead of Keras slicing them on the host and sending each batch.
    `nbytes`: the arrays' bytes times the copies one memory holds (CPU devices share the host's). `turned_off`: the
    setting that turned it off, in words (--device-data off, ACCELTRAIN_DEVICE_DATA=0), else empty.
    `weights_elsewhere`: where the model's weights lie when not on the devices the data would go to (a model laid
    out on several devices with no distribution in force: a restored sharded checkpoint), else empty. In a job of
    several `processes` each places its own share (`share_rows` samples; `nbytes` its bytes times the copies) on its own
    devices; `in_job_not`: what keeps such a job on Keras's input path (its batches gathered outside acceltrain's steps
    would reach Keras's distribution as global arrays), in words, else empty; `whole_set`: each process holds the whole
    set instead (Runtime.fit with checkpoints: its resumable order draws each batch from every sample)."""
    if turned_off:
        return False, f"turned off: {turned_off}"
    if backend != "jax":
        return False, f"{backend}: Keras's own input path"
    if keras_scans:
        return False, "this Keras scans steps_per_execution itself (3.16+): Keras's own input path"
    if not arrays:
        return False, "the inputs are not in-memory arrays of numbers (or validation_split is left to Keras)"
    if processes > 1 and in_job_not:
        return False, f"{processes} processes and {in_job_not}: each feeds its share through Keras's input path"
    if weights_elsewhere:
        return False, f"the model's weights lie on {weights_elsewhere}, with no distribution to place the data by"
    if device_bytes is None:
        return False, "the devices' memory is unknown"
    figures = f"{nbytes / 2**20:,.1f} MiB of {device_bytes / 2**30:,.1f} GiB, at most {share:.0%}"
    if processes > 1:
        held = ("the whole set (a resumable epoch draws each batch from every sample)" if whole_set
                else "its own share")
        figures = f"each of {processes} processes {held} on its devices, here {share_rows:,} samples: {figures}"
    if nbytes > share * device_bytes:
        return False, f"too large: {figures}"
    return True, (f"{figures}; each step sends only the batch's indices. --device-data off "
                  "(Runtime.keep_data_on_devices('off'), ACCELTRAIN_DEVICE_DATA=0) turns it off")


def choose_steps_per_dispatch(steps_per_epoch: int, steps_per_execution: int, batch_hooked: tuple[str, ...],
                              keras_train_step: bool, compiled: bool, index_bytes_a_step: int,
                              most_index_bytes: int, live: str = "", seconds_a_step: float | None = None,
                              first_steps: int = 16, seconds: float = 1.0, steps_apart: int = 0,
                              most_steps: int = 0) -> tuple[int, str]:
    """Training steps one execution of a fit on device data runs (each execution a few dispatches of about a second,
    timed on the fit's own steps): to the epoch's end when no callback needs each batch, capped by the index bytes one
    dispatch sends; else the model's steps_per_execution, Keras's contract with a batch hook. `live`: a callback that
    must hear from the loop about every `seconds` (the checkpoint loop: its notices and checkpoints within epochs),
    which caps an execution at the steps `seconds` holds, measured (`seconds_a_step`) or, before any, `first_steps`.
    `steps_apart`: executions must start at multiples of it (checkpoints every N steps, as asked): a divisor of it.
    `most_steps`: a callback must be called at least every that many steps (checkpoints 'auto' chose within epochs)."""
    if not compiled:
        return steps_per_execution, "the step runs uncompiled (run_eagerly or jit_compile=False): Keras's own loop"
    if not keras_train_step:
        return steps_per_execution, "the model has its own train_step: Keras's own loop, steps_per_execution"
    if batch_hooked:
        names = list(dict.fromkeys(batch_hooked))  # each class once (two ModelCheckpoints: one name)
        return steps_per_execution, (f"{', '.join(names)} {'has' if len(names) == 1 else 'have'} a batch hook: "
                                     f"steps_per_execution {steps_per_execution}, as Keras calls it")
    steps, why = _steps_without_batch_hooks(steps_per_epoch, index_bytes_a_step, most_index_bytes, live,
                                            seconds_a_step, first_steps, seconds, steps_apart, most_steps)
    if steps_per_execution > 1 and steps != steps_per_execution:  # the model's (its compile()'s, or the platform's)
        why = (f"{why}; not the model's steps_per_execution={steps_per_execution}, which says how often Keras calls "
               f"batch hooks, and no callback has one. To keep {steps_per_execution}: --device-data off "
               f"(Runtime.keep_data_on_devices('off'))")
    return steps, why


def _steps_without_batch_hooks(steps_per_epoch, index_bytes_a_step, most_index_bytes, live, seconds_a_step,
                               first_steps, seconds, steps_apart, most_steps) -> tuple[int, str]:
    """choose_steps_per_dispatch's count where no callback needs each batch, and why."""
    cap = max(1, most_index_bytes // max(index_bytes_a_step, 1))
    steps, why = steps_per_epoch, "no callback needs each batch: to the epoch's end, about a second a dispatch"
    if steps_per_epoch > cap:
        steps, why = cap, f"no callback needs each batch; capped by {most_index_bytes // 2**20} MiB of indices"
    if live:
        within = first_steps if seconds_a_step is None else max(1, int(seconds / max(seconds_a_step, 1e-9)))
        if within < steps:
            measured = (f"{seconds_a_step * 1e3:,.2f} ms a step measured" if seconds_a_step is not None
                        else "no step measured yet")
            steps, why = within, f"{live} hears from each execution: about {seconds:g} s of steps ({measured})"
    if most_steps and most_steps < steps:
        steps, why = most_steps, f"{why}; at most {most_steps}, the steps between checkpoints"
    if steps_apart and steps_apart % steps:
        steps = max(d for d in range(1, min(steps, steps_apart) + 1) if steps_apart % d == 0)
        why = (f"{why}; a divisor of {steps_apart}, so that executions start at the steps the checkpoint loop stops at "
               "(checkpoints due, or the steps its 'auto' cadence times)")
    return steps, why


def choose_step_loop(platform: str, devices: int) -> tuple[bool, str]:
    """How a fit on device data runs the steps of one execution: in one compiled loop (one dispatch for many steps:
    the device waits on no host between them, and the host spends no Python a step), or, over several CPU devices,
    each step its own program, one at a time (their collectives share XLA's small CPU thread pool:
    backends/jax/steps.py). On one CPU device the loop was measured against one program a step, interleaved in one
    process (the seed's MLP, issue 43, load ~13-15, so CPU time, not wall time): at batch 32 (1,875 steps an epoch) the
    Python thread spent 0.02 s an epoch against 0.30 s, the process 3.21 s of CPU against 3.42 s (a hand-written
    lax.scan epoch: 3.11 s); at batch 128, 0.01 s against 0.09 s, and 2.05 s against 2.21 s (hand: 2.10 s)."""
    if platform == "cpu" and devices > 1:
        return False, f"{devices} CPU devices: each step its own program, one at a time (their collectives)"
    return True, f"{devices} {platform} device(s): the steps in one compiled loop a dispatch"


# launch --emit jobset --grace-period FILE.json: the pods' grace after SIGTERM (terminationGracePeriodSeconds) sized
# from a run's measured checkpoints, with room for a slower shared file system than the measured run's and for the
# step in flight and the processes' agreement on it; never under Kubernetes's default.
KUBERNETES_GRACE_SECONDS = 30
GRACE_SAVE_MARGIN = 3
GRACE_STEP_SECONDS = 10


def choose_grace(checkpoint_seconds: float, checkpoints: int) -> tuple[int, str]:
    """Whole seconds of grace from a run's ledger (its `checkpoint` part, the loop's time blocked saving, restoring or
    finishing checkpoints: an upper bound of a save, and their count): GRACE_SAVE_MARGIN x a checkpoint +
    GRACE_STEP_SECONDS, at least KUBERNETES_GRACE_SECONDS."""
    if checkpoints <= 0:
        return KUBERNETES_GRACE_SECONDS, f"no checkpoint measured → Kubernetes's default {KUBERNETES_GRACE_SECONDS} s"
    each = checkpoint_seconds / checkpoints
    needed = math.ceil(GRACE_SAVE_MARGIN * each + GRACE_STEP_SECONDS)
    measured = (f"a checkpoint took {each:.1f} s ({checkpoints} measured): {GRACE_SAVE_MARGIN} × it + "
                f"{GRACE_STEP_SECONDS} s = {needed} s")
    if needed <= KUBERNETES_GRACE_SECONDS:
        return KUBERNETES_GRACE_SECONDS, f"{measured} ≤ {KUBERNETES_GRACE_SECONDS} s → Kubernetes's default"
    return needed, f"{measured}"
