"""The host CPU: always there, and the fallback."""

NAME = "cpu"

# A CPU step takes milliseconds, so per-step dispatch is noise (measured: Keras on JAX 1.07 s an epoch
# with 1 step per call, 1.06 s with 50): keep 1, which keeps progress and callbacks per step.
STEPS_PER_EXECUTION = 1

# A last, smaller batch costs one more compilation here, not a failure.
STATIC_SHAPES = False
