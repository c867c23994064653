"""Does the distributed run compute what one device computes? (`acceltrain run --verify N`, Runtime.fit(verify=N))

Before a model's first fit trains, N of its steps run twice from the same weights and the same batches (the first
N batches of its inputs, in order): laid out as the run will train (the chosen sharding, each batch cut over the
devices) and on one device with no distribution. The largest relative differences of the losses and of the
trainable weights after the N steps are printed with the tolerance; over it, the run stops before training, naming
the weights that differ most. Nothing is written back: training starts from the weights as they were, and the
optimizer's step count is untouched (the verification steps do not count).

Why it can differ at all: GSPMD computes the same function under any valid layout, so a difference beyond float
rounding is a bug of what is not GSPMD's: a layer written for one layout (its own shard_map, a collective
forgotten), data cut wrongly, a compiler's collective. Rounding does differ: a sharded matmul sums in another order.
So the verdict leaves out what rounding alone can change: the tolerance is the model's precision's (TOLERANCES), and
a weight with no gradient but round-off (NO_GRADIENT: a bias before BatchNormalization, which Adam would move by
its learning rate either way) is named, not compared. A distributed loss 1/N of the one-device loss is named as a
loss divided by the device count by hand (read as the step is traced; a count read earlier divides both runs alike).
The one-device run holds the whole training state on one device: the model must fit there (on simulated devices,
this machine's memory).
"""

from dataclasses import dataclass, field

import numpy as np

from acceltrain import errors, log
from acceltrain.errors import AcceltrainError, UsageError, option, positive_int
from acceltrain.inputs import arrays, streams

# The largest relative difference accepted, of the losses and of each weight (the norm of the difference over the
# norm of the one-device weight), by the precision the model computes in: a sum in another order differs by about
# its rounding unit. Where each sits between what correct models and wrong ones differ by, measured per precision:
# the benchmark section `verify-tolerance` (tests/layout/test_verify.py checks the record against these).
TOLERANCES = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-1}
TOLERANCE = TOLERANCES["float32"]
# One rounding of each precision, relative (half its machine epsilon): the least precise the model computes in names
# its tolerance; float64 is judged as float32.
_ROUNDING = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-9, "float16": 2.0**-11}
# A weight whose gradient (computed in float32, whatever the model's precision) is no larger than this many float32
# roundings of the largest gradient has none but round-off: a bias before BatchNormalization, which subtracts it
# again. Adam turns round-off into steps of its learning rate, so such a weight is named, not compared. Where the
# gradients of correct models fall on either side: the benchmark section `verify-tolerance`.
NO_GRADIENT = 1e3


class VerificationFailed(AcceltrainError):
    """The distributed steps computed something other than the one-device steps."""

    exit_code = 1


@dataclass
class Verdict:
    steps: int
    batch_size: int
    layout: str
    loss_difference: float
    weight_difference: float
    worst: list  # [(path, relative difference)], the largest first
    tolerance: float = TOLERANCE
    precision: str = "float32"
    without_gradient: list = field(default_factory=list)  # the paths of weights whose gradient is round-off only
    loss_ratio: float | None = None  # the distributed losses over the one-device ones, on average
    gradient_sizes: dict = field(default_factory=dict)  # {path: its float32 gradient's size over the largest's}

    @property
    def passed(self) -> bool:
        return max(self.loss_difference, self.weight_difference) <= self.tolerance

    def line(self) -> str:
        worst = ", ".join(f"{path} {difference:.1e}" for path, difference in self.worst[:3])
        skipped = ""
        if self.without_gradient:
            named = ", ".join(self.without_gradient[:3]) + (", ..." if len(self.without_gradient) > 3 else "")
            skipped = (f"; {len(self.without_gradient)} weight(s) with no gradient but round-off, not compared "
                       f"({named})")
        return (f"verify: {self.steps} step(s) of batch {self.batch_size} on {self.layout} and on one device, from the "
                f"same weights and batches: the losses differ by at most {self.loss_difference:.1e} (relative), the "
                f"weights by {self.weight_difference:.1e} (most: {worst}){skipped}; tolerance {self.tolerance:.0e} "
                f"({self.precision})")

    def hint(self, replicas: int) -> str:
        """What the failure looks like, where it has a known shape: a loss scaled by the device count."""
        if self.loss_ratio and replicas > 1:
            for factor, said in ((1 / replicas, "divided by"), (replicas, "multiplied by")):
                if abs(self.loss_ratio / factor - 1) < 0.05:
                    return (f" The distributed loss is the one-device loss {said} {replicas}, the replica count: a "
                            f"loss {said} the device count by hand? Keras's loss is already the mean over the whole "
                            "batch, however many devices share it: leave the count out.")
        return ""


