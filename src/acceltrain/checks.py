"""Checks of a `fit` call in a script acceltrain did not write: the pitfalls that cost accuracy or speed.

Each check takes plain values (numbers, numpy arrays, a loss name) and returns the Findings that apply,
so a table test covers it with no framework. `acceltrain run` prints each warning once, with its fix,
and stops on an error before Keras would crash with a less helpful message.
"""

import math
from dataclasses import dataclass

import numpy as np

from acceltrain import hardware
from acceltrain.inputs.arrays import keras_batch
from acceltrain.errors import UsageError

# Below this many samples per replica a step is too small to keep the device busy (each hardware kind
# says why: hardware/tpu.py, gpu.py, cpu.py). Rules of thumb, not limits.
MIN_BATCH_PER_REPLICA = {kind.NAME: kind.MIN_BATCH_PER_REPLICA for kind in hardware.KINDS}


@dataclass(frozen=True)
class Finding:
    key: str  # one of the check names: each is printed once per run
    message: str
    error: bool = False  # True where Keras would crash: acceltrain stops with the message instead


def partial_epoch(num_samples: int, batch_size: int | None, steps_per_epoch: int | None) -> list[Finding]:
    """steps_per_epoch × batch_size smaller than the data: each epoch sees only part of it."""
    if not steps_per_epoch or not num_samples:
        return []
    batch = keras_batch(batch_size)
    seen = steps_per_epoch * batch
    if seen >= num_samples:
        return []
    default = "" if batch_size else " (Keras's default: fit was given no batch_size)"
    return [Finding(
        "partial_epoch",
        f"each epoch trains on {seen:,} of the {num_samples:,} training samples: steps_per_epoch="
        f"{steps_per_epoch} × batch_size={batch}{default}. To see every sample each epoch, drop "
        f"steps_per_epoch (Keras then takes {math.ceil(num_samples / batch)} steps), or pass "
        f"batch_size={math.ceil(num_samples / steps_per_epoch)}.",
    )]


def uneven_batch(batch_size: int | None, num_replicas: int, splits_unevenly: bool) -> list[Finding]:
    """A global batch that does not split into equal slices over the replicas."""
    batch = keras_batch(batch_size)
    if num_replicas <= 1 or batch % num_replicas == 0:
        return []
    below = batch // num_replicas * num_replicas
    nearest = " or ".join(str(size) for size in (below, below + num_replicas) if size > 0)
    name = f"batch_size={batch}" + ("" if batch_size else " (Keras's default)")
    if splits_unevenly:
        return [Finding("uneven_batch", f"{name} does not divide over {num_replicas} replicas: some take one "
                        f"sample more each step and wait for the rest. Pass a multiple of {num_replicas}: "
                        f"{nearest}.")]
    return [Finding("uneven_batch", f"Received {name}, which does not divide over {num_replicas} replicas "
                    f"(each takes an equal slice of the global batch). Pass a multiple of {num_replicas}: "
                    f"{nearest}.", error=True)]


def small_replica_batch(batch_size: int | None, num_replicas: int, platform: str) -> list[Finding]:
    """Too few samples per replica to use the hardware. Silent for batch_size=1: one sample a step is nobody's
    choice for speed but the algorithm's (one bag a step in multiple-instance learning, online learning)."""
    if batch_size == 1:
        return []
    batch = keras_batch(batch_size)
    per_replica = batch // max(num_replicas, 1)
    enough = MIN_BATCH_PER_REPLICA.get(platform, 1)
    if per_replica >= enough:
        return []
    return [Finding(
        "small_replica_batch",
        f"each of the {num_replicas} replica(s) gets {per_replica} sample(s) a step (global batch_size={batch}"
        f"{'' if batch_size else ', Keras’s default'}): too few to keep a {platform.upper()} busy. Pass "
        f"batch_size={enough * max(num_replicas, 1)} or more (at least {enough} per replica), and raise the "
        "learning rate with it; unless the batch size is part of the algorithm, which acceltrain keeps as it is.",
    )]


# The float64 warning speaks when converting the arrays to float32 took at least this long here (Keras does it
# at the start of every epoch): below it, the cost is not worth a line (issue 22: it fired on copies of "0 MB ...
# 0.00 s"). Arrays under FLOAT64_MEASURED_FROM bytes are not even timed: their copy takes about 2 ms here (8 MiB
# of float64, measured on this project's 2-core machine), so its time would be noise, never the cost.
FLOAT64_WORTH_SAYING_SECONDS = 0.05
FLOAT64_MEASURED_FROM = 8 * 2**20


