"""Plan before you pay: will this training job fit the hardware you are about to rent, and how fast can it go?

    plan = acceltrain.plan("tpu-v5e-8", model="models.py:build", batch_size=1024)
    print(plan.table()); plan.as_dict()

For each candidate distribution the real Keras training step is compiled by the target's own compiler
(libtpu's compile-only client for a TPU, on this CPU; this machine's for `here`), from shapes alone: the
model is never materialised. The compiler's memory analysis says the bytes each device needs; its cost
analysis the FLOPs of a step, which over the published peak give a lower bound of the step time. Where
no compiler for the target runs here (GPU boxes, or libtpu not installed), the figures are an analytic
estimate, and say so. The step computes in the precision `run` and `train` would choose on the target
(choose_plan_precision): bfloat16 on TPUs and on GPUs that run it natively, float32 on a CPU.
"""

import contextlib
from dataclasses import asdict, dataclass, field

from acceltrain import decisions, log, sharding
from acceltrain.errors import UsageError, positive_int
from acceltrain.planning import targets
from acceltrain.planning.levers import SHARDINGS, Lever, Setting, choose_levers, first_fit

DISTRIBUTIONS = ("auto", *SHARDINGS)
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
class Plan:
    target: str
    devices: int
    device_memory_bytes: int
    compiled_for: str  # the compiler's device_kind, or "estimate"
    candidates: list[Candidate]
    recommended: str | None  # the distribution
    reason: str
    batch_size: int
    params: int  # trainable
    levers: list[Lever] = field(default_factory=list)  # the walk of levers.choose_levers, then "more chips"
    notes: list[str] = field(default_factory=list)
    total_params: int = 0  # with frozen weights (LoRA's base)
    sequence_length: int | None = None
    remat_layers: tuple[str, ...] = ()  # the layers the remat lever rematerialises (step.remat_layers)
    precision: tuple[str, str] = ("float32", "Keras's default")  # the dtype policy planned in, and why

    @property
    def recommended_setting(self) -> Setting | None:
        """The first setting that fits: the distribution, and the levers on top of it."""
        found = first_fit(self.levers)
        return found.setting if found else None

    def as_dict(self) -> dict:
        """The --json document: these keys exactly."""
        chosen = self.recommended_setting
        return {"target": self.target, "devices": self.devices, "device_memory_bytes": self.device_memory_bytes,
                "compiled_for": self.compiled_for,
                "candidates": [_json_safe(asdict(candidate)) for candidate in self.candidates],
                "recommended": self.recommended,
                "recommended_setting": asdict(chosen) if chosen else None,
                "levers": [{**asdict(lever), "setting": asdict(lever.setting) if lever.setting else None}
                           for lever in self.levers],
                "remat_layers": list(self.remat_layers),
                "precision": {"policy": self.precision[0], "reason": self.precision[1]}}

    def table(self) -> str:
        return format_table(self)


