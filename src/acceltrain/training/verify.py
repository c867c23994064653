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
The one-device run holds the whole training state on one device: the model must fit there (on simulated devices,
this machine's memory).
"""

from dataclasses import dataclass

import numpy as np

from acceltrain import data, log
from acceltrain.errors import AcceltrainError, UsageError, positive_int

# The largest relative difference accepted, of the losses and of each weight (the norm of the difference over the
# norm of the one-device weight). float32 sums in another order differ by about 1e-7 relative a step. Measured with
# --verify 3 on the corpus's 11 scripts that fit (tests/scripts/corpus), each under data, fsdp and model on 8
# simulated devices: the losses at most 1.9e-7 apart, the weights at most 1.3e-5 (finetune_frozen's second fit, on
# the 2 x 4 mesh); a layer that forgets its all-reduce moved the losses by 0.38 and a weight by 1.5
# (tests/training/test_verify.py). 1e-4 sits between, 7x above the largest rounding seen.
TOLERANCE = 1e-4


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

    @property
    def passed(self) -> bool:
        return max(self.loss_difference, self.weight_difference) <= self.tolerance

    def line(self) -> str:
        worst = ", ".join(f"{path} {difference:.1e}" for path, difference in self.worst[:3])
        return (f"verify: {self.steps} step(s) of batch {self.batch_size} on {self.layout} and on one device, from the "
                f"same weights and batches: the losses differ by at most {self.loss_difference:.1e} (relative), the "
                f"weights by {self.weight_difference:.1e} (most: {worst}); tolerance {self.tolerance:.0e}")


def compare(losses, alone, weights, alone_weights, paths, *, steps: int, batch_size: int, layout: str,
            tolerance: float = TOLERANCE) -> Verdict:
    """The verdict from the two runs' losses (each step's: a number, or {name: number} for several) and trainable
    weights after them (numpy arrays). Only losses are compared: a metric such as accuracy moves by a whole sample
    when rounding tips one prediction."""
    losses, alone = _values(losses), _values(alone)
    loss_difference = float(np.max(np.abs(losses - alone) / np.maximum(np.abs(alone), 1e-12))) if alone.size else 0.0
    by_path = []
    for path, got, expected in zip(paths, weights, alone_weights):
        got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
        by_path.append((path, float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-12))))
    by_path.sort(key=lambda item: -item[1])
    weight_difference = by_path[0][1] if by_path else 0.0
    return Verdict(steps, batch_size, layout, loss_difference, weight_difference, by_path, tolerance)


def _values(steps) -> np.ndarray:
    """Each step's losses as one flat array: a number a step, or the values of {name: number} in their names' order."""
    flat = [value for step in steps for _, value in (sorted(step.items()) if isinstance(step, dict) else [(0, step)])]
    return np.asarray(flat, np.float64)


def _dividing(batches, batch: int, replicas: int, shown: str):
    """The batches cut to a multiple of the replicas, as fit's inputs are cut (inputs.py leaves out the last samples
    so that each batch divides over them: a few samples, or a dataset's short last batch), and the batch."""
    def cut(size: int) -> int:
        return size // replicas * replicas

    if cut(batch) == 0:
        raise UsageError(f"Received {shown} with batches of {batch} sample(s), fewer than the {replicas} replicas "
                         "each step is cut over. Pass a batch_size of at least the replicas, or leave it out.")
    cuts = [slice(0, cut(len(data.leaves(x)[0]))) for x, _ in batches]
    return [(data.take(x, rows), data.take(y, rows)) for (x, y), rows in zip(batches, cuts) if rows.stop], cut(batch)


def check_steps(steps, name: str = "verify") -> int | None:
    """`verify` as given: None (off) or a whole number of steps."""
    return None if steps is None else positive_int(steps, name, " (the training steps compared, e.g. 3)")


def verify(runtime, model, x, y, batch_size: int | None, steps: int, *, accumulation: int = 1,
           flag: str = "verify") -> Verdict:
    """Run the comparison for `model`'s first fit on `runtime` (module docstring); raise VerificationFailed when the
    difference is over the tolerance. x, y: the fit's inputs (arrays at `batch_size`, the batch of each step, or a
    batched tf.data dataset); with `accumulation` steps per weight update, `steps` updates are compared."""
    import keras

    from acceltrain.backends import keras_internals
    from acceltrain.planning import step

    framework = runtime.backend_module
    shown = f"--verify {steps}" if flag.startswith("--") else f"verify={steps}"
    if not hasattr(framework, "verify_steps"):
        raise UsageError(f"Received {shown} on the {runtime.backend} backend: verification runs on JAX. Pass "
                         "--backend jax (backend='jax'), or leave it out.")
    if runtime.num_processes > 1:
        raise UsageError(f"Received {shown} in a job of {runtime.num_processes} processes: the one-device run needs "
                         "every batch in one process. Verify on one host (acceltrain run), then launch the job.")
    found = data.first_batches(x, y, batch_size, steps * accumulation)
    if found is None:
        raise UsageError(f"Received {shown} for a fit on {type(x).__name__}: verification reads its first batches "
                         "ahead, from arrays (numpy, or a dict of them) or a tf.data dataset. Verify with those, or "
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
    with (log.phase(f"verify: {len(packed)} step(s) on {runtime.distribution_name} and on one device"),
          keras_internals.stand_ins(model, optimizer, step.first_samples(batches[0], 2))):
        losses, alone, weights, alone_weights = framework.verify_steps(model, packed, runtime.distribution)
    verdict = compare(losses, alone, weights, alone_weights, [v.path for v in model.trainable_variables],
                      steps=len(packed), batch_size=batch, layout=runtime.distribution_name)
    if not verdict.passed:
        raise VerificationFailed(
            f"{verdict.line()}. Over the tolerance: under {verdict.layout} the model computes something else than on "
            "one device, so training did not start. The weights that differ most are where to look (a layer written "
            "for another layout, a collective it forgets, data cut wrongly).")
    log.info(verdict.line() + " → training starts from the weights as they were")
    return verdict
