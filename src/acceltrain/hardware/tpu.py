"""TPUs: the chips Keras and JAX are built around."""

import glob

NAME = "tpu"

# A TPU runs a step of a small model in microseconds, while each return to the Python host costs
# a millisecond or more: run many steps per compiled call (the seed's `steps_per_run=128` did the same).
STEPS_PER_EXECUTION = 32

# Below this many samples per replica a step leaves the chip idle: a TPU core's matrix unit is 128 wide.
MIN_BATCH_PER_REPLICA = 128

# TPUs compute in bfloat16 natively: Keras's mixed_bfloat16 policy is their default (decisions.choose_precision).
NATIVE_BFLOAT16 = True

# XLA on a TPU compiles one program per input shape: training batches must all be full (drop_remainder).
STATIC_SHAPES = True

# `acceltrain bench` measures the ceiling with one square matmul of this size.
MATMUL_SIZE = 8192

# Published bfloat16 peaks per JAX device, in TFLOP/s, from Google Cloud's TPU pages. On v2 and v3
# each chip holds two TensorCores that JAX shows as two devices, so a device has half the chip's
# 45 (v2) or 123 (v3); from v4 on, a device is a chip. Keyed by JAX's device_kind.
PEAK_BF16_TFLOPS = {
    "TPU v2": 22.5,
    "TPU v3": 61.5,
    "TPU v4": 275.0,
    "TPU v5 lite": 197.0,
    "TPU v5e": 197.0,
    "TPU v5p": 459.0,
    "TPU v5": 459.0,
    "TPU v6 lite": 918.0,
    "TPU v6e": 918.0,
}


def peak_flops_per_second(device_kind: str, dtype: str) -> float | None:
    """The published peak of one device of this kind, or None where not in the table.

    float32 matmuls at JAX's default precision run as one bfloat16 pass on the MXU, so they share the
    bfloat16 peak.
    """
    peak = PEAK_BF16_TFLOPS.get(device_kind)
    if peak is None or dtype not in ("bfloat16", "float32"):
        return None
    return peak * 1e12


# Where TPU chips appear as device files: /dev/accel* (v2-v4, v6e) or /dev/vfio/N (v5e, v5p). A seam:
# tests point it at a folder of fake device files.
DEVICE_FILES = ("/dev/accel*", "/dev/vfio/[0-9]*")


def device_files(patterns=None) -> list[str]:
    """The device files a TPU VM exposes (DEVICE_FILES, unless `patterns` are given)."""
    return sorted(path for pattern in (patterns or DEVICE_FILES) for path in glob.glob(pattern))
