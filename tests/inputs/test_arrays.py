import numpy as np
import pytest

from acceltrain.inputs import arrays, kinds, streams
from acceltrain.errors import UsageError


@pytest.mark.parametrize(
    "batch, replicas, expected",
    [(1000, 8, [1000, 1008]), (1001, 8, [1000, 1008]), (3, 8, [8]), (1200, 7, [1197, 1204])],
)
def test_nearest_valid_batch_sizes(batch, replicas, expected):
    assert arrays.nearest_valid_batch_sizes(batch, replicas) == expected


def test_check_batch_size_lists_the_nearest_valid_sizes():
    with pytest.raises(UsageError, match=r"batch_size=1001.*8 replicas.*1000 or 1008"):
        arrays.check_batch_size(1001, 8)
    arrays.check_batch_size(1200, 8)


@pytest.mark.parametrize("batch", [0, -5, 2.5, "64", True])
def test_check_batch_size_rejects_non_positive_integers(batch):
    with pytest.raises(UsageError, match="positive integer"):
        arrays.check_batch_size(batch, 1)


@pytest.mark.parametrize("batch, replicas, expected", [(None, 1, 32), (None, 8, 32), (24, 8, 24), (1, 1, 1)])
def test_a_batch_size_none_given_is_kerass_default_and_one_given_is_checked(batch, replicas, expected):
    assert arrays.checked_batch_size(batch, replicas) == expected


@pytest.mark.parametrize("batch, replicas, message", [
    (None, 3, r"Received no batch_size, so Keras's default of 32, which does not divide over 3 replicas.*30 or 33"),
    (0, 1, r"Received batch_size=0\. Expected a whole number of at least 1"),
    (12, 8, r"Received batch_size=12, which does not divide over 8 replicas")])
def test_a_batch_size_that_cannot_be_taken_is_named_as_given(batch, replicas, message):
    with pytest.raises(UsageError, match=message):
        arrays.checked_batch_size(batch, replicas)


def test_check_arrays_names_different_lengths():
    with pytest.raises(UsageError, match=r"different numbers of samples.*\[10\].*\[9\]"):
        arrays.check_arrays(np.zeros((10, 3)), np.zeros(9))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_arrays_finds_nan_and_inf(bad):
    x = np.zeros((10, 3))
    x[4, 1] = bad
    with pytest.raises(UsageError, match="1 NaN or infinite"):
        arrays.check_arrays(x, np.zeros(10))


def test_check_arrays_looks_inside_dicts():
    x = {"a": np.zeros((4, 2)), "b": np.full((4, 2), np.nan)}
    with pytest.raises(UsageError, match="NaN"):
        arrays.check_arrays(x, np.zeros(4))


def test_check_class_labels():
    with pytest.raises(UsageError, match=r"from 0 to 10.*10 classes \(0 to 9\)"):
        arrays.check_class_labels(np.arange(11), 10)
    with pytest.raises(UsageError, match="from -1"):
        arrays.check_class_labels(np.array([-1, 2]), 10)
    arrays.check_class_labels(np.arange(10), 10)
    arrays.check_class_labels(np.eye(3, dtype=np.int64), 3)  # one-hot: not class indices, not checked


def test_as_float32_casts_float64_only():
    x = {"f64": np.zeros(3), "u8": np.zeros(3, np.uint8), "f16": np.zeros(3, np.float16)}
    cast = arrays.as_float32(x)
    assert (cast["f64"].dtype, cast["u8"].dtype, cast["f16"].dtype) == (np.float32, np.uint8, np.float16)


def test_split_validation_cuts_the_last_fraction_before_any_shuffle_as_keras_does():
    x, y = np.arange(20).reshape(10, 2), np.arange(10)
    (x_train, y_train, weights), (x_val, y_val) = arrays.split_validation(x, y, None, 0.2)

    np.testing.assert_array_equal(y_train, np.arange(8))
    np.testing.assert_array_equal(y_val, [8, 9])
    np.testing.assert_array_equal(x_val, [[16, 17], [18, 19]])
    assert weights is None and len(x_train) == 8