def compare(losses, alone, weights, alone_weights, paths, *, steps: int, batch_size: int, layout: str,
            precision: str = "float32", gradients=None) -> Verdict:
    """The verdict from the two runs' losses (each step's: a number, or {name: number} for several) and trainable
    weights after them (numpy arrays). Only losses are compared: a metric such as accuracy moves by a whole sample
    when rounding tips one prediction. `gradients` (the first step's, on one device, in the weights' order) tell the
    weights whose gradient is round-off only: named, not compared (NO_GRADIENT)."""
    losses, alone = _values(losses), _values(alone)
    loss_difference = float(np.max(np.abs(losses - alone) / np.maximum(np.abs(alone), 1e-12))) if alone.size else 0.0
    loss_ratio = float(np.mean(losses) / np.mean(alone)) if alone.size and np.mean(alone) else None
    none = set(without_gradient(gradients, paths)) if gradients is not None else set()
    by_path = []
    for path, got, expected in zip(paths, weights, alone_weights):
        if path not in none:
            got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
            by_path.append((path, float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-12))))
    by_path.sort(key=lambda item: -item[1])
    weight_difference = by_path[0][1] if by_path else 0.0
    return Verdict(steps, batch_size, layout, loss_difference, weight_difference, by_path,
                   TOLERANCES.get(precision, TOLERANCE), precision, [p for p in paths if p in none], loss_ratio,
                   dict(zip(paths, gradient_sizes(gradients))) if gradients is not None else {})


def without_gradient(gradients, paths) -> list:
    """The paths of the weights whose float32 gradient (root mean square) is within NO_GRADIENT float32 roundings
    of the largest."""
    sizes = [_rms(g) for g in gradients]
    largest = max(sizes, default=0.0)
    return [path for path, size in zip(paths, sizes) if largest > 0 and size <= NO_GRADIENT * _ROUNDING["float32"] * largest]


def gradient_sizes(gradients) -> list:
    """Each gradient's root mean square over the largest one's (the benchmark records them)."""
    sizes = [_rms(g) for g in gradients]
    largest = max(sizes, default=0.0) or 1.0
    return [size / largest for size in sizes]


def _rms(array) -> float:
    array = np.asarray(array, np.float64)
    return float(np.sqrt(np.mean(array * array))) if array.size else 0.0


def precision_of(model) -> str:
    """The least precise float the model computes in: its own compute dtype and each of its layers' (a
    mixed_bfloat16 model computes in bfloat16, its variables float32)."""
    found, layers = {model.compute_dtype}, list(getattr(model, "layers", []))
    while layers:
        layer = layers.pop()
        found.add(layer.compute_dtype)
        layers.extend(getattr(layer, "layers", []))
    floats = [name for name in _ROUNDING if name in found]
    return max(floats, key=_ROUNDING.get) if floats else "float32"


def first_gradients(framework, model, batch, samples) -> list:
    """The first batch's gradient of each trainable weight, on one device, computed in float32 (in bfloat16 a bias
    before BatchNormalization has round-off a hundredth of the largest gradient): one step of plain SGD at learning
    rate 1 in place of the model's optimizer, so the weights move by minus their gradient (a train_step of the
    model's own goes through it as through any optimizer set on the model; a GAN keeping its own is not asked)."""
    import keras

    from acceltrain.backends import keras_internals

    with keras_internals.no_distribution():
        sgd = keras.optimizers.SGD(1.0)
        sgd.build(model.trainable_variables)
    before = [np.asarray(v.value, np.float64) for v in model.trainable_variables]
    with keras_internals.computing_in_float32(model), keras_internals.stand_ins(model, sgd, samples):
        _, after = framework.steps_on_one_device(model, [batch])
    return [start - np.asarray(end, np.float64) for start, end in zip(before, after)]


def _values(steps) -> np.ndarray:
    """Each step's losses as one flat array: a number a step, or the values of {name: number} in their names' order."""
    flat = [value for step in steps for _, value in (sorted(step.items()) if isinstance(step, dict) else [(0, step)])]
    return np.asarray(flat, np.float64)


