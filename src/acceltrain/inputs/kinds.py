"""The kind of an input, asked in one place (as Keras's get_data_adapter does): kind_of(x) is one of KINDS, in the
order they are tried, each kind's rules in its own module (arrays.py, tf_data.py, py_dataset.py, grain_loaders.py; a
generator is read as it comes, streams.py); a framework's tensor is read into numpy first (tensors_as_numpy), and
takes the arrays' rules. Recognised by their attributes and their classes' names, as Keras does, so no framework is
imported here.
"""

import numpy as np

ARRAYS = "arrays"  # a numpy array, or a list/tuple/dict of them (what Keras's array adapter takes)
TF_DATA = "tf.data"  # a tf.data.Dataset
PY_DATASET = "PyDataset"  # a keras.utils.PyDataset
GRAIN = "Grain"  # Grain's MapDataset, IterDataset or DataLoader (what Keras's grain adapter takes)
GENERATOR = "generator"  # a Python generator or iterator of batches
OTHER = "other"  # anything else (None included): Keras takes it, or says what it takes

KINDS = (ARRAYS, TF_DATA, PY_DATASET, GRAIN, GENERATOR)

# How each kind is named in a line the user reads.
NAMES = {ARRAYS: "arrays", TF_DATA: "a tf.data.Dataset", PY_DATASET: "a keras.utils.PyDataset",
         GRAIN: "a Grain loader", GENERATOR: "a generator"}


def kind_of(x) -> str:
    """Which of KINDS `x` is, tried in that order (a generator is what is none of the others and yields), else OTHER."""
    if _is_arrays(x):
        return ARRAYS
    if hasattr(x, "element_spec") and hasattr(x, "rebatch"):
        return TF_DATA
    if _is_class(x, ("PyDataset",), "keras"):
        return PY_DATASET
    if _is_class(x, ("MapDataset", "IterDataset", "DataLoader"), "grain"):
        return GRAIN
    if hasattr(x, "__next__") and hasattr(x, "__iter__"):
        return GENERATOR
    return OTHER


def named(x) -> str:
    """`x`'s kind as a line names it ("a tf.data.Dataset"), else its type's name."""
    return NAMES.get(kind_of(x), type(x).__name__)


def _is_arrays(x) -> bool:
    if isinstance(x, np.ndarray):
        return True
    if isinstance(x, dict):
        return bool(x) and all(_is_arrays(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return bool(x) and all(_is_arrays(v) for v in x)
    return False


def _is_class(x, names: tuple, package: str) -> bool:
    """`x`'s class, or one it derives from, is one of `names` from a module of `package`."""
    return any(parent.__name__ in names and package in str(parent.__module__) for parent in type(x).__mro__)


# --- A framework's tensors: read into numpy, then arrays --------------------------------------------------------------


def is_tensor(x) -> bool:
    """A framework's array (a tf.Tensor, a jax.Array) that numpy reads into numbers: not a numpy array, not a dataset,
    not a tensor of strings (tf.string: numpy reads it as an array of Python objects, which Keras refuses, "Invalid
    dtype: object", where it takes the tensor itself; issue 45's FeatureSpace model called on a dict of raw values)."""
    return (not isinstance(x, np.ndarray) and hasattr(x, "__array__") and hasattr(x, "shape")
            and hasattr(x, "dtype") and kind_of(x) != TF_DATA and getattr(x.dtype, "name", None) != "string")


def tensors_as_numpy(x):
    """A nest whose tensors are numpy arrays (np.asarray); anything else in it as it is."""
    if isinstance(x, dict):
        return {k: tensors_as_numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(tensors_as_numpy(v) for v in x)
    return np.asarray(x) if is_tensor(x) else x


def has_tensors(x) -> bool:
    if isinstance(x, (dict, list, tuple)):
        return any(has_tensors(v) for v in (x.values() if isinstance(x, dict) else x))
    return is_tensor(x)
