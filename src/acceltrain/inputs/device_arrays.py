"""Arrays kept on the devices for a fit: one more kind of input, made of arrays (backends/jax/resident.py places them
once a call and gathers each batch there from its indices, in Keras's order). Here, the neutral rule of when a fit's
inputs are this kind, and the bytes they take; whether they fit the devices is decisions.choose_device_data's. numpy
only: the backend names its own array types.
"""

from acceltrain.inputs.arrays import leaves


def resident(arguments: dict, array_types: tuple) -> bool:
    """A fit's inputs can be kept on the devices: x, y and sample_weight, and validation_data where given, are arrays of
    numbers (each leaf one of `array_types`, or None; at least one), and no validation_split is left to Keras (it would
    cut the arrays itself)."""
    validation = arguments.get("validation_data")
    if arguments.get("validation_split") and validation is None:
        return False
    training = (arguments.get("x"), arguments.get("y"), arguments.get("sample_weight"))
    if validation is not None and not isinstance(validation, (tuple, list)):
        return False  # a dataset or a generator: not read here (tuple() of one would use it up before the fit)
    return _numbers(training, array_types) and (validation is None or _numbers(tuple(validation), array_types))


def nbytes(arguments: dict) -> int:
    """The bytes of a fit's arrays (validation data included): what one copy on the devices holds."""
    parts = (arguments.get(name) for name in ("x", "y", "sample_weight", "validation_data"))
    return sum(int(leaf.nbytes) for part in parts for leaf in _leaves(part) if hasattr(leaf, "nbytes"))


def _numbers(structure, array_types: tuple) -> bool:
    found = [leaf for leaf in _leaves(structure) if leaf is not None]
    return bool(found) and all(isinstance(leaf, array_types) and leaf.dtype.kind in "biuf" for leaf in found)


def _leaves(structure) -> list:
    return [] if structure is None else leaves(structure)
