"""NVIDIA (CUDA) and AMD (ROCm) GPUs."""

import glob

NAME = "gpu"

# A GPU step of a small model is shorter than Python's per-step dispatch and callback overhead;
# a few steps per compiled call hides it without delaying progress reports much.
STEPS_PER_EXECUTION = 8

# A GPU needs a few dozen rows a step to hide its kernel launch overhead (a rule of thumb, not a limit).
MIN_BATCH_PER_REPLICA = 32

# Native bfloat16 depends on the GPU: from compute capability BFLOAT16_FROM_COMPUTE_CAPABILITY on.
NATIVE_BFLOAT16 = None

# A last, smaller batch costs one more compilation here, not a failure.
STATIC_SHAPES = False

# `acceltrain bench` measures the ceiling with one square matmul of this size (1.1 TFLOP: about
# 1.4 ms at an H100's bf16 rate, long enough to hide the launch).
MATMUL_SIZE = 8192

# Published dense (no sparsity) peaks per device, in TFLOP/s, from NVIDIA's datasheets (SXM parts
# unless named). float32 is the plain CUDA-core rate; matmuls XLA runs as TF32 can exceed it.
# Matched by substring of JAX's device_kind, first match wins: "H100 PCIe" before "H100".
PEAK_TFLOPS = (
    ("H200", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}),
    ("H100 PCIe", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.0}),
    ("H100", {"bfloat16": 989.0, "float16": 989.0, "float32": 67.0}),
    ("A100", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
)

# Compute capability from which bfloat16 runs natively on the tensor cores (Ampere).
BFLOAT16_FROM_COMPUTE_CAPABILITY = (8, 0)


def peak_flops_per_second(device_kind: str, dtype: str) -> float | None:
    """The published peak of one device of this kind in this dtype, or None where not in the table."""
    for name, peaks in PEAK_TFLOPS:
        if name in device_kind:
            return peaks[dtype] * 1e12 if dtype in peaks else None
    return None


def device_files() -> list[str]:
    """The device files of NVIDIA (/dev/nvidia0 ...) and AMD (/dev/kfd) GPUs."""
    return sorted(glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/kfd"))
