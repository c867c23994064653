"""A model's first fit, made to fit the devices: weighed, laid out and the levers applied before its first step.

It runs once per model, before the first fit (Runtime.fit; each fit of an `acceltrain run` script, layer
"autopilot"), where a device memory is known (the hardware's, or device_memory= / --device-memory), on JAX:
1. Weigh: the model's training step compiled ahead for each candidate layout by this machine's compiler, whose
   memory analysis says the bytes a device needs (weights, gradients, optimizer slots, activations, temporaries);
   where the step cannot be compiled ahead (a model with its own train_step, inputs that are not arrays, a
   compiler that reports no memory), the training state by shapes against the memory less its headroom.
2. Choose: the levers in order (planning/levers.py: what `acceltrain plan` recommends, from the same code), up to
   the first setting that fits: the sharding (data; fsdp; a batch x model mesh, with the model's own keras_hub
   layout map where it has one), then a smaller batch per step with the optimizer's gradient_accumulation_steps,
   the global batch kept. bfloat16 compute and rematerialisation need the model built again: named, not applied.
3. Apply: each variable moved to its layout, one at a time (the backend's relayout), before the step is compiled,
   so the optimizer's slots, which fit creates, take their weights' layouts; the optimizer told to accumulate and
   each call's batch cut. Each applied lever is one line, with its figure and how to turn it off.
When nothing fits it stops before training, with the figures and the `acceltrain plan` line. With the autopilot
off (--no-autopilot, autopilot=False) only the sharding that 'auto' chooses is applied.
"""

import weakref
from dataclasses import dataclass

from acceltrain import decisions, log, sharding
from acceltrain.errors import UsageError, under_cli
from acceltrain.inputs import arrays, streams, tf_data
from acceltrain.inputs.kinds import TF_DATA, kind_of
from acceltrain.layout import placement
from acceltrain.planning import levers

_weighed = weakref.WeakKeyDictionary()  # model -> steps accumulated per weight update, once its first fit is prepared


@dataclass(frozen=True)
class Naming:
    """How a message names the settings the user can change: the CLI's flags, or a library's arguments."""

    off: str
    distribution: str  # .format(kind)
    precision: str
    device_memory: str
    plan_model: str | None = None  # how `acceltrain plan --model` names the model (None: the acceltrain.plan() call)

    def memory_source(self, source: str) -> str:
        """Where the device memory came from, as the user set it."""
        return self.device_memory if source == "device_memory=" else source


FLAGS = Naming("--no-autopilot", "--distribution {}", "--precision mixed_bfloat16", "--device-memory",
               plan_model="SCRIPT.py:FUNCTION")  # a `run` user has a script, and the plan's flags, not acceltrain.plan
ARGUMENTS = Naming("autopilot=False (Runtime.fit)", "distribution='{}' (connect)", "precision='mixed_bfloat16' (connect)",
                   "device_memory=")
BUILDING = Naming("autopilot=False (Runtime.build), --no-autopilot (acceltrain train)", "distribution='{}' (connect)",
                  "precision='mixed_bfloat16' (connect)", "device_memory= (--device-memory)")


@dataclass
class FirstFit:
    """What the autopilot decided for a model's first fit."""

    batch_size: int | None  # the fit's global batch, as given (None: Keras's default, or a dataset's own)
    accumulation: int = 1  # steps whose gradients make one weight update (per_step cuts each step's batch)
    kind: str | None = None  # the sharding the runtime takes from now on (None: keep its own)
    distribution: object = None
    reason: str = ""