def float64_inputs(named_inputs: dict[str, object], clock=None) -> list[Finding]:
    """float64 arrays: Keras 3 converts each whole array to float32 at the start of every epoch
    (array_slicing.convert_to_sliceable, in the epoch's iterator). Said only when that costs something: one
    conversion of these arrays, timed here (`clock`, default time.perf_counter), took at least
    FLOAT64_WORTH_SAYING_SECONDS. A dtype alone, or arrays too small to time, say nothing: nothing was measured."""
    import time

    wide = {name: value for name, value in named_inputs.items()
            if isinstance(value, np.ndarray) and value.dtype == np.float64}
    if sum(value.nbytes for value in wide.values()) < FLOAT64_MEASURED_FROM:
        return []
    clock = clock or time.perf_counter
    started = clock()
    copies = [array.astype(np.float32) for array in wide.values()]
    seconds = clock() - started
    if seconds < FLOAT64_WORTH_SAYING_SECONDS:
        return []
    names = list(wide)
    megabytes = sum(copy.nbytes for copy in copies) / 1e6
    return [Finding(
        "float64_inputs",
        f"{' and '.join(names)} {'is' if len(names) == 1 else 'are'} float64: Keras converts the whole array to "
        f"float32 at the start of every epoch (a {megabytes:.0f} MB copy each time; one took {seconds:.2f} s here), "
        f"and trains in float32 anyway. Cast once before fit: {names[0]} = {names[0]}.astype('float32').",
    )]


def labels_vs_loss(y, loss_name: str | None, output_units: int | None) -> list[Finding]:
    """One-hot labels with a sparse loss, or class indices with a categorical loss: Keras crashes on both
    with a shape error that names neither."""
    if not isinstance(y, np.ndarray) or not loss_name or not output_units or output_units < 2:
        return []
    loss = loss_name.lower()
    sparse = "sparse_categorical" in loss
    categorical = "categorical" in loss and not sparse and "binary" not in loss
    one_hot = y.ndim == 2 and y.shape[-1] == output_units and _rows_are_one_hot(y)
    indices = y.ndim == 1 or (y.ndim == 2 and y.shape[-1] == 1)
    if sparse and one_hot:
        return [Finding(
            "labels_vs_loss",
            f"Received one-hot labels of shape {y.shape} with the loss {loss_name!r}, which takes class "
            "indices. Change the loss to 'categorical_crossentropy', or the labels to indices: y.argmax(axis=-1).",
            error=True,
        )]
    if categorical and indices:
        return [Finding(
            "labels_vs_loss",
            f"Received class-index labels of shape {y.shape} with the loss {loss_name!r}, which takes one-hot "
            f"labels over the model's {output_units} outputs. Change the loss to "
            "'sparse_categorical_crossentropy' (keeps the labels as they are), or one-hot the labels.",
            error=True,
        )]
    return []


def _rows_are_one_hot(y: np.ndarray) -> bool:
    sample = y[:1024]  # enough to tell, without scanning a large set
    return bool(np.isin(sample, (0, 1)).all() and (sample.sum(axis=-1) == 1).all())


def check_fit(*, num_samples: int, batch_size: int | None, steps_per_epoch: int | None, num_replicas: int,
              platform: str, splits_unevenly: bool, input_dtypes: dict[str, object], y,
              loss_name: str | None, output_units: int | None) -> list[Finding]:
    """Every check of one fit call, errors first."""
    findings = (
        uneven_batch(batch_size, num_replicas, splits_unevenly)
        + labels_vs_loss(y, loss_name, output_units)
        + partial_epoch(num_samples, batch_size, steps_per_epoch)
        + small_replica_batch(batch_size, num_replicas, platform)
        + float64_inputs(input_dtypes)
    )
    return sorted(findings, key=lambda finding: not finding.error)


# --- A checkpointed fit: what exact resume cannot honour, refused naming the argument --------------------

