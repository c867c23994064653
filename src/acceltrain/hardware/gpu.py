"""NVIDIA (CUDA) and AMD (ROCm) GPUs."""

NAME = "gpu"

# A GPU step of a small model is shorter than Python's per-step dispatch and callback overhead;
# a few steps per compiled call hides it without delaying progress reports much.
STEPS_PER_EXECUTION = 8

# A last, smaller batch costs one more compilation here, not a failure.
STATIC_SHAPES = False
