"""TPUs: the chips Keras and JAX are built around."""

NAME = "tpu"

# A TPU runs a step of a small model in microseconds, while each return to the Python host costs
# a millisecond or more: run many steps per compiled call (the seed's `steps_per_run=128` did the same).
STEPS_PER_EXECUTION = 32

# XLA on a TPU compiles one program per input shape: training batches must all be full (drop_remainder).
STATIC_SHAPES = True
