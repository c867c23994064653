"""The host CPU: always there, and the fallback."""

NAME = "cpu"

# A CPU step takes milliseconds, so per-step dispatch is noise (measured: Keras on JAX 1.07 s an epoch
# with 1 step per call, 1.06 s with 50): keep 1, which keeps progress and callbacks per step.
STEPS_PER_EXECUTION = 1

# Fewer rows a step than this leave a CPU's vector units mostly idle (a rule of thumb, not a limit).
MIN_BATCH_PER_REPLICA = 8

# No native bfloat16 gain measured on CPUs here (decisions.choose_precision says why).
NATIVE_BFLOAT16 = False

# A last, smaller batch costs one more compilation here, not a failure.
STATIC_SHAPES = False

# `acceltrain bench` measures the ceiling with one square matmul of this size: big enough to reach
# the cores' full speed (2048³ = 17 GFLOP, about 0.1 s here), small enough to repeat.
MATMUL_SIZE = 2048


def peak_flops_per_second(device_kind: str, dtype: str) -> float | None:
    """No published peak: it depends on the CPU model, its cores and its clock. bench measures one."""
    return None
