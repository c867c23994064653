"""The fit-time checks of `acceltrain run`, as tables: each fires on its pitfall and stays silent otherwise."""

import numpy as np
import pytest

from acceltrain import checks

ONE_HOT = np.eye(10, dtype="float32")[np.arange(100) % 10]
INDICES = np.arange(100) % 10


@pytest.mark.parametrize(
    "num_samples, batch_size, steps_per_epoch, fires, says",
    [
        (60000, None, 50, True, "1,600 of the 60,000"),  # the seed's script: batch 32 by default
        (60000, 1200, 50, False, None),  # 50 × 1200 covers the set
        (60000, 1000, 50, True, "50,000 of the 60,000"),
        (60000, None, None, False, None),  # no steps_per_epoch: Keras covers the set
        (1000, 32, 40, False, None),  # more steps than the set needs: Keras's own business
    ],
)
def test_partial_epoch(num_samples, batch_size, steps_per_epoch, fires, says):
    findings = checks.partial_epoch(num_samples, batch_size, steps_per_epoch)
    assert bool(findings) == fires
    if fires:
        assert says in findings[0].message and "drop steps_per_epoch" in findings[0].message
        assert not findings[0].error


@pytest.mark.parametrize(
    "batch_size, replicas, splits_unevenly, expected",
    [
        (256, 8, False, None),
        (None, 8, False, None),  # Keras's 32 divides
        (100, 8, False, "error"),  # JAX cannot place 100 rows on 8 devices
        (100, 8, True, "warning"),  # TF splits unevenly: slower, not wrong
        (30, 1, False, None),
    ],
)
def test_uneven_batch(batch_size, replicas, splits_unevenly, expected):
    findings = checks.uneven_batch(batch_size, replicas, splits_unevenly)
    kinds = ["error" if finding.error else "warning" for finding in findings]
    assert kinds == ([expected] if expected else [])
    if findings:
        assert "96 or 104" in findings[0].message


@pytest.mark.parametrize(
    "batch_size, replicas, platform, fires",
    [
        (32, 8, "cpu", True),  # 4 per replica
        (256, 8, "cpu", False),
        (32, 1, "cpu", False),
        (32, 1, "tpu", True),  # a TPU core wants 128 rows
        (1024, 8, "tpu", False),
        (64, 4, "gpu", True),
    ],
)
def test_small_replica_batch(batch_size, replicas, platform, fires):
    findings = checks.small_replica_batch(batch_size, replicas, platform)
    assert bool(findings) == fires
    if fires:
        assert f"batch_size={checks.MIN_BATCH_PER_REPLICA[platform] * replicas}" in findings[0].message


def test_float64_cost_is_measured_on_the_array():
    [finding] = checks.float64_inputs({"x": np.zeros((1000, 500)), "y": np.zeros(1000, np.int64)})
    assert "x is float64" in finding.message and "(a 2 MB copy each time; one took " in finding.message
    [finding] = checks.float64_inputs({"x": np.float64})  # a dtype alone: nothing measured, nothing claimed
    assert "copy" not in finding.message and "every epoch" in finding.message


@pytest.mark.parametrize(
    "dtypes, fires",
    [({"x": np.float64}, True), ({"x": np.float32, "y": np.float64}, True), ({"x": np.float32, "y": np.int64}, False),
     ({"x": np.uint8}, False)],
)
def test_float64_inputs(dtypes, fires):
    findings = checks.float64_inputs(dtypes)
    assert bool(findings) == fires
    if fires:
        assert ".astype('float32')" in findings[0].message


@pytest.mark.parametrize(
    "y, loss, units, change",
    [
        (ONE_HOT, "sparse_categorical_crossentropy", 10, "'categorical_crossentropy'"),  # the seed's mistake
        (INDICES, "categorical_crossentropy", 10, "'sparse_categorical_crossentropy'"),
        (INDICES[:, None], "CategoricalCrossentropy".lower(), 10, "'sparse_categorical_crossentropy'"),
        (INDICES, "sparse_categorical_crossentropy", 10, None),
        (ONE_HOT, "categorical_crossentropy", 10, None),
        (INDICES % 2, "binary_crossentropy", 1, None),
        (ONE_HOT, "mse", 10, None),
        (ONE_HOT * 0.5, "sparse_categorical_crossentropy", 10, None),  # not one-hot: not ours to judge
    ],
)
def test_labels_vs_loss(y, loss, units, change):
    findings = checks.labels_vs_loss(y, loss, units)
    assert bool(findings) == (change is not None)
    if change:
        assert findings[0].error and f"Change the loss to {change}" in findings[0].message


def test_clean_fit_is_silent():
    findings = checks.check_fit(num_samples=60000, batch_size=256, steps_per_epoch=None, num_replicas=8,
                                platform="cpu", splits_unevenly=False, input_dtypes={"x": np.float32, "y": np.int64},
                                y=INDICES, loss_name="sparse_categorical_crossentropy", output_units=10)
    assert findings == []


def test_errors_come_first():
    findings = checks.check_fit(num_samples=60000, batch_size=100, steps_per_epoch=None, num_replicas=8,
                                platform="cpu", splits_unevenly=False, input_dtypes={"x": np.float64},
                                y=INDICES, loss_name="sparse_categorical_crossentropy", output_units=10)
    assert [f.key for f in findings] == ["uneven_batch", "float64_inputs"]
    assert findings[0].error
