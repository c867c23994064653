"""Where a model's weights go: the sharding inputs of connect() checked, the distribution made, the
'auto' choice once the model can be measured (Runtime.build), and what was sharded, reported loudly.

Neutral: the numbers come from `acceltrain.sharding`, the arrays from the backend module.
"""

import inspect
import re
import shlex
import weakref
from dataclasses import dataclass, field, replace

from acceltrain import decisions, log, sharding
from acceltrain.errors import UsageError

# A weight bigger than this left whole on every device is worth a warning: each device pays for it.
WARN_REPLICATED_BYTES = 1024**2

# 'auto' weighs the training state (weights, gradients, slots), not the activations, against the memory
# less its headroom. A state over this share of that budget leaves the activations little room: the
# banner then names `acceltrain plan`, which compiles the step and counts them.
CLOSE_TO_FULL = 0.8


@dataclass
class Request:
    """What connect() was asked about sharding, checked; `chosen` is the kind in force."""

    kind: str = "auto"  # auto | data | fsdp | model | none
    device_memory: int | None = None  # bytes per device: device_memory=, else the hardware's
    memory_source: str = "unknown"
    mesh_shape: tuple[int, int] | None = None
    layout_map: object = None  # the user's keras.distribution.LayoutMap
    chosen: str = "none"
    reported: weakref.WeakSet = field(default_factory=weakref.WeakSet)  # models already reported


def check_request(distribution, device_memory, mesh_shape) -> Request:
    """connect()'s sharding arguments, checked before any framework starts."""
    layout_map = None
    if not isinstance(distribution, str):
        if not (hasattr(distribution, "device_mesh") and hasattr(distribution, "keys")):
            raise UsageError(f"Received distribution={distribution!r}. Valid: {', '.join(decisions.DISTRIBUTIONS)}, "
                             "or a keras.distribution.LayoutMap.")
        layout_map, distribution = distribution, "model"
    memory = None if device_memory is None else sharding.parse_bytes(device_memory, "device_memory")
    if mesh_shape is not None:
        if distribution != "model":
            raise UsageError(f"Received mesh_shape={mesh_shape!r} with distribution={distribution!r}. A mesh shape "
                             "is (batch, model) devices of distribution='model': pass both, or neither.")
        if not (isinstance(mesh_shape, (tuple, list)) and len(mesh_shape) == 2
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in mesh_shape)):
            raise UsageError(f"Received mesh_shape={mesh_shape!r}. Expected (batch, model): two whole numbers of "
                             "at least 1 whose product is the device count, e.g. (2, 4) for 8 devices.")
        mesh_shape = tuple(mesh_shape)
    return Request(distribution, memory, "device_memory=" if memory else "unknown", mesh_shape, layout_map)


def check_against_hardware(request: Request, kind: str, framework, found) -> Request:
    """The request checked against the devices found: the mesh fits them; completed with the `kind` chosen and,
    where it was not given, the device memory the hardware reports."""
    if request.mesh_shape and request.mesh_shape[0] * request.mesh_shape[1] != found.num_devices:
        raise UsageError(f"Received mesh_shape={request.mesh_shape}, {request.mesh_shape[0] * request.mesh_shape[1]} "
                         f"devices, but there are {found.num_devices}. Pass a (batch, model) shape whose product is "
                         f"{found.num_devices}, or leave mesh_shape out to have the model axis chosen.")
    if request.layout_map is not None and not framework.is_layout_map(request.layout_map):
        raise UsageError(f"Received distribution={request.layout_map!r}: not a keras.distribution.LayoutMap.")
    if request.device_memory is not None and not framework.SHARDS:
        log.warn(f"device_memory={sharding.format_bytes(request.device_memory)} is not used on the {framework.NAME} "
                 "backend: it shards nothing, so 'auto' stays data parallel. Use --backend jax to fit a model to it.")
    if request.device_memory is None and framework.SHARDS:
        memory = framework.device_memory(found.platform)
        request = replace(request, device_memory=memory, memory_source="the hardware" if memory else "unknown")
    return replace(request, chosen=kind)


