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
        (1, 1, "cpu", False),  # batch_size=1: the algorithm's (a bag a step), not a speed setting
        (1, 8, "tpu", False),
        (2, 1, "cpu", True),
    ],
)
def test_small_replica_batch(batch_size, replicas, platform, fires):
    findings = checks.small_replica_batch(batch_size, replicas, platform)
    assert bool(findings) == fires
    if fires:
        assert f"batch_size={checks.MIN_BATCH_PER_REPLICA[platform] * replicas}" in findings[0].message


class _Clock:
    """A clock whose every reading is `step` seconds after the last: a conversion 'takes' `step`."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


BIG = np.zeros((1100, 1000))  # 8.8 MB of float64: timed


def test_float64_cost_is_measured_on_the_array_and_said_with_it():
    [finding] = checks.float64_inputs({"x": BIG, "y": np.zeros(1100, np.int64)}, clock=_Clock(0.2))
    assert "x is float64" in finding.message and "(a 4 MB copy each time; one took 0.20 s here)" in finding.message
    assert ".astype('float32')" in finding.message


@pytest.mark.parametrize(
    "arrays, seconds, fires",
    [({"x": BIG}, 0.05, True),
     ({"x": BIG}, 0.01, False),  # measured, and cheap: issue 22's "0 MB ... 0.00 s", said 28 times
     ({"x": np.zeros((1000, 8))}, 1.0, False),  # 64 KB: too small to time (its time would be noise), never said
     ({"x": BIG.astype(np.float32), "y": BIG}, 0.1, True),
     ({"x": BIG.astype(np.float32), "y": np.zeros(1100, np.int64)}, 1.0, False),
     ({"x": np.float64}, 1.0, False)],  # a dtype alone: nothing measured, nothing claimed
)
def test_float64_inputs_fire_on_their_measured_cost(arrays, seconds, fires):
    assert bool(checks.float64_inputs(arrays, clock=_Clock(seconds))) == fires


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
    findings = checks.check_fit(num_samples=60000, batch_size=100, steps_per_epoch=10, num_replicas=8,
                                platform="cpu", splits_unevenly=False, input_dtypes={"x": np.float64},
                                y=INDICES, loss_name="sparse_categorical_crossentropy", output_units=10)
    assert [f.key for f in findings] == ["uneven_batch", "partial_epoch"]
    assert findings[0].error
