"""inputs/device_arrays.py: when a fit's inputs are the kind kept on the devices, and their bytes (numpy only; the
backend names its array types: backends/jax/resident.py passes NumPy's and JAX's)."""

import numpy as np
import pytest

from acceltrain.inputs import device_arrays

x, y, w = np.zeros((8, 3), "float32"), np.arange(8), np.ones(8, "float32")


@pytest.mark.parametrize("parts, split_by_keras, resident", [
    ((x, y, None, None), False, True),
    (({"a": x, "b": x}, y, w, None), False, True),
    ((x, y, None, (x, y)), False, True),
    ((x, y, None, [x, y, w]), False, True),
    ((x, y, None, None), True, False),  # a validation_split left to Keras: it would cut the arrays itself
    ((x, y, None, iter([(x, y)])), False, False),  # a generator, not used up by the question
    ((np.array(["a", "b"]), y, None, None), False, False),  # strings are not numbers
    ((x.astype(object), y, None, None), False, False),
    (([1.0, 2.0], y, None, None), False, False),  # a list of Python numbers: not arrays
    ((None, None, None, None), False, False),
])
def test_a_fits_inputs_are_resident_where_every_part_is_an_array_of_numbers(parts, split_by_keras, resident):
    assert device_arrays.resident(parts, split_by_keras, (np.ndarray,)) is resident


def test_only_the_backends_array_types_count():
    class Other:
        dtype, nbytes = np.dtype("float32"), 4

    assert not device_arrays.resident((Other(), y, None, None), False, (np.ndarray,))
    assert device_arrays.resident((Other(), y, None, None), False, (np.ndarray, Other))


def test_the_bytes_are_every_parts_validation_included():
    assert device_arrays.nbytes((x, y, w, (x, y, None))) == 2 * x.nbytes + 2 * y.nbytes + w.nbytes


def test_a_validation_generator_is_not_read_by_the_question():
    validation = iter([(x, y)])
    assert not device_arrays.resident((x, y, None, validation), False, (np.ndarray,))
    assert next(validation)[0] is x  # still there for the fit
