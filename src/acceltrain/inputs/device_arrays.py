"""Arrays kept on the devices for a fit: one more kind of input, made of arrays (backends/jax/resident.py places them
once a call and gathers each batch there from its indices, in Keras's order). Here, the neutral rule of when a fit's
inputs are this kind, and the bytes they take; whether they fit the devices is decisions.choose_device_data's. numpy
only: the backend names its own array types.
"""

from acceltrain.inputs.arrays import leaves


def resident(parts: tuple, split_by_keras: bool, array_types: tuple) -> bool:
    """A fit's inputs `parts` (x, y, sample_weight, validation_data) can be kept on the devices: x, y and sample_weight,
    and validation_data where given, are arrays of numbers (each leaf one of `array_types`, or None; at least one), and
    `split_by_keras` is False (a validation_split left to Keras: it would cut the arrays itself)."""
    *training, validation = parts
    if split_by_keras:
        return False
    if validation is not None and not isinstance(validation, (tuple, list)):
        return False  # a dataset or a generator: not read here (tuple() of one would use it up before the fit)
    return _numbers(tuple(training), array_types) and (validation is None or _numbers(tuple(validation), array_types))


def nbytes(parts: tuple) -> int:
    """The bytes of the arrays `parts` (a fit's x, y and sample_weight): what one copy on the devices holds."""
    return sum(int(leaf.nbytes) for part in parts for leaf in _leaves(part) if hasattr(leaf, "nbytes"))


def _numbers(structure, array_types: tuple) -> bool:
    found = [leaf for leaf in _leaves(structure) if leaf is not None]
    return bool(found) and all(isinstance(leaf, array_types) and leaf.dtype.kind in "biuf" for leaf in found)


def _leaves(structure) -> list:
    return [] if structure is None else leaves(structure)
