"""inputs/ on its own: what each process hands Keras for fit, evaluate and predict (numpy, no framework)."""

from types import SimpleNamespace

import numpy as np
import pytest

from acceltrain import inputs
from acceltrain.errors import UsageError


def _split(num_replicas, num_processes=1, process_index=0, **more):
    return inputs.Split(num_replicas, num_processes, process_index, **more)


@pytest.mark.parametrize("loss, output_shape, expected", [
    ("sparse_categorical_crossentropy", (None, 10), inputs.Classes("sparse_categorical_crossentropy", 10)),
    (SimpleNamespace(name="categorical_crossentropy"), (None, 4), inputs.Classes("categorical_crossentropy", 4)),
    ("mse", (None, 1), inputs.Classes("mse", 1)),
    (None, None, inputs.Classes(None, None)),
])
def test_classes_of_reads_the_loss_name_and_the_output_units(loss, output_shape, expected):
    model = SimpleNamespace(loss=loss, output_shape=output_shape)
    assert inputs.classes_of(model) == expected


@pytest.mark.parametrize("classes, expected", [
    (inputs.Classes("sparse_categorical_crossentropy", 10), 10),
    (inputs.Classes("categorical_crossentropy", 1), None),  # one unit: not classes
    (inputs.Classes("mse", 10), None),
    (inputs.Classes(None, 10), None),
])
def test_num_classes_only_for_a_cross_entropy_over_several_outputs(classes, expected):
    assert classes.num_classes == expected


def test_fit_trims_casts_and_checks_when_checked():
    x, y = np.zeros((100, 3)), np.arange(100) % 4  # float64: cast once
    fit = inputs.prepare_fit(_split(8), x, y, batch_size=32, classes=inputs.Classes("sparse_categorical_crossentropy", 4))
    assert len(fit.x) == 96 and fit.x.dtype == np.float32 and fit.steps_per_epoch == 3
    assert fit.notes == [("trimmed", "left out the last 4 training samples so the final batch divides over 8 replicas "
                                      "(the same ones every epoch: Keras shuffles the rest)")]
    with pytest.raises(UsageError, match="labels from 0 to 3.*2 classes"):
        inputs.prepare_fit(_split(8), x, y, batch_size=32, classes=inputs.Classes("sparse_categorical_crossentropy", 2))


def test_fit_on_fewer_samples_than_replicas_is_refused_on_jax_and_kept_whole_on_tensorflow():
    """Trimmed to a multiple of 8, two samples would be none (issue 22: Keras then raised StopIteration)."""
    x, y = np.zeros((2, 3), "float32"), np.zeros(2, "int32")
    with pytest.raises(UsageError, match="Received 2 training samples for 8 replicas: .* Pass at least 8 samples, or "
                                         r"connect\(distribution='none'\)"):
        inputs.prepare_fit(_split(8), x, y, batch_size=32)
    tensorflow = _split(8, splits_uneven_batches=True)
    fit = inputs.prepare_fit(tensorflow, x, y, batch_size=32)
    assert len(fit.x) == 2 and fit.notes == []


def test_fit_kept_whole_gives_each_epoch_its_order_less_its_last_few_with_their_weights():
    """Runtime.fit with checkpoints: each epoch leaves out its own last samples, after its shuffle, from the step
    a resumed epoch starts at; process 1 of 2 takes every other sample of each global batch."""
    x, y, w = np.arange(100, dtype="float32")[:, None], np.arange(100) % 4, np.arange(100) / 100
    fit = inputs.prepare_fit(_split(8, num_processes=2, process_index=1), x, y, batch_size=32, sample_weight=w,
                             trim=False)
    assert (len(fit.x), fit.left_out, fit.steps_per_epoch, fit.local_batch_size) == (100, 4, 3, 16)
    order = np.random.default_rng(0).permutation(100)
    epoch = fit.epoch(order, first_step=1)  # resumed after one step of 32
    np.testing.assert_array_equal(epoch["x"][:, 0], order[32:96][1::2])
    np.testing.assert_array_equal(epoch["y"], order[32:96][1::2] % 4)
    np.testing.assert_array_equal(epoch["sample_weight"], order[32:96][1::2] / 100)  # the weights follow their samples
    assert epoch["batch_size"] == 16


