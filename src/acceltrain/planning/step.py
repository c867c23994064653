"""The training step, built and compiled from shapes alone: the model is never materialised.

jax and keras are imported inside the functions (the planner runs before anything else has started a
framework); the caller has loaded Keras on JAX (backends.load("jax")).

How a model is built without its weights: the build function runs under `jax.eval_shape`, so every
initializer returns an abstract value (a tracer) of the right shape and dtype and no weight is
allocated; only the shapes and dtypes of the variables are read afterwards. The step takes its
weights as arguments (`model.stateless_call`, `optimizer.stateless_apply`, as Keras's own JAX trainer
does), so it is lowered from `jax.ShapeDtypeStruct`s laid out by NamedShardings and compiled for the
target's devices: libtpu's compile-only devices for a TPU, this machine's for `here`.
"""

import contextlib
import math
import os
import tempfile
from dataclasses import dataclass

from acceltrain import sharding
from acceltrain.errors import UsageError


@dataclass
class AbstractModel:
    """A built, compiled Keras model whose variables hold no values, and the batch its step takes."""

    model: object
    inputs: object  # the model's own input structure (one, a list, a dict) of ShapeDtypeStructs without the batch
    labels: object  # the same for the labels its loss takes
    params: int  # trainable parameters
    total_params: int  # with the frozen ones (LoRA's base weights)
    optimizer_name: str
    # Keras's global dtype policy once the model was built: the one asked for, or the model function's own where it
    # set one (keras.config.set_dtype_policy inside it wins over the scope it was called in, as in a `run` script).
    policy: str = "float32"

    def batch_specs(self, batch: int, sharding=None) -> tuple:
        """(x, y) as the step takes them: the model's input structure and the labels, at `batch` samples."""
        import jax
        import keras

        def batched(spec):
            if spec is None:
                return None
            return jax.ShapeDtypeStruct((batch, *spec.shape), spec.dtype, sharding=sharding)

        return keras.tree.map_structure(batched, self.inputs), keras.tree.map_structure(batched, self.labels)


def build_abstract(build, *, policy: str = "float32", remat: tuple[str, ...] = (), accumulation: int = 1,
                   sequence_length: int | None = None) -> AbstractModel:
    """Call `build()` (returns a compiled keras.Model) with no weights allocated; its optimizer, loss and metrics
    built too, as fit builds them before its first step.

    policy: the dtype policy the model is built under ("float32", "mixed_bfloat16").
    remat: the names of the layers to rematerialise (remat_layers): built inside
        keras.RematScope(mode="list_of_layers", layer_names=remat), each recomputes its forward pass in the
        backward instead of keeping its activations.
    accumulation: the optimizer's gradient_accumulation_steps (1: none): it sums that many steps' gradients
        before it updates the weights, in one more gradient-sized variable per trainable weight.
    sequence_length: the size of every unknown input dimension but the batch (a language model's tokens).
    """
    import jax
    import keras

    from acceltrain import precision
    from acceltrain.backends import keras_internals

    made = {}

    def shapes_only():
        remat_scope = keras.RematScope(mode="list_of_layers" if remat else None, layer_names=list(remat))
        with precision.scope(policy), remat_scope:
            model = build()
            built_under = precision.current_policy()
        if not isinstance(model, keras.Model):
            raise UsageError(f"The model function returned {type(model).__name__}, not a Keras model. "
                             "Return a keras.Model (Sequential, functional or subclassed).")
        if getattr(model, "optimizer", None) is None:
            raise UsageError("The model is not compiled: plan needs its optimizer and loss. Call "
                             "model.compile(optimizer=..., loss=...) in the model function before returning it.")
        if accumulation > 1:
            model.optimizer.gradient_accumulation_steps = accumulation  # read when the optimizer is built
        model.optimizer.build(model.trainable_variables)
        inputs = _input_specs(model, sequence_length)
        labels = _build_loss_and_metrics(model, inputs)
        made.update(model=model, inputs=inputs, labels=labels, policy=built_under)

    with keras_internals.keras_state_kept():
        jax.eval_shape(shapes_only)
    model = made["model"]
    return AbstractModel(model, made["inputs"], made["labels"], _count(model.trainable_variables),
                         _count(model.weights), type(model.optimizer).__name__.lower(), made["policy"])