def make_distribution(request: Request, framework, found):
    kind = request.chosen
    if kind not in decisions.SHARDED:
        born = _born_within(request, framework, found)
        return framework.make_distribution(kind, found.devices, **({"born_within": born} if born else {}))
    model_axis = request.mesh_shape[1] if request.mesh_shape else None
    return framework.make_distribution(kind, found.devices, model_axis=model_axis, layout_map=request.layout_map)


def _born_within(request: Request, framework, found) -> int | None:
    """'auto' with a device memory over several devices, on JAX: the training state bytes a device may hold of
    variables born whole (the budget: the memory less its headroom), before a model's first fit weighs it."""
    if (request.kind != "auto" or request.chosen != "data" or request.device_memory is None
            or not framework.SHARDS or found.num_devices < 2):
        return None
    return int(request.device_memory * (1 - sharding.DEFAULT_HEADROOM))


def born_note(request: Request, framework, found) -> str:
    """What the banner adds where models are born within a budget (make_distribution), else ""."""
    born = _born_within(request, framework, found)
    if born is None:
        return ""
    return (f"; a model built in scope() is born whole up to {sharding.format_bytes(born)} of training state a "
            "device, cut past it, and weighed at its first fit")


# --- At build time: the model can be measured -------------------------------------------------------

def choose_for_model(runtime, build_model, layout_map=None, job: dict | None = None):
    """Before `build_model()` runs for real: 'auto' weighs its training state against the device memory
    (fsdp if it does not fit one device); 'model' takes the model's own layout map and the model axis.
    Returns (kind, distribution, reason) to use instead of connect()'s, or None to keep it (Runtime.build)."""
    request, framework = runtime.sharding_request, runtime.backend_module
    if request.layout_map is not None or not framework.SHARDS:
        return None  # the user's own layout stands; TensorFlow has no sharding to choose
    job = job_of(build_model, job)
    memory_known = request.device_memory is not None
    if request.kind == "auto" and memory_known:
        state = measure(runtime, build_model)
        by_degree = {runtime.num_devices: state["at_all_devices"]} if runtime.num_devices > 1 else {}
        choice, degree, reason = _choose_sharding(runtime, job, state["replicated"], by_degree)
        needs = by_degree[degree] if choice == "fsdp" else state["replicated"]
        log.info(f"{sharding.format_params(state['params'])}, {reason} (device memory from {request.memory_source})"
                 + _close_to_full_note(runtime, job, needs))
        if choice == "fsdp":
            return "fsdp", framework.make_distribution("fsdp", runtime.hardware.devices), reason
    elif request.chosen == "model" and (layout_map is not None or (memory_known and not request.mesh_shape)):
        model_axis = request.mesh_shape[1] if request.mesh_shape else None
        if model_axis is None and memory_known:
            model_axis = _model_axis_that_fits(runtime, build_model, job)
        return ("model", framework.make_distribution("model", runtime.hardware.devices, model_axis=model_axis,
                                                     layout_map=layout_map),
                "asked for" + (", the model's own layout map" if layout_map is not None else ""))
    return None


def check_fits_sharded(runtime, build_model, job: dict | None = None) -> None:
    """Stop, with the numbers and the `acceltrain plan` line, where even the training state alone (weights,
    gradients, slots: no lever makes them smaller) does not fit cut over every device: before anything is compiled."""
    state = measure(runtime, build_model)
    by_degree = {runtime.num_devices: state["at_all_devices"]} if runtime.num_devices > 1 else {}
    _choose_sharding(runtime, job_of(build_model, job), state["replicated"], by_degree)


def measure(runtime, build_model) -> dict:
    """The training state `build_model()` would have, per sharding degree, with nothing allocated."""
    from acceltrain import precision

    with precision.scope(runtime.precision):
        weights, slot_bytes = runtime.backend_module.abstract_state(build_model)
    shapes = [(shape, dtype) for _, shape, dtype, _ in weights]
    trainable = [trains for *_, trains in weights]
    trainable_bytes = sharding.state_bytes(shapes, 0, trainable=trainable)["gradients"]
    if slot_bytes is None or not trainable_bytes:
        slots = sharding.OPTIMIZER_SLOTS["adam"]  # not compiled yet: assume Adam's two, the safe side
    else:
        slots = round(slot_bytes / trainable_bytes)
    state = sharding.state_bytes(shapes, slots, 1, trainable)
    state["slots_per_weight"] = slots
    state["by_degree"] = sharding.sharded_bytes_by_degree(shapes, slots, runtime.num_devices, trainable)
    state["at_all_devices"] = state["by_degree"].get(runtime.num_devices, state["replicated"])
    return state