def first_fit(runtime, model, x, y=None, batch_size: int | None = None, *, enabled: bool = True) -> FirstFit:
    """Before `model`'s first fit on `runtime` with inputs x, y at `batch_size` (the global batch): weigh, choose,
    apply (the module's steps). Returns the decision; the caller's runtime takes its distribution
    (Runtime.first_fit). A model weighed before, or where nothing can be weighed, passes as it is. Its messages
    name the CLI's flags while a CLI verb runs (errors.under_cli), else the library's arguments."""
    framework, request = runtime.backend_module, runtime.sharding_request
    naming = FLAGS if under_cli() else ARGUMENTS
    if (model in _weighed or not framework.SHARDS or request.device_memory is None
            or request.kind == "none"):
        return FirstFit(batch_size)
    _weighed[model] = 1
    first = streams.first_batches(x, y, batch_size, 1)  # None: inputs that cannot be read ahead
    batch = first[1] if first else arrays.keras_batch(batch_size)
    replicas = runtime.num_replicas  # fit leaves out the samples that do not divide over them (inputs/)
    batch = batch // replicas * replicas or batch
    optimizer = getattr(model, "optimizer", None)
    # The accumulation lever changes the optimizer's gradient_accumulation_steps and each step's batch: not where
    # the user set the steps themselves (theirs are kept, and weighed), nor once fit has built the optimizer.
    accumulate = (first is not None and optimizer is not None and not optimizer.built
                  and _own_accumulation(optimizer) == 1)

    # 1. Weigh: each candidate layout compiled here (or the state by shapes).
    candidates = _candidates(runtime, model)
    judge = _Judge(runtime, model, first[0][0] if first else None, batch, candidates)

    # 2. Choose: the levers in order, up to the first that fits.
    walk = levers.choose_levers(list(candidates), judge.budget, judge.needs, global_batch=batch,
                                batch_ways={kind: _batch_ways(d) for kind, d in candidates.items()}, bfloat16=False,
                                accumulate=accumulate)
    chosen = levers.first_fit(walk)
    if chosen is None or (not enabled and chosen.setting.accumulation > 1):
        raise UsageError(_does_not_fit(runtime, model, walk, judge, naming, chosen if not enabled else None))

    # 3. Apply: the layout, then the accumulation.
    decision = _lay_out(runtime, model, chosen, walk, candidates, judge, naming)
    decision.batch_size = batch_size
    framework.weighed(runtime.distribution)
    if chosen.setting.accumulation > 1:
        steps = chosen.setting.accumulation
        optimizer.gradient_accumulation_steps = steps  # read when fit builds the optimizer
        decision.accumulation = _weighed[model] = steps
        schedule = (f"; its learning-rate schedule counts steps, so it moves {steps}× per update"
                    if isinstance(optimizer.get_config().get("learning_rate"), dict) else "")
        log.info(f"autopilot: accumulate {steps}: each weight update sums the gradients of {steps} steps of batch "
                 f"{batch // steps}, so the global batch stays {batch}; {judge.figure(chosen.bytes_per_device)} a "
                 f"device with {chosen.setting.distribution}{schedule} ({naming.off} stops instead)")
    return decision


# --- With a build function (Runtime.build): every lever, the model built under the setting chosen ----------------

