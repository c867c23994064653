"""The framework behind Keras. Each backend module has the same functions; neutral code calls through them.

A backend module is imported only once connect() has chosen it, so importing acceltrain starts no
framework and fixes no Keras backend.
"""

import importlib
import importlib.util
import os

BACKENDS = ("jax", "tensorflow")


def load(name: str):
    """Import the backend module `name` after pointing Keras at it (KERAS_BACKEND is read on import)."""
    os.environ["KERAS_BACKEND"] = name
    return importlib.import_module(f"acceltrain.backends.{name}")


def loaded_keras_backend() -> str | None:
    """The backend Keras was already imported with in this process, if it was."""
    import sys

    keras = sys.modules.get("keras")
    if keras is None or not hasattr(keras, "backend"):
        return None
    return keras.backend.backend()


def jax_importable() -> bool:
    return importlib.util.find_spec("jax") is not None


# The functions every backend module defines, called by neutral code through `Runtime.backend_module`
# (tests/backends/test_interface.py checks both modules against it). Each module lists what it has beyond
# them in OWN: what only that framework needs (a TPU resolver, a compilation cache).
INTERFACE = (
    # start-up
    "prepare", "start_processes", "shard_inputs_per_process", "set_seed", "versions",
    # what is there
    "device_counts", "devices", "device_kind", "compute_capability", "process_count", "process_index",
    # distribution
    "make_distribution", "distribution_name", "num_replicas", "scope", "set_jit_compile", "release",
    # unmodified scripts
    "devices_spanned", "fit_hook", "gathering_predictions",
)


def hooked_fit(backend: str, hook):
    """Inside, each `fit` and `evaluate` of every model of `backend` first calls
    `hook(name, model, args, kwargs)`, which returns the (args, kwargs) to call Keras with, and each
    `predict` is `hook.predict(method, model, args, kwargs)`. The previous methods are restored on exit.
    The same for both backends: only the trainer class differs (keras_internals.trainer_class)."""
    from acceltrain.backends import keras_internals

    def wrap(name, method):
        if name == "predict":
            return lambda model, *args, **kwargs: hook.predict(method, model, args, kwargs)

        def wrapper(model, *args, **kwargs):
            args, kwargs = hook(name, model, args, kwargs)
            return method(model, *args, **kwargs)

        return wrapper

    return keras_internals.patched(keras_internals.trainer_class(backend), ("fit", "evaluate", "predict"), wrap)


def with_callback(method, args, kwargs: dict, callback) -> dict:
    """The kwargs of a call `method(model, *args, **kwargs)` (a Keras fit, evaluate or predict) with
    `callback` added to its callbacks. Left as they are where the callbacks came by position or as a
    CallbackList the caller built, or already hold a callback of the same class."""
    import inspect

    names = list(inspect.signature(method).parameters)[1:]  # less the model
    if "callbacks" not in names or len(args) > names.index("callbacks"):
        return kwargs
    callbacks = kwargs.get("callbacks")
    if callbacks is not None and not isinstance(callbacks, (list, tuple)):
        return kwargs  # a keras.callbacks.CallbackList: already configured by the caller
    if any(type(c) is type(callback) for c in callbacks or ()):
        return kwargs
    return {**kwargs, "callbacks": [*(callbacks or ()), callback]}