def plan(target: str, *, recipe: str | None = None, model: str | None = None, batch_size: int | None = None,
         distribution: str = "auto", device_memory: str | int | None = None, sequence_length: int | None = None,
         lora_rank: int | None = None, compare: bool = False, precision: str = "auto") -> Plan:
    """Compile (or estimate) the training step for `target` under each candidate distribution in order, up to the
    first that fits; when none does, the levers in order (bfloat16 compute where the step computes in float32,
    rematerialisation, gradient accumulation), each compiled (planning/levers.py).

    Args:
        target: what you would rent, e.g. "tpu-v5e-8", "v5litepod-16", "tpu-v4-128", "h100-8", or "here".
        recipe: a built-in job (default "mnist-mlp"); or
        model: "FILE.py:FUNCTION", a function returning a compiled keras.Model; or a keras_hub preset folder
            (its config.json: no weights are read) or a preset's config .json, planned as its CausalLM.
        batch_size: the global batch (default: the recipe's).
        distribution: "auto" (the candidates data, fsdp, model, in that order), or one of them.
        device_memory: bytes per device (e.g. "16GiB"), instead of the target's; needed for "here" on a CPU.
        sequence_length: the size of the model's unknown input dimensions (a language model's tokens).
        lora_rank: enable LoRA of this rank on the model's keras_hub backbone (backbone.enable_lora(rank)).
        compare: compile every candidate, not only up to the first that fits (for their FLOPs and step times;
            a 2B-parameter model takes minutes a compile).
        precision: Keras's dtype policy the step computes in: "auto" (what `run` and `train` would use on the
            target: your own global policy if you set one, else mixed_bfloat16 on TPUs and GPUs of compute
            capability 8.0+, else float32), "float32" or "mixed_bfloat16". A model function that sets its own
            policy is planned in it, as `run` would run it.
    """
    from acceltrain import recipes
    from acceltrain.planning import models

    # 1. Check the arguments, before any framework starts.
    found = targets.resolve(target)
    if distribution not in DISTRIBUTIONS:
        raise UsageError(f"Received distribution={distribution!r}. Valid: {', '.join(DISTRIBUTIONS)}.")
    if precision not in decisions.PRECISIONS:
        raise UsageError(f"Received precision={precision!r}. Valid: {', '.join(decisions.PRECISIONS)}. Pass 'auto' to "
                         "plan in the precision run and train would use on the target, or a dtype policy to plan in.")
    if recipe is not None and model is not None:
        raise UsageError(f"Received recipe={recipe!r} and model={model!r}: plan one or the other.")
    job = recipes.get(recipe or recipes.DEFAULT)
    for name, value in (("sequence_length", sequence_length), ("lora_rank", lora_rank)):
        if value is not None:
            positive_int(value, name)
    build = models.builder(job, model, lora_rank)
    batch_size = job.BATCH_SIZE if batch_size is None else batch_size
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"Received batch_size={batch_size!r}. Expected a positive whole number (the global batch).")
    memory = sharding.parse_bytes(device_memory) if device_memory is not None else None

    # 2. Start Keras on JAX, on this machine's CPU unless it has an accelerator.
    _start_jax()

    from acceltrain.planning import step

    with _compiler_environment(found):
        # 3. Find the devices to compile for; build the model from shapes alone, in the precision run would use there.
        devices, compiled_for, memory, notes = _devices(found, memory)
        num_devices = len(devices) if devices else found.devices
        abstract, chosen_precision = _built_in_precision(build, found, devices, precision, sequence_length)
        if devices is not None:
            log.info(f"{_params(abstract.params, abstract.total_params)}, built from shapes; compiling for "
                     f"{num_devices} {compiled_for} device(s)")
        from acceltrain.inputs import arrays

        arrays.check_batch_size(batch_size, num_devices)
        layouts = step.layouts(num_devices, distribution)
        measure = step_compiler(build, devices, batch_size, layouts=layouts, base=abstract,
                                sequence_length=sequence_length)

        # 4. The walk: each sharding in order, then the levers, up to the first that fits, each compiled once. A
        # model function's own policy is not a lever's to change (it would set it again inside the lever's build).
        remat_layers = step.remat_layers(abstract.model)
        walk = choose_levers([layout.distribution for layout in layouts], memory, bytes_needed(measure, memory),
                             global_batch=batch_size,
                             batch_ways={layout.distribution: layout.mesh_shape[0] for layout in layouts},
                             compute=abstract.policy, remat_layers=remat_layers,
                             bfloat16=chosen_precision[1] != OWN_POLICY)

        # 5. The candidates: the shardings the walk compiled (all of them with `compare`), with FLOPs and time.
        peak = found.peak_flops_per_device
        candidates = []
        walked = {lever.name: lever for lever in walk}
        for layout in layouts:
            tried = walked.get(layout.distribution)
            if tried is not None and tried.bytes_per_device is None:
                notes.append(f"{layout.distribution}: {tried.how}")
                continue
            if tried is None and not compare:
                notes.append(f"{layout.distribution}: not compiled, as {walk[-1].name} fits before it "
                             "(--compare / compare=True compiles every candidate)")
                continue
            nbytes, flops, refused = measure(Setting(layout.distribution, abstract.policy))
            seconds = flops / (num_devices * peak) if peak and flops == flops else None
            candidates.append(Candidate(layout.distribution, layout.describe(), nbytes,
                                        nbytes <= memory and not refused, flops, seconds))
            if refused:
                notes.append(f"{layout.distribution}: the compiler refused it, {refused.splitlines()[0]}")

        # 6. The recommendation, why, and, when nothing fits, what more chips would do.
        recommended, reason = choose_plan([(c.distribution, c.bytes_per_device, c.fits) for c in candidates], memory)
        chosen = first_fit(walk)
        if recommended is None and chosen is not None:
            recommended = chosen.setting.distribution
            reason = f"no sharding alone fits; {chosen.setting.describe()} needs " \
                     f"{sharding.format_bytes(chosen.bytes_per_device)} of {sharding.format_bytes(memory)} per device"
        elif chosen is None and candidates:
            walk.append(_more_chips(abstract, layouts, candidates, memory))
    return Plan(found.name, num_devices, memory, compiled_for, candidates, recommended, reason, batch_size,
                abstract.params, levers=walk, notes=notes, total_params=abstract.total_params,
                sequence_length=sequence_length, remat_layers=remat_layers, precision=chosen_precision)