def for_build(runtime, build_model, batch_size: int, *, enabled: bool = True,
              job: dict | None = None):
    """Before Runtime.build runs `build_model()` for real, under 'auto' with a device memory and the global batch fit
    will take: the training step compiled here from shapes for each sharding and each lever on top (planning's
    step_compiler: what `acceltrain plan --target here` compiles), the levers' walk in full (bfloat16 and remat too:
    the model is yet to be built); the first setting that fits (levers.Setting), to build under (building). None
    where the model cannot be built from shapes (an unknown input dimension: the estimate decides instead)."""
    from acceltrain.planning import bytes_needed, step, step_compiler

    naming = BUILDING  # Runtime.build's, called by the library and `acceltrain train` alike
    memory = runtime.sharding_request.device_memory
    placement.check_fits_sharded(runtime, build_model, job)  # no lever shrinks the state: no compile is worth it
    job = {**placement.job_of(build_model, job), "batch_size": batch_size}
    try:
        base = step.build_abstract(build_model, policy=runtime.precision)
    except UsageError as error:
        log.info(f"autopilot: the step is not compiled ahead ({error}): the training state by shapes decides")
        return None
    layouts = step.layouts(runtime.num_devices)
    measure = step_compiler(build_model, step.here_devices(), batch_size, layouts=layouts, base=base)
    remat = step.remat_layers(base.model) if enabled else ()
    walk = levers.choose_levers([layout.distribution for layout in layouts], memory, bytes_needed(measure, memory),
                                global_batch=batch_size, compute=base.policy, remat_layers=remat,
                                accumulate=enabled and _own_accumulation(base.model.optimizer) == 1,
                                bfloat16=enabled and runtime.precision == "float32" and not runtime.precision_asked,
                                batch_ways={layout.distribution: layout.mesh_shape[0] for layout in layouts})
    chosen = levers.first_fit(walk)
    where = f"{sharding.format_bytes(memory)} ({naming.memory_source(runtime.sharding_request.memory_source)})"
    if chosen is None:
        figures = "; ".join(f"{lever.setting.describe() if lever.setting else lever.name} {_bytes(lever)}"
                            for lever in walk)
        raise UsageError(f"The model does not fit {where} a device at batch {batch_size}: its training step, compiled "
                         f"here, needs {figures}. {placement.check_before_renting(runtime, job)}")
    shardings = [lever for lever in walk if lever.name in levers.SHARDINGS]
    kind = chosen.setting.distribution
    log.info(f"autopilot: the training step, compiled here at batch {batch_size}, needs "
             f"{', '.join(f'{_named(lever.name)} {_bytes(lever)}' for lever in shardings)} a device, of {where} "
             f"→ {_named(kind)}")
    # One line per lever applied on top of the sharding: those kept on the way (they saved bytes) and the last.
    applied = [lever for lever in walk if _applied(lever, chosen.setting)]
    for lever in applied:
        log.info(f"autopilot: {lever.name}: {_bytes(lever)} a device with {lever.setting.describe()}: {lever.how} "
                 f"({naming.off} stops instead)")
    return chosen.setting, remat


def _applied(lever: levers.Lever, chosen: levers.Setting) -> bool:
    """A lever of the walk that the chosen setting keeps: bfloat16 and remat where it has them, and its accumulation."""
    return {"bfloat16": chosen.compute == "mixed_bfloat16", "remat": chosen.remat,
            f"accumulate {chosen.accumulation}": chosen.accumulation > 1}.get(lever.name, False)


def building(setting, remat_layers):
    """Inside, a model is built as `setting` says: its compute dtype, its repeated layers rematerialised."""
    import contextlib

    import keras

    from acceltrain import precision

    stack = contextlib.ExitStack()
    stack.enter_context(precision.scope(setting.compute))
    if setting.remat:
        stack.enter_context(keras.RematScope(mode="list_of_layers", layer_names=list(remat_layers)))
    return stack


def built(model, setting) -> None:
    """A model Runtime.build built under `setting`: its optimizer accumulates as the setting says, and its first fit
    is not weighed again (its batch is cut by per_step)."""
    if setting.accumulation > 1:
        model.optimizer.gradient_accumulation_steps = setting.accumulation  # read when fit builds the optimizer
    _weighed[model] = setting.accumulation


def _own_accumulation(optimizer) -> int:
    """The gradient_accumulation_steps the user gave `optimizer` (1: none)."""
    return getattr(optimizer, "gradient_accumulation_steps", None) or 1


def accumulation_of(model) -> int:
    """The steps accumulated per weight update the autopilot chose for `model` (1: none, or not weighed)."""
    return _weighed.get(model, 1)


