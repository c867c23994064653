"""inputs/device_arrays.py: when a fit's inputs are the kind kept on the devices, and their bytes (numpy only; the
backend names its array types: backends/jax/resident.py passes NumPy's and JAX's)."""

import numpy as np
import pytest

from acceltrain.inputs import device_arrays

x, y, w = np.zeros((8, 3), "float32"), np.arange(8), np.ones(8, "float32")


@pytest.mark.parametrize("arguments, resident", [
    ({"x": x, "y": y}, True),
    ({"x": {"a": x, "b": x}, "y": y, "sample_weight": w}, True),
    ({"x": x, "y": y, "validation_data": (x, y)}, True),
    ({"x": x, "y": y, "validation_data": [x, y, w]}, True),
    ({"x": x, "y": y, "validation_split": 0.25}, False),  # Keras would cut the arrays itself
    ({"x": x, "y": y, "validation_split": 0.25, "validation_data": (x, y)}, True),  # Keras ignores the split then
    ({"x": x, "y": y, "validation_data": iter([(x, y)])}, False),  # a generator, not used up by the question
    ({"x": np.array(["a", "b"]), "y": y}, False),  # strings are not numbers
    ({"x": x.astype(object), "y": y}, False),
    ({"x": [1.0, 2.0], "y": y}, False),  # a list of Python numbers: not arrays
    ({"x": None}, False),
    ({}, False),
])
def test_a_fits_inputs_are_resident_where_every_part_is_an_array_of_numbers(arguments, resident):
    assert device_arrays.resident(arguments, (np.ndarray,)) is resident


def test_only_the_backends_array_types_count():
    class Other:
        dtype, nbytes = np.dtype("float32"), 4

    assert not device_arrays.resident({"x": Other(), "y": y}, (np.ndarray,))
    assert device_arrays.resident({"x": Other(), "y": y}, (np.ndarray, Other))


def test_the_bytes_are_every_parts_validation_included():
    assert device_arrays.nbytes({"x": x, "y": y, "sample_weight": w, "validation_data": (x, y, None)}) == \
        2 * x.nbytes + 2 * y.nbytes + w.nbytes


def test_a_validation_generator_is_not_read_by_the_question():
    validation = iter([(x, y)])
    assert not device_arrays.resident({"x": x, "y": y, "validation_data": validation}, (np.ndarray,))
    assert next(validation)[0] is x  # still there for the fit
