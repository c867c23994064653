"""Validation and preparation of training inputs, shared by both backends.

Everything here works on numpy arrays (or nests of them) and imports no framework. Each check raises
UsageError naming the value and the fix, so bad input ends before anything is trained or written.
"""

import math

import numpy as np

from acceltrain.errors import UsageError


def is_arrays(x) -> bool:
    """True for a numpy array or a list/tuple/dict of them (what Keras's array adapter takes)."""
    if isinstance(x, np.ndarray):
        return True
    if isinstance(x, dict):
        return bool(x) and all(is_arrays(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return bool(x) and all(is_arrays(v) for v in x)
    return False


def _map(fn, x):
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_map(fn, v) for v in x)
    return fn(x)


def _leaves(x):
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def num_samples(x) -> int:
    return len(_leaves(x)[0])


# --- Checks -----------------------------------------------------------------------------------

def nearest_valid_batch_sizes(batch_size: int, num_replicas: int) -> list[int]:
    """The multiples of num_replicas nearest to batch_size, below and above."""
    below = (batch_size // num_replicas) * num_replicas
    above = below + num_replicas
    return [size for size in (below, above) if size > 0]


def check_batch_size(batch_size, num_replicas: int) -> None:
    """The global batch must be a positive integer that splits evenly over the replicas."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise UsageError(f"Received batch_size={batch_size!r}. Expected a positive integer (the global batch).")
    if batch_size % num_replicas:
        valid = " or ".join(str(size) for size in nearest_valid_batch_sizes(batch_size, num_replicas))
        raise UsageError(
            f"Received batch_size={batch_size}, which does not divide over {num_replicas} replicas "
            f"(each replica takes an equal slice of the global batch). Use a multiple of {num_replicas}: "
            f"the nearest are {valid}."
        )


def check_arrays(x, y=None, *, name: str = "x") -> None:
    """Same number of samples everywhere, and no NaN or inf in floating-point inputs."""
    leaves = _leaves(x) + ([] if y is None else _leaves(y))
    lengths = {len(leaf) for leaf in leaves}
    if len(lengths) > 1:
        x_len = [len(leaf) for leaf in _leaves(x)]
        y_len = [] if y is None else [len(leaf) for leaf in _leaves(y)]
        raise UsageError(
            f"{name} and its labels have different numbers of samples: {name} has {x_len}, labels have "
            f"{y_len}. Each input and label array needs one row per sample."
        )
    for label, arrays in ((name, _leaves(x)), (f"labels of {name}", [] if y is None else _leaves(y))):
        for array in arrays:
            if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
                bad = int(np.size(array) - np.isfinite(array).sum())
                raise UsageError(
                    f"{label} holds {bad} NaN or infinite value(s). Training on them gives a NaN loss: "
                    "clean or impute them before training."
                )


def check_class_labels(y, num_classes: int, *, name: str = "y") -> None:
    """Integer class labels must lie in [0, num_classes): Keras on JAX would train on garbage silently."""
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer) or num_classes < 2:
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


def trim_to_replicas(x, y, batch_size: int, num_replicas: int):
    """Drop the few last samples that would make the final batch indivisible over the replicas.

    Returns (x, y, dropped). Fewer than num_replicas samples go; shuffling changes which are seen each
    epoch only among the rest, which is the usual `drop_remainder` trade on accelerators.
    """
    n = num_samples(x)
    dropped = (n % batch_size) % num_replicas
    if not dropped:
        return x, y, 0
    keep = n - dropped
    cut = lambda a: a[:keep]  # noqa: E731
    return _map(cut, x), (None if y is None else _map(cut, y)), dropped


def repeat_to_replicas(x, y, batch_size: int, num_replicas: int):
    """For evaluation: repeat the whole set k times so every batch divides over the replicas.

    Returns (x, y, k). Every sample counts exactly k times, so accuracy, loss and every other Keras
    metric (a mean or a ratio of counts) equal those of the set itself: nothing is dropped.
    """
    n = num_samples(x)
    if (n % batch_size) % num_replicas == 0:
        return x, y, 1
    k = num_replicas // math.gcd(n, num_replicas)
    tile = lambda a: np.concatenate([a] * k)  # noqa: E731
    return _map(tile, x), (None if y is None else _map(tile, y)), k


def take(x, indices):
    """The samples at `indices`, in that order, from an array or a nest of them."""
    return None if x is None else _map(lambda a: a[indices], x)
