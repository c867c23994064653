"""Keras's dtype policy for the models built under Runtime.scope(), restored on leaving it.

Neutral: reads Keras only once it is loaded, and imports no framework.
"""

import contextlib
import sys


def current_policy() -> str:
    """The global dtype policy's name; "float32" (Keras's default) while Keras is not loaded."""
    keras = sys.modules.get("keras")
    if keras is None or not hasattr(keras, "config"):
        return "float32"
    return keras.config.dtype_policy().name


@contextlib.contextmanager
def scope(policy: str):
    """Models built inside compute as `policy` says ("float32", "mixed_bfloat16"); the previous one comes back."""
    if policy == current_policy():
        yield  # nothing to change: leave Keras's global state alone
        return
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def override_note(chosen: str, reason: str, current: str) -> str | None:
    """What the banner says when acceltrain changes Keras's dtype policy for the models built in scope() (so
    every model of a `run` script): what they compute in, why, and how to keep the user's; None if unchanged."""
    if chosen == current:
        return None
    return (f"models built in scope() (every model of a `run` script) compute in {_compute_dtype(chosen)}, not "
            f"{_compute_dtype(current)} ({chosen}: {reason}); keep {current} with precision='{current}' "
            f"(CLI: --precision {current})")


def _compute_dtype(policy: str) -> str:
    return policy.removeprefix("mixed_")