def choose_plan_precision(target: targets.Target, asked: str, current_policy: str = "float32",
                          here: tuple[str, str | None] = ("cpu", None)) -> tuple[str, str]:
    """The dtype policy `run` and `train` would use on `target` (precision `asked`, over Keras's global policy
    `current_policy`), and why: decisions.choose_precision, over the target's platform and a GPU's compute
    capability.

    1. A TPU target: a TPU's (bfloat16, native).
    2. A GPU target: its compute capability's (targets.GPU_FAMILIES).
    3. `here`: the devices found on this machine, as (platform, compute capability).
    """
    platform, capability = {"tpu": ("tpu", None), "gpu": ("gpu", target.compute_capability)}.get(target.kind, here)
    return decisions.choose_precision(platform, capability, current_policy, asked)


# The reason a plan gives for a policy the model function set itself (keras.config.set_dtype_policy in it).
OWN_POLICY = "set with keras.config.set_dtype_policy by the model function, which wins as a script's own does in run"


def _built_in_precision(build, found, devices, asked: str, sequence_length: int | None):
    """(the model built from shapes in the precision run would use on `found`, (its policy, why)), said in one line.
    A model function that sets its own policy is built in it, as in run; the line says so."""
    from acceltrain import precision
    from acceltrain.planning import step

    here = ("cpu", None)  # read for the target "here" alone: the devices found are its platform
    if found.kind == "here":
        here = (devices[0].platform, getattr(devices[0], "compute_capability", None))
    policy, reason = choose_plan_precision(found, asked, precision.current_policy(), here)
    abstract = step.build_abstract(build, policy=policy, sequence_length=sequence_length)
    if abstract.policy != policy:
        policy, reason = abstract.policy, OWN_POLICY
    log.info(f"dtype policy {policy} ({reason})")
    return abstract, (policy, reason)