def test_split_validation_keeps_the_held_out_samples_weights_as_keras_does():
    """Keras validates a validation_split's samples with their own sample_weight: acceltrain's split dropped them, so
    a weighted fit's val_loss was the unweighted one (1.086 where plain Keras said 1.413)."""
    x, y, weights = np.arange(20).reshape(10, 2), np.arange(10), np.linspace(0.1, 1.0, 10)
    (_, _, train_weights), (x_val, y_val, val_weights) = arrays.split_validation(x, y, weights, 0.3)

    np.testing.assert_array_equal(train_weights, weights[:7])
    np.testing.assert_array_equal(val_weights, weights[7:])
    np.testing.assert_array_equal(y_val, [7, 8, 9])


def test_first_batches_are_the_fits_first_batches_in_order_from_the_start_again():
    x, y = np.arange(20, dtype=np.float64).reshape(10, 2), np.arange(10)
    batches, batch = streams.first_batches(x, y, 4, 3)  # 2 whole batches of 4, then the first again
    assert batch == 4 and [list(b[1]) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    assert batches[0][0].dtype == np.float32  # what fit is fed: float64 cast once


@pytest.mark.parametrize("batch_size", [None, 32])
def test_first_batches_of_fewer_samples_than_a_batch_are_one_batch_of_them_all(batch_size):
    """Keras trains 10 samples at its default batch of 32 as one batch of 10; so does the autopilot's weighing
    (it refused them: a tiny script under run --device-memory stopped)."""
    batches, batch = streams.first_batches(np.zeros((10, 2), np.float32), np.arange(10), batch_size, 2)
    assert batch == 10 and [len(b[1]) for b in batches] == [10, 10]


def test_first_batches_are_none_where_they_cannot_be_read_ahead():
    assert streams.first_batches(iter([(np.zeros((4, 2)), np.zeros(4))]), None, None, 1) is None  # a generator
    assert streams.first_batches(np.zeros((0, 2)), np.zeros(0), 8, 1) is None  # no samples: fit says so


@pytest.mark.parametrize("batch_size, expected", [(None, 32), (0, 32), (1, 1), (64, 64)])
def test_kerass_default_batch_is_resolved_in_one_place(batch_size, expected):
    assert arrays.keras_batch(batch_size) == expected == (batch_size or arrays.KERAS_DEFAULT_BATCH_SIZE)


def test_no_other_module_writes_kerass_default_batch():
    """Issue 36: Keras's default was resolved in 13 places, twice as a literal 32."""
    import re
    from pathlib import Path

    source = Path(arrays.__file__).parents[1]
    written = sorted(f"{path.relative_to(source)}:{number}" for path in source.rglob("*.py")
                     if path.relative_to(source).as_posix() != "inputs/arrays.py"
                     for number, line in enumerate(path.read_text().splitlines(), 1)
                     if re.search(r"batch_size or (32\b|[\w.]*KERAS_DEFAULT_BATCH_SIZE)", line))
    assert not written, f"Keras's default batch resolved outside arrays.keras_batch: {written}"


class _Tensor:
    """A framework's tensor as inputs/kinds.py sees one: numpy reads it (`__array__`), it has a shape and a dtype named as
    TensorFlow names its own (tf.string's name is "string"; tf.float32's "float32")."""

    def __init__(self, values, dtype_name):
        self.values, self.shape = np.asarray(values, dtype=object if dtype_name == "string" else None), (len(values),)
        self.dtype = type("DType", (), {"name": dtype_name})()

    def __array__(self, dtype=None, copy=None):
        return self.values


def test_a_string_tensor_is_left_to_keras_and_a_numeric_one_read_as_numpy():
    # Issue 45: a FeatureSpace model called on {name: tf.convert_to_tensor([value])} with one string feature. Read
    # by numpy, the string tensor became an array of objects, which Keras refuses ("Invalid dtype: object") where it
    # takes the tf.string tensor itself; so it stays a tensor, and the numbers beside it become arrays.
    raw = {"age": _Tensor([60.0], "float32"), "thal": _Tensor([b"fixed"], "string")}

    read = kinds.tensors_as_numpy(raw)

    assert isinstance(read["age"], np.ndarray) and read["age"].tolist() == [60.0]
    assert read["thal"] is raw["thal"]
    assert kinds.has_tensors(raw) and not kinds.has_tensors({"thal": raw["thal"]})
    assert not kinds.kind_of(read) == kinds.ARRAYS  # a nest with a tensor left in it is Keras's to read, not the arrays' rules
