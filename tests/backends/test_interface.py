"""The backend seam: both backend modules define the same public functions (backends.INTERFACE), plus
only what each lists in OWN; neutral code reaches them through Runtime.backend_module."""

import json
import subprocess

from acceltrain import backends
from tests import support

_PUBLIC_FUNCTIONS = """
import inspect, json, importlib
names = {}
for backend in ("jax", "tensorflow"):
    module = importlib.import_module(f"acceltrain.backends.{backend}")
    functions = {name for name, value in vars(module).items()
                 if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")}
    names[backend] = {"functions": sorted(functions), "own": list(module.OWN), "NAME": module.NAME,
                      "SPLITS_UNEVEN_BATCHES": module.SPLITS_UNEVEN_BATCHES}
print(json.dumps(names))
"""


def test_both_backends_define_the_same_public_functions():
    done = subprocess.run(support.command()[:1] + ["-c", _PUBLIC_FUNCTIONS], env=support.env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = json.loads(done.stdout.strip().splitlines()[-1])
    shared = {backend: set(found["functions"]) - set(found["own"]) for backend, found in names.items()}
    assert shared["jax"] == shared["tensorflow"] == set(backends.INTERFACE), {
        "only jax": shared["jax"] - shared["tensorflow"], "only tensorflow": shared["tensorflow"] - shared["jax"]}
    for backend, found in names.items():
        assert set(found["own"]) <= set(found["functions"]), f"{backend}.OWN names a function it lacks"
        assert found["NAME"] == backend and isinstance(found["SPLITS_UNEVEN_BATCHES"], bool)


def test_the_runtime_exposes_its_backend_module(runtime):
    from acceltrain.backends import jax as jax_backend

    assert runtime.backend_module is jax_backend and runtime.backend == "jax"


def test_tensorflow_refuses_several_processes_in_words():
    code = ("from acceltrain.backends import tensorflow as tf_backend\n"
            "for call in (lambda: tf_backend.start_processes(None), lambda: tf_backend.gathering_predictions(None),\n"
            "             lambda: tf_backend.shard_inputs_per_process(None)):\n"
            "    try:\n"
            "        call()\n"
            "    except Exception as error:\n"
            "        print(type(error).__name__, error)\n")
    done = subprocess.run(support.command()[:1] + ["-c", code], env=support.env(), capture_output=True, text=True,
                          timeout=120)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("UsageError") and "--backend jax" in line for line in lines), done