def step_compiler(build, devices, global_batch: int, *, layouts, base, sequence_length: int | None = None):
    """measure(setting) -> (bytes per device, FLOPs per step over all devices, the compiler's refusal or ""):
    the model built from shapes for the setting's compute, remat and accumulation (each variant once), its
    step compiled for `devices` under the setting's layout at its per-step batch (global / accumulation),
    or estimated where `devices` is None. Each setting is measured once; ask again and it is remembered.

    base: the model as built by `build` with no lever (step.build_abstract), in the policy the settings start from
    (choose_levers's `compute`: base.policy), which names the layers a remat setting rematerialises
    (step.remat_layers). levers.choose_levers's compile function over it is
    bytes_needed(measure, device_memory).
    """
    from acceltrain.planning import step

    by_name = {layout.distribution: layout for layout in layouts}
    abstracts = {(base.policy, False, 1): base}
    measured = {}

    def measure(setting: Setting) -> tuple[int, float, str]:
        if setting not in measured:
            variant = (setting.compute, setting.remat, setting.accumulation)
            if variant not in abstracts:
                with log.phase(f"building the model from shapes: {setting.describe()}"):
                    abstracts[variant] = step.build_abstract(
                        build, policy=setting.compute, remat=step.remat_layers(base.model) if setting.remat else (),
                        accumulation=setting.accumulation, sequence_length=sequence_length)
            if abstracts[variant].policy != setting.compute:  # the build function set its own, as it does each time
                raise UsageError(f"the model function sets its own dtype policy, {abstracts[variant].policy}, so the "
                                 f"step cannot be built in {setting.compute}")
            measured[setting] = _measure(abstracts[variant], by_name[setting.distribution], devices,
                                         global_batch // setting.accumulation, label=setting.describe())
        return measured[setting]

    return measure


def bytes_needed(measure, device_memory: int):
    """levers.choose_levers's compile function over step_compiler's `measure`: the bytes a setting needs, a
    program the compiler refused counted as over `device_memory` whatever it says (libtpu refuses at its own
    usable memory, less than the chip's)."""

    def needs(setting: Setting) -> int:
        nbytes, _, refused = measure(setting)
        return max(nbytes, device_memory + 1) if refused else nbytes

    return needs


def _params(trainable: int, total: int) -> str:
    if total > trainable:
        return f"{sharding.format_params(total)} ({sharding.format_params(trainable).replace(' params', '')} trainable)"
    return sharding.format_params(trainable)


@contextlib.contextmanager
def _compiler_environment(found):
    """libtpu's variables (step.LIBTPU_ENV) for the compile of a TPU target only, put back after it: a later
    connect() in this process, on a TPU VM, reads the VM's own (TPU_WORKER_HOSTNAMES above all)."""
    from acceltrain.planning import step

    if found.topology is None:
        yield
        return
    with step.libtpu_environment():
        yield


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


def _measure(abstract, layout, devices, batch_size, *, label: str = "") -> tuple[int, float, str]:
    """(bytes per device, FLOPs per step over all devices, the compiler's refusal or ""): compiled when there
    are devices, else estimated. A program the compiler refuses for want of memory has no FLOPs (NaN) and
    the bytes the compiler said it needs."""
    from acceltrain.planning import estimate, step

    if devices is None:
        per_device_batch = batch_size // layout.mesh_shape[0]
        nbytes = estimate.state_bytes_per_device(abstract, layout) + estimate.activation_bytes(abstract, per_device_batch)
        return nbytes, estimate.step_flops(step.train_step(abstract), abstract, batch_size), ""
    with log.phase(f"compiling the step: {label or layout.distribution} over {layout.describe()}, batch {batch_size}"):
        compiled = step.compile_step(abstract, layout, devices, batch_size)
    return compiled.bytes_per_device, compiled.flops_per_device * len(devices), compiled.compiler_said


def _more_chips(abstract, layouts, candidates, memory) -> Lever:
    """The fewest devices (doubling) at which fsdp's share of the training state fits, the rest of the smallest
    candidate's need kept as compiled: an estimate from shapes, and it says so."""
    from acceltrain.planning import estimate, step

    best = min(range(len(candidates)), key=lambda i: candidates[i].bytes_per_device)
    layout = layouts[best]
    rest = max(candidates[best].bytes_per_device - estimate.state_bytes_per_device(abstract, layout), 0)
    devices = max(layout.mesh_shape[0] * (layout.weight_parts if layout.weight_axis != "batch" else 1), 1)
    for _ in range(12):
        devices *= 2
        wider = step.Layout("fsdp", (devices,), ("batch",), "batch")
        needed = estimate.state_bytes_per_device(abstract, wider) + rest
        if needed <= memory:
            return Lever("more chips", needed, True, f"fsdp over {devices} devices (an estimate: the training "
                                                     "state's share by shapes, the rest as compiled)")
    return Lever("more chips", needed, False, f"even {devices} devices do not fit (an estimate)")


# --- Output ---------------------------------------------------------------------------------

# The samples/s a step at peak implies is shown from this step time up: below it, what a step costs besides its FLOPs
# (its dispatch, the host feeding it, a collective's latency) takes longer than the FLOPs (a judgement, not a
# measurement: a step of a few microseconds at peak is not how fast such a job runs), and a rate of millions of
# samples a second would be no guide to it.
RATE_SHOWN_FROM_SECONDS = 1e-3


def format_table(result: Plan) -> str:
    memory = sharding.format_bytes(result.device_memory_bytes)
    source = "compiled for " + result.compiled_for if result.compiled_for != ESTIMATE else "ESTIMATE (no compiler)"
    sequence = f", sequence length {result.sequence_length}" if result.sequence_length else ""
    lines = [f"plan for {result.target}: {result.devices} devices x {memory}; {source}; "
             f"{_params(result.params, result.total_params or result.params)}, global batch {result.batch_size}"
             f"{sequence}; dtype policy {result.precision[0]}",
             f"{'distribution':<13}{'mesh':<20}{'per device':>12}{'fits':>6}{'TFLOP/step':>12}"
             f"{'step at peak':>14}{'samples/s':>16}"]
    for c in result.candidates:
        seconds = _duration(c.step_seconds_at_peak) if c.step_seconds_at_peak else "n/a"
        rate = "n/a"
        if c.step_seconds_at_peak and c.step_seconds_at_peak >= RATE_SHOWN_FROM_SECONDS:
            rate = f"{result.batch_size / c.step_seconds_at_peak:,.0f}"
        elif c.step_seconds_at_peak:
            rate = "(not shown)"
        lines.append(f"{c.distribution:<13}{c.mesh:<20}{sharding.format_bytes(c.bytes_per_device):>12}"
                     f"{'yes' if c.fits else 'NO':>6}{c.flops_per_step / 1e12:>12.4g}{seconds:>14}{rate:>16}")
    if any(c.flops_per_step != c.flops_per_step for c in result.candidates):
        lines.append("(nan: the compiler refused the program, so it has no cost analysis)")
    beyond_sharding = [lever for lever in result.levers if lever.name not in SHARDINGS]
    if beyond_sharding:
        measured = "compiled" if result.compiled_for != ESTIMATE else "estimated"
        lines.append(f"no sharding fits: the levers in order, each {measured} on top of those that saved bytes:")
        width = max(len(lever.setting.describe() if lever.setting else lever.name) for lever in beyond_sharding)
        for lever in beyond_sharding:
            needs = sharding.format_bytes(lever.bytes_per_device) if lever.bytes_per_device is not None else "?"
            fits = "yes" if lever.fits else "NO"
            label = lever.setting.describe() if lever.setting else lever.name
            lines.append(f"  {label:<{width}}  {needs:>10}  {fits:>3}  {lever.how}")
    chosen = result.recommended_setting
    if chosen is not None and chosen != Setting(chosen.distribution, result.precision[0]):
        lines.append(f"recommended: {chosen.describe()} ({result.reason})")
    else:
        lines.append(f"recommended: {result.recommended or 'none'} ({result.reason})")
    lines.append("step at peak: FLOPs / (devices x published bf16 peak), a lower bound (no communication, "
                 "memory traffic or input pipeline)")
    if any(c.step_seconds_at_peak and c.step_seconds_at_peak < RATE_SHOWN_FROM_SECONDS for c in result.candidates):
        lines.append(f"samples/s (not shown): a step under {_duration(RATE_SHOWN_FROM_SECONDS)} at peak is set by "
                     "what it costs besides its FLOPs (its dispatch, its input, its collectives), so the rate its "
                     "FLOPs imply would be no guide")
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