def per_step(x, batch_size: int | None, accumulation: int):
    """(x, batch_size) of a fit whose weight updates accumulate `accumulation` steps: the batch cut so that each
    update still sees the global batch (a tf.data dataset rebatched: the same samples, in the same order)."""
    if accumulation == 1:
        return x, batch_size
    if kind_of(x) == TF_DATA:
        return x.rebatch(tf_data.dataset_batch_size(x) // accumulation), batch_size
    return x, arrays.keras_batch(batch_size) // accumulation


def _candidates(runtime, model) -> dict:
    """{kind: distribution} in the walk's order: data, fsdp, model under 'auto' (data alone on one device); the
    user's own sharding otherwise. "model" takes the model's own keras_hub layout map where it has one."""
    request, framework = runtime.sharding_request, runtime.backend_module
    if request.kind == "auto":
        kinds = ["data", "fsdp", "model"] if runtime.num_devices > 1 else ["data"]
    else:
        kinds = [request.chosen if request.chosen in ("data", *decisions.SHARDED) else "data"]
    model_axis = request.mesh_shape[1] if request.mesh_shape else None
    layout_map = request.layout_map or own_layout_map(model)
    return {kind: framework.candidate_distribution(kind, runtime.hardware.devices, model_axis=model_axis,
                                                   layout_map=layout_map if kind == "model" else None)
            for kind in kinds}


def own_layout_map(model):
    """The layout map function of the model's keras_hub backbone (`get_layout_map(device_mesh)`), or None."""
    backbone = getattr(model, "backbone", None)
    get_layout_map = getattr(type(backbone), "get_layout_map", None) if backbone is not None else None
    if not callable(get_layout_map):
        return None

    def layout_map(mesh):
        try:
            return get_layout_map(mesh)
        except (NotImplementedError, TypeError, ValueError):
            return None  # a backbone without its own map: the shape rule lays it out

    return layout_map


def _batch_ways(distribution) -> int:
    mesh = distribution.device_mesh
    return mesh.shape[mesh.axis_names.index(distribution.batch_dim_name)]


class _Judge:
    """How many bytes one device needs for a setting: the step compiled here, else the training state by shapes."""

    def __init__(self, runtime, model, first_batch, batch: int, candidates: dict):
        """first_batch: the (x, y) of the fit's first batch, or None where its inputs cannot be read ahead."""
        from acceltrain.backends import keras_internals
        from acceltrain.planning import step

        self.runtime, self.model, self.batch, self.candidates = runtime, model, batch, candidates
        self.memory = runtime.sharding_request.device_memory
        self.measured = {}  # setting -> bytes
        self.stand_ins = {}  # accumulation -> the optimizer built from shapes
        self.specs = None  # (inputs, labels) of one sample, when the step can be compiled
        why_not = None
        if first_batch is None:
            why_not = "its inputs are neither arrays nor a tf.data dataset, which could be read ahead"
        elif not model.built:
            why_not = "its layers are built by the fit itself, from its first batch"
        elif not keras_internals.uses_keras_train_step(model):
            why_not = "it has its own train_step"
        elif getattr(model, "optimizer", None) is None:
            why_not = "it has no optimizer of its own"
        if why_not is None:
            try:
                self.specs = tuple(step.sample_specs(part) for part in first_batch)
                self.needs(levers.Setting(next(iter(candidates))))  # the first candidate: can it be compiled here?
            except Exception as error:  # noqa: BLE001 - any failure to compile ahead falls back to the estimate
                why_not = f"it could not be compiled ahead ({type(error).__name__}: {levers.gist(error)})"
                self.specs = None
        self.compiled = self.specs is not None
        self.budget = self.memory if self.compiled else int(self.memory * (1 - sharding.DEFAULT_HEADROOM))
        if not self.compiled:
            self.measured.clear()  # a compile that half succeeded: every setting judged alike, by the estimate
            log.info(f"autopilot: {model.name}'s training step is judged by its training state (weights, gradients, "
                     f"optimizer slots) by shapes against {sharding.format_bytes(self.budget)} a device (the memory "
                     f"less {sharding.DEFAULT_HEADROOM:.0%} for activations): {why_not}")

    def what(self) -> str:
        if self.compiled:
            return f"its training step, compiled here at batch {self.batch},"
        return "its training state (weights, gradients, optimizer slots)"

    def figure(self, nbytes: int) -> str:
        return sharding.format_bytes(nbytes) + ("" if self.compiled else " of state")

    def needs(self, setting: levers.Setting) -> int:
        """levers.choose_levers's compile function: bytes per device for `setting`, each setting once."""
        if setting not in self.measured:
            self.measured[setting] = self._compiled(setting) if self.specs is not None else self._state(setting)
        return self.measured[setting]

    def _stand_in(self, accumulation: int):
        """The optimizer the step is traced with: the model's own where it is built already (an evaluate before the
        first fit builds it), else one built from shapes with `accumulation`."""
        from acceltrain.planning import step

        if self.model.optimizer.built and accumulation == 1:
            return self.model.optimizer
        if accumulation not in self.stand_ins:  # the user's own steps where the autopilot adds none
            steps = accumulation if accumulation > 1 else _own_accumulation(self.model.optimizer)
            self.stand_ins[accumulation] = step.optimizer_like(self.model.optimizer, self.model.trainable_variables,
                                                               steps)
        return self.stand_ins[accumulation]

    def _spec_of(self, distribution, optimizer):
        from acceltrain.backends import keras_internals

        framework, model = self.runtime.backend_module, self.model
        variables = [*model.weights, *optimizer.variables]
        references = keras_internals.slot_references(optimizer, model.trainable_variables)
        specs = dict(zip(map(id, variables), framework.layouts_of(distribution, variables, references)))
        return lambda variable: specs[id(variable)]

    def _compiled(self, setting) -> int:
        from acceltrain.planning import step

        distribution = self.candidates[setting.distribution]
        optimizer = self._stand_in(setting.accumulation)
        mesh = distribution.device_mesh
        layout = step.Layout(setting.distribution, tuple(mesh.shape), tuple(mesh.axis_names), None)
        devices = list(mesh.backend_mesh.devices.flatten())
        with log.phase(f"autopilot: compiling the step for {setting.describe()}"), distribution.scope():
            compiled = step.compile_built(self.model, optimizer, *self.specs, layout, devices,
                                          self.batch // setting.accumulation, self._spec_of(distribution, optimizer))
        return compiled.bytes_per_device

    def _state(self, setting) -> int:
        """Weights, gradients and optimizer state per device under the setting's layouts, by shapes."""
        import math

        distribution = self.candidates[setting.distribution]
        try:
            optimizer = self._stand_in(setting.accumulation)
        except Exception:  # noqa: BLE001 - an optimizer that cannot be rebuilt from its config: Adam's two slots
            optimizer = None
        spec_of = self._spec_of(distribution, optimizer) if optimizer is not None else None
        mesh = dict(zip(distribution.device_mesh.axis_names, distribution.device_mesh.shape))
        framework = self.runtime.backend_module

        def per_device(variable, spec=None) -> int:
            spec = spec or (spec_of(variable) if spec_of else framework.layouts_of(distribution, [variable])[0])
            return math.prod(variable.shape) * sharding.dtype_bytes(str(variable.dtype)) // \
                sharding.spec_divisor(spec, mesh)

        total = sum(per_device(v) * (2 if v.trainable else 1) for v in self.model.weights)  # + gradients
        if optimizer is not None:
            return total + sum(per_device(v) for v in optimizer.variables)
        accumulates = max(setting.accumulation, _own_accumulation(self.model.optimizer)) > 1
        slots = sharding.OPTIMIZER_SLOTS["adam"] + accumulates
        return total + slots * sum(per_device(v) for v in self.model.trainable_variables)


def _lay_out(runtime, model, chosen, walk, candidates, judge, naming) -> FirstFit:
    """Move the model's variables to the chosen sharding (those already there stay) and say what was decided."""
    from acceltrain.backends import keras_internals

    framework, request = runtime.backend_module, runtime.sharding_request
    kind = chosen.setting.distribution
    switch = kind != request.chosen and not (kind == "data" and runtime.num_devices == 1)
    target = candidates[kind]
    if switch:  # a distribution of the runtime's own, made as connect() makes them
        target = framework.make_distribution(kind, runtime.hardware.devices, model_axis=_model_axis(target),
                                             layout_map=target.layout_map if kind == "model" else None)
    optimizer = getattr(model, "optimizer", None)
    built = optimizer.variables if optimizer is not None and optimizer.built else []
    references = keras_internals.slot_references(optimizer, model.trainable_variables) if built else {}
    moved = framework.relayout([*model.variables, *built], target, references)

    shardings = [lever for lever in walk if lever.name in levers.SHARDINGS]
    figures = ", ".join(f"{_named(lever.name)} {_bytes(lever, judge)}" for lever in shardings)
    memory = f"{sharding.format_bytes(judge.memory)} ({naming.memory_source(request.memory_source)})"
    reason = f"the first fit's {judge.what().rstrip(',')} needs {figures} a device, of {memory}"
    moves = f"; {sharding.format_bytes(moved)} of variables moved to it before the first step" if moved else ""
    theirs = (f" ('auto' chose it: {naming.distribution.format('NAME')} chooses yourself)" if request.kind == "auto"
              and kind != "data" else "")
    log.info(f"autopilot: {model.name} ({sharding.format_params(_count(model.weights))}): {judge.what()} needs "
             f"{figures} a device, of {memory} → {_named(kind)}{moves}{theirs}")
    return FirstFit(None, 1, kind if switch else None, target if switch else None, reason)


def _model_axis(distribution) -> int | None:
    mesh = distribution.device_mesh
    return mesh.shape[mesh.axis_names.index("model")] if "model" in mesh.axis_names else None


def _named(kind: str) -> str:
    return {"data": "data parallel", "fsdp": "fsdp", "model": "a batch x model mesh"}.get(kind, kind)


def _bytes(lever, judge=None) -> str:
    if lever.bytes_per_device is None:
        return "(not compiled)"
    return judge.figure(lever.bytes_per_device) if judge else sharding.format_bytes(lever.bytes_per_device)


def _count(variables) -> int:
    import math

    return sum(math.prod(v.shape) for v in variables)


def _does_not_fit(runtime, model, walk, judge, naming, would) -> str:
    """The stop: each setting tried with its figure, what else would help (the levers that need the model built
    again), and the `acceltrain plan` line; with the autopilot off, what it would have done."""
    from acceltrain.planning import step

    tried = "; ".join(f"{lever.setting.describe() if lever.setting else lever.name} {_bytes(lever)}" for lever in walk)
    memory = f"{sharding.format_bytes(judge.budget)} a device ({naming.memory_source(runtime.sharding_request.memory_source)})"
    head = f"{model.name} ({sharding.format_params(_count(model.weights))}) does not fit {memory}: {judge.what()} needs"
    if would is not None:
        return (f"{head} {tried}. The autopilot would train it with {would.setting.describe()} "
                f"({_bytes(would)} a device), keeping the global batch of {judge.batch}: leave {naming.off} out to "
                "let it, or pass a smaller batch_size.")
    blocks = step.remat_layers(model)
    remat = (f"rematerialisation (build it inside keras.RematScope(mode='list_of_layers', "
             f"layer_names={list(blocks[:3])}{' ...' if len(blocks) > 3 else ''})), " if blocks else "")
    job = {"batch_size": judge.batch, **({"model": naming.plan_model} if naming.plan_model else {})}
    function = (f" ({naming.plan_model}: a function of your script that builds and compiles the model and returns it)"
                if naming.plan_model else "")
    return (f"{head} {tried}. What else would help: bfloat16 compute ({naming.precision}: models built in it), {remat}"
            f"a smaller batch, more devices, or a device memory that is right if this one is not. "
            f"{placement.check_before_renting(runtime, job)}{function}")