def optimizer_like(optimizer, variables, accumulation: int = 1, *, abstract: bool = True):
    """A stand-in for `optimizer` (its class and settings) built for `variables` with `accumulation` steps of gradient
    accumulation: from shapes alone (`abstract`: its slots hold no values), or for real (zeros, laid out as the
    variables are). The optimizer itself is left as it is (unbuilt, for a lever to change before fit builds it)."""
    import jax

    config = {**optimizer.get_config(), "gradient_accumulation_steps": accumulation if accumulation > 1 else None}
    stand_in = type(optimizer).from_config(config)
    if not abstract:
        stand_in.build(variables)
        return stand_in

    def build():
        stand_in.build(variables)
        return jax.numpy.zeros(())

    jax.eval_shape(build)
    return stand_in


def first_samples(arrays, count: int):
    """The first `count` samples of each array of a structure (None stays None), float64 as float32 (what fit
    is fed: inputs/ casts it once)."""
    import keras
    import numpy as np

    def first(array):
        if array is None:
            return None
        array = np.asarray(array[:count])
        return array.astype(np.float32) if array.dtype == np.float64 else array

    return keras.tree.map_structure(first, arrays)


def sample_specs(arrays):
    """One sample's ShapeDtypeStruct of each array of a structure (the batch left out), in the dtype JAX holds it:
    64-bit numbers as 32-bit (JAX's default)."""
    import jax
    import keras
    import numpy as np

    narrow = {np.dtype("float64"): "float32", np.dtype("int64"): "int32", np.dtype("uint64"): "uint32"}

    def spec(array):
        if array is None:
            return None
        dtype = np.asarray(array[:1]).dtype
        return jax.ShapeDtypeStruct(tuple(array.shape[1:]), narrow.get(dtype, dtype))

    return keras.tree.map_structure(spec, arrays)


def compile_built(model, optimizer, inputs, labels, layout: "Layout", devices: list, batch: int, spec_of) -> "Compiled":
    """compile_step for a model built already (a script's, at its first fit): its own variables' shapes, with
    `optimizer` (optimizer_like) and a compiled loss of its own standing in for the model's while the step is traced
    (keras_internals.stand_ins: what fit builds is left for fit to build).

    inputs, labels: the structures of ShapeDtypeStructs of one sample (AbstractModel's), from the fit's first batch.
    """
    from acceltrain.backends import keras_internals

    abstract = AbstractModel(model, inputs, labels, _count(model.trainable_variables), _count(model.weights),
                             type(optimizer).__name__.lower())
    with keras_internals.stand_ins(model, optimizer, abstract.batch_specs(2)):
        return compile_step(abstract, layout, devices, batch, spec_of=spec_of)


def remat_layers(model) -> tuple[str, ...]:
    """The layers to rematerialise: those of a class that repeats among a model's own layers and that hold
    weights (a transformer's blocks, an MLP's Dense layers), in every model nested in `model`.

    Why not Keras's mode="full": it wraps every layer, the model itself too, in jax.checkpoint, which traces
    Python arguments such as `training=True` into arrays; a call that branches on one then fails (measured:
    keras_hub's GemmaCausalLM, "Attempted boolean conversion", Keras 3.15.1). A repeated block is called on
    arrays alone, and is where the activations are.
    """
    import collections

    import keras

    names = []

    def visit(parent):
        own = [layer for layer in parent.layers if not isinstance(layer, keras.Model) and layer.weights]
        repeated = {kind for kind, count in collections.Counter(type(layer) for layer in own).items() if count > 1}
        names.extend(layer.name for layer in own if type(layer) in repeated)
        for layer in parent.layers:
            if isinstance(layer, keras.Model):
                visit(layer)

    visit(model)
    return tuple(dict.fromkeys(names))


def _count(variables) -> int:
    return sum(math.prod(v.shape) for v in variables)


