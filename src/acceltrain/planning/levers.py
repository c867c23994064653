"""When a training step does not fit a device: the levers, tried in order, each verified by compiling.

Plain values only (no framework): a `Setting` says how to run the step, and the caller's
`compile_fn(setting)` says how many bytes one device needs for it, from a compiler: libtpu's for a TPU
target (`acceltrain plan`), this machine's for `here` (and for a runtime that checks a job before its
first step). The same walk serves both.

The order is the priority: what costs the job least in speed and in change comes first.
  1. The sharding: data parallel, then fsdp (weights cut over the one mesh axis), then the 2-D batch x model
     mesh. Data parallel gathers no weights; fsdp is one axis, the simpler program.
  2. bfloat16 compute (Keras's mixed_bfloat16: float32 weights, activations in half the bytes), on the
     sharding that needed the least; only where the step computes in float32 (the caller's `compute`:
     precision 'auto' already computes in bfloat16 on TPUs and GPUs of compute capability 8.0 on).
  3. Rematerialisation of the model's repeated layers (its blocks, built in keras.RematScope(mode=
     "list_of_layers")): their activations are recomputed in the backward pass instead of kept, about a
     third more arithmetic. Skipped where the model repeats no layer.
  4. A smaller per-device batch with the optimizer's gradient_accumulation_steps, so the global batch (the
     samples per weight update) stays the user's: 2, 4, 8 ... steps while the batch still divides over the
     devices. Each costs one more gradient-sized variable per trainable weight and smaller, slower steps.
  5. Else it does not fit.
A lever of steps 2 and 3 is kept only where its compiled step needs fewer bytes than without it; the next
lever is tried on top of what was kept. The walk stops at the first setting that fits.
"""

from dataclasses import dataclass, replace

SHARDINGS = ("data", "fsdp", "model")
ACCUMULATION_STEPS = (2, 4, 8, 16, 32)

# How a user applies each lever to their own job (the plan prints it beside the figure).
HOW = {
    "data": "data parallel: every device holds every weight (--distribution data, distribution='data')",
    "fsdp": "fsdp: every weight cut over all devices, gathered as used (--distribution fsdp, distribution='fsdp')",
    "model": "a batch x model mesh, weights cut over its model axis (--distribution model, distribution='model')",
    "bfloat16": "compute in bfloat16: keras.config.set_dtype_policy('mixed_bfloat16') before the model is built "
                "(float32 weights)",
    "remat": "rematerialise {what}: build the model inside `with keras.RematScope(mode='list_of_layers', "
             "layer_names=[those names]):`",
    "accumulate": "fit(batch_size={batch}) with the optimizer's gradient_accumulation_steps={steps}: the weights "
                  "update every {steps} steps, on the global batch of {global_batch}",
}


@dataclass(frozen=True)
class Setting:
    """One way to run the training step."""

    distribution: str  # "data" | "fsdp" | "model"
    compute: str = "float32"  # the dtype policy the model is built under: "float32" | "mixed_bfloat16"
    remat: bool = False  # the repeated layers built inside keras.RematScope(mode="list_of_layers")
    accumulation: int = 1  # the optimizer's gradient_accumulation_steps; each step takes global batch / this

    def describe(self) -> str:
        """"fsdp + bfloat16 + remat + accumulate 4": the sharding and each lever on top of it."""
        parts = [self.distribution]
        parts += ["bfloat16"] if self.compute == "mixed_bfloat16" else []
        parts += ["remat"] if self.remat else []
        parts += [f"accumulate {self.accumulation}"] if self.accumulation > 1 else []
        return " + ".join(parts)


@dataclass
class Lever:
    """One setting tried: its compiled bytes per device (None: it could not be compiled, see `how`)."""

    name: str  # "data" | "fsdp" | "model" | "bfloat16" | "remat" | "accumulate N" | "more chips"
    bytes_per_device: int | None
    fits: bool
    how: str
    setting: Setting | None = None  # what was compiled: this lever on top of those kept before it