def test_an_epoch_batch_by_batch_is_the_same_epoch_cut_at_the_local_batch():
    """Runtime.fit with checkpoints on JAX reads an epoch batch by batch (no copy of the whole epoch in its order):
    the same samples, weights and split over processes as the whole epoch's arrays, resumed or not."""
    x, y, w = np.arange(100, dtype="float32")[:, None], np.arange(100) % 4, np.arange(100) / 100
    for processes, index, first_step in ((1, 0, 0), (2, 1, 1)):
        fit = inputs.prepare_fit(_split(8, num_processes=processes, process_index=index), x, y, batch_size=32,
                                 sample_weight=w, trim=False)
        order = np.random.default_rng(processes).permutation(100)
        whole, batches = fit.epoch(order, first_step), fit.epoch_batches(order, first_step)
        local = whole["batch_size"]
        assert len(batches) == 3 - first_step
        for i in range(len(batches)):
            for got, expected in zip(batches[i], (whole["x"], whole["y"], whole["sample_weight"])):
                np.testing.assert_array_equal(got, expected[i * local:(i + 1) * local])
    fit = inputs.prepare_fit(_split(1), x, y, batch_size=32, trim=False)
    assert len(fit.epoch_batches(np.arange(100))[3]) == 2  # no weights: (x, y); the last batch is the rest, 4


def test_fit_unchecked_leaves_dtypes_and_keras_default_batch():
    x, y = np.zeros((100, 3)), np.zeros(100)
    fit = inputs.prepare_fit(_split(8), x, y, checked=False)
    assert fit.x.dtype == np.float64 and fit.local_batch_size is None and fit.validation_batch_size is None


def test_evaluate_repeats_the_set_and_its_sample_weights():
    x, y, w = np.zeros((1001, 3), "float32"), np.zeros(1001, "int64"), np.ones(1001)
    prepared = inputs.prepare_evaluate(_split(8), x, y, batch_size=128, sample_weight=w)
    assert len(prepared.x) == len(prepared.y) == len(prepared.sample_weight) == 8008


@pytest.mark.parametrize("n, replicas, padded", [(3, 4, 4), (3, 8, 8), (100, 8, 104), (96, 8, 96), (1, 1, 1)])
def test_predict_pads_to_the_replicas_and_cuts_back(n, replicas, padded):
    x = np.arange(n, dtype="float32")[:, None]
    prepared = inputs.prepare_predict(_split(replicas), x)
    assert len(prepared.x) == padded and prepared.local_batch_size is None
    np.testing.assert_array_equal(prepared.x[:n], x)  # the set itself first; padding after
    np.testing.assert_array_equal(prepared.finish(prepared.x * 2), x * 2)


def test_predict_rejects_a_batch_that_does_not_divide():
    with pytest.raises(UsageError, match="batch_size=10.*4 replicas"):
        inputs.prepare_predict(_split(4), np.zeros((3, 1)), batch_size=10)


@pytest.mark.parametrize("n, batch_size", [(3, None), (37, 8), (64, 16), (1000, None)])
def test_predict_across_processes_joins_the_outputs_in_sample_order(n, batch_size):
    """Two processes of two devices: global batch k holds process 0's local batch k, then process 1's, as
    Keras joins them. Undone by finish(gathered=True), whatever the set's size."""
    x = np.arange(n, dtype="float32")[:, None] * np.ones((1, 2), "float32")
    shares = [inputs.prepare_predict(_split(4, 2, p), x, batch_size=batch_size) for p in (0, 1)]
    locals_ = [share.local()[0] for share in shares]
    local_batch = shares[0].local_batch_size
    assert len(locals_[0]) == len(locals_[1]) and len(locals_[0]) % local_batch == 0  # same steps, full batches
    joined = np.concatenate([np.concatenate([local[k:k + local_batch] for local in locals_])
                             for k in range(0, len(locals_[0]), local_batch)])
    np.testing.assert_array_equal(shares[0].finish(joined * 3, gathered=True), x * 3)


def test_predict_keeps_the_structure_of_several_outputs():
    prepared = inputs.prepare_predict(_split(4), np.zeros((3, 1)))
    outputs = prepared.finish({"a": np.zeros((4, 2)), "b": [np.ones((4,))]})
    assert outputs["a"].shape == (3, 2) and outputs["b"][0].shape == (3,)


@pytest.mark.parametrize("given", [tuple, list])
def test_validation_arrays_as_a_tuple_or_a_list_are_repeated_to_divide(given):
    """A list [x, y] is unpacked by Keras as a tuple is: it takes the same rule (167 rows over 4 replicas: the
    path that let a batch of 167 reach JAX whole, issue 33)."""
    x, y = np.zeros((1670, 2), "float32"), np.zeros(1670, "int32")
    fit = inputs.prepare_fit(_split(4), x, y, batch_size=128, validation_data=given((x[:167], y[:167])),
                             checked=False)
    assert isinstance(fit.validation_data, tuple) and len(fit.validation_data[0]) == 4 * 167


