"""connect()'s platform= and tpu= arguments: checked before any framework starts, honoured after."""

import pytest

from acceltrain import hardware
from acceltrain.errors import UsageError
from acceltrain.arguments import check_platform


@pytest.mark.parametrize("platform, tpu, simulate, expected", [
    ("auto", None, None, "auto"),
    ("tpu", None, None, "tpu"),
    ("auto", "my-tpu", None, "tpu"),  # a TPU name asks for a TPU
    ("cpu", None, 8, "cpu"),
    ("auto", None, 8, "auto"),
])
def test_valid_platform_arguments(platform, tpu, simulate, expected):
    assert check_platform(platform, tpu, simulate) == expected


@pytest.mark.parametrize("platform, tpu, simulate, message", [
    ("TPU", None, None, r"Received platform='TPU'. Valid: auto, tpu, gpu, cpu"),
    ("gpu", "my-tpu", None, r"tpu='my-tpu' with platform='gpu'"),
    ("tpu", None, 2, r"simulate_devices=2 with platform='tpu'.*slices of the CPU"),
    ("auto", "my-tpu", 2, r"simulate_devices=2 with platform='tpu'"),
])
def test_conflicting_platform_arguments_are_refused(platform, tpu, simulate, message):
    with pytest.raises(UsageError, match=message):
        check_platform(platform, tpu, simulate)


@pytest.mark.parametrize("counts, requested, expected", [
    ({"tpu": 8, "gpu": 0, "cpu": 1}, "auto", "tpu"),
    ({"tpu": 8, "gpu": 0, "cpu": 1}, "cpu", "cpu"),
    ({"tpu": 0, "gpu": 2, "cpu": 1}, "gpu", "gpu"),
])
def test_the_platform_asked_for_wins_when_it_is_there(counts, requested, expected):
    assert hardware.choose_platform(counts, requested)[0] == expected


def test_a_platform_asked_for_that_is_not_there_is_an_error_naming_what_is():
    with pytest.raises(UsageError, match=r"platform='tpu', but the backend sees no TPU device \(it sees: 1 CPU\)"):
        hardware.choose_platform({"tpu": 0, "gpu": 0, "cpu": 1}, "tpu")


def test_a_tpu_name_on_jax_points_to_platform_tpu_or_tensorflow():
    jax_backend = pytest.importorskip("acceltrain.backends.jax")
    with pytest.raises(UsageError, match=r"tpu='my-tpu' with the JAX backend.*platform='tpu'.*backend='tensorflow'"):
        jax_backend.prepare(None, "tpu", "my-tpu")
