"""Plan before you pay: will this training job fit the hardware you are about to rent, and how fast can it go?

    plan = acceltrain.plan("tpu-v5e-8", model="models.py:build", batch_size=1024)
    print(plan.table()); plan.as_dict()

For each candidate distribution the real Keras training step is compiled by the target's own compiler
(libtpu's compile-only client for a TPU, on this CPU; this machine's for `here`), from shapes alone: the
model is never materialised. The compiler's memory analysis says the bytes each device needs; its cost
analysis the FLOPs of a step, which over the published peak give a lower bound of the step time. Where
no compiler for the target runs here (GPU boxes, or libtpu not installed), the figures are an analytic
estimate, and say so.
"""

from dataclasses import asdict, dataclass, field

from acceltrain import log, sharding
from acceltrain.errors import UsageError
from acceltrain.planning import targets

DISTRIBUTIONS = ("auto", "data", "fsdp", "model")
ESTIMATE = "estimate"
INSTALL_COMPILER = "pip install 'acceltrain[tpu]' (libtpu, ~680 MB) for the TPU compiler's own figures"


@dataclass
class Candidate:
    distribution: str
    mesh: str
    bytes_per_device: int
    fits: bool
    flops_per_step: float
    step_seconds_at_peak: float | None


@dataclass
class Lever:
    name: str  # "bfloat16" | "remat" | "accumulate" | "more chips"
    bytes_per_device: int
    fits: bool
    how: str


