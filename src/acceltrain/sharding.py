"""Which weight goes where when a model is bigger than one device: pure functions of shapes and bytes.

No framework here: shapes are tuples of ints, dtypes are names ("float32"), sizes are bytes. The backend
turns a spec (a PartitionSpec-like tuple of mesh axis names and None) into a real layout; the planner
(`acceltrain plan`) and the 'auto' distribution both decide from these numbers.

The fsdp rule, as in google/parallax `parallax/sharding/fsdp.py`: every weight of two or more dimensions
is cut along one axis, its largest one that the device count divides; vectors and scalars (biases,
norms, counters) are replicated: they are small, and cutting them saves little and costs a gather.
Optimizer slots have their weight's shape and layout (Keras gives a slot its variable's layout), so
sharding the weights shards Adam's state too.
"""

import difflib
import math

from acceltrain.errors import UsageError

# Bytes per element of the dtypes Keras variables take.
DTYPE_BYTES = {
    "float64": 8, "int64": 8, "uint64": 8,
    "float32": 4, "int32": 4, "uint32": 4,
    "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

# Adam, AdamW, Lion ... keep this many slots per weight, each the weight's shape and dtype. An optimizer
# missing here counts as Adam's 2: too many bytes is the safe side of a memory estimate.
OPTIMIZER_SLOTS = {"sgd": 0, "rmsprop": 1, "adagrad": 1, "lion": 1, "adam": 2, "adamw": 2, "nadam": 2,
                   "adamax": 2, "adafactor": 2, "lamb": 2}

# Without a measured device memory, 'auto' keeps this share of it free for activations, XLA's buffers
# and fragmentation: the training state alone must fit in the rest.
DEFAULT_HEADROOM = 0.25

GIB = 1024**3
MIB = 1024**2
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": MIB,
          "g": 1000**3, "gb": 1000**3, "gib": GIB, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name; unknown names count as 4 (float32)."""
    return DTYPE_BYTES.get(str(dtype), 4)


def shard_axis(shape: tuple[int, ...], axis_size: int) -> int | None:
    """The axis of `shape` to cut over `axis_size` devices under the fsdp rule, or None to replicate.

    The largest dimension that `axis_size` divides (the first of equals); None for vectors and scalars,
    for a single device, and when no dimension divides (that weight stays whole: see `indivisible`).
    """
    if axis_size <= 1 or len(shape) < 2:
        return None
    divisible = [axis for axis, size in enumerate(shape) if size >= axis_size and size % axis_size == 0]
    if not divisible:
        return None
    return max(divisible, key=lambda axis: (shape[axis], -axis))


def fsdp_spec(shape: tuple[int, ...], axis_size: int, axis_name: str = "model") -> tuple[str | None, ...]:
    """A PartitionSpec-like tuple for `shape`: `axis_name` on its shard_axis, None elsewhere."""
    axis = shard_axis(shape, axis_size)
    return tuple(axis_name if index == axis else None for index in range(len(shape)))


def indivisible(shape: tuple[int, ...], axis_size: int) -> bool:
    """A weight the rule wanted to cut (two or more dims, several devices) but no dimension divides."""
    return axis_size > 1 and len(shape) >= 2 and shard_axis(shape, axis_size) is None


def spec_divisor(spec: tuple, mesh_shape: dict[str, int]) -> int:
    """Into how many parts a spec cuts a tensor on a mesh of {axis name: size}."""
    parts = 1
    for entry in spec:
        for name in (entry if isinstance(entry, tuple) else (entry,)):
            if name is not None:
                parts *= mesh_shape.get(name, 1)
    return parts


def state_bytes(
    weights: list[tuple[tuple[int, ...], str]],
    optimizer_slots_per_weight: int,
    axis_size: int = 1,
    trainable: list[bool] | None = None,
) -> dict:
    """Bytes of the training state: weights, their gradients and optimizer slots, whole and per device.

    `weights` are (shape, dtype) pairs. Gradients and slots exist for trainable weights only, in the
    weight's dtype. "per_device" is what the first device holds when each weight is laid out by the
    fsdp rule over `axis_size` devices (replicated weights count whole on every device).
    """
    trainable = [True] * len(weights) if trainable is None else list(trainable)
    totals = {"params": 0, "weights": 0, "gradients": 0, "optimizer": 0, "per_device": 0,
              "sharded_weights": 0}
    for (shape, dtype), trains in zip(weights, trainable):
        nbytes = math.prod(shape) * dtype_bytes(dtype)
        copies = 1 + (1 + optimizer_slots_per_weight if trains else 0)  # weight, gradient, slots
        parts = axis_size if shard_axis(tuple(shape), axis_size) is not None else 1
        totals["params"] += math.prod(shape)
        totals["weights"] += nbytes
        if trains:
            totals["gradients"] += nbytes
            totals["optimizer"] += nbytes * optimizer_slots_per_weight
        totals["per_device"] += copies * nbytes // parts
        if parts > 1:
            totals["sharded_weights"] += nbytes
    totals["replicated"] = totals["weights"] + totals["gradients"] + totals["optimizer"]
    return totals


def sharded_bytes_by_degree(
    weights: list[tuple[tuple[int, ...], str]], optimizer_slots_per_weight: int, num_devices: int,
    trainable: list[bool] | None = None,
) -> dict[int, int]:
    """Per-device bytes of the training state for each sharding degree that divides the device count."""
    return {
        degree: state_bytes(weights, optimizer_slots_per_weight, degree, trainable)["per_device"]
        for degree in range(2, num_devices + 1)
        if num_devices % degree == 0
    }


def choose_sharding(
    bytes_replicated: int,
    bytes_sharded_by_degree: dict[int, int],
    num_devices: int,
    device_memory: int | None,
    headroom: float = DEFAULT_HEADROOM,
) -> tuple[str, int, str]:
    """'auto': ("data" | "fsdp" | "none", degree, reason with the numbers).

    1. Device memory unknown: data parallel (nothing to weigh against).
    2. The whole training state fits one device with `headroom` to spare: data parallel (or none on
       one device): no gathers, the fastest when it fits.
    3. Else fsdp over the fewest devices whose share fits (less sharding, fewer and smaller gathers).
    4. Else stop, with the numbers and what would help.
    """
    spread = "none" if num_devices == 1 else "data"
    if device_memory is None:
        return spread, num_devices, f"device memory unknown: {format_bytes(bytes_replicated)} replicated, unchecked"
    budget = int(device_memory * (1 - headroom))
    keep = f"{format_bytes(budget)} usable per device ({format_bytes(device_memory)} less {headroom:.0%} headroom)"
    if bytes_replicated <= budget:
        return spread, num_devices, f"{format_bytes(bytes_replicated)} to replicate fits {keep}"
    for degree in sorted(bytes_sharded_by_degree):
        if degree > 1 and num_devices % degree == 0 and bytes_sharded_by_degree[degree] <= budget:
            return "fsdp", degree, (f"{format_bytes(bytes_replicated)} to replicate > {keep} → fsdp over "
                                    f"{degree}: {format_bytes(bytes_sharded_by_degree[degree])} each")
    most = max(bytes_sharded_by_degree, default=1)
    needs = bytes_sharded_by_degree.get(most, bytes_replicated)
    raise UsageError(
        f"The model does not fit even sharded over {most} device(s): its training state (weights, gradients, "
        f"optimizer slots) needs {format_bytes(needs)} per device, has {keep}. What would help: more devices, "
        "bfloat16 weights, an optimizer with fewer slots (SGD keeps none, Adam two), a smaller model, or "
        "--device-memory / device_memory= if the memory given is wrong."
    )


def born_cut(shape: tuple[int, ...], dtype: str, trainable: bool, held: int, budget: int, axis_size: int,
             slots: int = OPTIMIZER_SLOTS["adam"]) -> tuple[bool, int]:
    """Under 'auto' with a device memory, as each variable of a model built in scope() is created (the model
    cannot be weighed before its first fit): (cut it by the fsdp rule?, the training state the first device
    holds once it is born). `held`: what it holds of the variables born before it.

    1. Born whole while what the device holds, with this variable's state whole (the variable and, trainable,
       its gradient and `slots` optimizer slots: Adam's two until the optimizer is known), fits `budget`: a model
       that fits is born as data parallel builds it.
    2. Else cut by the fsdp rule over `axis_size` devices, where the rule cuts it: no device ever holds more
       than the budget of whole variables, whatever the model's size.
    3. Else whole (a vector, a shape no dimension of which divides): counted whole.
    The first fit then weighs the whole model and moves each variable to the layout chosen for it.
    """
    state = math.prod(shape) * dtype_bytes(dtype) * (1 + (1 + slots if trainable else 0))
    if held + state <= budget or shard_axis(tuple(shape), axis_size) is None:
        return False, held + state
    return True, held + state // axis_size


def model_axis_size(num_devices: int) -> int:
    """The model axis of a 2-D (batch x model) mesh when nothing says otherwise: the smallest divisor of
    the device count at least its square root (8 → 2 x 4, as keras_hub's own examples; 4 → 2 x 2)."""
    for size in range(2, num_devices + 1):
        if num_devices % size == 0 and size * size >= num_devices:
            return size
    return 1


def parse_bytes(text: str, name: str = "device_memory") -> int:
    """"128MiB", "16GiB", "1.5GB", "4096" (bytes) → bytes; a UsageError names `name` otherwise."""
    if isinstance(text, int) and not isinstance(text, bool) and text > 0:
        return text
    raw = str(text).strip().lower().replace(" ", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or not value > 0 or not math.isfinite(value):
        flag = name.startswith("--")  # the CLI's flag, else the Python argument
        received, example = (f"{name} {text!r}", f"{name} 16GiB") if flag else (f"{name}={text!r}", f"{name}='16GiB'")
        raise UsageError(
            f"Received {received}. Valid: a positive size such as 128MiB, 16GiB, 1.5GB or a number of "
            f"bytes. Pass e.g. {example}."
        )
    return int(value * _UNITS[unit])


def format_bytes(nbytes: int) -> str:
    """1536 → "1.5 KiB"; binary units, as device memory is sold."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} B"


def format_params(count: int) -> str:
    """25_200_000 → "25.2M params"."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit} params"
    return f"{count} params"


def unmatched_layout_keys(keys: list[str], paths: list[str], matches) -> dict[str, list[str]]:
    """LayoutMap keys that match no variable path, each with the nearest paths (the fullmatch trap:
    since Keras 3.14 a key must match the whole path, so 'dense.*kernel' misses 'mlp/dense/kernel').

    `matches(key, path)` is how the Keras in use matches (re.fullmatch since 3.14).
    """
    missing = {}
    for key in keys:
        if not any(key == path or matches(key, path) for path in paths):
            missing[key] = difflib.get_close_matches(key, paths, n=3, cutoff=0.0)
    return missing


def coverage(variables: list[tuple[str, tuple[int, ...], str, int]], warn_above: int) -> dict:
    """How much of the weight bytes is sharded, from (path, shape, dtype, parts) per variable.

    `parts` is into how many pieces the variable's layout cuts it (1: replicated). A replicated
    variable of more than `warn_above` bytes is listed in "big_replicated", largest first.
    """
    total = sharded = 0
    big = []
    for path, shape, dtype, parts in variables:
        nbytes = math.prod(shape) * dtype_bytes(dtype)
        total += nbytes
        if parts > 1:
            sharded += nbytes
        elif nbytes > warn_above:
            big.append((path, nbytes))
    big.sort(key=lambda item: -item[1])
    return {"bytes": total, "sharded_bytes": sharded, "share": sharded / total if total else 0.0,
            "big_replicated": big}
