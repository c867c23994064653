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