@dataclass
class Plan:
    target: str
    devices: int
    device_memory_bytes: int
    compiled_for: str  # the compiler's device_kind, or "estimate"
    candidates: list[Candidate]
    recommended: str | None
    reason: str
    batch_size: int
    params: int
    levers: list[Lever] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The --json document: these keys exactly."""
        return {"target": self.target, "devices": self.devices, "device_memory_bytes": self.device_memory_bytes,
                "compiled_for": self.compiled_for,
                "candidates": [_json_safe(asdict(candidate)) for candidate in self.candidates],
                "recommended": self.recommended}

    def table(self) -> str:
        return format_table(self)


def plan(target: str, *, recipe: str | None = None, model: str | None = None, batch_size: int | None = None,
         distribution: str = "auto", device_memory: str | int | None = None) -> Plan:
    """Compile (or estimate) the training step for `target` under each candidate distribution.

    Args:
        target: what you would rent, e.g. "tpu-v5e-8", "v5litepod-16", "tpu-v4-128", "h100-8", or "here".
        recipe: a built-in job (default "mnist-mlp"); or
        model: "FILE.py:FUNCTION", a function returning a compiled keras.Model.
        batch_size: the global batch (default: the recipe's).
        distribution: "auto" (every candidate: data, fsdp, model), or one of them.
        device_memory: bytes per device (e.g. "16GiB"), instead of the target's; needed for "here" on a CPU.
    """
    from acceltrain import recipes

    # 1. Check the arguments, before any framework starts.
    found = targets.resolve(target)
    if distribution not in DISTRIBUTIONS:
        raise UsageError(f"Received distribution={distribution!r}. Valid: {', '.join(DISTRIBUTIONS)}.")
    if recipe is not None and model is not None:
        raise UsageError(f"Received recipe={recipe!r} and model={model!r}: plan one or the other.")
    job = recipes.get(recipe or recipes.DEFAULT)
    build = _model_builder(job, model)
    batch_size = job.BATCH_SIZE if batch_size is None else batch_size
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"Received batch_size={batch_size!r}. Expected a positive whole number (the global batch).")
    memory = sharding.parse_bytes(device_memory) if device_memory is not None else None

    # 2. Start Keras on JAX, on this machine's CPU unless it has an accelerator.
    _start_jax()

    # 3. Build the model from shapes alone; find the devices to compile for.
    from acceltrain.planning import step

    abstract = step.build_abstract(build)
    devices, compiled_for, memory, notes = _devices(found, memory)
    if devices is not None:
        log.info(f"{abstract.params:,} parameters, built from shapes; compiling for {len(devices)} {compiled_for} "
                 "device(s)")
    num_devices = len(devices) if devices else found.devices
    from acceltrain import data

    data.check_batch_size(batch_size, num_devices)

    # 4. Each candidate, compiled (or estimated).
    peak = found.peak_flops_per_device
    candidates = []
    for layout in step.layouts(num_devices, distribution):
        nbytes, flops, refused = _measure(abstract, layout, devices, batch_size)
        seconds = flops / (num_devices * peak) if peak and flops == flops else None
        candidates.append(Candidate(layout.distribution, layout.describe(), nbytes, nbytes <= memory and not refused,
                                    flops, seconds))
        if refused:
            notes.append(f"{layout.distribution}: the compiler refused it, {refused.splitlines()[0]}")

    # 5. The recommendation, and what would help when nothing fits.
    recommended, reason = choose_plan([(c.distribution, c.bytes_per_device, c.fits) for c in candidates], memory)
    result = Plan(found.name, num_devices, memory, compiled_for, candidates, recommended, reason, batch_size,
                  abstract.params, notes=notes)
    if recommended is None:
        result.levers = levers(build, abstract, step.layouts(num_devices, distribution), candidates, devices,
                               batch_size, memory, found)
    return result


def choose_plan(candidates: list[tuple[str, int, bool]], device_memory: int) -> tuple[str | None, str]:
    """The recommended distribution from (name, bytes per device, fits), in the candidates' order, and why.

    1. Data parallel when it fits: no weight is gathered, the least communication.
    2. Else the first sharded candidate that fits (fsdp before model: one mesh axis, the simpler program).
    3. Else none, with the smallest need against the memory.
    """
    memory = sharding.format_bytes(device_memory)
    by_name = {name: (nbytes, fits) for name, nbytes, fits in candidates}
    if by_name.get("data", (0, False))[1]:
        return "data", f"data parallel fits: {sharding.format_bytes(by_name['data'][0])} of {memory} per device, " \
                       "and gathers no weights"
    for name, nbytes, fits in candidates:
        if fits:
            needs = f"data parallel needs {sharding.format_bytes(by_name['data'][0])}; " if "data" in by_name else ""
            return name, f"{needs}{name} fits with {sharding.format_bytes(nbytes)} of {memory} per device"
    if not candidates:
        return None, "no candidate"
    name, nbytes, _ = min(candidates, key=lambda c: c[1])
    return None, f"nothing fits: the smallest, {name}, needs {sharding.format_bytes(nbytes)} per device, has {memory}"


def _model_builder(job, model_spec: str | None):
    if model_spec is None:
        return lambda: job.build_model()
    from acceltrain import user_model

    return user_model.builder(model_spec)


def _start_jax() -> None:
    from acceltrain import backends

    loaded = backends.loaded_keras_backend()
    if loaded not in (None, "jax"):
        raise UsageError(f"Keras is already running on {loaded} in this process; plan compiles with JAX. Call "
                         "acceltrain.plan() in a process where Keras uses JAX (KERAS_BACKEND=jax), or run "
                         "`acceltrain plan` from a shell.")
    backends.load("jax").prepare(None)


def _devices(found, memory):
    """(devices to compile for or None for an estimate, compiled_for, device memory, notes)."""
    from acceltrain.planning import step

    notes = []
    if found.kind == "here":
        import jax

        devices = jax.devices()
        memory = memory or (devices[0].memory_stats() or {}).get("bytes_limit")
        if not memory:
            raise UsageError(f"--target here on {devices[0].platform.upper()}: it reports no device memory. Pass "
                             "--device-memory SIZE (device_memory=), e.g. 16GiB.")
        return devices, devices[0].device_kind, memory, notes
    memory = memory or found.device_memory_bytes
    if found.topology is None:
        notes.append(f"{found.name}: no compiler for it runs on this machine; the figures are an analytic estimate "
                     "(weights, gradients and optimizer slots by shape, activations as the forward pass's arrays).")
        return None, ESTIMATE, memory, notes
    if not step.libtpu_installed():
        notes.append(f"libtpu is not installed, so the figures are an analytic estimate: {INSTALL_COMPILER}.")
        return None, ESTIMATE, memory, notes
    devices = step.topology_devices(found.topology)[:found.devices]
    if found.topology_note:
        notes.append(f"compiled for {found.topology_note}")
    return devices, devices[0].device_kind, memory, notes


def _measure(abstract, layout, devices, batch_size, *, remat=False) -> tuple[int, float, str]:
    """(bytes per device, FLOPs per step over all devices, the compiler's refusal or ""): compiled when there
    are devices, else estimated. A program the compiler refuses for want of memory has no FLOPs (NaN) and
    the bytes the compiler said it needs."""
    from acceltrain.planning import estimate, step

    if devices is None:
        num_devices = 1
        for size in layout.mesh_shape:
            num_devices *= size
        per_device_batch = batch_size // layout.mesh_shape[0]
        nbytes = estimate.state_bytes_per_device(abstract, layout) + estimate.activation_bytes(abstract, per_device_batch)
        return nbytes, estimate.step_flops(step.train_step(abstract), abstract, batch_size), ""
    with log.phase(f"compiling the step: {layout.distribution} over {layout.describe()}"):
        compiled = step.compile_step(abstract, layout, devices, batch_size, remat=remat)
    return compiled.bytes_per_device, compiled.flops_per_device * len(devices), compiled.compiler_said


# --- When nothing fits ---------------------------------------------------------------------------

def levers(build, abstract, layouts, candidates, devices, batch_size, memory, found) -> list[Lever]:
    """What would make the smallest candidate fit, in order, each with its figure."""
    from acceltrain.planning import step

    best = min(range(len(candidates)), key=lambda i: candidates[i].bytes_per_device)
    layout = layouts[best]
    found_levers = []

    half_precision = step.build_abstract(build, policy="mixed_bfloat16")
    nbytes, _, _ = _measure(half_precision, layout, devices, batch_size)
    found_levers.append(Lever("bfloat16", nbytes, nbytes <= memory,
                              f"compute in bfloat16 (mixed_bfloat16: float32 weights), {layout.distribution}"))
    nbytes, _, _ = _measure(abstract, layout, devices, batch_size, remat=True)
    found_levers.append(Lever("remat", nbytes, nbytes <= memory,
                              f"rematerialise the forward pass in the backward (jax.checkpoint), {layout.distribution}"))
    found_levers.append(_accumulation(abstract, layout, devices, batch_size, memory))
    found_levers.append(_more_chips(abstract, layout, candidates[best].bytes_per_device, memory, found))
    return found_levers


def _accumulation(abstract, layout, devices, batch_size, memory) -> Lever:
    """The fewest accumulation steps (of 2, 4, 8, 16) whose smaller batch fits, keeping the global batch."""
    from acceltrain.planning import estimate

    accumulator = estimate.state_bytes_per_device(abstract, layout)  # an upper bound of one gradient copy's share
    nbytes = None
    for steps in (2, 4, 8, 16):
        if batch_size % (steps * layout.mesh_shape[0]):
            break
        nbytes, _, _ = _measure(abstract, layout, devices, batch_size // steps)
        nbytes += accumulator // 4  # the summed gradients: one of the state's four copies (weight, gradient, 2 slots)
        if nbytes <= memory:
            return Lever("accumulate", nbytes, True, f"batch {batch_size // steps} x {steps} accumulation steps "
                                                     f"(Keras: optimizer gradient_accumulation_steps={steps})")
    return Lever("accumulate", nbytes or 0, False, "no smaller batch of up to 16 accumulation steps fits")


def _more_chips(abstract, layout, nbytes, memory, found) -> Lever:
    """The fewest devices (doubling) at which the state's share shrinks enough: an estimate from shapes."""
    from acceltrain.planning import estimate, step

    state_now = estimate.state_bytes_per_device(abstract, layout)
    rest = max(nbytes - state_now, 0)
    devices = max(layout.mesh_shape[0] * (layout.weight_parts if layout.weight_axis != "batch" else 1), 1)
    for _ in range(12):
        devices *= 2
        wider = step.Layout("fsdp", (devices,), ("batch",), "batch")
        needed = estimate.state_bytes_per_device(abstract, wider) + rest
        if needed <= memory:
            return Lever("more chips", needed, True, f"fsdp over {devices} devices (estimate: the state's share "
                                                     "by shapes, the rest as compiled)")
    return Lever("more chips", needed, False, f"even {devices} devices do not fit (estimate)")


# --- Output ---------------------------------------------------------------------------------

def format_table(result: Plan) -> str:
    memory = sharding.format_bytes(result.device_memory_bytes)
    source = "compiled for " + result.compiled_for if result.compiled_for != ESTIMATE else "ESTIMATE (no compiler)"
    lines = [f"plan for {result.target}: {result.devices} devices x {memory}; {source}; "
             f"{sharding.format_params(result.params)}, global batch {result.batch_size}",
             f"{'distribution':<13}{'mesh':<20}{'per device':>12}{'fits':>6}{'TFLOP/step':>12}"
             f"{'step at peak':>14}{'samples/s':>16}"]
    for c in result.candidates:
        seconds = _duration(c.step_seconds_at_peak) if c.step_seconds_at_peak else "n/a"
        rate = f"{result.batch_size / c.step_seconds_at_peak:,.0f}" if c.step_seconds_at_peak else "n/a"
        lines.append(f"{c.distribution:<13}{c.mesh:<20}{sharding.format_bytes(c.bytes_per_device):>12}"
                     f"{'yes' if c.fits else 'NO':>6}{c.flops_per_step / 1e12:>12.4g}{seconds:>14}{rate:>16}")
    if any(c.flops_per_step != c.flops_per_step for c in result.candidates):
        lines.append("(nan: the compiler refused the program, so it has no cost analysis)")
    lines.append(f"recommended: {result.recommended or 'none'} ({result.reason})")
    for lever in result.levers:
        lines.append(f"  would help? {lever.name}: {sharding.format_bytes(lever.bytes_per_device)} per device, "
                     f"{'fits' if lever.fits else 'does not fit'}: {lever.how}")
    lines.append("step at peak: FLOPs / (devices x published bf16 peak), a lower bound (no communication, "
                 "memory traffic or input pipeline)")
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _json_safe(values: dict) -> dict:
    """NaN (no FLOPs for a program the compiler refused) is not JSON: null instead."""
    return {key: None if isinstance(value, float) and value != value else value for key, value in values.items()}