def _dividing(batches, batch: int, replicas: int, shown: str):
    """The batches cut to a multiple of the replicas, as fit's inputs are cut (inputs/ leaves out the last samples
    so that each batch divides over them: a few samples, or a dataset's short last batch), and the batch."""
    def cut(size: int) -> int:
        return size // replicas * replicas

    if cut(batch) == 0:
        raise UsageError(f"Received {shown} with batches of {batch} sample(s), fewer than the {replicas} replicas "
                         "each step is cut over. Pass a batch_size of at least the replicas, or leave it out.")
    cuts = [slice(0, cut(len(arrays.leaves(x)[0]))) for x, _ in batches]
    return [(arrays.take(x, rows), arrays.take(y, rows)) for (x, y), rows in zip(batches, cuts) if rows.stop], cut(batch)


def check_steps(steps, processes: int = 1) -> int | None:
    """`verify` as given: None (off) or a whole number of steps, in a job of one process (`processes`)."""
    if steps is None:
        return None
    name = option("verify")  # --verify under the CLI
    steps = positive_int(steps, name, " (the training steps compared, e.g. 3)")
    if processes > 1:
        raise UsageError(f"Received {errors.shown(name, steps)} for a job of {processes} processes: the one-device run of the "
                         "verification needs every batch in one process. Verify with `acceltrain run --verify N` on "
                         "one host first, then launch without it.")
    return steps


def verify(runtime, model, x, y, batch_size: int | None, steps: int, *, accumulation: int = 1,
           ) -> Verdict:
    """Run the comparison for `model`'s first fit on `runtime` (module docstring); raise VerificationFailed when the
    difference is over the tolerance. x, y: the fit's inputs (arrays at `batch_size`, the batch of each step, or a
    batched tf.data dataset); with `accumulation` steps per weight update, `steps` updates are compared."""
    import keras

    from acceltrain.backends import keras_internals
    from acceltrain.planning import step

    framework = runtime.backend_module
    shown = errors.shown(option("verify"), steps)
    if not framework.SHARDS:
        raise UsageError(f"Received {shown} on the {runtime.backend} backend: verification runs on JAX. Pass "
                         "--backend jax (backend='jax'), or leave it out.")
    if runtime.num_processes > 1:
        raise UsageError(f"Received {shown} in a job of {runtime.num_processes} processes: the one-device run needs "
                         "every batch in one process. Verify on one host (acceltrain run), then launch the job.")
    found = streams.first_batches(x, y, batch_size, steps * accumulation)
    if found is None:
        raise UsageError(f"Received {shown} for a fit on {type(x).__name__}: verification reads its first batches "
                         "ahead, from arrays (numpy, or a dict of them), a tf.data dataset or a grain dataset. Verify with those, or "
                         "leave it out.")
    if runtime.distribution is None:
        log.info(f"verify: {model.name} trains on one device with no distribution: nothing to compare")
        return Verdict(0, found[1], "one device", 0.0, 0.0, [])
    batches, batch = _dividing(*found, runtime.num_replicas, shown)
    # The model's own optimizer, loss and metrics are left for fit to build: a stand-in optimizer, built here for real
    # (its slots laid out by the distribution in force, as fit's will be), and a loss of its own train the steps.
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        with runtime.scope():
            optimizer = step.optimizer_like(optimizer, model.trainable_variables, accumulation, abstract=False)
    packed = [keras.utils.pack_x_y_sample_weight(*pair) for pair in batches]  # as Keras hands train_step a batch
    samples = step.first_samples(batches[0], 2)
    with (log.phase(f"verify: {len(packed)} step(s) on {runtime.distribution_name} and on one device"),
          keras_internals.stand_ins(model, optimizer, samples)):
        losses, alone, weights, alone_weights = framework.verify_steps(model, packed, runtime.distribution)
    verdict = compare(losses, alone, weights, alone_weights, [v.path for v in model.trainable_variables],
                      steps=len(packed), batch_size=batch, layout=runtime.distribution_name,
                      precision=precision_of(model),
                      gradients=None if model.optimizer is None else first_gradients(runtime.backend_module, model, packed[0], samples))
    if not verdict.passed:
        error = VerificationFailed(
            f"{verdict.line()}. Over the tolerance: under {verdict.layout} the model computes something else than on "
            "one device, so training did not start. The weights that differ most are where to look (a layer written "
            f"for another layout, a collective it forgets, data cut wrongly).{verdict.hint(runtime.num_replicas)}")
        error.verdict = verdict
        raise error
    log.info(verdict.line() + " → training starts from the weights as they were")
    return verdict