def choose_levers(distributions, budget: int, compile_fn, *, global_batch: int, batch_ways: dict[str, int],
                  compute: str = "float32", remat_layers: tuple[str, ...] = (), bfloat16: bool = True,
                  accumulate: bool = True) -> list[Lever]:
    """Each setting tried, in the module's order, up to the first that fits `budget` bytes per device.

    distributions: the shardings to try, in order (a subset of SHARDINGS).
    compile_fn(setting) -> bytes one device needs (a compiler's refusal for want of memory says how many);
        an exception is recorded against that lever (bytes None, its first line in `how`) and the walk goes on.
    global_batch: the samples of one weight update, kept by every lever.
    batch_ways: for each distribution, over how many devices its batch is split (its mesh's batch axis).
    compute: the dtype policy every setting starts from (Setting.compute): the one the job would run in.
    remat_layers: the names of the layers remat would rematerialise (none: the lever is skipped).
    bfloat16: whether the bfloat16 lever can be applied (False: a model built already computes as it was built;
        a `compute` other than float32 is not changed whatever this says).
    accumulate: whether the accumulation lever can be applied (False: the caller cannot change the batch).
    """
    tried = []

    def attempt(name: str, setting: Setting, how: str) -> Lever:
        try:
            nbytes = int(compile_fn(setting))
        except Exception as error:  # noqa: BLE001 - a lever that cannot be built is reported, not fatal
            lever = Lever(name, None, False, f"could not compile: {type(error).__name__}: {gist(error)}", setting)
        else:
            lever = Lever(name, nbytes, nbytes <= budget, how, setting)
        tried.append(lever)
        return lever

    # 1. The sharding, in order.
    for distribution in distributions:
        if attempt(distribution, Setting(distribution, compute), HOW[distribution]).fits:
            return tried
    compiled = [lever for lever in tried if lever.bytes_per_device is not None]
    if not compiled:
        return tried
    best = min(compiled, key=lambda lever: lever.bytes_per_device)

    # 2, 3. bfloat16 compute, then rematerialisation, each kept where it saves bytes.
    savers = [("bfloat16", {"compute": "mixed_bfloat16"}, HOW["bfloat16"])] if bfloat16 and compute == "float32" else []
    if remat_layers:
        savers.append(("remat", {"remat": True}, HOW["remat"].format(what=_layers(remat_layers))))
    for name, change, how in savers:
        lever = attempt(name, replace(best.setting, **change), how)
        if lever.fits:
            return tried
        if lever.bytes_per_device is not None and lever.bytes_per_device < best.bytes_per_device:
            best = lever

    # 4. A smaller per-device batch, the global batch kept by accumulating gradients.
    ways = batch_ways[best.setting.distribution]
    for steps in accumulation_steps(global_batch, ways) if accumulate else ():
        how = HOW["accumulate"].format(batch=global_batch // steps, steps=steps, global_batch=global_batch)
        if attempt(f"accumulate {steps}", replace(best.setting, accumulation=steps), how).fits:
            return tried
    return tried


def gist(error: Exception) -> str:
    """An error's first two lines of text, on one line: Keras puts what failed first and why second
    ("Exception encountered when calling GemmaCausalLM.call()." / "Attempted boolean conversion ...")."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    return " ".join([line for line in lines if line][:2])


def _layers(names: tuple[str, ...]) -> str:
    """"decoder_block_0 … decoder_block_17 (18 layers)", or the names themselves when few."""
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]} … {names[-1]} ({len(names)} layers)"


def accumulation_steps(global_batch: int, batch_ways: int) -> list[int]:
    """The accumulation steps (of ACCUMULATION_STEPS) whose smaller batch still divides over `batch_ways`
    devices: 64 over 8 → 2, 4, 8 (8 per device, then 4, 2, 1)."""
    return [steps for steps in ACCUMULATION_STEPS if global_batch % (steps * batch_ways) == 0]


def first_fit(levers: list[Lever]) -> Lever | None:
    """The lever the walk stopped at because it fits, or None."""
    return next((lever for lever in levers if lever.fits), None)
