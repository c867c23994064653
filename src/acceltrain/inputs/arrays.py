"""Arrays (numpy, or a list/tuple/dict of them): their checks, reshaping and share, and the arrays' rules a batch of
any stream takes (batch_part). Also the one resolution of Keras's default batch (keras_batch).

Everything here works on numpy arrays (or nests of them) and imports no framework. Each check raises
UsageError naming the value and the fix, so bad input ends before anything is trained or written.
"""

import numpy as np

from acceltrain.errors import UsageError, positive_int
from acceltrain.inputs.kinds import tensors_as_numpy

# Keras's own batch where fit, evaluate or predict is given none (batch_size=None; Keras 3.15.1's data adapters).
KERAS_DEFAULT_BATCH_SIZE = 32


def keras_batch(batch_size: int | None) -> int:
    """The batch Keras trains on for `batch_size`: the one given, else Keras's default. The one place it is resolved."""
    return batch_size or KERAS_DEFAULT_BATCH_SIZE


def _map(fn, x):
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map(fn, v) for v in x)
    return fn(x)


def leaves(x) -> list:
    """The arrays of a nest (dict, list, tuple) in order; a single array is its own one leaf."""
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in leaves(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in leaves(v)]
    return [x]


def num_samples(x) -> int:
    return len(leaves(x)[0])


# --- Checks -----------------------------------------------------------------------------------


