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


# What Keras writes into keras.json the first time it is imported, if the file is missing: its own
# defaults (keras/src/backend/config.py, Keras 3.15.1), not anyone's choice.
KERAS_WRITTEN_CONFIG = {"floatx": "float32", "epsilon": 1e-07, "backend": "tensorflow",
                        "image_data_format": "channels_last"}


def keras_config_backend(env=None) -> tuple[str | None, str]:
    """The backend set in Keras's own config file, and the file's path, as Keras finds it: KERAS_HOME,
    else ~/.keras (/tmp/.keras where home is not writable). None when the file is absent, unreadable,
    names no backend, or holds exactly what Keras writes there itself on its first import."""
    import json

    env = os.environ if env is None else env
    if "KERAS_HOME" in env:
        folder = env["KERAS_HOME"]
    else:
        home = os.path.expanduser("~")
        folder = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    path = os.path.expanduser(os.path.join(folder, "keras.json"))
    try:
        with open(path) as file:
            config = json.load(file)
    except (OSError, ValueError):
        return None, path
    if not isinstance(config, dict) or config == KERAS_WRITTEN_CONFIG:
        return None, path
    return config.get("backend"), path


def jax_compilation_cache_dir(env=None) -> str | None:
    """The folder where connect() keeps JAX's compiled programs between runs, or None when it is off
    (ACCELTRAIN_COMPILATION_CACHE=0): JAX_COMPILATION_CACHE_DIR if set, else XDG_CACHE_HOME or ~/.cache,
    under acceltrain/jax. Here, without JAX, so `doctor` reports the folder connect() will use."""
    env = os.environ if env is None else env
    if env.get("ACCELTRAIN_COMPILATION_CACHE", "1") == "0":
        return None
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return env["JAX_COMPILATION_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "acceltrain", "jax")


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