@pytest.mark.parametrize("batch_size, replicas, accumulation, own, said", [
    (256, 8, 1, "", "global batch 256 = 32 × 8 replica(s)"),
    (None, 4, 1, "", "global batch 32 = 8 × 4 replica(s)"),  # Keras's default batch
    (32, 8, 2, "", "global batch 64 = 2 steps × 4 × 8 replica(s)"),  # the autopilot's accumulation: per step 32
    (32, 1, 1, "the script's own ModelParallel (mesh batch 1 × model 4)",  # its mesh's batch axis: 1 replica
     "global batch 32 = 32 × 1 replica(s) of the script's own ModelParallel (mesh batch 1 × model 4)"),
])
def test_the_global_batch_is_said_one_way(batch_size, replicas, accumulation, own, said):
    """Runtime.fit and `run` both say it through inputs.global_batch (issue 36: it was written twice)."""
    assert inputs.global_batch(batch_size, replicas, accumulation, own) == said


def _endless(rows):
    """A generator of `rows`-row batches, each batch's rows numbered by its place."""
    start = 0
    while True:
        yield np.full((rows, 3), start, "float32"), np.zeros(rows)
        start += 1


def test_a_generators_batch_is_its_first_batchs_read_ahead_and_given_back_first():
    """Runtime.fit said "global batch 32" (Keras's default) for a generator of 4-row batches: its first batch, read
    ahead, is its batch, and fit still reads it first."""
    fit = inputs.prepare_fit(_split(4), _endless(4))
    assert fit.batch_size == 4
    assert [float(next(fit.x)[0][0, 0]) for _ in range(3)] == [0, 1, 2]


def test_runtime_fits_generator_whose_batch_does_not_divide_is_refused_naming_its_rows():
    """An endless generator of 2-row batches at 4 replicas: each batch was cut to nothing, and Runtime.fit never took a
    step (a hang); refused as a PyDataset's batch is."""
    with pytest.raises(UsageError, match=r"Received x, a generator whose first batch has 2 rows, which does not divide "
                                         r"over 4 replicas .* Yield batches of a multiple of 4: the nearest are 4\."):
        inputs.prepare_fit(_split(4), _endless(2))
    assert inputs.prepare_fit(_split(4), _endless(2), checked=False).batch_size == 2  # run's door decided already


def test_a_validation_splits_samples_are_named_as_such_where_they_are_counted_again():
    """A fit given validation_split and no validation_data was told "validation_data: each sample counted 4 times";
    its held-out samples are named, with their weights kept (Keras weighs their loss)."""
    x, y, weights = np.zeros((403, 3), "float32"), np.zeros(403, "int64"), np.ones(403, "float32")
    fit = inputs.prepare_fit(_split(4), x, y, batch_size=32, sample_weight=weights, validation_split=0.13)
    said = [text for _, text in fit.notes if "each sample counted" in text]
    assert said == ["validation_split's held-out samples: each sample counted 4 times so every batch divides over 4 "
                    "replicas (metrics unchanged, none dropped)"]
    assert len(fit.validation_data) == 3 and len(fit.validation_data[2]) == 53 * 4
    given = inputs.prepare_fit(_split(4), x, y, batch_size=32, validation_data=(x[:53], y[:53]))
    assert [text for _, text in given.notes if "each sample counted" in text][0].startswith("validation_data: ")


def test_a_scripts_predict_on_a_batch_tensorflow_splits_unevenly_is_not_refused():
    """A script's predict(batch_size=7) on TensorFlow's 4 replicas exited 2 ("Received batch_size=7, which does not
    divide over 4 replicas") where its evaluate(batch_size=10) was only warned and plain Keras predicts: run's door
    decides a script's batch (here: TensorFlow splits it, warned); Runtime.predict's is still refused."""
    x = np.arange(29, dtype="float32").reshape(29, 1)
    uneven = _split(4, splits_uneven_batches=True)
    predict = inputs.prepare_predict(uneven, x, batch_size=7, checked=False)
    assert predict.local_batch_size == 7 and len(predict.x) == 32  # padded to the replicas, cut back after
    with pytest.raises(UsageError, match=r"Received batch_size=7, which does not divide over 4 replicas"):
        inputs.prepare_predict(uneven, x, batch_size=7)
