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
    """A built, compiled Keras model whose variables hold no values, and what its step takes."""

    model: object
    loss: object  # a Keras loss callable: loss(y_true, y_pred)
    input_specs: list  # [(shape without batch, dtype)] per model input
    label_spec: tuple  # (shape without batch, dtype)
    params: int  # trainable parameters
    optimizer_name: str


def build_abstract(build, *, policy: str = "float32") -> AbstractModel:
    """Call `build()` (returns a compiled keras.Model) with no weights allocated; its optimizer built too."""
    import jax
    import keras

    from acceltrain import precision

    made = {}

    def shapes_only():
        with precision.scope(policy):
            model = build()
            if not isinstance(model, keras.Model):
                raise UsageError(f"The model function returned {type(model).__name__}, not a Keras model. "
                                 "Return a keras.Model (Sequential, functional or subclassed).")
            if getattr(model, "optimizer", None) is None:
                raise UsageError("The model is not compiled: plan needs its optimizer and loss. Call "
                                 "model.compile(optimizer=..., loss=...) in the model function before returning it.")
            model.optimizer.build(model.trainable_variables)
        made["model"] = model

    jax.eval_shape(shapes_only)
    model = made["model"]
    return AbstractModel(model, _loss_of(model), _input_specs(model), _label_spec(model),
                         sum(math.prod(v.shape) for v in model.trainable_variables),
                         type(model.optimizer).__name__.lower())


def _loss_of(model):
    import keras

    loss = model.loss
    if isinstance(loss, (dict, list, tuple)):
        raise UsageError("plan handles models compiled with one loss for now; this one has "
                         f"{type(loss).__name__} {loss!r}. Plan a one-output version of it.")
    return keras.losses.get(loss) if isinstance(loss, str) else loss


def _input_specs(model) -> list:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise UsageError("The model has no known input shape: plan builds it from shapes alone. Start it with "
                         "keras.Input(shape=...) (or build it with model.build(input_shape)).")
    return [(tuple(int(d) for d in t.shape[1:]), str(t.dtype)) for t in inputs]


def _label_spec(model) -> tuple:
    """Integer class labels for a sparse loss, else labels shaped like the output."""
    output = model.outputs[0]
    name = model.loss if isinstance(model.loss, str) else type(model.loss).__name__
    shape = tuple(int(d) for d in output.shape[1:])
    if "sparse" in str(name).lower():
        return shape[:-1], "int32"
    return shape, "float32"


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
                 remat: bool = False) -> Compiled:
    """Lower and compile one training step for `devices` laid out as `layout`; the compiler's figures."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices).reshape(layout.mesh_shape), layout.axis_names)

    def laid_out(variable):
        spec = PartitionSpec(*layout.weight_spec(variable.shape))
        return jax.ShapeDtypeStruct(tuple(variable.shape), variable.dtype, sharding=NamedSharding(mesh, spec))

    model = abstract.model
    state = ([laid_out(v) for v in model.trainable_variables], [laid_out(v) for v in model.non_trainable_variables],
             [laid_out(v) for v in model.optimizer.variables])
    batch = NamedSharding(mesh, PartitionSpec("batch"))
    inputs = [jax.ShapeDtypeStruct((global_batch, *shape), dtype, sharding=batch) for shape, dtype in abstract.input_specs]
    labels = jax.ShapeDtypeStruct((global_batch, *abstract.label_spec[0]), abstract.label_spec[1], sharding=batch)
    out_shardings = tuple([a.sharding for a in part] for part in state) + (NamedSharding(mesh, PartitionSpec()),)

    step = jax.jit(train_step(abstract, remat=remat), donate_argnums=(0, 1, 2), out_shardings=out_shardings)
    lowered = step.lower(*state, inputs, labels)
    try:
        with _no_persistent_cache():
            compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as error:
        needed = out_of_memory_bytes(str(error))
        if needed is None:
            raise
        return Compiled(needed, 0, 0, float("nan"), devices[0].device_kind, fits=False, compiler_said=str(error))
    flops = _flops(compiled.cost_analysis())
    if " while(" in compiled.as_text():
        # XLA's collective matmuls (weights gathered piece by piece in a loop) are counted once per loop by
        # the cost analysis, not once per trip: measured 17% low for fsdp over 8 v5e chips. The step's
        # arithmetic is the same in every layout, so count its matmuls from the traced program instead.
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


def train_step(abstract: AbstractModel, *, remat: bool = False):
    """(trainable, non_trainable, optimizer_variables, inputs, labels) -> the same updated, and the loss."""
    import jax

    model, loss_fn = abstract.model, abstract.loss

    def loss_and_updates(trainable, non_trainable, inputs, labels):
        x = inputs[0] if len(inputs) == 1 else inputs
        predictions, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return jax.numpy.mean(loss_fn(labels, predictions)), non_trainable  # a loss function gives one per sample

    if remat:
        loss_and_updates = jax.checkpoint(loss_and_updates)

    def step(trainable, non_trainable, optimizer_variables, inputs, labels):
        gradients_of = jax.value_and_grad(loss_and_updates, has_aux=True)
        (loss, non_trainable), gradients = gradients_of(trainable, non_trainable, inputs, labels)
        trainable, optimizer_variables = model.optimizer.stateless_apply(optimizer_variables, gradients, trainable)
        return trainable, non_trainable, optimizer_variables, loss

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

# Set for the process (where not set already) before libtpu loads: see topology_devices.
LIBTPU_ENV = (("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("TPU_SKIP_MDS_QUERY", "1"), ("TPU_WORKER_HOSTNAMES", "localhost"))


def topology_devices(topology: str) -> list:
    """libtpu's compile-only devices for a topology name ("v5e:2x4"), with libtpu's start-up chatter on
    stderr kept out of the way (shown only if it fails).

    ALLOW_MULTIPLE_LIBTPU_LOAD: libtpu takes /tmp/libtpu_lockfile to guard a real TPU; compiling needs
    no TPU, and without it a plan fails while any other process (a plain JAX script) holds the lock.
    TPU_WORKER_HOSTNAMES=localhost: without a TPU VM's metadata libtpu logs an error about it.
    """
    from jax.experimental import topologies

    for name, value in LIBTPU_ENV:
        os.environ.setdefault(name, value)
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
    must be constructed with a Client"), so a plan neither writes nor reads it."""
    import jax

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
