"""The framework behind Keras. Each backend module has the same functions; neutral code calls through them.

A backend module is imported only once connect() has chosen it, so importing acceltrain starts no
framework and fixes no Keras backend.
"""

import contextlib
import functools
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


@contextlib.contextmanager
def hooked_fit(trainer_class, hook):
    """Inside, each `fit` and `evaluate` of `trainer_class` (a backend's Keras trainer) first calls
    `hook(name, model, args, kwargs)`, which returns the (args, kwargs) to call Keras with. The previous
    methods are restored on exit. The same for both backends: only the trainer class differs."""
    originals = {name: getattr(trainer_class, name) for name in ("fit", "evaluate")}

    def hooked(name, method):
        @functools.wraps(method)
        def wrapper(model, *args, **kwargs):
            args, kwargs = hook(name, model, args, kwargs)
            return method(model, *args, **kwargs)

        return wrapper

    for name, method in originals.items():
        setattr(trainer_class, name, hooked(name, method))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(trainer_class, name, method)


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