def _input_specs(model, sequence_length: int | None):
    """The model's inputs in its own structure (keras_hub's: a dict of token_ids and padding_mask), each a
    ShapeDtypeStruct without the batch; unknown dimensions are `sequence_length`."""
    import jax

    inputs = None
    for structured in ("input", "inputs"):  # a functional model's own structure; a Sequential's list of one
        try:
            inputs = getattr(model, structured)
            break
        except (AttributeError, ValueError):
            continue
    if isinstance(inputs, list) and len(inputs) == 1:
        inputs = inputs[0]
    if inputs is None or not jax.tree.leaves(inputs):
        raise UsageError("The model has no known input shape: plan builds it from shapes alone. Start it with "
                         "keras.Input(shape=...) (or build it with model.build(input_shape)).")

    unknown = [f"{tensor.name!r} {tuple(tensor.shape)}" for tensor in jax.tree.leaves(inputs)
               if None in tuple(tensor.shape[1:])]
    if sequence_length is not None and not unknown:
        shapes = ", ".join(f"{tensor.name!r} {tuple(tensor.shape)}" for tensor in jax.tree.leaves(inputs))
        raise UsageError(f"Received --sequence-length {sequence_length} (sequence_length={sequence_length}), but the "
                         f"model's inputs ({shapes}) have no unknown size but the batch's for it to set, so it would "
                         "not be used. Leave it out.")
    if unknown and sequence_length is None:
        raise UsageError(f"The model's input{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: plan needs every "
                         "size but the batch's. Pass --sequence-length N (sequence_length=N), the length of the "
                         "sequences you will train on, e.g. --sequence-length 512.")

    def spec(tensor):
        shape = tuple(sequence_length if size is None else int(size) for size in tensor.shape[1:])
        return jax.ShapeDtypeStruct(shape, tensor.dtype)

    return jax.tree.map(spec, inputs)


def _build_loss_and_metrics(model, inputs):
    """Run the model, its loss and its metrics once on a sample of one, as fit does before its first step (their
    variables are made then), and return the labels' specs: shaped like each output, or, for a sparse loss
    (integer classes), without its last axis, as int32."""
    import jax
    import keras

    def one(spec):
        return jax.numpy.zeros((1, *spec.shape), spec.dtype)

    x = keras.tree.map_structure(one, inputs)
    y_pred = model(x, training=False)
    labels = keras.tree.map_structure(_label_spec, y_pred, _loss_per_output(model, y_pred))
    y = keras.tree.map_structure(lambda spec: None if spec is None else one(spec), labels)
    model.compute_loss(x=x, y=y, y_pred=y_pred, training=False)
    model.compute_metrics(x, y, y_pred, sample_weight=None)
    return labels


def _loss_per_output(model, y_pred):
    """The compiled loss of each output, in y_pred's structure (None: an output without one): one loss for all,
    or a list or a dict of them."""
    import keras

    loss = model.loss
    if isinstance(loss, dict):
        if isinstance(y_pred, dict):
            return {name: loss.get(name) for name in y_pred}
        names = iter(getattr(model, "output_names", []))
        return keras.tree.map_structure(lambda _: loss.get(next(names, None)), y_pred)
    if isinstance(loss, (list, tuple)):
        return keras.tree.pack_sequence_as(y_pred, list(loss))
    return keras.tree.map_structure(lambda _: loss, y_pred)


def _label_spec(output, loss):
    import jax

    if loss is None:
        return None
    name = getattr(loss, "name", None) or getattr(loss, "__name__", None) or str(loss)
    shape = tuple(output.shape[1:])
    if "sparse" in str(name).lower():
        return jax.ShapeDtypeStruct(shape[:-1], "int32")
    return jax.ShapeDtypeStruct(shape, "float32")


# --- Layouts ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """A candidate distribution as a mesh and a rule for weights: plain data until `mesh()` is called."""

    distribution: str  # "data" | "fsdp" | "model"
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    weight_axis: str | None  # the mesh axis weights are cut along; None: replicated

    @property
    def weight_parts(self) -> int:
        return self.mesh_shape[self.axis_names.index(self.weight_axis)] if self.weight_axis else 1

    def describe(self) -> str:
        return " x ".join(f"{name} {size}" for name, size in zip(self.axis_names, self.mesh_shape))

    def weight_spec(self, shape) -> tuple:
        if self.weight_axis is None:
            return (None,) * len(shape)
        return sharding.fsdp_spec(tuple(shape), self.weight_parts, self.weight_axis)