def resumable_arguments(arguments: dict) -> dict:
    """A fit's arguments (by Keras's names) as the checkpointed loop takes them; what exact resume cannot honour
    raises UsageError naming it (under the CLI: a script's fit under --checkpoint-dir, else checkpoint_dir=)."""
    from acceltrain.errors import under_cli
    from acceltrain.inputs import kinds

    flags = under_cli()

    arguments = dict(arguments)
    arguments.update({name: kinds.tensors_as_numpy(arguments[name]) for name in ("x", "y", "sample_weight")
                      if kinds.has_tensors(arguments.get(name))})  # a tf.Tensor: numpy arrays, rewound as they are
    x = arguments.get("x")
    # A script's model.fit under `run --checkpoint-dir`, or Runtime.fit(checkpoint_dir=...)
    under = "model.fit({}) under --checkpoint-dir" if flags else "Runtime.fit({}) with checkpoint_dir"
    without = "Run without --checkpoint-dir to train as the script says" if flags else \
        "Leave out checkpoint_dir to train as the call says"
    if not (kinds.kind_of(x) in (kinds.ARRAYS, kinds.TF_DATA, kinds.PY_DATASET) or _is_grain_loader(x)):
        _refuse(f"x of type {type(x).__name__}", "exact resume rewinds numpy arrays, a tf.data.Dataset, a "
                "keras.utils.PyDataset or a Grain DataLoader to the step a checkpoint was written at; a generator or a "
                "Grain dataset (MapDataset, IterDataset) cannot be rewound by acceltrain: pass one of those", under,
                without)
    given = {"steps_per_epoch": arguments.get("steps_per_epoch") is not None,
             "initial_epoch": arguments.get("initial_epoch", 0) != 0}
    for name in (name for name, is_given in given.items() if is_given):
        _refuse(f"{name}={_short(arguments[name])}", _WHY[name], under, without)
    if not isinstance(arguments.get("callbacks") or [], (list, tuple)):
        _refuse("callbacks=<a CallbackList>", "each epoch's fit needs the callbacks as a list", under, without)
    for callback in arguments.get("callbacks") or ():
        if _is_backup_and_restore(callback):
            _refuse(f"callbacks=[..., BackupAndRestore(backup_dir={callback.backup_dir!r}), ...]",
                    _WHY["BackupAndRestore"].format(resume="--resume" if flags else "resume=True"), under, without)
    if arguments.get("shuffle") == "batch":
        _refuse("shuffle='batch'", "each epoch's order is drawn whole from (seed, epoch)", under, without)
    for name in ("steps_per_epoch", "initial_epoch"):
        arguments.pop(name, None)
    if kinds.kind_of(x) == kinds.ARRAYS and arguments.get("batch_size") is None:
        arguments["batch_size"] = keras_batch(None)  # Keras's default, made explicit
    arguments["callbacks"] = list(arguments.get("callbacks") or ())
    return arguments



def _is_backup_and_restore(callback) -> bool:
    """keras.callbacks.BackupAndRestore, or a class made from it (its name asked along the class's bases, so that
    no framework is imported here)."""
    return any(base.__name__ == "BackupAndRestore" and base.__module__.startswith("keras")
               for base in type(callback).__mro__)


def _is_grain_loader(x) -> bool:
    from acceltrain.inputs import grain_loaders, kinds

    return kinds.kind_of(x) == kinds.GRAIN and grain_loaders.is_loader(x)  # its checkpointable iterator, not a dataset


_WHY = {
    "steps_per_epoch": "an epoch is one pass over the data, numbered so a checkpoint can say where it stopped",
    "initial_epoch": "where training starts is the newest checkpoint's business (resuming)",
    # Measured (Keras 3.15.1, a run stopped after epoch 2 of 4, its checkpoint at epoch 1): the checkpointed loop
    # fits one epoch a call, and BackupAndRestore restores its backup (epoch 2) at each call's start, over the
    # resumed checkpoint: the epochs ran were 2, 2, 3 (80 steps, not 64) and the loss was another run's
    "BackupAndRestore": "Keras's BackupAndRestore restores its own backup at the start of each fit the checkpointed "
                        "loop makes (one an epoch), over the checkpoint acceltrain resumed from, so epochs run "
                        "twice. The checkpoints do its work: leave it out of the callbacks and pass {resume} to "
                        "continue",
}


def _refuse(received: str, why: str, under: str, without: str) -> None:
    raise UsageError(f"Received {under.format(received)}, which cannot resume it exactly: {why}. {without}.")


def _short(value) -> str:
    return f"<array of {len(value)}>" if hasattr(value, "__len__") and not isinstance(value, str) else repr(value)