def nearest_valid_batch_sizes(batch_size: int, num_replicas: int) -> list[int]:
    """The multiples of num_replicas nearest to batch_size, below and above."""
    below = (batch_size // num_replicas) * num_replicas
    above = below + num_replicas
    return [size for size in (below, above) if size > 0]


def check_batch_size(batch_size, num_replicas: int) -> None:
    """The global batch must be a positive integer that splits evenly over the replicas."""
    positive_int(batch_size, "batch_size", ": the global batch")
    if batch_size % num_replicas:
        raise_indivisible(f"Received batch_size={batch_size}, which does", batch_size, num_replicas,
                           "Use a multiple")


def checked_batch_size(batch_size, num_replicas: int) -> int:
    """check_batch_size's, where none given is Keras's default (as model.fit, evaluate and predict take it), said as
    such when it does not divide over the replicas."""
    if batch_size is not None:
        check_batch_size(batch_size, num_replicas)  # a 0 given is refused, not read as none
        return batch_size
    if KERAS_DEFAULT_BATCH_SIZE % num_replicas:
        raise_indivisible(f"Received no batch_size, so Keras's default of {KERAS_DEFAULT_BATCH_SIZE}, which does",
                          KERAS_DEFAULT_BATCH_SIZE, num_replicas, "Pass batch_size= a multiple")
    return KERAS_DEFAULT_BATCH_SIZE


def raise_indivisible(subject: str, batch: int, num_replicas: int, fix: str):
    valid = " or ".join(str(size) for size in nearest_valid_batch_sizes(batch, num_replicas))
    raise UsageError(
        f"{subject} not divide over {num_replicas} replicas (each replica takes an equal slice of the global "
        f"batch). {fix} of {num_replicas}: the nearest are {valid}."
    )


def check_arrays(x, y=None, *, name: str = "x") -> None:
    """Same number of samples everywhere, and no NaN or inf in floating-point inputs."""
    arrays = leaves(x) + ([] if y is None else leaves(y))
    lengths = {len(leaf) for leaf in arrays}
    if len(lengths) > 1:
        x_len = [len(leaf) for leaf in leaves(x)]
        y_len = [] if y is None else [len(leaf) for leaf in leaves(y)]
        raise UsageError(
            f"{name} and its labels have different numbers of samples: {name} has {x_len}, labels have "
            f"{y_len}. Each input and label array needs one row per sample."
        )
    if lengths == {0}:
        raise_empty(name)
    for label, arrays in ((name, leaves(x)), (f"labels of {name}", [] if y is None else leaves(y))):
        for array in arrays:
            if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
                bad = int(np.size(array) - np.isfinite(array).sum())
                raise UsageError(
                    f"{label} holds {bad} NaN or infinite value(s). Training on them gives a NaN loss: "
                    "clean or impute them before training."
                )


def raise_empty(name: str = "x"):
    """No samples at all: Keras would fail on them with a numpy error ("zero-size array to reduction operation") or,
    predicting, an UnboundLocalError, naming neither the input nor the fix."""
    raise UsageError(f"Received {name} with 0 samples (its arrays have no rows). Expected at least one sample, one row "
                     "each: pass the arrays holding your data.")


def check_class_labels(y, num_classes: int | None, *, name: str = "y") -> None:
    """Integer class labels must lie in [0, num_classes): Keras on JAX would train on garbage silently."""
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or (num_classes or 0) < 2:
        return
    if y.ndim > 1 and y.shape[-1] != 1:
        return  # not class indices (one-hot or multi-label)
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        raise UsageError(
            f"{name} holds class labels from {low} to {high}, but the model's output has {num_classes} "
            f"classes (0 to {num_classes - 1}). Give the last layer one unit per class, or fix the labels."
        )


# --- Preparation ------------------------------------------------------------------------------


def as_float32(x):
    """float64 arrays cast once to float32 (accelerators compute in 32 bits or fewer; Keras would
    otherwise cast every batch, every step). Other dtypes pass as they are."""
    return _map(lambda a: a.astype(np.float32) if a.dtype == np.float64 else a, x)


def repeat(x, times: int):
    """The whole of an array (or a nest of them) `times` over, one copy after another."""
    return None if x is None else _map(lambda a: np.concatenate([a] * times), x)


def process_share(x, process_index: int, num_processes: int):
    """This process's share of the samples in a multi-process job: every num_processes-th, from its index.

    Keras joins the processes' local batches into one global batch, so global batch k holds exactly the
    samples of batch k of the whole array (in another order within it), whatever the process count.
    """
    if x is None or num_processes == 1:
        return x
    return _map(lambda a: a[process_index::num_processes], x)


def take(x, indices):
    """The samples at `indices` (an index array, in its order, or a slice), from an array or a nest of them."""
    return None if x is None else _map(lambda a: a[indices], x)


def split_validation(x, y, sample_weight, fraction: float):
    """Keras's `validation_split`, made here: ((x, y, sample_weight) to train on, (x, y[, sample_weight]) to validate
    on), the validation part the last `fraction` of the samples, before any shuffle, as Keras cuts it; the weights
    cut with them, so the validation loss is weighted as Keras weighs it."""
    cut = int(num_samples(x) * (1 - fraction))
    weights = () if sample_weight is None else (take(sample_weight, slice(cut, None)),)
    held = (take(x, slice(cut, None)), take(y, slice(cut, None)), *weights)
    return (take(x, slice(0, cut)), take(y, slice(0, cut)), take(sample_weight, slice(0, cut))), held


def join_batches(batches):
    first = batches[0]
    if isinstance(first, dict):
        return {key: join_batches([b[key] for b in batches]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(join_batches([b[i] for b in batches]) for i in range(len(first)))
    return np.concatenate(batches)


def batch_rows(element) -> int:
    """The rows of one batch (its first array's leading dimension)."""
    return int(np.shape(leaves(element)[0])[0])


def batch_part(element, num_replicas: int, process_index: int = 0, num_processes: int = 1):
    """One batch (a nest of arrays) by the arrays' rules: its rows cut to a multiple of `num_replicas` (the global
    replicas: its last few left out), then this process's rows of it, every num_processes-th from its index
    (process_share). None where nothing is left (a batch of fewer rows than replicas)."""
    rows = batch_rows(element)
    keep = rows - rows % num_replicas
    if keep == 0:
        return None
    return _map(lambda a: np.asarray(a)[:keep][process_index::num_processes], element)


def batches_to_arrays(batches, *, name: str = "x"):
    """Batches (x, y, sample_weight), (x, y), (x,) or x joined into numpy arrays: (x, y, sample_weight)."""
    if not batches:
        raise UsageError(f"{name} yielded no batches: there is nothing to evaluate or predict on.")
    first = batches[0]
    if not isinstance(first, tuple):
        return join_batches(batches), None, None
    parts = [join_batches([b[i] for b in batches]) if first[i] is not None else None for i in range(len(first))]
    return tuple((parts + [None, None, None])[:3])


def read_batches(batches, steps: int | None = None) -> list:
    """The batches an iterable yields (at most `steps`), each a nest of numpy arrays (a framework's tensors read)."""
    found = []
    for batch in batches:
        found.append(tensors_as_numpy(batch))
        if steps and len(found) == steps:
            break
    return found


def places_of_every_nth(batches, index: int, processes: int) -> np.ndarray:
    """The places in the whole stream of the rows of `batches`, read as samples index, index + processes, ..."""
    rows = sum(batch_rows(batch) for batch in batches)
    return index + processes * np.arange(rows, dtype=np.int64)