def _model_axis_that_fits(runtime, build_model, job: dict) -> int | None:
    state = measure(runtime, build_model)
    _, degree, reason = _choose_sharding(runtime, job, state["replicated"], state["by_degree"])
    log.info(f"model axis {degree}: {sharding.format_params(state['params'])}, {reason}")
    return degree if degree > 1 else None


def _choose_sharding(runtime, job: dict, bytes_replicated: int, by_degree: dict) -> tuple[str, int, str]:
    """sharding.choose_sharding, its "does not fit" naming the `acceltrain plan` line that checks the job."""
    try:
        return sharding.choose_sharding(bytes_replicated, by_degree, runtime.num_devices,
                                        runtime.sharding_request.device_memory)
    except UsageError as error:
        raise UsageError(f"{error} {check_before_renting(runtime, job)}") from None


def _close_to_full_note(runtime, job: dict, needs: int) -> str:
    budget = runtime.sharding_request.device_memory * (1 - sharding.DEFAULT_HEADROOM)
    if needs <= CLOSE_TO_FULL * budget:
        return ""
    return (f"; that is {needs / budget:.0%} of it, and the activations are not counted: "
            f"`{plan_command(runtime.sharding_request, runtime.hardware, _with_precision(runtime, job))}` compiles the "
            "step and counts them")


# --- Check before renting: the `acceltrain plan` line for this job ---------------------------------

def job_of(build_model, job: dict | None = None) -> dict:
    """What `acceltrain plan` needs to name the job: the caller's `job` ({"recipe": NAME} or {"model":
    "FILE.py:FUNCTION"}, and "batch_size"), else build_model's own FILE.py:NAME (None where it has none)."""
    return dict(job) if job else {"model": _model_function(build_model)}


def check_before_renting(runtime, job: dict) -> str:
    """The sentence a "does not fit" ends with: how to check this job against hardware before renting it."""
    command = plan_command(runtime.sharding_request, runtime.hardware, _with_precision(runtime, job))
    return (f"Check it against hardware before renting: `{command}` compiles its "
            "training step for a --target and says what would fit (tpu-v5e-16, tpu-v4-128, h100-8 ... or here).")


def _with_precision(runtime, job: dict) -> dict:
    """`job` with the precision the user asked for (precision=, --precision): plan's 'auto' is the runtime's own
    'auto' on the same hardware, so only a precision asked for needs saying."""
    return {**job, "precision": runtime.precision} if runtime.precision_asked else job


def plan_command(request: Request, found, job: dict) -> str:
    """The `acceltrain plan` command line for this job (job_of, with the "precision" asked for, if any) on this
    hardware, or, where the model's function is not known (a model built in scope(), a lambda), the
    acceltrain.plan() call with the job's numbers.

    The target is this hardware's rental name (8 "TPU v5 lite" devices: tpu-v5e-8); a CPU, or a kind the
    targets table lacks, is `here`, with the device memory 'auto' used (and, for simulated devices, as many
    of them). `request`: the runtime's sharding request; `found`: its hardware.Hardware.
    """
    target = None if found.platform == "cpu" else _rental_name(found.device_kind, found.num_devices)
    memory = None
    if target is None or request.memory_source == "device_memory=":
        memory = _size_argument(request.device_memory) if request.device_memory else None
    if job.get("recipe") or job.get("model"):
        words = ["acceltrain", "plan", "--target", target or "here"]
        words += [job["recipe"]] if job.get("recipe") else ["--model", job["model"]]
        words += ["--batch-size", str(job["batch_size"])] if job.get("batch_size") else []
        words += ["--device-memory", memory] if memory else []
        words += ["--precision", job["precision"]] if job.get("precision") else []
        if found.simulated:  # `plan` sees the devices JAX starts with: simulate the same ones
            words.insert(0, f"XLA_FLAGS=--xla_force_host_platform_device_count={found.num_devices}")
        return shlex.join(words)
    arguments = [repr(target or "here"), "model='FILE.py:FUNCTION'"]
    arguments += [f"batch_size={job['batch_size']}"] if job.get("batch_size") else []
    arguments += [f"device_memory={memory!r}"] if memory else []
    arguments += [f"precision={job['precision']!r}"] if job.get("precision") else []
    return f"acceltrain.plan({', '.join(arguments)}) with FILE.py:FUNCTION returning the compiled model"


