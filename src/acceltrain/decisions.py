"""The 'auto' decisions. Each is one short ordered function of plain values that returns its choice
and the reason, so a table-driven test covers it and the CLI can print it in one line.
"""

from acceltrain import hardware
from acceltrain.errors import UsageError

BACKENDS = ("jax", "tensorflow")
DISTRIBUTIONS = ("auto", "data", "fsdp", "model", "none")
SHARDED = ("fsdp", "model")  # weights cut over devices: keras.distribution on JAX only


def choose_backend(requested: str | None, loaded: str | None, env: str | None, jax_importable: bool,
                   config_file: tuple[str | None, str] = (None, "")) -> tuple[str, str]:
    """Keras's backend: the one already loaded, else the one asked for, else KERAS_BACKEND, else the one in
    Keras's config file (`config_file`: (backend, path), from backends.keras_config_backend), else jax.

    After the loaded Keras and the argument, the order is Keras's own: KERAS_BACKEND over keras.json.
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
                f"Received backend={requested!r}, but Keras is already loaded with the {loaded!r} "
                "backend in this process and cannot switch. Call connect() before importing keras, "
                f"or pass backend={loaded!r}."
            )
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


def choose_steps_per_execution(platform: str, steps_per_epoch: int, compiled_with: int = 1,
                               requested: int | None = None) -> tuple[int, str]:
    """Training steps per compiled call: fit's argument, else the model's own setting, else the platform's,
    within an epoch. Keras's default of 1 cannot be told from a 1 set in compile(): see
    steps_per_execution_override for the warning when the platform's replaces it."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise UsageError(f"Received steps_per_execution={requested!r}. Expected a whole number of at least 1.")
        return requested, "asked for in fit"
    if compiled_with != 1:
        return compiled_with, "set by the model's compile()"
    per_platform = hardware.kind(platform).STEPS_PER_EXECUTION
    if steps_per_epoch < per_platform:
        return max(steps_per_epoch, 1), f"{platform}: {per_platform}, capped at the {steps_per_epoch} steps of an epoch"
    return per_platform, f"{platform}'s setting"


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