def here_devices() -> list:
    """This machine's devices, to compile for (a runtime's own: Runtime.build's levers)."""
    import jax

    return jax.devices()


def layouts(num_devices: int, distribution: str = "auto") -> list[Layout]:
    """The candidates for `distribution` over `num_devices`: data, fsdp and model for 'auto'."""
    every = [Layout("data", (num_devices,), ("batch",), None)]
    if num_devices > 1:
        every.append(Layout("fsdp", (num_devices,), ("batch",), "batch"))
        model_axis = sharding.model_axis_size(num_devices)
        every.append(Layout("model", (num_devices // model_axis, model_axis), ("batch", "model"), "model"))
    if distribution == "auto":
        return every
    chosen = [layout for layout in every if layout.distribution == distribution]
    if not chosen:
        raise UsageError(f"Received --distribution {distribution!r} for {num_devices} device(s). Valid there: "
                         f"auto, {', '.join(layout.distribution for layout in every)}.")
    return chosen


# --- Compiling ---------------------------------------------------------------------------------

@dataclass
class Compiled:
    bytes_per_device: int
    argument_bytes: int
    temp_bytes: int
    flops_per_device: float
    device_kind: str
    fits: bool | None = None  # False: the compiler refused it for want of memory (then no FLOPs)
    compiler_said: str = ""


def compile_step(abstract: AbstractModel, layout: Layout, devices: list, global_batch: int, *,
                 spec_of=None) -> Compiled:
    """Lower and compile one training step for `devices` laid out as `layout`; the compiler's figures.

    spec_of(variable) -> the variable's spec (a tuple of mesh axis names and None), instead of the layout's rule:
    the layouts a real distribution gives a built model's variables (layout/autopilot.py).
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices).reshape(layout.mesh_shape), layout.axis_names)
    replicated = NamedSharding(mesh, PartitionSpec())

    def laid_out(variable):
        spec = PartitionSpec(*(spec_of(variable) if spec_of else layout.weight_spec(variable.shape)))
        return jax.ShapeDtypeStruct(tuple(variable.shape), variable.dtype, sharding=NamedSharding(mesh, spec))

    model = abstract.model
    state = ([laid_out(v) for v in model.trainable_variables], [laid_out(v) for v in model.non_trainable_variables],
             [laid_out(v) for v in model.optimizer.variables],
             [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=replicated) for v in model.metrics_variables])
    data = abstract.batch_specs(global_batch, NamedSharding(mesh, PartitionSpec("batch")))
    out_shardings = (replicated, tuple([a.sharding for a in part] for part in state))  # (logs, state)

    step = jax.jit(train_step(abstract), donate_argnums=0, out_shardings=out_shardings)
    lowered = step.lower(state, data)
    try:
        with _no_persistent_cache():
            compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as error:
        needed = out_of_memory_bytes(str(error))
        if needed is None:
            raise
        return Compiled(needed, 0, 0, float("nan"), devices[0].device_kind, fits=False, compiler_said=str(error))
    flops = _flops(compiled.cost_analysis())
    if " while(" in compiled.as_text() or devices[0].platform == "gpu":
        # XLA's collective matmuls (weights gathered piece by piece in a loop) are counted once per loop by
        # the cost analysis, not once per trip: measured 17% low for fsdp over 8 v5e chips. On a GPU it counts
        # none of the matmuls it hands to cuBLAS (an H200: 1.8e11 FLOPs for a step whose matmuls hold 1.5e13). The
        # step's arithmetic is the same in every layout, so count its matmuls from the traced program instead.
        from acceltrain.planning import estimate

        flops = estimate.step_flops(train_step(abstract), abstract, global_batch) / len(devices)
    return Compiled(*_bytes(compiled.memory_analysis()), flops, devices[0].device_kind)


_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def out_of_memory_bytes(message: str) -> int | None:
    """The bytes a program needs, from libtpu's refusal to compile one that does not fit, e.g.
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (18.10G)
    exceeds available HBM (15.75G)"; None for any other error."""
    import re

    if "RESOURCE_EXHAUSTED" not in message and "out of memory" not in message.lower():
        return None
    found = re.search(r"(?:required[^(]*\(|[Uu]sed )([\d.]+)\s*([KMGT]?)i?B?", message)
    return int(float(found.group(1)) * _UNITS[found.group(2)]) if found else None


def train_step(abstract: AbstractModel):
    """(state, (x, y)) -> (logs, state): the model's own Keras training step, as fit jits it (Keras's JAX
    trainer: `model.train_step`), over (trainable, non-trainable, optimizer, metrics) variables. A model's
    own train_step (written statelessly, as Keras on JAX requires) is the one compiled."""
    model = abstract.model

    def step(state, data):
        return model.train_step(state, data)

    return step


def _bytes(memory) -> tuple[int, int, int]:
    """(peak bytes per device, argument bytes, temporaries) from XLA's memory analysis.

    libtpu reports the program's peak (`peak_memory_in_bytes`); where a backend does not (XLA:CPU here),
    the live set is arguments + outputs not aliased to them (the state is donated) + temporaries.
    Temporaries read 0 for small TPU programs (measured: the MNIST MLP's step), so the peak is used.
    """
    arguments, temp = int(memory.argument_size_in_bytes), int(memory.temp_size_in_bytes)
    live = arguments + int(memory.output_size_in_bytes) - int(memory.alias_size_in_bytes) + temp
    peak = int(getattr(memory, "peak_memory_in_bytes", 0) or 0)
    return max(peak, live), arguments, temp


def _flops(cost) -> float:
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float((cost or {}).get("flops", 0.0))


# --- libtpu's compile-only devices -------------------------------------------------------------

# Set while plan compiles for a TPU (where the user has not set them), and put back after: see
# libtpu_environment and topology_devices.
LIBTPU_ENV = (("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"))


@contextlib.contextmanager
def libtpu_environment():
    """LIBTPU_ENV set inside (a value the user set is kept), each variable as it was on the way out: a later
    connect() in the same process, on a TPU VM, must see the VM's hosts, not the compile's one localhost.

    ALLOW_MULTIPLE_LIBTPU_LOAD: libtpu takes /tmp/libtpu_lockfile to guard a real TPU; compiling needs
    no TPU, and without it a plan fails while any other process (a plain JAX script) holds the lock.
    TPU_SKIP_MDS_QUERY, TPU_WORKER_HOSTNAMES=localhost: without a TPU VM's metadata server libtpu logs an
    error about the hosts it cannot find.
    """
    before = {name: os.environ.get(name) for name, _ in LIBTPU_ENV}
    for name, value in LIBTPU_ENV:
        os.environ.setdefault(name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def topology_devices(topology: str) -> list:
    """libtpu's compile-only devices for a topology name ("v5e:2x4"), with libtpu's start-up chatter on
    stderr kept out of the way (shown only if it fails). Call it inside libtpu_environment()."""
    from jax.experimental import topologies

    with _stderr_kept() as kept:
        try:
            return list(topologies.get_topology_desc(platform="tpu", topology_name=topology).devices)
        except Exception as error:
            raise RuntimeError(f"libtpu could not build the {topology!r} topology: {error}\n{kept()}") from error


def libtpu_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("libtpu") is not None


@contextlib.contextmanager
def _stderr_kept():
    """Send file descriptor 2 (where C++ libraries log) to a temporary file; yields a reader of it."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as kept:
        os.dup2(kept.fileno(), 2)
        try:
            yield lambda: (kept.seek(0), kept.read().decode(errors="replace"))[1]
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@contextlib.contextmanager
def _no_persistent_cache():
    """Compile-only executables cannot be loaded back from JAX's disk cache (reading one warns "PjRtCompiler
    must be constructed with a Client"), so a plan neither writes nor reads it.

    JAX decides whether it uses the cache once, at its first compile: when that is a plan's (Runtime.build weighing
    layouts under --device-memory), the cache stayed off for the whole run, so every rerun compiled anew (33 s a
    run instead of 5.6, issue 31) and the ledger advised unsetting ACCELTRAIN_COMPILATION_CACHE=0, which nobody had
    set. After the plan, JAX is told to decide again (reset_cache: its next compile opens the cache afresh)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        if was:
            compilation_cache.reset_cache()