def _rental_name(device_kind: str, num_devices: int) -> str | None:
    from acceltrain.planning import targets

    return targets.rental_name(device_kind, num_devices)


def _model_function(build_model) -> str | None:
    """"FILE.py:NAME" for a function defined at the top of a module file (not __main__: `plan` would import
    the script and run it); None for anything else (a lambda, a closure, a partial)."""
    name = getattr(build_model, "__name__", "")
    top_level = inspect.isfunction(build_model) and name.isidentifier() and build_model.__qualname__ == name  # not <lambda>
    if not top_level or build_model.__module__ == "__main__":
        return None
    try:
        path = inspect.getsourcefile(build_model)
    except TypeError:
        return None
    return f"{path}:{name}" if path and path.endswith(".py") else None


def _size_argument(nbytes: int) -> str:
    """Bytes as --device-memory takes them, exactly: 24MiB, 16GiB, or a number of bytes."""
    for unit, size in (("GiB", sharding.GIB), ("MiB", sharding.MIB), ("KiB", 1024)):
        if nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return str(nbytes)


# --- After building: what was sharded, loudly --------------------------------------------------------

def report(runtime, model) -> None:
    """Once per model: the share of weight bytes sharded and what the first device holds; a warning for
    each big weight left whole and each weight whose shape did not divide; an error for a LayoutMap key
    that matches no weight. (A model built in scope() under 'auto' is weighed at its first fit instead:
    layout/autopilot.py.)"""
    request = getattr(runtime, "sharding_request", None)  # None: a stand-in runtime (tests of run's layers)
    framework = getattr(runtime, "backend_module", None)
    if request is None or model in request.reported or not getattr(framework, "SHARDS", False):
        return
    request.reported.add(model)
    if request.chosen not in decisions.SHARDED:
        return
    rows = framework.variable_layouts(model.weights)
    if request.layout_map is not None:
        _check_layout_keys(list(request.layout_map), [path for path, *_ in rows])
    indivisible = framework.indivisible_weights(runtime.distribution)
    coverage = sharding.coverage(rows, WARN_REPLICATED_BYTES)
    first = framework.first_device_bytes(model.weights)
    log.info(f"weights sharded: {coverage['share']:.1%} of {sharding.format_bytes(coverage['bytes'])}; the first "
             f"device holds {sharding.format_bytes(first)} of them ({first / max(coverage['bytes'], 1):.1%})")
    for path, (shape, spec) in indivisible.items():
        log.warn(f"{path} of shape {shape} does not divide by its layout {spec} on this mesh: it is replicated on "
                 "every device. A dimension divisible by the axis size would let it be cut.")
    for path, nbytes in coverage["big_replicated"]:
        if path not in indivisible:
            log.warn(f"{path} ({sharding.format_bytes(nbytes)}) is left whole on every device by the layout. "
                     "Give it a LayoutMap key to cut it.")


def _check_layout_keys(keys: list[str], paths: list[str]) -> None:
    missing = sharding.unmatched_layout_keys(keys, paths, re.fullmatch)
    if missing:
        key, nearest = next(iter(missing.items()))
        raise UsageError(
            f"LayoutMap key {key!r} matches no variable path of the model"
            + (f" (and {len(missing) - 1} more: {', '.join(map(repr, list(missing)[1:]))})" if len(missing) > 1 else "")
            + f". Nearest paths: {', '.join(nearest)}. Keys must match the whole path (re.fullmatch, Keras ≥ 3.14): "
            + (f"prefix the key with '.*' (e.g. {'.*' + key.lstrip('^')!r}) or " if not key.startswith(".*") else "")
            + "spell the path out."
        )
