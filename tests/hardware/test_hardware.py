import pytest

from acceltrain import hardware


@pytest.mark.parametrize(
    "counts, expected",
    [
        ({"tpu": 8, "gpu": 0, "cpu": 1}, "tpu"),
        ({"tpu": 4, "gpu": 2, "cpu": 1}, "tpu"),  # TPU first, whatever else is there
        ({"tpu": 0, "gpu": 2, "cpu": 1}, "gpu"),
        ({"gpu": 1, "cpu": 1}, "gpu"),
        ({"tpu": 0, "gpu": 0, "cpu": 8}, "cpu"),
        ({"cpu": 1}, "cpu"),
    ],
)
def test_choose_platform_takes_the_first_kind_with_a_device(counts, expected):
    platform, reason = hardware.choose_platform(counts)
    assert platform == expected
    assert str(counts[expected]) in reason


def test_the_auto_order_is_tpu_gpu_cpu():
    assert hardware.PLATFORMS == ("tpu", "gpu", "cpu")


def test_kind_rejects_an_unknown_platform():
    with pytest.raises(ValueError, match="Valid: tpu, gpu, cpu"):
        hardware.kind("npu")


def test_hardware_counts_its_devices():
    found = hardware.Hardware(platform="cpu", device_kind="cpu", devices=("cpu:0", "cpu:1"))
    assert found.num_devices == 2
